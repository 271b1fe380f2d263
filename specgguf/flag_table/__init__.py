"""llama.cpp's command line, whole: one row per flag of llama-server's, llama-cli's and
llama-completion's --help (and the older spellings real scripts still carry), each with what it
does in specgguf. The CLI builds its options, variables and refusals from these rows, and the
docs' compatibility table is generated from them. Pure data: no other layer is imported."""

"""The legacy-flag migration: removed-flag tables, command-line and file rewriting, and the
guard that never passes a file still holding a removed flag. Imports no model runtime.

removed_flags  what llama.cpp and vLLM removed, SGLang's tree flags (a leaf: `run` reads it
               at start-up)
refuse         `run`/`bench`/`serve` refuse a removed flag, with the corrected command
argv, plan     one command as words; llama_argv and vllm_argv hold each dialect's rules,
               sglang_argv SGLang's tree flags carried into a specgguf command
drafter_kind   what a draft GGUF is (plain, MTP, EAGLE-3, DFlash, DSpark), read from the file,
               else assumed from its name (--draft-kind and a comment directive say otherwise)
word, shell_lexer, list_lexer   located words from shell text and JSON / YAML lists
scan, scan_shell, scan_dockerfile, scan_yaml, scan_markdown   commands found per file kind
edit           writing changed words back into the text; env: LLAMA_ARG_* variables
guard          the token scan; text: one file's text through both; kinds: what a file is
files          reading and writing files; check: what `specgguf migrate` runs
reasons        the fixed list of reasons a line left for a person names
"""

"""Model files without a model runtime: GGUF headers, pair compatibility, vocabulary
overlap, llama.cpp's type names, and `pull` of the default pair."""

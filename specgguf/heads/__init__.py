"""Hidden-state drafter heads (EAGLE-3, DFlash, MTP): their GGUF header checks against a
target, and the llama contexts that run them."""

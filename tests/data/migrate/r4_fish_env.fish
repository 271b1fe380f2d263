#!/usr/bin/env fish
# start the local model server from fish
set -gx LLAMA_ARG_MODEL ~/models/target.gguf
set -gx LLAMA_ARG_MODEL_DRAFT ~/models/draft.gguf
set -gx LLAMA_ARG_DRAFT_MAX 12
llama-server --port 8080

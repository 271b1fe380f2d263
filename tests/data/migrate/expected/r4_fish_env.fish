#!/usr/bin/env fish
# start the local model server from fish
set -gx LLAMA_ARG_MODEL ~/models/target.gguf
set -gx LLAMA_ARG_SPEC_DRAFT_MODEL ~/models/draft.gguf
set -gx LLAMA_ARG_SPEC_DRAFT_N_MAX 12
set -gx LLAMA_ARG_SPEC_TYPE draft-simple
set -gx LLAMA_ARG_SPEC_DRAFT_P_MIN 0.75
llama-server --port 8080

#!/bin/sh
# one export line for the whole configuration
export LLAMA_ARG_MODEL=models/t.gguf LLAMA_ARG_SPEC_DRAFT_MODEL=models/d.gguf LLAMA_ARG_SPEC_DRAFT_N_MAX=16 LLAMA_ARG_SPEC_TYPE=draft-simple LLAMA_ARG_SPEC_DRAFT_P_MIN=0.75 LLAMA_ARG_CTX_SIZE=8192
exec llama-server --host 127.0.0.1

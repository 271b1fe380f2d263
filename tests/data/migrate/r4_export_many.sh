#!/bin/sh
# one export line for the whole configuration
export LLAMA_ARG_MODEL=models/t.gguf LLAMA_ARG_MODEL_DRAFT=models/d.gguf LLAMA_ARG_DRAFT_MAX=16 LLAMA_ARG_CTX_SIZE=8192
exec llama-server --host 127.0.0.1

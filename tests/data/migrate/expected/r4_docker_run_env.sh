#!/usr/bin/env bash
set -euo pipefail
docker run -d --name llm --gpus all -p 8080:8080 -v "$PWD/models:/models" -e "LLAMA_ARG_MODEL=/models/t.gguf" -e "LLAMA_ARG_SPEC_DRAFT_MODEL=/models/d.gguf" -e "LLAMA_ARG_SPEC_DRAFT_N_MAX=16" -e "LLAMA_ARG_SPEC_TYPE=draft-simple" -e "LLAMA_ARG_SPEC_DRAFT_P_MIN=0.75" ghcr.io/ggml-org/llama.cpp:server-cuda

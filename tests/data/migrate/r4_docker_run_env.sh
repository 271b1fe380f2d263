#!/usr/bin/env bash
set -euo pipefail
docker run -d --name llm --gpus all -p 8080:8080 -v "$PWD/models:/models" -e "LLAMA_ARG_MODEL=/models/t.gguf" -e "LLAMA_ARG_MODEL_DRAFT=/models/d.gguf" -e "LLAMA_ARG_DRAFT_MAX=16" ghcr.io/ggml-org/llama.cpp:server-cuda

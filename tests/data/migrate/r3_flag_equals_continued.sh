#!/usr/bin/env bash
# Synthetic (round 3 shapes): --flag=value on backslash-continued lines, exec, ${VAR:-default} paths.
set -euo pipefail

MODEL=${MODEL:-models/qwen2.5-7b-instruct-q4_k_m.gguf}
DRAFT=${DRAFT:-models/qwen2.5-0.5b-instruct-q8_0.gguf}

exec ./llama-server \
    --model "$MODEL" \
    --model-draft "$DRAFT" \
    --draft-max=16 \
    --draft-min=4 \
    --ctx-size 8192 \
    --host 0.0.0.0 --port 8080

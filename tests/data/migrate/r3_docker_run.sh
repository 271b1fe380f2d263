#!/usr/bin/env bash
# Synthetic (round 3 shapes): docker run with the llama.cpp image, then the server's arguments.
docker run --gpus all -p 8080:8080 -v "$PWD/models:/models" \
  ghcr.io/ggml-org/llama.cpp:server-cuda \
  -m /models/t.gguf -md /models/d.gguf --draft-max 16 --draft-min 4 -ngl 99 -ngld 99

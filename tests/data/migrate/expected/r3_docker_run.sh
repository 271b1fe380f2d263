#!/usr/bin/env bash
# Synthetic (round 3 shapes): docker run with the llama.cpp image, then the server's arguments.
docker run --gpus all -p 8080:8080 -v "$PWD/models:/models" \
  ghcr.io/ggml-org/llama.cpp:server-cuda \
  -m /models/t.gguf -md /models/d.gguf --spec-type draft-simple --spec-draft-p-min 0.75 --spec-draft-n-max 16 --spec-draft-n-min 4 -ngl 99 -ngld 99

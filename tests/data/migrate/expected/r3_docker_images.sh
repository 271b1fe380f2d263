#!/bin/sh
# Synthetic (round 3 shapes): docker and podman run with the ggerganov and ggml-org images, :full --server, a local tag.
docker run -p 8080:8080 -v /models:/models ghcr.io/ggerganov/llama.cpp:server -m /models/t.gguf -md /models/d.gguf --spec-type draft-simple --spec-draft-p-min 0.75 --spec-draft-n-max 16
docker run -v /models:/models ghcr.io/ggml-org/llama.cpp:full --server -m /models/t.gguf -md /models/d.gguf --spec-type draft-simple --spec-draft-p-min 0.75 --spec-draft-n-max 8
docker run --rm -it local/llama.cpp:server-cuda -m /models/t.gguf -md /models/d.gguf --spec-type draft-simple --spec-draft-p-min 0.75 --spec-draft-n-max 8
podman run -d --name llm ghcr.io/ggml-org/llama.cpp:server-vulkan -m /models/t.gguf -md /models/d.gguf --spec-type draft-simple --spec-draft-n-max 16 --spec-draft-p-min 0.75 --spec-draft-n-min 2

#!/bin/sh
# Synthetic (round 3 shapes): a quoted heredoc sent over ssh.
ssh gpu-box <<'REMOTE'
cd ~/llama.cpp && ./build/bin/llama-server -m t.gguf -md d.gguf --spec-type draft-simple --spec-draft-p-min 0.75 --spec-draft-n-max 16 --spec-draft-n-min 1 --port 8080
REMOTE

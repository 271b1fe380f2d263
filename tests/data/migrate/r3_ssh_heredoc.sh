#!/bin/sh
# Synthetic (round 3 shapes): a quoted heredoc sent over ssh.
ssh gpu-box <<'REMOTE'
cd ~/llama.cpp && ./build/bin/llama-server -m t.gguf -md d.gguf --draft-max 16 --draft-min 1 --port 8080
REMOTE

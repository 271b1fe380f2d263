#!/bin/bash
# Synthetic (round 3 shapes): env assignments, nohup, timeout, sudo -u, pipes, && and $VAR tool paths before the tool.
CUDA_VISIBLE_DEVICES=0 nohup ./build/bin/llama-server -m t.gguf -md d.gguf --draft-max 16 > server.log 2>&1 &
timeout 600 llama-speculative -m t.gguf -md d.gguf --draft 8 -p "hi" | tee out.txt
sudo -u llama /opt/llama/llama-server -m t.gguf -md d.gguf --draft-max=8 && echo ok
"$LLAMA_BIN"/llama-server -m t.gguf -md d.gguf --draft-max 8
$HOME/llama.cpp/build/bin/llama-server -m t.gguf -md d.gguf --draft-max "8"
LLAMA=./llama-server
$LLAMA -m t.gguf -md d.gguf --draft-max 8

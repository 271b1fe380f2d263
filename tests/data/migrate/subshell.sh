#!/bin/sh
# Synthetic (issue 12 shape): a command inside $(...).
OUT=$(llama-cli -m t.gguf -md d.gguf --draft 8 -p "hello" -n 16)
echo "$OUT"

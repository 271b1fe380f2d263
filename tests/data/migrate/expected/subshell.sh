#!/bin/sh
# Synthetic (issue 12 shape): a command inside $(...).
OUT=$(llama-cli -m t.gguf -md d.gguf --spec-type draft-simple --spec-draft-p-min 0.75 --spec-draft-n-max 8 -p "hello" -n 16)
echo "$OUT"

#!/bin/sh
# Synthetic (round 3 shapes): -cd next to -c, --ctx-size-draft 0.
llama-server -m t.gguf -md d.gguf --spec-type draft-simple --spec-draft-p-min 0.75 -c 8192 --spec-draft-n-max 16
llama-server -m t.gguf -md d.gguf --spec-type draft-simple --spec-draft-p-min 0.75 --spec-draft-n-max 8

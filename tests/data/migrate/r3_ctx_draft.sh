#!/bin/sh
# Synthetic (round 3 shapes): -cd next to -c, --ctx-size-draft 0.
llama-server -m t.gguf -md d.gguf -c 8192 -cd 4096 --draft-max 16
llama-server -m t.gguf -md d.gguf --ctx-size-draft 0 --draft 8

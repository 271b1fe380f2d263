#!/usr/bin/env bash
# Synthetic (issue 12 shape): flags kept in a shell variable and an array.
SPEC_FLAGS="--draft-max 16 --draft-min 4"
FLAGS=(-md /models/d.gguf --draft-p-min 0.6 -cd 4096)
llama-server -m /models/t.gguf $SPEC_FLAGS "${FLAGS[@]}"

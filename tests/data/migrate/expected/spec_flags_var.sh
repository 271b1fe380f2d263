#!/usr/bin/env bash
# Synthetic (issue 12 shape): flags kept in a shell variable and an array.
SPEC_FLAGS="--spec-draft-n-max 16 --spec-draft-n-min 4"
FLAGS=(-md /models/d.gguf --spec-type draft-simple --draft-p-min 0.6)
llama-server -m /models/t.gguf $SPEC_FLAGS "${FLAGS[@]}"

#!/bin/sh
# Synthetic: a Latin-1 file (café), once "skipped" with exit 0.
llama-server -m t.gguf --spec-draft-n-min 2 --port 8080

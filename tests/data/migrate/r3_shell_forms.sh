#!/bin/bash
# Synthetic (round 3 shapes): a function body, case arms, if/then on one line, time, exec of a tool kept in a variable.
serve() { llama-server -m "$1" -md "$2" --draft-max 16; }
case "$MODE" in
  spec) exec ./llama-server -m t.gguf -md d.gguf --draft-max 8 ;;
  plain) exec ./llama-server -m t.gguf ;;
esac
if [ -f d.gguf ]; then llama-server -m t.gguf -md d.gguf --draft-max 4; fi
time ./llama-speculative -m t.gguf -md d.gguf --draft 8 -p "hi"
exec "${LLAMA_SERVER}" -m t.gguf -md d.gguf "$@" --draft-max 16

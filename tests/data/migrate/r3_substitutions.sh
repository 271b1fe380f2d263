#!/bin/bash
# Synthetic (round 3 shapes): flags in a string variable, $(...) capture, an array +=, a for loop.
SPEC="--draft-max 16 --draft-min 4"
llama-server -m t.gguf -md d.gguf $SPEC &
PID=$!
OUT=$(llama-speculative -m t.gguf -md d.gguf --draft 8 -p "$PROMPT" 2>/dev/null)
if [ -n "$DRAFT" ]; then
  EXTRA+=(--model-draft "$DRAFT" --draft-max "${DRAFT_MAX}")
fi
for n in 4 8 16; do
  ./llama-speculative -m t.gguf -md d.gguf --draft "$n" -p hi
done

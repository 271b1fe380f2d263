#!/bin/bash
# Synthetic (round 3 shapes): flags in a string variable, $(...) capture, an array +=, a for loop.
SPEC="--spec-draft-n-max 16 --spec-draft-n-min 4"
llama-server -m t.gguf -md d.gguf $SPEC &
PID=$!
OUT=$(llama-speculative -m t.gguf -md d.gguf --spec-draft-n-max 8 -p "$PROMPT" 2>/dev/null)
if [ -n "$DRAFT" ]; then
  EXTRA+=(--model-draft "$DRAFT" --spec-type draft-simple --spec-draft-p-min 0.75 --spec-draft-n-max "${DRAFT_MAX}")
fi
for n in 4 8 16; do
  ./llama-speculative -m t.gguf -md d.gguf --spec-draft-n-max "$n" -p hi
done

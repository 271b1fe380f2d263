#!/bin/bash
# Synthetic (round 3 shapes): a bash array with quoted flags, an explicit --draft-p-min.
ARGS=(
  -m "$MODEL"
  -md "$DRAFT"
  "--draft-max" "16"
  '--draft-min' '4'
  --draft-p-min 0.6
)
exec llama-server "${ARGS[@]}"

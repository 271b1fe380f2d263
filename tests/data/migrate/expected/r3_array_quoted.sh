#!/bin/bash
# Synthetic (round 3 shapes): a bash array with quoted flags, an explicit --draft-p-min.
ARGS=(
  -m "$MODEL"
  -md "$DRAFT" --spec-type draft-simple
  "--spec-draft-n-max" "16"
  '--spec-draft-n-min' '4'
  --draft-p-min 0.6
)
exec llama-server "${ARGS[@]}"

#!/bin/sh
# Synthetic (round 3 shapes): quoted flags and values, a value from ${N_DRAFT:-16}.
# speculative decoding with a small draft
llama-cli -m "models/big model.gguf" -md 'models/small.gguf' --spec-type draft-simple --spec-draft-p-min 0.75 "--spec-draft-n-max" "8" -p "Once upon a time" -n 128
llama-server -m big.gguf -md small.gguf --spec-type draft-simple --spec-draft-p-min 0.75 --spec-draft-n-max "${N_DRAFT:-16}" --spec-draft-n-min 2

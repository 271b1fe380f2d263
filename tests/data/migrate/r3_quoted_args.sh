#!/bin/sh
# Synthetic (round 3 shapes): quoted flags and values, a value from ${N_DRAFT:-16}.
# speculative decoding with a small draft
llama-cli -m "models/big model.gguf" -md 'models/small.gguf' "--draft" "8" -p "Once upon a time" -n 128
llama-server -m big.gguf -md small.gguf --draft-max "${N_DRAFT:-16}" --draft-min 2

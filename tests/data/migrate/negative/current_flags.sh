#!/bin/sh
# Negative control: written for current llama.cpp.
llama-server -m t.gguf -md d.gguf --spec-type draft-simple --spec-draft-n-max 8 --draft-p-min 0.6
vllm serve M --speculative-config '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'

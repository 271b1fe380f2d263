#!/bin/bash
# Shape of a public llama-server launcher (code index, query: draft-min, id 5825749861):
# ngram-mod with the old size/draft flags, and a commented-out copy. Reconstructed.
MODEL_PATH="$HOME/models/model.gguf"

#ngram settings:
#        --spec-type ngram-mod \
#        --draft-max 64 \

./build/bin/llama-server \
    --spec-type ngram-mod \
    --spec-ngram-mod-n-match 24 \
    --spec-ngram-mod-n-min 48 \
    --spec-ngram-mod-n-max 64 \
    -m "$MODEL_PATH" \
    -ngl 99 \
    -c 80000 \
    --jinja

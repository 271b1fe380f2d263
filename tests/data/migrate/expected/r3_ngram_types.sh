#!/bin/sh
# Synthetic (round 3 shapes): the removed flags under ngram-simple, ngram-mod and --spec-type draft.
llama-server -m t.gguf --spec-type ngram-simple --spec-ngram-simple-size-n 4 --spec-draft-n-max 16
llama-server -m t.gguf --spec-type ngram-mod --spec-ngram-mod-n-max 32 --spec-ngram-mod-n-min 8
llama-server -m t.gguf --spec-type draft-simple -md d.gguf --spec-draft-p-min 0.75 --spec-draft-n-max 8

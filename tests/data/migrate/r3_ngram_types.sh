#!/bin/sh
# Synthetic (round 3 shapes): the removed flags under ngram-simple, ngram-mod and --spec-type draft.
llama-server -m t.gguf --spec-type ngram-simple --spec-ngram-size-n 4 --draft-max 16
llama-server -m t.gguf --spec-type ngram-mod --draft-max 32 --draft-min 8
llama-server -m t.gguf --spec-type draft -md d.gguf --draft-max 8

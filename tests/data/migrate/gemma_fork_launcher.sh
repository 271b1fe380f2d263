#!/bin/bash
# Shape of a public launcher for a llama.cpp fork (code index, query: speculative-model,
# id 55972684414): extra args in a variable. Reconstructed.
case "$MODEL_KEY" in
    "gemma26")
        MODEL_PATH="$M_DIR/gemma-26B-Q4.gguf"
        MTP_PATH="$M_DIR/gemma-26B-Q4_0-MTP.gguf"
        EXTRA_ARGS="--speculative-model $MTP_PATH --spec-type draft-mtp --spec-draft-n-max 3"
        ;;
esac
llama-server -m "$MODEL_PATH" $EXTRA_ARGS --port 8080

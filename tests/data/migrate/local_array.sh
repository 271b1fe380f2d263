#!/usr/bin/env bash
# Reconstructed (issue 27 shape): flags built up in a local array inside a function.
start() {
    local -a args=(
        -m "$MODEL"
        -md "$draft_path"   # the small one
        --draft-max 16
        --draft-p-min 0.9
    )
    args+=(--port "${PORT:-8080}")
    exec llama-server "${args[@]}"
}
start

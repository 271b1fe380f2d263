#!/usr/bin/env bash
# Shape of a public run script found by the code index (query: draft-max, index id
# 65724876423): a bash array per mode, spliced with "${opts[@]}". Reconstructed, not copied.
set -euo pipefail
build_cmd_args() {
    case "$mode" in
    speculative)
        cmd_args=(
            "$bin_dir/llama-speculative"
            -md "$draft_model"
            -ngld all
            -m "$model"
            --spec-draft-n-min 3
            --spec-draft-n-max 5
            --repeat-penalty 1.15
            "${backend_opts[@]}"
        )
        ;;
    esac
}
run_cmd() {
    env "${env_args[@]}" "${cmd_args[@]}"
}

#!/usr/bin/env bash
# Reconstructed (issue 27 shape): a benchmark wrapper that passes vLLM's engine flags on.
set -e
python -m bench_suite.run --dataset sharegpt --num-prompts 200 \
    vllm-engine --model facebook/opt-6.7b \
    --speculative-config '{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}'

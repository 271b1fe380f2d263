#!/usr/bin/env bash
# Reconstructed (issue 27 shape): a benchmark wrapper that passes vLLM's engine flags on.
set -e
python -m bench_suite.run --dataset sharegpt --num-prompts 200 \
    vllm-engine --model facebook/opt-6.7b \
    --speculative-model '[ngram]' --num-speculative-tokens 5 --ngram-prompt-lookup-max 4

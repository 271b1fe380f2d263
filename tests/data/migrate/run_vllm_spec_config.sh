# Shape of southfreebird/vllm run_vllm.sh (code search): a --speculative-config JSON that
# still carries disable_by_batch_size, which current vLLM rejects. Reconstructed.
vllm serve meta-llama/Meta-Llama-3.1-8B-Instruct \
          --tensor-parallel-size 2 \
          --speculative-config '{"model": "./mlp_speculator/", "num_speculative_tokens": 3, "disable_by_batch_size": 30, "method": "mlp_speculator"}'

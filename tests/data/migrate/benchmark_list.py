# Shape of a public benchmark driver (code index, query: num-speculative-tokens,
# id 33266311345): whole command lines as Python strings. Reconstructed.
commands = [
    'python benchmarks/benchmark_throughput.py --model facebook/opt-6.7b --speculative-model facebook/opt-125m --num-speculative-tokens 3 --output-len 512',  # noqa: E501
]

"""The algorithm, free of any backend: round types, sampling, acceptance, the loop, statistics.

Nothing here imports llama.cpp, the drafters' implementations, auto or the command line, so
the loop can be read like the paper and tested on a numpy toy target in milliseconds:
context (what the loop needs of a KV cache), draft (what a draft source is), rounds (what one
round did), sampling (the target's sampler chain as distributions), acceptance (the greedy and
rejection-sampling rules), loop (draft, verify, accept, roll back), stats (what a run reports).
"""

"""`--spec-draft-n-max auto`: how much to draft each round, from costs measured on this machine.

Backend-free: it sees rounds and timings, never llama.cpp. profile keeps the measured costs
between runs; policy decides each round's budget.
"""

"""-np 8 on the real Qwen2.5-Coder pair (select with `-m real`; needs `specgguf pull`): eight
greedy generations of mixed prompt lengths decoded together, speculation on, each equal to the
same generation on a one-slot session, or parting from it only where the target's two best
logits nearly tie (a wider pass rounds differently on a CPU; what was found is printed)."""

from __future__ import annotations

import pytest

from specgguf.core.sampling import SamplerParams
from specgguf.generator import Generator
from specgguf.loading.session import LoadOptions, Session, SpecOptions
from specgguf.modelfiles.models import DRAFT, TARGET, is_present, model_path
from tests.near_tie import REAL_NEAR_TIE
from tests.test_batched import assert_same_or_near_tie, concurrently, tokens_of

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(
        not (is_present(TARGET) and is_present(DRAFT)), reason="run `specgguf pull` first"
    ),
]

N_SLOTS = 8
N_PREDICT = 16
NEAR_TIE = REAL_NEAR_TIE
PROMPTS = [
    "def quicksort(arr):",
    "# Python: read a CSV file and print the sum of the second column\nimport csv\n",
    "class Stack:\n    def __init__(self):",
    "<|im_start|>user\nWhat is a hash table? Answer briefly.<|im_end|>\n<|im_start|>assistant\n",
    "def fib(n):\n    " + "# compute the n-th Fibonacci number iteratively\n    " * 6,
    "import os\n",
    "SELECT name, COUNT(*) FROM orders",
    "fn main() {\n    let v: Vec<i32> = (1..=10).collect();\n",
]


def test_eight_slots_together_match_each_alone():
    load = LoadOptions(model=model_path(TARGET), model_draft=model_path(DRAFT), n_ctx=1024)
    spec = SpecOptions(types=["draft-simple"], n_max=3)
    one = Session(load, spec)
    try:
        greedy = SamplerParams(temp=0.0)
        alone = Generator(one, sampler=greedy, n_predict=N_PREDICT, ignore_eos=True)
        prompts = [one.tokenize(p) for p in PROMPTS]
        refs = [tokens_of(alone.generate(p)) for p in prompts]
        many = Session(
            LoadOptions(
                model=model_path(TARGET), model_draft=model_path(DRAFT), n_ctx=1024 * N_SLOTS
            ),
            spec,
            parallel=N_SLOTS,
        )
        try:
            gen = Generator(many, sampler=greedy, n_predict=N_PREDICT, ignore_eos=True)
            got = concurrently(gen, prompts, None)
            stats = gen.rendezvous.steppers[0].stats
            print(
                f"\ntarget passes {stats.steps}, sequences per pass {stats.seqs / stats.steps:.2f}"
            )
            assert stats.seqs > 2 * stats.steps
        finally:
            many.close()
        for i, (p, ref, g) in enumerate(zip(prompts, refs, got, strict=True)):
            assert_same_or_near_tie(one, p, ref, g, f"slot {i}", near_tie=NEAR_TIE)
    finally:
        one.close()

"""Speculation that fits editing: in a fill-in-the-middle prompt the text after the cursor
and the other files' chunks are part of the prompt, so the free lookups the default
speculation runs (ngram-map-k, suffix) draft a completion that repeats them from there."""

from __future__ import annotations

import pytest

from specgguf.drafters.ngram_map import NgramMapK
from specgguf.drafters.ngram_params import SuffixParams
from specgguf.drafters.suffix import SuffixDrafter
from specgguf.io.fim import Budget, ExtraChunk, FimTokens, infill_prompt

FIM = FimTokens(pre=300, suf=301, mid=302, rep=303, sep=304)


def tokens(text: str) -> list[int]:
    return list(text.encode())


PROMPT = infill_prompt(
    FIM,
    tokens,
    "def total(items, offset):\n    count = len(items)\n",
    "\n    return count_of_items + offset\n",
    extra=[ExtraChunk("util.py", "def ordered(items):\n    return sorted(items, key=len)\n")],
    budget=Budget(1024, -1, 4096),
)
DRAFTERS = {"ngram-map-k": lambda: NgramMapK(4, 8), "suffix": lambda: SuffixDrafter(SuffixParams())}


@pytest.mark.parametrize("kind", sorted(DRAFTERS))
@pytest.mark.parametrize(
    ("written", "repeats"),
    [("    return count_of", "_items + offset"), ("    return sorted(it", "ems, key=len)")],
    ids=["the suffix", "an extra chunk"],
)
def test_a_completion_is_drafted_from_the_suffix_and_the_extra_chunks(kind, written, repeats):
    d = DRAFTERS[kind]()
    d.begin(PROMPT)
    d.observe(tokens(written))
    draft = d.propose(len(repeats))
    assert bytes(draft.tokens).decode() == repeats[: len(draft.tokens)] and len(draft.tokens) > 4

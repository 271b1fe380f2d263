"""Greedy texts that may part only where the target's two best logits nearly tie.

Passes of different widths (a (K+1)-token verify pass and a 1-token step, a batch of several
sequences and one alone, rows in other KV cells) use other kernels and round differently, so
two greedy decodings of the same prompt may take different tokens where the target's top two
logits are within rounding of each other; anywhere else a difference is a bug. The tests that
compare such decodings judge them here (test_real_pair, test_real_f16, test_real_cross_vocab,
test_batched and through it test_batched_real and test_eagle3; test_serve_real, for text,
uses top_two): where they part, the target is evaluated alone from an empty cache and the gap
between its two best logits decides.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: on the real models, rounding differences between pass widths are about 1e-2 logits on a
#: short context, and grow with it: after the ~1,500-token write_file prompt of
#: test_agent_edits_real two greedy texts parted between the top two tokens 0.278 apart
REAL_NEAR_TIE = 0.3


def top_two(row: Any) -> tuple[int, int, float]:
    """The two best tokens of a row of logits, and the gap between their logits."""
    row = np.asarray(row)
    best, second = (int(t) for t in np.argsort(-row)[:2])
    return best, second, float(row[best] - row[second])


def top_two_after(session: Any, context: list[int]) -> tuple[int, int, float]:
    """top_two of the target's logits after `context`, evaluated alone on slot 0 from an
    empty cache (left empty again)."""
    ctx = session.target
    ctx.truncate(0)
    row = ctx.decode(context, 0, outputs="last")[0]
    ctx.truncate(0)
    return top_two(row)


def greedy(session: Any, tokens: list[int], n: int) -> tuple[list[int], Any]:
    """A session's greedy decoding of `tokens` (at most n tokens) and its statistics: one side
    of the comparisons judged here."""
    from specgguf.core.sampling import SamplerParams

    dec = session.decoder(SamplerParams(temp=0.0), n, 0)
    return [t for rnd in dec.generate(tokens) for t in rnd.emitted], dec.stats


def first_difference(ref: list[int], got: list[int]) -> int | None:
    """Where `got` first differs from `ref` (a length difference counts), or None."""
    k = next((i for i, (a, b) in enumerate(zip(ref, got, strict=False)) if a != b), None)
    if k is None and len(ref) != len(got):
        return min(len(ref), len(got))
    return k


def assert_same_or_near_tie(
    session: Any,
    prompt: list[int],
    ref: list[int],
    got: list[int],
    near_tie: float,
    *,
    label: str = "",
    between_top_two: bool = True,
) -> None:
    """`got` equals `ref` (the tokens of plain greedy decoding after `prompt`), or parts from
    it at a token where the target's two best logits are within `near_tie`; with
    `between_top_two`, the two must also have taken exactly those two tokens there."""
    k = first_difference(ref, got)
    if k is None:
        return
    assert k < len(ref) and k < len(got), (label, "one is a prefix of the other", ref, got)
    best, second, gap = top_two_after(session, [*prompt, *ref[:k]])
    print(f"{label}: parts at token {k} ({ref[k]} vs {got[k]}), top-2 {best}/{second}, "
          f"logit gap {gap:.2e}")
    if between_top_two:
        assert {ref[k], got[k]} == {best, second}, (label, "not between the target's top two")
    assert gap < near_tie, f"{label}: parts at a clear winner (gap {gap:.3f}): a real bug"

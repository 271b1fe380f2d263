"""Accept or reject proposals so that every emitted token is distributed exactly as the target's p.

Leviathan et al. / Chen et al.: for a proposal x ~ q, accept with probability min(1, p(x)/q(x));
on rejection emit y ~ max(0, p - q) / Z; if all K proposals pass, emit a bonus token from the
target's (K+1)-th distribution. Deterministic drafters (n-gram lookup, greedy draft) have a
one-hot q, which turns the rule into "accept with probability p(x), else sample p without x".
Greedy targets have a one-hot p, which turns it into "accept while x == argmax".

Everything here is pure: distributions and a numpy Generator in, decisions out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specgguf.sampling import SparseDist, one_hot


def residual(p: SparseDist, q: SparseDist) -> SparseDist:
    """max(0, p - q), renormalised. Only called after a rejection, where it is never all-zero
    (a rejection has probability sum(max(0, q - p)) = sum(max(0, p - q)) > 0)."""
    q_at_p = np.zeros_like(p.probs)
    common = np.isin(p.ids, q.ids)
    if common.any():
        lookup = dict(zip(q.ids.tolist(), q.probs.tolist(), strict=True))
        q_at_p[common] = [lookup[t] for t in p.ids[common].tolist()]
    mass = np.maximum(p.probs - q_at_p, 0.0)
    total = mass.sum()
    if total <= 0.0:  # only reachable through float rounding when p == q; p is then exact
        return p
    keep = mass > 0.0
    return SparseDist(p.ids[keep], mass[keep] / total)


@dataclass(frozen=True)
class Verdict:
    """Outcome of one verification: the first `n_accepted` proposals stand, then `token`
    (the correction at the first rejection, or the bonus token after a full acceptance)."""

    n_accepted: int
    token: int


def verify(
    proposals: Sequence[int],
    draft_dists: Sequence[SparseDist] | None,
    target_dist: Callable[[int], SparseDist],
    rng: np.random.Generator,
) -> Verdict:
    """Walk the proposals left to right, stop at the first rejection.

    `target_dist(i)` is p at position i (i = 0..K); it is called lazily, so rows after the
    first rejection are never turned into distributions. `draft_dists` is None for
    deterministic drafters (one-hot q).
    """
    for i, x in enumerate(proposals):
        p = target_dist(i)
        q = one_hot(x) if draft_dists is None else draft_dists[i]
        px, qx = p.prob(x), q.prob(x)
        if qx <= 0.0:
            raise ValueError(f"proposal {x} at position {i} has zero draft probability")
        # u < p/q accepts with probability min(1, p/q); a one-hot p (greedy) needs no randomness.
        if px >= qx or (px > 0.0 and rng.random() < px / qx):
            continue
        return Verdict(i, residual(p, q).sample(rng) if p.ids.size > 1 else p.top()[0])
    bonus = target_dist(len(proposals))
    return Verdict(len(proposals), bonus.sample(rng) if bonus.ids.size > 1 else bonus.top()[0])

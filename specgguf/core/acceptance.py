"""Accept or reject proposals so that every emitted token is distributed exactly as the target's p.

Leviathan et al. / Chen et al.: for a proposal x ~ q, accept with probability min(1, p(x)/q(x));
on rejection emit y ~ max(0, p - q) / Z; if all K proposals pass, emit a bonus token from the
target's (K+1)-th distribution. Deterministic drafters (n-gram lookup, greedy draft) have a
one-hot q, which turns the rule into "accept with probability p(x), else sample p without x".
Greedy targets have a one-hot p, which turns it into "accept while x == argmax".

Randomness comes per position (specgguf.core.sampling.PositionRandom): the target's sample at a
position uses that position's SAMPLE uniform whether or not a proposal stood there. For a
one-hot q "accept with probability p(x), else sample p without x" is then "accept iff the
target's sample is x, else emit that sample" -- the same distribution, and the same token
plain decoding would have produced with the same seed.

Everything here is pure: distributions and uniforms in, decisions out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specgguf.core.sampling import ACCEPT, SAMPLE, SparseDist

#: uniform for (position in this round, purpose); a numpy Generator is also accepted
Uniforms = Callable[[int, int], float]


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
    rand: Uniforms | np.random.Generator,
) -> Verdict:
    """Walk the proposals left to right, stop at the first rejection.

    `target_dist(i)` is p at position i (i = 0..K); it is called lazily, so rows after the
    first rejection are never turned into distributions. `draft_dists` is None for
    deterministic drafters (one-hot q). `rand(i, purpose)` is the uniform for position i of
    this round (PositionRandom); a Generator draws them in sequence instead.
    """
    if isinstance(rand, np.random.Generator):
        gen = rand
        rand = lambda _i, _purpose: gen.random()  # noqa: E731
    for i, x in enumerate(proposals):
        p = target_dist(i)
        if draft_dists is None:  # one-hot q: accept iff the target's own sample is x
            token = p.sample_at(rand(i, SAMPLE))
            if token == x:
                continue
            return Verdict(i, token)
        q = draft_dists[i]
        px, qx = p.prob(x), q.prob(x)
        if qx <= 0.0:
            raise ValueError(f"proposal {x} at position {i} has zero draft probability")
        # u < p/q accepts with probability min(1, p/q)
        if px >= qx or (px > 0.0 and rand(i, ACCEPT) < px / qx):
            continue
        return Verdict(i, residual(p, q).sample_at(rand(i, SAMPLE)))
    return Verdict(
        len(proposals), target_dist(len(proposals)).sample_at(rand(len(proposals), SAMPLE))
    )

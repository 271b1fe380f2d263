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
from dataclasses import dataclass, field

import numpy as np

from specgguf.core.sampling import ACCEPT, SAMPLE, SparseDist, sibling
from specgguf.core.tree import ROOT, chain_parents, children

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


def without(q: SparseDist, token: int) -> SparseDist | None:
    """q with `token` removed, renormalised: the distribution of the next sibling a drafter
    drew without replacement (None once nothing is left)."""
    keep = q.ids != token
    total = q.probs[keep].sum()
    if total <= 0.0:
        return None
    return SparseDist(q.ids[keep], q.probs[keep] / total)


@dataclass(frozen=True)
class Verdict:
    """Outcome of one verification: the first `n_accepted` proposals stand, then `token`
    (the correction at the first rejection, or the bonus token after a full acceptance).
    `path` lists the accepted nodes (a chain's: 0..n_accepted-1; a tree's: one branch)."""

    n_accepted: int
    token: int
    path: tuple[int, ...] = field(default=(), compare=False)


def verify(
    proposals: Sequence[int],
    draft_dists: Sequence[SparseDist] | None,
    target_dist: Callable[[int], SparseDist],
    rand: Uniforms | np.random.Generator,
) -> Verdict:
    """Walk a chain of proposals left to right, stop at the first rejection (a chain is the
    tree whose every node has one child: `verify_tree` with chain parents).

    `target_dist(i)` is p at position i (i = 0..K); it is called lazily, so rows after the
    first rejection are never turned into distributions. `draft_dists` is None for
    deterministic drafters (one-hot q). `rand(i, purpose)` is the uniform for position i of
    this round (PositionRandom); a Generator draws them in sequence instead.
    """
    return verify_tree(proposals, chain_parents(len(proposals)), draft_dists, target_dist, rand)


def verify_tree(
    tokens: Sequence[int],
    parents: Sequence[int],
    draft_dists: Sequence[SparseDist] | None,
    target_dist: Callable[[int], SparseDist],
    rand: Uniforms | np.random.Generator,
) -> Verdict:
    """Walk down a draft tree from the root, keeping one path; every emitted token is
    distributed exactly as the target's p.

    `target_dist(r)` is p at row r of the pass (row 0: the root, row i + 1: node i), asked
    lazily; `rand(d, purpose)` is the uniform for the position at depth d below the root.
    At each node:
    - one-hot children (`draft_dists` None): the target samples its token with the
      position's SAMPLE uniform and the walk descends while that token is a child. That is
      the token plain decoding samples there with the same seed, so the text is plain
      decoding's whatever the tree;
    - sampled children (drawn from q without replacement, in node order): recursive
      rejection sampling. The j-th child x, drawn from q_j (q without the earlier
      siblings), is accepted with probability min(1, p_j(x) / q_j(x)); after a rejection
      p_{j+1} = norm(max(0, p_j - q_j)); after the last sibling the token is sampled from
      what is left of p. Each stage is one ordinary rejection step whose proposal is the
      conditional law of the next draw, so the emitted token follows p (a chain: one
      child, the rule of Leviathan et al.).
    """
    if isinstance(rand, np.random.Generator):
        gen = rand
        rand = lambda _i, _purpose: gen.random()  # noqa: E731
    kids = children(parents)
    node, depth, path = ROOT, 0, []
    while True:
        p = target_dist(node + 1)
        below = kids.get(node, ())
        if not below:  # a leaf (or nothing drafted): the bonus token
            return Verdict(len(path), p.sample_at(rand(depth, SAMPLE)), tuple(path))
        if draft_dists is None:  # one-hot children: descend along the target's own sample
            token = p.sample_at(rand(depth, SAMPLE))
            nxt = next((c for c in below if tokens[c] == token), None)
            if nxt is None:
                return Verdict(len(path), token, tuple(path))
        else:
            nxt, p = _rejection_sample(tokens, below, draft_dists, p, depth, rand)
            if nxt is None:
                return Verdict(len(path), p.sample_at(rand(depth, SAMPLE)), tuple(path))
        path.append(nxt)
        node, depth = nxt, depth + 1


def _rejection_sample(
    tokens: Sequence[int],
    below: Sequence[int],
    draft_dists: Sequence[SparseDist],
    p: SparseDist,
    depth: int,
    rand: Uniforms,
) -> tuple[int | None, SparseDist]:
    """The child of `below` accepted at a node (recursive rejection sampling over siblings
    drawn without replacement), or None and the residual of p left after all of them."""
    q: SparseDist | None = draft_dists[below[0]]
    for j, child in enumerate(below):
        if q is None:  # q was used up by the siblings before: nothing drew this one
            raise ValueError(f"tree node {child}: drawn from an exhausted distribution")
        x = tokens[child]
        px, qx = p.prob(x), q.prob(x)
        if qx <= 0.0:
            raise ValueError(f"proposal {x} at depth {depth} has zero draft probability")
        # u < p/q accepts with probability min(1, p/q)
        if px >= qx or (px > 0.0 and rand(depth, sibling(ACCEPT, j)) < px / qx):
            return child, p
        p = residual(p, q)
        q = without(q, x)
    return None, p

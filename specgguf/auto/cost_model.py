"""The cost model of speculative decoding, as pure functions of measured numbers.

In units of one plain target step (a 1-token pass), a round with k proposals costs

    C(k) = draft * k + verify(k) + (1 - P(all k accepted)) * rollback
                                         (verify(0) = 1: a plain step, no drafting)

and emits E(k) = 1 + a1 + a1*a2 + ... + a1*...*ak tokens, where a_i is the probability that
proposal i is accepted given that proposals 1..i-1 were (the expected gain of speculative
sampling; constant a gives (1 - a^(k+1)) / (1 - a)). The speedup over plain decoding is
E(k) / C(k); `best_k` picks the k that maximises it, and k = 0 (do not speculate) whenever
nothing beats 1. `worth_continuing` answers the same question one draft token at a time.
`rollback` is what undoing a rejection costs the target: ~0 for an attention KV cache, a
checkpoint restore plus a re-decode of the accepted tokens for a recurrent or hybrid model
(specgguf.binding.checkpoints), which only a round with a rejected proposal pays.

No state, no clock, no backend: the estimators (cost_estimator, acceptance_estimator) supply
the numbers, the policy asks these functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Acceptance = float | Sequence[float]


@dataclass(frozen=True)
class Costs:
    """Costs relative to one plain target step.

    verify[k] is the cost of one target pass over 1 + k tokens (k proposals), verify[0] is the
    plain step itself (normally 1.0). Past the end of the tuple the curve is extrapolated with
    its average slope (at least `min_slope` per token). `draft` is the cost of one draft step
    (one draft-model decode; ~0 for n-gram lookup). `rollback` is the mean cost of rolling
    the target back after a rejected proposal (0 where the KV cache drops positions itself).
    """

    verify: tuple[float, ...] = (1.0,)
    draft: float = 0.0
    min_slope: float = 0.0
    rollback: float = 0.0

    def verify_cost(self, k: int) -> float:
        v = self.verify
        if k < len(v):
            return v[k]
        last = len(v) - 1
        slope = (v[last] - v[0]) / last if last > 0 else 1.0
        return v[last] + (k - last) * max(slope, self.min_slope)

    def round_cost(self, k: int) -> float:
        """Cost of a round with k proposals: k draft steps (the first is the draft catching up
        on the last emitted token, the others decode the proposals) and one verify pass."""
        return self.draft * k + self.verify_cost(k) if k > 0 else self.verify_cost(0)


def in_shared_pass(costs: Costs, peers: int, *, draft: float | None = None) -> Costs:
    """The costs of one sequence's round when its rows share each pass with `peers` other
    sequences (a server's slots decoded together), in units of that shared plain step.

    Priced at the symmetric choice: every sequence in the pass drafts as this one does, so a
    pass of S = peers + 1 sequences with k proposals each verifies S * (1 + k) rows, and
    verify'(k) = verify(S * (1 + k) - 1) / verify(S - 1) (verify[j] being a pass over 1 + j
    rows). Pricing a draft only at what it adds to the others' rows as they are now would let
    every slot draft at once on that promise and make the pass far wider than any of them
    priced (then none drafts, then all do again). Where the curve is flat (a GPU below its
    compute bound) drafts stay cheap in a batch; where it is steep (a CPU, or a batch already
    at the knee) speculation stops, as it should: it would lower the server's throughput.

    A draft step is then one draft pass over S rows; `draft`, where measured, is its cost in
    units of a target pass over S rows (the shared plain step). Without it the draft's pass is
    assumed to widen as the target's does (its cost alone, unchanged), which holds for two
    models of one kind on one device but not for a compute-bound draft beside a weight-bound
    target. peers = 0: the costs unchanged."""
    if peers <= 0:
        return costs
    n = peers + 1
    base = costs.verify_cost(n - 1)
    shared = (costs.verify_cost(n * (1 + k) - 1) / base for k in range(len(costs.verify)))
    return Costs(
        verify=tuple(shared),
        draft=costs.draft if draft is None else draft,
        min_slope=costs.min_slope,
        rollback=costs.rollback,
    )


def _acc(acceptance: Acceptance, i: int) -> float:
    """Acceptance of position i (0-based); a short sequence repeats its last value."""
    if isinstance(acceptance, (int, float)):
        a = float(acceptance)
    elif len(acceptance) == 0:
        a = 0.0
    else:
        a = float(acceptance[min(i, len(acceptance) - 1)])
    return min(1.0, max(0.0, a))


def expected_tokens(acceptance_per_position: Acceptance, k: int) -> float:
    """Expected tokens one round emits with k proposals: 1 + sum_j prod_{i<=j} a_i.

    `acceptance_per_position[i]` is P(proposal i accepted | proposals before it accepted); a
    float means the same rate everywhere, which gives (1 - a^(k+1)) / (1 - a).
    """
    total, reach = 1.0, 1.0
    for i in range(max(0, k)):
        reach *= _acc(acceptance_per_position, i)
        total += reach
    return total


def speedups(
    costs: Costs, acceptance: Acceptance, n_max: int, *, p_empty: float = 0.0
) -> list[float]:
    """Expected speedup over plain decoding for k = 0..n_max (index k); speedups[0] == 1.

    `p_empty`: probability that a drafting attempt ends before its first token (a model
    drafter that, after one draft step, finds its guess not worth proposing); such a round
    costs that draft step plus a plain step and emits one token.
    (Asked several times a round for widths up to 64: one plain loop, no per-k method calls;
    numpy's per-call overhead is larger than this whole loop at these sizes.)
    """
    n = max(0, n_max)
    base = costs.verify_cost(0)
    p = min(1.0, max(0.0, p_empty))
    q = 1.0 - p
    if isinstance(acceptance, (int, float)):
        acc = [min(1.0, max(0.0, float(acceptance)))] * n
    else:
        acc = [0.0 if a < 0.0 else 1.0 if a > 1.0 else a for a in acceptance[:n]]
        acc += [acc[-1] if acc else 0.0] * (n - len(acc))
    verify, draft, rollback = costs.verify, costs.draft, costs.rollback
    known = len(verify)
    empty = p * (draft + base)
    out = [1.0]
    expected, reach = 1.0, 1.0  # expected_tokens(acceptance, k), built up one k at a time
    for k in range(1, n + 1):
        reach *= acc[k - 1]
        expected += reach
        v = verify[k] if k < known else costs.verify_cost(k)
        v += (1.0 - reach) * rollback  # reach: P(all k accepted), the round that needs none
        out.append((q * expected + p) * base / (q * (draft * k + v) + empty))
    return out


def best_k(
    costs: Costs,
    acceptance: Acceptance,
    n_max: int,
    *,
    margin: float = 0.0,
    p_empty: float = 0.0,
) -> tuple[int, float]:
    """The draft length in 0..n_max with the highest expected speedup, and that speedup.

    A k > 0 is chosen only if its speedup exceeds 1 + margin (the margin keeps noise-level
    gains from switching speculation on); ties go to the shorter draft. (0, 1.0) means
    "do not speculate".
    """
    best, best_s = 0, 1.0
    for k, s in enumerate(speedups(costs, acceptance, n_max, p_empty=p_empty)):
        if k > 0 and s > 1.0 + margin and s > best_s + 1e-12:
            best, best_s = k, s
    return best, best_s


def worth_continuing(
    costs: Costs,
    position: int,
    *,
    p_reach: float,
    a_next: float,
    future: Acceptance,
    n_max: int,
    rate: float = 1.0,
) -> bool:
    """Whether a model drafter that has proposed `position` tokens this round should propose
    one more, whose acceptance (given the earlier ones were accepted) is `a_next`.

    `p_reach`: probability that every earlier proposal is accepted; `future`: acceptance of the
    positions after this one (per position, as in `expected_tokens`, index 0 = position + 1);
    `n_max`: the most tokens this round may draft; `rate`: what a unit of cost is worth in
    tokens (the throughput the policy expects anyway, >= 1 plain step's token).

    Stopping now leaves the round at `position` proposals. Continuing to j > position adds the
    expected tokens of positions position..j-1 and costs the extra verify width plus the draft
    decodes still needed: the logits for this token are already computed (sunk), but each
    token kept before n_max is decoded at once to get the next position's logits. Continue iff
    some j has positive net value  gain_tokens - rate * extra_cost. On a target that pays a
    rollback per rejection, the j - i more proposals also add the chance that one of them is
    rejected (p_reach - reach) times that rollback.
    """
    i = position
    if i >= n_max:
        return False
    v_i = costs.verify_cost(i)
    gain, reach = 0.0, p_reach * min(1.0, max(0.0, a_next))
    for j in range(i + 1, n_max + 1):
        if j > i + 1:
            reach *= _acc(future, j - i - 2)
        gain += reach
        draft_steps = (j - i) if j < n_max else (j - i - 1)
        extra = costs.draft * draft_steps + costs.verify_cost(j) - v_i
        extra += costs.rollback * (p_reach - reach)
        if gain - rate * extra > 1e-12:
            return True
    return False


def tree_ceiling(costs: Costs, acceptance: Acceptance, depth: int, nodes: int) -> float:
    """The most a tree of `nodes` nodes and `depth` levels can gain over the better of the
    chain of that depth and plain decoding, as a ratio of speedups: the tree's if every
    round emitted all depth + 1 tokens it can (no tree does better), priced at the chain's
    draft cost plus the tree's wider verify pass (its wider draft passes only add to that),
    over the chain's expected speedup or 1. At or below 1 the tree loses to one of them
    whatever the target accepts: auto never drafts it."""
    if depth <= 0 or nodes <= depth:
        return 1.0
    chain = speedups(costs, acceptance, depth)[depth]
    base = costs.verify_cost(0)
    best = (depth + 1) * base / (costs.draft * depth + costs.verify_cost(nodes))
    return best / max(chain, 1.0)


def needed_acceptance(
    costs: Costs, n_max: int, *, margin: float = 0.0, p_empty: float = 0.0
) -> tuple[float, int] | None:
    """The lowest constant acceptance at which some draft length pays (beats 1 + margin),
    and that length: what a drafter must reach before drafting is worth it here. None when
    none pays even at 100% acceptance. (Bisection: the best speedup grows with acceptance.)"""
    if best_k(costs, 1.0, n_max, margin=margin, p_empty=p_empty)[0] == 0:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(24):
        mid = (lo + hi) / 2
        if best_k(costs, mid, n_max, margin=margin, p_empty=p_empty)[0] > 0:
            hi = mid
        else:
            lo = mid
    return hi, best_k(costs, hi, n_max, margin=margin, p_empty=p_empty)[0]

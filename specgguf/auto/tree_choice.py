"""Chain or tree, drafter by drafter: what auto lets a drafter that may branch do each round.

A tree pays where the target's pass and the draft's wider passes cost little more than a
chain's (a GPU below its compute bound) and the draft is often unsure between two tokens; on
a compute-bound CPU each node costs nearly a row of a step and trees lose. Both depend on the
machine, the pair and the text, so the choice is measured: the rate (tokens per millisecond,
drafting, verifying and rolling back included) of this drafter's chain rounds and of its tree
rounds, as moving averages over the same run, the tree's explored a round in every
`explore_every` while it is unmeasured or behind, kept while it is ahead by `margin`. The cost
model vetoes first (cost_model.tree_ceiling): a tree that cannot beat the chain even if every
round kept all it could is never drafted, not even to explore.

Pure: rounds' numbers in, a yes or no out; no backend, no clock.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field


@dataclass
class _Rates:
    chain: float | None = None  # tokens per ms of chain rounds (moving average)
    tree: float | None = None
    chain_n: int = 0
    tree_n: int = 0
    since_tree: int = 0  # rounds since the last tree round
    since_chain: int = 0  # rounds since the last chain round

    @staticmethod
    def _avg(old: float | None, x: float, w: float) -> float:
        return x if old is None else old + w * (x - old)


@dataclass(eq=False)
class TreeChoice:
    """Whether a drafter whose shape branches grows a tree this round: its settings, and the
    rates measured so far per drafter."""

    _: KW_ONLY
    explore_every: int = 8  # rounds between tree rounds while it is unmeasured or close behind
    recheck_every: int = 64  # ... once it has lost clearly
    margin: float = 0.03  # the relative lead that counts as ahead (and the gap as close behind)
    weight: float = 0.15  # of a new round in the moving averages
    samples: int = 6  # tree rounds before its rate is trusted
    _rates: dict[str, _Rates] = field(default_factory=dict, init=False, repr=False)

    def wants_tree(self, name: str, *, can_pay: bool) -> bool:
        """Asked before the drafter drafts; `can_pay`: the cost model's veto lifted."""
        r = self._rates.setdefault(name, _Rates())
        if not can_pay:
            return False
        if r.tree_n < self.samples or r.chain is None:
            return r.since_tree >= self.explore_every or r.tree_n == 0
        assert r.tree is not None
        if r.tree > r.chain * (1.0 + self.margin):
            # ahead: trees, with a chain round now and then to keep the comparison current
            return r.since_chain < self.explore_every
        gap = self.explore_every if r.tree > r.chain * (1.0 - self.margin) else self.recheck_every
        return r.since_tree >= gap

    def observe(self, name: str, *, tree: bool, tokens: int, ms: float) -> None:
        """A finished round of `name`: a tree round or a chain one, what it emitted and the
        milliseconds it took (drafting, verifying, rolling back)."""
        if ms <= 0:
            return
        r = self._rates.setdefault(name, _Rates())
        rate = tokens / ms
        if tree:
            r.tree = r._avg(r.tree, rate, self.weight)
            r.tree_n += 1
            r.since_tree, r.since_chain = 0, r.since_chain + 1
        else:
            r.chain = r._avg(r.chain, rate, self.weight)
            r.chain_n += 1
            r.since_tree, r.since_chain = r.since_tree + 1, 0

    def knows(self, name: str) -> bool:
        """Whether `name` was asked about (a drafter whose shape branches)."""
        return name in self._rates

    def summary(self, name: str) -> dict[str, float | int | None]:
        """The measured rates (tokens per ms) and rounds of each kind, for auto's report."""
        r = self._rates.get(name, _Rates())

        def rate(x: float | None) -> float | None:
            return round(x, 5) if x is not None else None

        return {
            "chain_rate": rate(r.chain),
            "tree_rate": rate(r.tree),
            "chain_rounds": r.chain_n,
            "tree_rounds": r.tree_n,
        }

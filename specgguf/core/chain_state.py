"""What the sampler chain remembers along a sequence, and its state at each row of a verify pass.

Five stages depend on more than a row's logits: the penalties count the tokens of the last N
(the prompt's included, as llama-server feeds the prompt to its sampler), DRY looks for repeats
in the last N, mirostat's mu moves after every emitted token, adaptive-p averages the chosen
tokens' probabilities, and XTC tosses a coin per position. A speculative round scores several
positions in one pass; each row must be sampled with the state the chain would have after that
row's own prefix, drafted tokens included, or speculation would not be exact (a penalty must
see a token drafted earlier in the same pass). So:

- `ChainState` holds the sequence's state after everything emitted: the window of the last N
  tokens and their counts (a dict, updated per emitted token: O(1) each), DRY's live matches
  (core.dry.DryTrack, updated per token), mu and adaptive-p's average;
- `ChainState.round` gives a `RoundRows` for one pass: the state at a row is the sequence's
  state advanced over the drafted tokens on the path to that row (a few tokens: the counts'
  change is computed on them alone, never on the history), DRY's point stepped from the row
  above by the one drafted token between them, mu and adaptive-p's average advanced through
  the rows above (by each drafted token's probability under its parent row's distribution),
  and the XTC uniform of the row's position;
- `ChainState.advance` moves the sequence's state over what the round emitted.

A chain with none of these stages on (`SamplerParams.stateful` false) has no state: rows get None.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from specgguf.core.dry import NO_BREAKERS, DryPoint, DrySettings, DryTrack
from specgguf.core.sampling import (
    CHAIN,
    PositionRandom,
    SamplerParams,
    SparseDist,
    adaptive_after,
    adaptive_start,
)
from specgguf.core.tree import ROOT, path_to

_NO_IDS = np.empty(0, dtype=np.int64)
_NO_COUNTS = np.empty(0, dtype=np.float64)


@dataclass(frozen=True)
class RowState:
    """The chain's state at one row (specgguf.core.sampling.RowState)."""

    pen_ids: np.ndarray  # int64, sorted, distinct
    pen_counts: np.ndarray  # float64, > 0
    mu: float
    xtc_u: float | None
    dry_ids: np.ndarray = field(default_factory=lambda: _NO_IDS)  # int64, sorted, distinct
    dry_amounts: np.ndarray = field(default_factory=lambda: _NO_COUNTS)  # float64
    adaptive: tuple[float, float] = (0.0, 0.0)  # adaptive-p's (weighted sum, total weight)


def dry_track(params: SamplerParams) -> DryTrack | None:
    """DRY's tracker for `params` (None: DRY off). Its breakers must have been found in the
    vocabulary (SamplerParams.dry_breakers) unless there are none."""
    if not params.dries:
        return None
    breakers = params.dry_breakers
    if breakers is None:
        if params.dry_sequence_breakers:
            raise ValueError("DRY's sequence breakers were not looked up in the vocabulary")
        breakers = NO_BREAKERS
    n = params.dry_penalty_last_n
    settings = DrySettings(params.dry_multiplier, params.dry_base, params.dry_allowed_length,
                           None if n < 0 else n, breakers)  # fmt: skip
    return DryTrack(settings)


class ChainState:
    """The chain's state after everything emitted so far (the prompt included)."""

    def __init__(
        self, params: SamplerParams, prompt: Sequence[int], random: PositionRandom | None
    ) -> None:
        self.params = params
        self.random = random
        self.counting = params.penalizes
        n = params.penalty_last_n
        self.window_n: int | None = None if n < 0 else n  # None: the whole sequence
        self.window: deque[int] = deque()
        self.counts: dict[int, int] = {}
        self.mu = 2.0 * params.mirostat_tau
        self.adaptive = adaptive_start(params)
        self._base: tuple[np.ndarray, np.ndarray] | None = None
        self.dry = dry_track(params)
        self._dry_base: tuple[np.ndarray, np.ndarray] | None = None
        self.push(prompt)

    def push(self, tokens: Sequence[int]) -> None:
        """Count `tokens` into the window (O(1) each) and move DRY's tracker over them."""
        if self.dry is not None:
            self.dry.push(tokens)
            self._dry_base = None
        if not self.counting:
            return
        counts, window, limit = self.counts, self.window, self.window_n
        for t in tokens:
            counts[t] = counts.get(t, 0) + 1
            window.append(t)
            if limit is not None and len(window) > limit:
                old = window.popleft()
                left = counts[old] - 1
                if left:
                    counts[old] = left
                else:
                    del counts[old]
        self._base = None

    def base(self) -> tuple[np.ndarray, np.ndarray]:
        """The window's distinct tokens (sorted) and their counts, once per round."""
        if self._base is None:
            if not self.counts:
                self._base = (_NO_IDS, _NO_COUNTS)
            else:
                ids = np.fromiter(self.counts.keys(), dtype=np.int64, count=len(self.counts))
                cnt = np.fromiter(self.counts.values(), dtype=np.float64, count=len(self.counts))
                order = np.argsort(ids)
                self._base = (ids[order], cnt[order])
        return self._base

    def dry_base(self) -> tuple[np.ndarray, np.ndarray]:
        """DRY's penalties after the emitted sequence, once per round."""
        if self._dry_base is None:
            assert self.dry is not None
            self._dry_base = self.dry.penalties(self.dry.point)
        return self._dry_base

    def round(self, tokens: Sequence[int], parents: Sequence[int], pos0: int) -> RoundRows:
        """The rows of one pass: row 0 at position `pos0` (after the sequence), row i + 1
        after drafted node i (`parents`: a chain's or a tree's shape)."""
        return RoundRows(self, tokens, parents, pos0)

    def advance(self, rows: RoundRows, path: Sequence[int], token: int,
                dist_of: Callable[[int], SparseDist]) -> None:  # fmt: skip
        """Move past a round that emitted the drafted nodes `path` and then `token` (sampled
        from the row after the path)."""
        emitted = [rows.tokens[i] for i in path] + [token]
        if self.params.mirostat:
            last = path[-1] + 1 if path else 0
            self.mu = _mu_after(rows.state(last, dist_of).mu, dist_of(last), token, self.params)
        if self.params.adapts:
            last = path[-1] + 1 if path else 0
            before = rows.state(last, dist_of).adaptive
            self.adaptive = adaptive_after(before, dist_of(last).pre_prob(token), self.params)
        self.push(emitted)


def _mu_after(mu: float, p: SparseDist, token: int, params: SamplerParams) -> float:
    """Mirostat's mu after `token` was emitted from `p`: mu - eta * (surprise - tau)."""
    px = p.prob(token)
    if px <= 0.0:  # a token the row could not give (a rejected draft's): its rows never count
        return mu
    return mu - params.mirostat_eta * (-np.log2(px) - params.mirostat_tau)


class RoundRows:
    """The chain's state at each row of one verify pass, made when a row is first asked for."""

    def __init__(
        self, chain: ChainState, tokens: Sequence[int], parents: Sequence[int], pos0: int
    ) -> None:
        self.chain = chain
        self.tokens = tokens
        self.parents = parents
        self.pos0 = pos0
        self._rows: dict[int, RowState] = {}
        self._dry_points: dict[int, DryPoint] = {}

    def state(self, r: int, dist_of: Callable[[int], SparseDist]) -> RowState | None:
        """Row r's state (None: the chain has none); `dist_of(row)`: the distribution of a row
        above r (mirostat's mu follows the drafted tokens through them)."""
        chain = self.chain
        if not chain.params.stateful:
            return None
        got = self._rows.get(r)
        if got is not None:
            return got
        prefix = path_to(r - 1, self.parents) if r else []
        ids, counts = chain.base() if chain.counting else (_NO_IDS, _NO_COUNTS)
        if prefix and chain.counting:
            ids, counts = self._counts_after([self.tokens[i] for i in prefix], ids, counts)
        mu = chain.mu
        if chain.params.mirostat and prefix:
            above = self.parents[r - 1] + 1 if self.parents[r - 1] != ROOT else 0
            mu = _mu_after(self.state(above, dist_of).mu, dist_of(above),
                           self.tokens[r - 1], chain.params)  # fmt: skip
        adaptive = chain.adaptive
        if chain.params.adapts and prefix:
            above = self.parents[r - 1] + 1 if self.parents[r - 1] != ROOT else 0
            p = dist_of(above).pre_prob(self.tokens[r - 1])
            adaptive = adaptive_after(self.state(above, dist_of).adaptive, p, chain.params)
        u = chain.random.uniform(self.pos0 + len(prefix), CHAIN) if chain.random else None
        dry_ids, dry_amounts = _NO_IDS, _NO_COUNTS
        if chain.dry is not None:
            path = [self.tokens[i] for i in prefix]
            point = self._dry_point(r, path)
            dry_ids, dry_amounts = chain.dry.penalties(point, path) if r else chain.dry_base()
        row = self._rows[r] = RowState(ids, counts, mu, u, dry_ids, dry_amounts, adaptive)
        return row

    def _dry_point(self, r: int, path: list[int]) -> DryPoint:
        """DRY's point at row r (after the drafted `path`): the point of the row above,
        stepped by the path's last token."""
        track = self.chain.dry
        assert track is not None
        got = self._dry_points.get(r)
        if got is None:
            if not path:
                got = track.point
            else:
                above = self.parents[r - 1] + 1 if self.parents[r - 1] != ROOT else 0
                got = track.after(self._dry_point(above, path[:-1]), path)
            self._dry_points[r] = got
        return got

    def _counts_after(
        self, drafted: list[int], ids: np.ndarray, counts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The window's counts after `drafted` too: + 1 for each, - 1 for each token that
        leaves a full window (its oldest), computed on those few tokens alone."""
        chain = self.chain
        gone: list[int] = []
        if chain.window_n is not None:
            over = len(chain.window) + len(drafted) - chain.window_n
            if over > len(chain.window):  # the drafted tokens themselves leave too
                gone = list(chain.window) + drafted[: over - len(chain.window)]
            else:
                gone = [chain.window[j] for j in range(max(over, 0))]
        all_ids = np.concatenate([ids, np.asarray(drafted + gone, dtype=np.int64)])
        weights = np.concatenate([counts, np.ones(len(drafted)), -np.ones(len(gone))])
        uniq, inv = np.unique(all_ids, return_inverse=True)
        total = np.bincount(inv, weights=weights, minlength=uniq.size)
        keep = total > 0
        return uniq[keep], total[keep]

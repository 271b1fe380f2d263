"""Constrained output (a grammar, a JSON schema) under speculation, without a grammar engine.

A Constraint says which tokens may come next and advances over the tokens chosen; the backend
implements it with libllama's grammar sampler, tests with a toy. Speculation stays lossless
because every verified position uses the distribution plain constrained decoding would use
after the same prefix: the sampler chain over the row with every forbidden token removed.
A drafted token the grammar forbids then has probability 0 and is rejected like any other
wrong guess, and the grammar's state advances only over what the round emits.

Why the chain is not run on a fully masked row: asking the grammar about 150k candidates
costs milliseconds per row. The chain only ever reads the top-k of the row (greedy: the
argmax), so the row's candidates are asked in decreasing order of logit, a few at a time,
until k allowed ones are known; in the common case the first ask (the argmax, or the top-k)
is all allowed and nothing more is asked. The result is what the chain gives on the masked
row (tested against exactly that).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from specgguf.core.sampling import (
    RowState,
    SamplerParams,
    SparseDist,
    adjusted_row,
    chain_on_sorted,
    sorted_top_k,
)

#: how many more candidates each further ask covers (×8: 1 -> 8 -> 64 -> ... -> the row)
_GROWTH = 8
#: the distribution of a state that cannot be reached (after a forbidden proposal): nothing
UNREACHABLE = SparseDist(np.zeros(0, dtype=np.int64), np.zeros(0))


class NoTokenAllowed(RuntimeError):
    """The constraint allows no token at this point (a grammar with a dead end)."""


class Constraint(Protocol):
    """What may follow the text so far; one object per generated sequence."""

    def allowed(self, ids: np.ndarray) -> np.ndarray:
        """For each token id, may it come next? (bool array of the same length)"""
        ...

    def accept(self, token: int) -> None:
        """Advance over `token` (one `allowed` said yes to: anything else is a bug)."""
        ...

    def clone(self) -> Constraint:
        """An independent copy of the current state (accepting on it leaves this one)."""
        ...


def constrained_distribution(
    logits: np.ndarray, params: SamplerParams, constraint: Constraint, row: RowState | None = None
) -> SparseDist:
    """The sampler chain on `logits` with the tokens `constraint` forbids removed, first (as
    llama.cpp's grammar comes before its chain); `row`: the chain's state at this row.

    Raises NoTokenAllowed when no token of the row is allowed."""
    logits = adjusted_row(logits, params, row)
    n = logits.shape[0]
    need = 1 if params.greedy else (params.top_k if 0 < params.top_k < n else n)
    m = need
    while True:
        if m == 1:  # greedy's first ask: the argmax, as distribution() takes it
            top = int(np.argmax(logits))
            ids, vals = np.array([top], dtype=np.int64), np.array([float(logits[top])])
        else:
            ids, vals = sorted_top_k(logits, min(m, n))
        ok = np.asarray(constraint.allowed(ids), dtype=bool)
        if int(ok.sum()) >= need or ids.size == n:
            break
        m = max(m * _GROWTH, 64)
    ids, vals = ids[ok][:need], vals[ok][:need]
    if ids.size == 0:
        raise NoTokenAllowed("the grammar allows no token here")
    if params.greedy:
        return SparseDist(ids[:1].astype(np.int64), np.array([1.0]))
    return chain_on_sorted(ids, vals, params, row)


class RoundStates:
    """The constraint's state before each proposal of one round, made as the verifier walks.

    State 0 is the sequence's own (after everything emitted so far); state i+1 is a clone of
    state i advanced over proposal i, made only when asked for, i.e. when proposal i was
    accepted (or a trace asks for every position). A proposal the grammar forbids makes every
    later state unreachable: its row gets UNREACHABLE, never an accept llama.cpp would abort
    on.
    """

    def __init__(self, state: Constraint, proposals: Sequence[int]) -> None:
        self._states: list[Constraint | None] = [state]
        self._proposals = proposals

    def state(self, i: int) -> Constraint | None:
        while len(self._states) <= i:
            j = len(self._states) - 1
            prev, x = self._states[j], self._proposals[j]
            nxt = None
            if prev is not None and bool(prev.allowed(np.array([x], dtype=np.int64))[0]):
                nxt = prev.clone()
                nxt.accept(x)
            self._states.append(nxt)
        return self._states[i]

    def distribution(
        self, i: int, logits: np.ndarray, params: SamplerParams, row: RowState | None = None
    ) -> SparseDist:
        """The target's distribution at position i of the round under the constraint."""
        s = self.state(i)
        return UNREACHABLE if s is None else constrained_distribution(logits, params, s, row)

    def advance(self, n_accepted: int, token: int) -> Constraint:
        """The sequence's state after the round: the accepted proposals, then `token` (drawn
        from that state's distribution, so allowed)."""
        s = self.state(n_accepted)
        assert s is not None, "an accepted proposal had probability 0"
        s.accept(token)
        return s

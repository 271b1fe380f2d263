"""ngram-mod: one fixed-size hash table hash(n_match tokens) -> next token, rolled forward.

Mirrors llama.cpp's common_ngram_mod / common_speculative_impl_ngram_mod:
- the table has 4 Mi int32 slots (-1 = empty); the slot of a window t_0..t_{n-1} is
  (sum t_i * A**(n-1-i)) mod 2**64 mod size with A = 6364136223846793005. Because the size is a
  power of two we compute it mod 2**22 directly, and roll it in O(1) per token. Slots are
  overwritten on collision and keys are not verified: that is the design (cheap, lossy);
- the table outlives begin(): it is shared by all sequences this drafter sees;
- a proposal rolls forward from the last n_match tokens up to the drafter's own n_max
  tokens, stopping at an empty slot, and is thrown away if it stopped before n_min tokens;
- begin() resets the table when it is more than 25% full after adding the prompt;
- after 5 consecutive verified drafts with acceptance < 25% the table is reset and the current
  sequence re-indexed.

How the loop's budget and ngram-mod's own n_max/n_min fit together (common_speculative_draft):
the drafter rolls out with its own n_max and applies n_min to that rollout; only then is the
result cut to the loop's budget. So n_min=48 with a budget of 3 means "propose 3 tokens, but
only where the table can continue for 48". propose(n_max) does exactly that (it stops rolling
once both the budget and n_min are covered, which cannot change the result).

Deviations: llama.cpp adds n-grams lazily at draft time in chunks of 32 tokens and leaves out
the window ending just before the last token; we add each window as soon as its next token is
observed, so the table is a function of the sequence (incremental == from scratch) and costs
O(1) per token. The low-acceptance rule divides by the number of tokens actually sent
(feedback's n_drafted); llama.cpp divides by the length before the loop cut it, which would
reset the table on every few rounds whenever the loop's budget is much smaller than n_max.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np

from specgguf.core.draft import Draft, Drafter, DraftGate
from specgguf.drafters.ngram_params import NgramModParams

TABLE_SIZE = 4 * 1024 * 1024
EMPTY = -1
#: table occupancy above which begin() resets the table
RESET_OCCUPANCY = 0.25
#: a verified draft with acceptance below this fraction counts as "low"
LOW_ACCEPTANCE = 0.25
#: this many low drafts in a row reset the table
LOW_STREAK = 5

_MASK = TABLE_SIZE - 1
_A = 6364136223846793005 & _MASK  # multiplier reduced mod the table size
assert TABLE_SIZE & _MASK == 0, "rolling hash needs a power-of-two table"


class NgramMod(Drafter):
    """Rolls a lossy n-gram -> next-token table forward to draft long runs cheaply."""

    def __init__(self, n_match: int = 24, n_min: int = 48, n_max: int = 64) -> None:
        NgramModParams(n_match, n_min, n_max)  # raises UsageError naming the flag
        self.n_match = n_match
        self.n_min = n_min
        self.n_max = n_max
        #: the longest draft this drafter makes on its own (llama.cpp's impl n_max)
        self.max_draft = n_max
        # array for fast scalar access in the per-token path, numpy view for bulk updates.
        self._table = array("i", [EMPTY]) * TABLE_SIZE
        self._view = np.frombuffer(self._table, dtype=np.int32)
        self._used = 0
        self._top = pow(_A, n_match - 1, TABLE_SIZE)  # weight of the oldest token in a window
        self._tokens: list[int] = []
        self._slot = 0  # slot of the last n_match tokens (valid once there are that many)
        self._n_low = 0
        self._pending = False

    @property
    def occupancy(self) -> float:
        return self._used / TABLE_SIZE

    def reset_table(self) -> None:
        self._view.fill(EMPTY)
        self._used = 0

    def begin(self, prompt: Sequence[int]) -> None:
        self._tokens = [int(t) for t in prompt]
        self._n_low = 0
        self._pending = False
        self._index_all()
        if self.occupancy > RESET_OCCUPANCY:
            self.reset_table()

    def _index_all(self) -> None:
        """Add every window of the sequence at once (vectorised) and set the rolling slot."""
        n, toks = self.n_match, self._tokens
        length = len(toks)
        if length < n:
            return
        arr = np.asarray(toks, dtype=np.int64)
        wins = length - n + 1
        slots = np.zeros(wins, dtype=np.int64)
        low = arr & _MASK
        for i in range(n):  # < 2**22 * 2**22, no int64 overflow
            slots = (slots * _A + low[i : i + wins]) & _MASK
        self._slot = int(slots[-1])
        if wins > 1:
            # windows 0..wins-2 have a next token; on repeated slots the last write wins,
            # which is what adding them one by one does.
            idx, nxt = slots[:-1], arr[n:]
            uniq, first_rev = np.unique(idx[::-1], return_index=True)
            values = nxt[len(idx) - 1 - first_rev].astype(np.int32)
            self._used += int(np.count_nonzero(self._view[uniq] == EMPTY))
            self._view[uniq] = values

    def observe(self, tokens: Sequence[int]) -> None:
        n, toks, table = self.n_match, self._tokens, self._table
        for t in tokens:
            tok = int(t)
            length = len(toks)
            if length >= n:
                slot = self._slot
                if table[slot] == EMPTY:
                    self._used += 1
                table[slot] = tok
                self._slot = ((slot - toks[length - n] * self._top) * _A + tok) & _MASK
            elif length == n - 1:
                s = 0
                for x in toks[1 - n :] if n > 1 else ():
                    s = (s * _A + x) & _MASK
                self._slot = (s * _A + tok) & _MASK
            toks.append(tok)

    def peek(self, budget: int) -> Draft:
        n, toks, table = self.n_match, self._tokens, self._table
        length = len(toks)
        if budget <= 0 or length <= n:  # llama.cpp needs n_match tokens before the last one
            return Draft()
        # Rolling past both the budget and n_min cannot change what is returned.
        limit = min(self.n_max, max(budget, self.n_min))
        out: list[int] = []
        slot, base = self._slot, length - n
        for i in range(limit):
            tok = table[slot]
            if tok == EMPTY:
                if i < self.n_min:
                    return Draft()
                break
            out.append(tok)
            old = toks[base + i] if i < n else out[i - n]
            slot = ((slot - old * self._top) * _A + tok) & _MASK
        if not out:
            return Draft()
        return Draft(tokens=out[:budget])

    def propose(self, budget: int, gate: DraftGate | None = None) -> Draft:
        draft = self.peek(budget)
        self._pending = bool(draft.tokens)  # feedback judges only a proposal that was made
        return draft

    def feedback(self, n_drafted: int, n_accepted: int) -> None:
        pending, self._pending = self._pending, False
        if not pending or n_drafted <= 0:
            return
        if n_accepted / n_drafted < LOW_ACCEPTANCE:
            self._n_low += 1
            if self._n_low >= LOW_STREAK:
                self._n_low = 0
                self.reset_table()
                self._index_all()
        else:
            self._n_low = 0

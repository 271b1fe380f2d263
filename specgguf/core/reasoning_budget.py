"""A thinking budget as a constraint: after N tokens of thinking, the closing of the thinking
is forced token by token, the way llama-server's reasoning-budget sampler ends it.

States, over the tokens the sequence emits (`accept`):
- idle: waiting for the thinking's opening;
- counting: each token of thinking spends one of the budget; the thinking's own closing ends
  it naturally (done);
- waiting: the budget is spent inside a character whose UTF-8 bytes are not all out yet; the
  tokens that complete it pass (judged on the bytes emitted so far, so a character split
  over byte tokens completes with its last byte);
- forcing: only the next token of the forced sequence (an optional message, then the
  closing) is allowed;
- done: everything passes; a new opening starts counting again.

A budget of 0 forces the closing right after the opening: no thinking. The prompt's last
tokens are fed first (`prime`), so a prompt that opened the thinking starts counting. The
opening and closing are found in the emitted bytes, not as one token sequence, so a marker
spelled in other tokens than its usual ones, or sharing its last token with the text after
it (">\n"), is still seen.

Why this is exact under speculation: it is a Constraint (specgguf.core.constraint), the same
kind as a grammar. Every verified position's distribution is the sampler chain over the row
with the forbidden tokens removed, from the budget's state after the same prefix, so while
forcing the distribution is one-hot on the forced token whatever was drafted: a draft that
proposes it is accepted as plain decoding would emit it, any other proposal there has
probability 0 and is rejected, and the token emitted in its place is the forced one. The
budget's state advances only over what a round emits (RoundStates clones it per proposal),
so the forced tokens are never text taken on a draft's word. Another constraint (the
request's grammar) may sit inside: a token must pass both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

IDLE, COUNTING, WAITING, FORCING, DONE = "idle", "counting", "waiting", "forcing", "done"


@dataclass(frozen=True)
class BudgetMarkers:
    """How the thinking opens and closes (the bytes of the text, matched on the emitted
    tokens' bytes, however the model split them into tokens), and the token ids forced to close
    it when the budget is spent."""

    start: bytes
    end: bytes
    forced: tuple[int, ...]


@dataclass(eq=False)
class ReasoningBudget:
    """The budget's state (a Constraint: allowed / accept / clone), over `inner` if given."""

    markers: BudgetMarkers
    budget: int
    piece: Callable[[int], bytes]  # a token's bytes, control tokens spelled out
    inner: Any = None  # the constraint inside (the request's grammar), or None
    state: str = field(default=IDLE, init=False)
    remaining: int = field(init=False)  # of the budget, while counting
    force_pos: int = field(default=0, init=False)  # the next forced token, while forcing
    _recent: bytes = field(default=b"", init=False, repr=False)  # the last bytes, a marker long

    def __post_init__(self) -> None:
        self.remaining = self.budget
        self._keep = max(len(self.markers.start), len(self.markers.end), 4)

    # -- Constraint -------------------------------------------------------------------------

    def allowed(self, ids: np.ndarray) -> np.ndarray:
        ok = np.ones(len(ids), dtype=bool) if self.inner is None else np.asarray(
            self.inner.allowed(ids), dtype=bool
        )
        if self.state == FORCING and self.force_pos < len(self.markers.forced):
            ok &= np.asarray(ids) == self.markers.forced[self.force_pos]
        return ok

    def accept(self, token: int) -> None:
        if self.inner is not None:
            self.inner.accept(token)
        self._step(token)

    def clone(self) -> ReasoningBudget:
        c = ReasoningBudget.__new__(ReasoningBudget)
        c.__dict__.update(self.__dict__)
        c.inner = None if self.inner is None else self.inner.clone()
        return c

    # -- the state machine ------------------------------------------------------------------

    def prime(self, prompt_tail: Sequence[int]) -> None:
        """Feed the prompt's last tokens (the inner constraint does not see them)."""
        for t in prompt_tail:
            self._step(t)

    def _step(self, token: int) -> None:
        piece = self.piece(token)
        seen = self._recent + piece
        self._recent = seen[-self._keep :]
        if self.state in (IDLE, DONE):
            if _ends_in(seen, piece, self.markers.start):
                self._start()
        elif self.state in (COUNTING, WAITING):
            if _ends_in(seen, piece, self.markers.end):
                self.state = DONE
                return
            complete = utf8_complete(self._recent)
            if self.state == WAITING:
                if complete:
                    self._force()
                return
            self.remaining -= 1
            if self.remaining <= 0:
                if complete:
                    self._force()
                else:
                    self.state = WAITING
        elif self.state == FORCING:
            if token != self.markers.forced[self.force_pos]:
                return  # a prompt token after the opening (generated ones are the forced)
            self.force_pos += 1
            if self.force_pos >= len(self.markers.forced):
                self.state = DONE
                self._recent = b""

    def _start(self) -> None:
        self.state, self.remaining = COUNTING, self.budget
        self._recent = b""
        if self.remaining <= 0:
            self._force()

    def _force(self) -> None:
        self.state, self.force_pos = FORCING, 0
        self._recent = b""
        if not self.markers.forced:
            self.state = DONE


def _ends_in(seen: bytes, piece: bytes, marker: bytes) -> bool:
    """Whether `marker` ends inside `piece`, the last token's bytes at the end of `seen` (the
    token may carry more after it: a ">\n" that closes "<think>" and starts a line)."""
    return bool(marker) and marker in seen[-(len(marker) + len(piece) - 1) :]


def utf8_complete(piece: bytes) -> bool:
    """Whether `piece` ends on a whole UTF-8 character (no lead byte waiting for more)."""
    n = len(piece)
    for back in range(1, min(4, n) + 1):
        b = piece[n - back]
        if b & 0xC0 == 0x80:  # a continuation byte: look further back for its lead
            continue
        if b & 0x80 == 0:
            return True
        need = 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4 if b & 0xF8 == 0xF0 else 1
        return back >= need
    return n == 0

"""draft-eagle3: an EAGLE-3 head drafts from the target's own hidden states.

The head (specgguf.heads.eagle3_head, reached through the `HiddenStateHead` protocol so
this layer needs no backend) hears three of the target's layers on every target pass,
prompt chunks and verify passes alike, and keeps its decoder's input convention and its KV
in step with the target's. This drafter tells it what the loop decided (the prompt, what
was accepted) and drafts over its rows with draft_steps, under the same rules as
draft-simple: greedy or p_min at --temp 0, the auto gate, and probabilistic drafting with
the head's own distribution as q.

Prefix reuse: a head row at position P pairs the token at P+1 with the target's state at P,
so it stays right only while the tokens up to P+1 are unchanged; `begin` keeps the rows of
the new prompt's common prefix with what the head last heard, but for the last one, and
`resume` asks the target to evaluate again from there (at least the prompt's last two
tokens, so that a boundary to draft from exists after the prompt).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from specgguf.core.context import common_prefix_len
from specgguf.core.draft import Draft, DraftGate, DraftTiming, TargetPass
from specgguf.drafters.draft_steps import DraftRules, ModelDrafter


class HiddenStateHead(Protocol):
    """An EAGLE-3 head's context (specgguf.heads.eagle3_head.Eagle3Context)."""

    #: the target layers it reads, in its own order
    @property
    def target_layers(self) -> tuple[int, ...]: ...

    #: positions [0, settled) hold pairs of accepted tokens
    settled: int
    #: the sequence the settled rows were heard for (kept across generations: prefix reuse)
    heard: list[int]

    def restart(self, keep: int) -> None: ...

    def hear(
        self, tokens: Sequence[int], pos0: int, hidden: Mapping[int, np.ndarray], known: int
    ) -> None: ...

    def accept(self, n_accepted: int) -> None: ...

    def seed(self, id_last: int) -> np.ndarray | None: ...

    def step(self, token: int) -> np.ndarray: ...


class Eagle3Drafter(ModelDrafter):
    def __init__(
        self,
        head: HiddenStateHead,
        rules: DraftRules,
        *,
        reuse_prefix: bool = True,
    ) -> None:
        super().__init__(rules)
        self.head = head
        self.hears = tuple(sorted(set(head.target_layers)))
        self.reuse_prefix = reuse_prefix
        self._resume = 0
        self._verifying = False  # a verify pass was heard and its verdict not yet observed

    def begin(self, prompt: Sequence[int]) -> None:
        old = self.head.heard
        self.history = list(prompt)
        keep = 0
        if self.reuse_prefix and len(prompt) >= 2:
            agree = common_prefix_len(old, prompt)
            keep = max(0, min(agree - 1, self.head.settled, len(prompt) - 2))
        self.head.restart(keep)
        self._resume = keep
        self.head.heard = self.history  # the same list: it grows as tokens are observed
        self._verifying = False
        self.output_starts()

    def resume(self, kept: int) -> int:
        return min(kept, self._resume)

    def hear(self, p: TargetPass) -> None:
        known = len(self.history)
        self.head.hear(p.tokens, p.pos0, p.hidden, known)
        # a verify pass's rows wait for observe; a prompt pass's are all the sequence's
        self._verifying = not p.prompt and len(p.tokens) > 0

    def observe(self, tokens: Sequence[int]) -> None:
        self.history.extend(tokens)
        if self._verifying and tokens:
            self.head.accept(len(tokens) - 1)
        self._verifying = False

    def propose(self, budget: int, gate: DraftGate | None = None) -> Draft:
        if budget <= 0 or not self.history:
            return Draft()
        t0 = time.perf_counter()
        first = self.head.seed(self.history[-1])
        if first is None:
            return Draft()
        timing = DraftTiming((time.perf_counter() - t0) * 1e3, 1)
        return self.draft(first, self.head.step, budget, gate, timing)

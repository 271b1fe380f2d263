"""draft-dflash and draft-dspark: a block drafter proposes every draft token in one pass.

The drafter (specgguf.heads.dflash_head, reached through the `BlockHead` protocol so this
layer needs no backend) hears the target layers it reads on every target pass, prompt chunks
and verify passes alike: its KV cache holds one row per target position. A proposal is one
pass over [the last token, mask...]; its rows are the draft's logits, read under the same
rules as every model drafter (draft_steps: greedy or p_min, the auto gate, probabilistic
drafting with the row as q, the grammar's mask), except that the next row never depends on
the token taken from this one: the block was decoded before any was chosen.

The block's length is llama.cpp's: --spec-draft-n-max mask rows (plus the anchor row for
DFlash, whose anchor row drafts nothing), clamped to the block the drafter was trained on,
whatever the round's budget (attention inside the block is not causal, so the length changes
every row; the budget only cuts the draft). DSpark's --spec-draft-p-min reads its confidence
head, as llama.cpp's does: the draft stops at the first row whose confidence is below it.

Prefix reuse: the row at position P is a function of the tokens up to P, so the rows of the
new prompt's common prefix with what was heard stay, but for the prompt's last token (which
the target evaluates again to sample from).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np

from specgguf.core.context import common_prefix_len
from specgguf.core.draft import Draft, DraftGate, DraftTiming, TargetPass
from specgguf.drafters.draft_steps import DraftRules, ModelDrafter
from specgguf.errors import UsageError


class BlockHead(Protocol):
    """A DFlash or DSpark drafter's context (specgguf.heads.dflash_head.DflashContext)."""

    #: the target layers it reads, in its own order
    @property
    def target_layers(self) -> tuple[int, ...]: ...

    #: the most draft tokens one pass gives (the trained block's mask rows)
    @property
    def max_draft(self) -> int: ...

    #: whether the block's first row (the last token's) is the first draft token (DSpark
    #: sampling from its anchor) rather than a row that drafts nothing (DFlash)
    @property
    def anchor_drafts(self) -> bool: ...

    @property
    def has_confidence(self) -> bool: ...

    #: positions its KV cache holds (target positions [0, n_past))
    n_past: int
    #: the sequence its rows were heard for (kept across generations: prefix reuse)
    heard: list[int]

    def restart(self, keep: int) -> None: ...

    def truncate(self, n: int) -> None: ...

    def hear(self, pos0: int, hidden: Mapping[int, np.ndarray]) -> None: ...

    def block(
        self, id_last: int, pos: int, n_rows: int
    ) -> tuple[np.ndarray, np.ndarray | None] | None: ...


class BlockDrafter(ModelDrafter):
    def __init__(
        self, head: BlockHead, rules: DraftRules, *, dspark: bool, reuse_prefix: bool = True
    ) -> None:
        n_draft = min(rules.n_max, head.max_draft)
        #: DSpark: --spec-draft-p-min read from its confidence head, not from the rows
        self._conf_min = 0.0
        if dspark and rules.p_min > 0:
            if not head.has_confidence:
                raise UsageError(
                    "--spec-type draft-dspark: this DSpark drafter has no confidence head for "
                    "--spec-draft-p-min to read: set --spec-draft-p-min 0"
                )
            self._conf_min, rules = rules.p_min, replace(rules, p_min=0.0)
        super().__init__(replace(rules, n_max=n_draft))
        self.head = head
        self.hears = tuple(sorted(set(head.target_layers)))
        self.reuse_prefix = reuse_prefix
        #: rows of every block: the draft rows, after the anchor row unless it drafts
        self.n_rows = n_draft + (0 if head.anchor_drafts else 1)
        self._resume = 0

    def begin(self, prompt: Sequence[int]) -> None:
        keep = 0
        if self.reuse_prefix and prompt:
            agree = common_prefix_len(self.head.heard, prompt)
            keep = max(0, min(agree, self.head.n_past, len(prompt) - 1))
        self.history = list(prompt)
        self.head.restart(keep)
        self._resume = keep
        self.head.heard = self.history  # the same list: it grows as tokens are observed
        self.output_starts()

    def resume(self, kept: int) -> int:
        return min(kept, self._resume)

    def hear(self, p: TargetPass) -> None:
        self.head.hear(p.pos0, p.hidden)

    def observe(self, tokens: Sequence[int]) -> None:
        self.history.extend(tokens)
        # the target now holds every position but the last token's: so does the drafter
        self.head.truncate(len(self.history) - 1)

    def propose(self, budget: int, gate: DraftGate | None = None) -> Draft:
        pos = len(self.history) - 1
        if budget <= 0 or pos < 0 or self.head.n_past != pos or self.n_rows <= 0:
            return Draft()
        t0 = time.perf_counter()
        out = self.head.block(self.history[-1], pos, self.n_rows)
        if out is None:  # no room left for the block: llama.cpp drafts nothing there either
            return Draft()
        rows, conf = out
        timing = DraftTiming((time.perf_counter() - t0) * 1e3, 1)
        if not self.head.anchor_drafts:
            rows = rows[1:]
            conf = conf[1:] if conf is not None else None
        if self._conf_min > 0 and conf is not None:
            low = np.flatnonzero(conf < self._conf_min)
            budget = min(budget, int(low[0]) if low.size else budget)
        budget = min(budget, rows.shape[0])
        if budget <= 0:
            return Draft()
        nxt = iter(rows[1:])
        return self.draft(rows[0], lambda _tok: next(nxt), budget, gate, timing)

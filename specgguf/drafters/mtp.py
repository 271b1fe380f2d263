"""draft-mtp: the target's own multi-token-prediction (NextN) layer drafts.

The head (specgguf.heads.mtp_head) reads, at each position q, the token at q and the
target's last hidden state at q-1, and predicts the token after q. This drafter keeps the head
in step with the target, in llama.cpp's convention (common/speculative.cpp, draft-mtp):

* every row the target evaluates (prompt chunks and verify passes alike, heard through
  `hear`) is fed to the head one position later: the pass's token at q with the hidden state
  of the row before it, the first row with the state carried over from the previous pass (a
  zero row before position 0);
* after a verify pass only the rows the target kept count: the head's KV is cut back with the
  target's, and the state carried to the next pass is that of the last kept row, the one
  whose output the target's own token came from;
* a draft starts from the last emitted token at the next position with that carried state;
  each further step feeds the token just proposed with the head's own output state, at the
  position after it, or, for a head over the target's own cache (a separate drafter file such
  as a Gemma-4 assistant, `shares_cache`), at the same position again: such a head keeps
  nothing of a draft, and what it is fed only tracks what the target's cache holds.

The hidden states it keeps are few: the carried one, and one every ANCHOR_EVERY positions (and
at the end of the last prompts) so that a later prompt sharing a prefix (-cnv, a server slot)
can resume at a position whose state it still has, instead of reading the whole prompt again.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from specgguf.core.draft import Draft, DraftGate, DraftTiming, TargetPass
from specgguf.drafters.draft_steps import DraftRules, ModelDrafter

#: the head's KV cache can resume at a multiple of this (a kept hidden state per span)
ANCHOR_EVERY = 64
#: prompt ends whose hidden state is kept besides (a next prompt often shares exactly one)
PROMPT_ENDS = 2


class Head(Protocol):
    """What the drafter needs of an MTP head (specgguf.heads.mtp_head.MtpHead)."""

    n_embd: int
    n_ctx: int
    #: NextN layers: more than one are chained, one per draft step (`chain`)
    n_heads: int
    #: the id of the target's hidden state the head reads (the trunk's layer count: its last
    #: output, in TargetPass.hidden)
    hidden_layer: int
    #: it attends over the target's cache: every draft step of a round at the same position
    shares_cache: bool
    tokens: list[int]

    @property
    def n_past(self) -> int: ...

    def feed(self, tokens: Sequence[int], pos0: int, hidden: np.ndarray) -> None: ...

    def step(self, token: int, pos: int, hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def chain(
        self, tokens: Sequence[int], pos0: int, hidden: np.ndarray, head: int
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def truncate(self, n_keep: int) -> None: ...

    def close(self) -> None: ...


class HeadState:
    """An MTP head and the target's hidden states kept for it: what outlives one generation
    (a session keeps one per slot; each generation's drafter works on it)."""

    def __init__(self, head: Head) -> None:
        self.head = head
        #: the target's hidden state at a position, for the positions kept (module docstring)
        self.states: dict[int, np.ndarray] = {}
        #: the positions among them that ended a prompt, latest last
        self.prompt_ends: list[int] = []

    def close(self) -> None:
        self.head.close()


class MtpDrafter(ModelDrafter):
    def __init__(
        self,
        state: HeadState,
        rules: DraftRules,
    ) -> None:
        super().__init__(rules)
        self.state = state
        self.head = head = state.head
        self.layer = head.hidden_layer
        self.hears = (self.layer,)  # the trunk's last output: the target's nextn embeddings
        # chained heads: one draft step per NextN layer, so no longer a draft (llama.cpp)
        if head.n_heads > 1:
            self.max_draft = min(rules.n_max, head.n_heads)
        #: the last heard pass, not yet judged: (pos0, its rows' hidden states, whether it was
        #: a pass of the prompt)
        self._heard: tuple[int, np.ndarray, bool] | None = None
        #: False when a pass was missed: the head cannot follow until the next sequence
        self._in_step = True
        # what feeding the target's passes to the head cost since the last propose: the
        # "catch-up" of this drafter's timing (a price paid every round, drafting or not)
        self._fed_ms = 0.0
        self._fed = 0

    # -- the sequence ----------------------------------------------------------------------

    def begin(self, prompt: Sequence[int]) -> None:
        self.history = list(prompt)
        self._heard = None  # a pass of an abandoned sequence that was never judged: not kept
        self.output_starts()

    def resume(self, kept: int) -> int:
        """Where the head can take over the prompt: at most `kept` (what the target keeps),
        no further than the head's own cache agrees with the prompt, and just after a
        position whose hidden state is still here (a fresh read otherwise)."""
        head_tokens, prompt = self.head.tokens, self.history
        agree = 0
        limit = min(kept, len(head_tokens), len(prompt) - 1)
        while agree < limit and head_tokens[agree] == prompt[agree]:
            agree += 1
        start = max((p + 1 for p in self.state.states if p + 1 <= agree), default=0)
        self._cut(start)
        self._in_step = True
        return start

    def hear(self, p: TargetPass) -> None:
        self._settle()  # a pass heard before: a prompt chunk, all kept
        rows = p.hidden.get(self.layer)
        n = len(p.tokens)
        before = self._state_before(p.pos0)
        if (
            not self._in_step
            or rows is None
            or rows.shape != (n, self.head.n_embd)
            or p.pos0 > self.head.n_past
            or before is None
        ):
            self._in_step = False
            return
        t0 = time.perf_counter()
        self._cut(p.pos0)  # the last draft's own steps, and states of rows evaluated again
        paired = np.empty((n, self.head.n_embd), dtype=np.float32)
        paired[0] = before
        paired[1:] = rows[: n - 1]
        self.head.feed(p.tokens, p.pos0, paired)
        self._heard = (p.pos0, np.array(rows, dtype=np.float32), p.prompt)
        self._fed_ms += (time.perf_counter() - t0) * 1e3
        self._fed += n

    def observe(self, tokens: Sequence[int]) -> None:
        """A round was judged: the first len(tokens) rows of its verify pass are what the
        target kept; after the prompt's last pass (the first token), all of that pass's rows,
        the prompt's end."""
        self.history.extend(tokens)
        if self._heard is not None:
            pos0, rows, prompt = self._heard
            if prompt:
                self._keep(pos0, rows, prompt_end=True)
            else:
                self._keep(pos0, rows[: len(tokens)], prompt_end=False)

    # -- drafting --------------------------------------------------------------------------

    def propose(self, budget: int, gate: DraftGate | None = None) -> Draft:
        self._settle()  # a pass no verdict followed (the loop leaves none)
        pos = len(self.history) - 1  # id_last's position, not yet in the target's cache
        before = self._state_before(pos)
        budget = min(budget, self.head.n_ctx - pos)
        if budget <= 0 or not self._in_step or self.head.n_past != pos or before is None:
            return Draft()
        head = self.head
        if head.n_heads > 1:
            budget = min(budget, head.n_heads)
        t0 = time.perf_counter()
        head.truncate(pos)
        drafted, states = [self.history[-1]], [before]
        if head.n_heads == 1:
            first, state = head.step(drafted[0], pos, before)
        else:
            first, state = head.chain(drafted, pos, np.stack(states), 0)
        first_ms = (time.perf_counter() - t0) * 1e3
        timing = DraftTiming(self._fed_ms, self._fed, first_ms, 1)
        self._fed_ms, self._fed = 0.0, 0

        def step(token: int) -> np.ndarray:
            """The next row: the token just proposed, with the head's own output state."""
            nonlocal state
            drafted.append(token)
            states.append(state)
            if head.n_heads == 1:
                at = pos if head.shares_cache else pos + len(drafted) - 1
                logits, state = head.step(token, at, states[-1])
            else:  # layer i over the whole draft so far
                logits, state = head.chain(drafted, pos, np.stack(states), len(drafted) - 1)
            return logits

        return self.draft(first, step, budget, gate, timing)

    # -- the hidden states kept --------------------------------------------------------------

    def _state_before(self, pos: int) -> np.ndarray | None:
        """The target's hidden state at pos-1 (zeros before the first position), if kept."""
        if pos == 0:
            return np.zeros(self.head.n_embd, dtype=np.float32)
        return self.state.states.get(pos - 1)

    def _settle(self) -> None:
        """A heard pass that no verdict followed (a prompt chunk) is kept whole."""
        if self._heard is not None:
            pos0, rows, _ = self._heard
            self._keep(pos0, rows, prompt_end=False)

    def _keep(self, pos0: int, rows: np.ndarray, *, prompt_end: bool) -> None:
        """Rows pos0.. were kept by the target: the head keeps as much, and the hidden states
        kept are the anchors among them and the last one (the carried state). With
        `prompt_end` (the prompt's pass, ending at its last token) the state before that
        token is kept besides: the same prompt sent again resumes there, its last token being
        evaluated again whatever is cached."""
        self._heard = None
        end = pos0 + len(rows)
        self._cut(end)
        states = self.state.states
        tail = max(states, default=-1)
        at = end - 2
        if prompt_end and at >= 0:
            if at >= pos0:
                states[at] = rows[at - pos0].copy()
            if at in states:
                self.state.prompt_ends = [*self.state.prompt_ends, at][-PROMPT_ENDS:]
        if tail >= 0 and (tail + 1) % ANCHOR_EVERY and tail not in self.state.prompt_ends:
            del states[tail]  # the previous carried state, no anchor: not needed again
        first_anchor = pos0 + (-(pos0 + 1)) % ANCHOR_EVERY
        for p in range(first_anchor, end - 1, ANCHOR_EVERY):
            states[p] = rows[p - pos0].copy()
        if rows.shape[0]:
            states[end - 1] = rows[-1].copy()

    def _cut(self, n_keep: int) -> None:
        """Forget the head's positions >= n_keep, and the hidden states kept for them (the
        one at n_keep-1 stays: the next row at n_keep pairs with it)."""
        self.head.truncate(n_keep)
        for p in [p for p in self.state.states if p >= n_keep]:
            del self.state.states[p]
        self.state.prompt_ends = [p for p in self.state.prompt_ends if p < n_keep]

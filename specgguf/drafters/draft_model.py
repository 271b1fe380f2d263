"""draft-simple: a small model of the target's family guesses the next tokens autoregressively.

Mirrors llama.cpp's common/speculative.cpp (draft-simple): the draft first catches up on the
tokens it has not seen, then decodes one token at a time; drafting stops when the draft's top
probability (top-k 10 at temperature 1) falls below --spec-draft-p-min (that token is not
added) or at the round's budget (at most --spec-draft-n-max); a draft shorter than
--spec-draft-n-min is thrown away.

Two ways of drafting (--spec-draft-sampling; the session turns its `auto` into one of them):
- greedy (always at --temp 0, upstream's default, and what `auto` picks under
  --spec-draft-n-max auto): propose the draft's argmax; q is one-hot, and verification
  reduces to "does the target's sample equal the draft".
- probabilistic (what `auto` picks at --temp > 0 with a fixed --spec-draft-n-max): sample
  from q, the user's sampler chain applied to the draft's logits, and keep q for rejection
  sampling, which accepts more often than matching a one-hot guess when the target itself is
  sampling.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from specgguf.core.context import KVContext, Outputs
from specgguf.core.draft import Draft, DraftGate, DraftTiming
from specgguf.drafters.draft_steps import DraftRules, ModelDrafter
from specgguf.drafters.draft_tree import draft_tree

__all__ = ["DraftModelDrafter", "DraftTiming"]


class DraftModelDrafter(ModelDrafter):
    def __init__(
        self,
        ctx: KVContext,
        rules: DraftRules,
        *,
        reuse_prefix: bool = True,
    ) -> None:
        super().__init__(rules)
        self.ctx = ctx
        self.reuse_prefix = reuse_prefix
        # Tokens whose KV the draft context holds, position by position: always a prefix of
        # history, possibly followed by drafted tokens that verification has not judged yet.
        self.kv: list[int] = []

    def begin(self, prompt: Sequence[int]) -> None:
        """Take the prompt. What the draft context already holds of it (an earlier turn) is
        kept; the rest is read by the first `propose`, with whatever was emitted by then, in
        one catch-up batch: a generation that never drafts (auto found the draft cannot pay,
        a server whose batch is too wide for drafts to pay) never pays for the prompt on the
        draft model (nor for --cache-reuse's holes and shift: the context's next pass
        evaluates them)."""
        self.history = list(prompt)
        keep = self.ctx.keep_prefix(self.history[:-1] if self.reuse_prefix else [])
        self.ctx.truncate(keep)
        self.kv = self.history[:keep]
        self.output_starts()

    @property
    def behind(self) -> int:
        return len(self.history) - len(self.kv)

    def observe(self, tokens: Sequence[int]) -> None:
        base = len(self.history)
        self.history.extend(tokens)
        # Drafted tokens past `base` stay valid exactly as far as they match what was emitted.
        m = 0
        tail = self.kv[base:]
        while m < len(tail) and m < len(tokens) and tail[m] == tokens[m]:
            m += 1
        # ...but the last token always stays pending: drafting starts from its logits.
        keep = min(base + m, len(self.history) - 1)
        if keep < len(self.kv):
            del self.kv[keep:]
            self.ctx.truncate(keep)

    def _grows_trees(self) -> bool:
        """Whether this round drafts a tree: a shape that branches, a target that verifies
        trees (the loop's tree_leaves), and a draft context with sequences to branch into
        (a context of its own: a server's shared pass and a recurrent draft have none)."""
        return (
            self.tree.branches
            and self.tree_leaves > 1
            and getattr(self.ctx, "n_seq", 1) > 1
            and hasattr(self.ctx, "decode_beside")
        )

    def _catch_up(self, upto: int, outputs: Outputs) -> np.ndarray | None:
        pending = self.history[len(self.kv) : upto]
        logits = self.ctx.decode(pending, len(self.kv), outputs=outputs)
        self.kv.extend(pending)
        return logits

    def propose(self, budget: int, gate: DraftGate | None = None) -> Draft:
        if budget <= 0:
            return Draft()
        # --cache-reuse's holes in the kept prompt (and the shift pass with them) are the
        # prompt's cost, paid on the first draft of a request only: not timed as catch-up,
        # whose per-token cost auto weighs against the tokens a draft model is behind
        settle = getattr(self.ctx, "settle", None)
        if settle is not None:
            settle()
        t0 = time.perf_counter()
        n_pending = len(self.history) - len(self.kv)
        logits = self._catch_up(len(self.history), outputs="last")
        assert logits is not None
        timing = DraftTiming((time.perf_counter() - t0) * 1e3, n_pending)

        if self._grows_trees():
            self.timing = timing
            draft, own = draft_tree(
                logits[0],
                self.ctx,  # type: ignore[arg-type]  (an engine.Context: _grows_trees)
                budget,
                gate,
                self.rules,
                self.tree,
                max_leaves=self.tree_leaves,
                pos_first=len(self.history),
                timing=timing,
            )
            self.kv.extend(own)
            return draft if draft.depth >= self.rules.n_min else Draft()

        def step(tok: int) -> np.ndarray:
            logits = self.ctx.decode([tok], len(self.kv), outputs="last")
            assert logits is not None
            self.kv.append(tok)
            return logits[0]

        return self.draft(logits[0], step, budget, gate, timing)

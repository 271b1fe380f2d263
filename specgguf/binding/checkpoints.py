"""Rollback from saved states, for a context whose memory forgets only whole sequences.

The loop rolls the target back after each rejected proposal, the draft model rolls back the
proposals the target did not keep, and a new prompt keeps the cached prefix it shares with
the last one. A recurrent or hybrid model cannot drop its last positions
(specgguf.binding.memory_caps), so `CheckpointedContext` does it from checkpoints, in the
scheme llama.cpp's server uses for such models:

* before a decode that may be rolled back it saves the sequence's recurrent state (the
  attention KV needs no copy: it can drop a suffix of positions);
* rolling back to position n restores the latest checkpoint at or before n, drops the
  attention KV past it, and evaluates the tokens between that checkpoint and n again. That is
  exact: each layer's state at a position is a function of the tokens before it, whether they
  came in one batch or several, so the result is what plain decoding holds there;
* at the end of each prompt (before its last token, evaluated apart: a pass more than on an
  attention model, as in llama-server) it keeps a checkpoint too, so that the next prompt (a
  conversation's next turn, a server request, the same prompt again) can reuse a prefix up
  to that point. A prompt
  that shares less than that with the cache is evaluated afresh: a recurrent state cannot be
  cut back to an arbitrary earlier position without a checkpoint there.

When checkpoints are taken is the one choice per context: a target's verify pass is the only
decode the loop rolls back (a plain step never is), while a draft model rolls back its own
one-token steps, so a draft context saves before every decode that returns logits, and a
rollback then lands on a checkpoint exactly and evaluates nothing again.

It satisfies specgguf.core.context.KVContext and passes everything else (model, n_batch,
close, ...) to the engine context inside.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specgguf import interrupts
from specgguf.binding import engine, memory_caps
from specgguf.core.context import Outputs
from specgguf.core.draft import Hear
from specgguf.forwarding import Forwarded

#: prompt-end checkpoints kept per context (the latest ones): the prefixes a next prompt
#: can resume from without a fresh evaluation (--ctx-checkpoints sets it; 0: none kept)
PROMPT_CHECKPOINTS = 2


@dataclass
class _Checkpoint:
    pos: int  # the cache held this many positions when the state was saved
    state: bytearray
    prompt: bool  # taken at the end of a prompt (kept for prefix reuse)


@dataclass
class RollbackStats:
    """What checkpointing cost this context: the price of speculating on such a model."""

    saves: int = 0
    save_ms: float = 0.0
    restores: int = 0
    restore_ms: float = 0.0  # loading states and evaluating tokens again
    redecoded: int = 0  # tokens evaluated again after a restore

    def as_dict(self) -> dict[str, float | int]:
        return {
            "saves": self.saves,
            "save_ms": round(self.save_ms, 3),
            "restores": self.restores,
            "restore_ms": round(self.restore_ms, 3),
            "redecoded": self.redecoded,
        }


class CheckpointedContext:
    """An engine.Context whose rollbacks go through checkpoints (see the module docstring).

    `every_decode`: save before every decode that returns logits (a draft model) instead of
    only before one of several tokens (a target's verify pass); `keep`: how many such
    checkpoints to keep, the latest (a rollback never reaches further back than one round).
    """

    def __init__(self, ctx: engine.Context, *, every_decode: bool, keep: int = 1,
                 prompt_keep: int = PROMPT_CHECKPOINTS, min_step: int = 0) -> None:  # fmt: skip
        """`prompt_keep` (--ctx-checkpoints): prompt-end checkpoints kept; `min_step`
        (--checkpoint-min-step): the fewest positions between two of them (0: any)."""
        self.inner = ctx
        self.every_decode = every_decode
        self.keep = max(1, keep)
        self.prompt_keep = max(0, prompt_keep)
        self.min_step = max(0, min_step)
        self.stats = RollbackStats()
        self._checkpoints: list[_Checkpoint] = []  # by position, ascending
        self._spare: list[bytearray] = []  # buffers of dropped checkpoints, for reuse

    # -- what the loop sees (KVContext) --------------------------------------------------------

    n_ctx = Forwarded[int]("inner")
    n_past = Forwarded[int]("inner")
    tokens = Forwarded[list[int]]("inner")

    #: chains only: a tree's branches would need a state per branch, not one checkpoint
    tree_width = 1
    n_seq = 1

    def __getattr__(self, name: str):  # model, n_batch, n_vocab, close, ...
        return getattr(self.inner, name)

    @interrupts.atomic
    def decode(
        self,
        tokens: Sequence[int],
        pos0: int,
        *,
        outputs: Outputs = "last",
        hear: Hear | None = None,
    ) -> np.ndarray | None:
        """A target's decode with logits of every row is a verify pass (saved before, when it
        has proposals to reject); one with the last row's only is its prompt, whose last
        token is evaluated apart after a checkpoint (a resent prompt resumes there: its last
        token is always evaluated again, its row's logits being the answer; llama-server
        splits a recurrent model's prompt end so too). A draft model's decodes with logits
        are all steps it may roll back. A decode without logits ends at a prefix to resume
        from: saved after."""
        if pos0 < self.n_past or self.inner.dirty:
            self.truncate(pos0)
        if not self.every_decode and outputs == "last" and len(tokens) > 1:
            n = len(tokens)
            self.decode(tokens[: n - 1], pos0, outputs="none", hear=hear)
            return self.inner.decode(tokens[n - 1 :], pos0 + n - 1, outputs="last", hear=hear)
        may_roll_back = outputs != "none" if self.every_decode else outputs == "all"
        if tokens and may_roll_back and (self.every_decode or len(tokens) > 1):
            self._save(prompt=False)
        logits = self.inner.decode(tokens, pos0, outputs=outputs, hear=hear)
        if tokens and outputs == "none" and self._prompt_checkpoint_due():
            self._save(prompt=True)
        return logits

    @interrupts.atomic
    def truncate(self, n_keep: int) -> None:
        """Forget every position >= n_keep: restore the latest checkpoint at or before it and
        evaluate what lies between again (from scratch if there is none)."""
        n_keep = max(0, n_keep)
        if n_keep >= self.n_past and not self.inner.dirty:
            return
        self._drop_after(n_keep)
        if self.inner.remove_from(n_keep):  # the whole sequence, or nothing past a clean end
            return
        t0 = time.perf_counter()
        cp = self._checkpoints[-1] if self._checkpoints else None
        start = cp.pos if cp is not None else 0
        again = self.inner.tokens[start:n_keep]
        self._restore(cp)
        if again:
            self.inner.decode(again, start, outputs="none")
        self.stats.restores += 1
        self.stats.redecoded += len(again)
        self.stats.restore_ms += (time.perf_counter() - t0) * 1e3

    @interrupts.atomic
    def keep_prefix(self, tokens: Sequence[int]) -> int:
        """Keep what the cache holds of `tokens` up to the latest checkpoint inside their
        common prefix (all of it when the cache holds nothing more than that prefix)."""
        n = engine.common_prefix_len(self.inner.tokens, tokens)
        if n >= self.n_past and not self.inner.dirty:
            return self.n_past
        self._drop_after(n)
        if self.inner.remove_from(n):
            return n
        t0 = time.perf_counter()
        cp = self._checkpoints[-1] if self._checkpoints else None
        self._restore(cp)
        self.stats.restores += 1
        self.stats.restore_ms += (time.perf_counter() - t0) * 1e3
        return self.n_past

    # -- checkpoints ---------------------------------------------------------------------------

    def _prompt_checkpoint_due(self) -> bool:
        """Whether a prompt checkpoint is kept here: some are kept at all, and the latest is
        at least min_step positions back."""
        if not self.prompt_keep:
            return False
        last = next((c.pos for c in reversed(self._checkpoints) if c.prompt), None)
        return last is None or self.n_past - last >= self.min_step

    def _save(self, *, prompt: bool) -> None:
        pos = self.n_past
        cps = self._checkpoints
        if cps and cps[-1].pos == pos:  # the same tokens before it: the same state
            cps[-1].prompt = cps[-1].prompt or prompt
            return
        t0 = time.perf_counter()
        state = self.inner.save_state(self._spare.pop() if self._spare else None)
        cps.append(_Checkpoint(pos, state, prompt))
        self._evict()
        self.stats.saves += 1
        self.stats.save_ms += (time.perf_counter() - t0) * 1e3

    def _evict(self) -> None:
        """Keep the latest `keep` round checkpoints and `prompt_keep` prompt ones."""
        rounds = [c for c in self._checkpoints if not c.prompt]
        prompts = [c for c in self._checkpoints if c.prompt]
        for c in rounds[: -self.keep] + prompts[: max(0, len(prompts) - self.prompt_keep)]:
            self._checkpoints.remove(c)
            self._spare.append(c.state)

    def _drop_after(self, n: int) -> None:
        """Checkpoints past position n describe tokens that are about to go."""
        while self._checkpoints and self._checkpoints[-1].pos > n:
            self._spare.append(self._checkpoints.pop().state)

    def _restore(self, cp: _Checkpoint | None) -> None:
        if cp is None or cp.pos == 0:
            self.inner.clear()
        else:
            self.inner.load_state(cp.state, cp.pos)

    def close(self) -> None:
        self._checkpoints.clear()
        self._spare.clear()
        self.inner.close()


#: a context as the session hands it out: plain where the memory rolls back by itself
ModelContext = engine.Context | CheckpointedContext


def with_rollback(ctx: engine.Context, *, draft: bool, keep: int,
                  prompt_keep: int = PROMPT_CHECKPOINTS, min_step: int = 0,
                  ) -> tuple[ModelContext, str]:  # fmt: skip
    """`ctx` probed (memory_caps.probe_removal) and, where its memory forgets only whole
    sequences, wrapped in a CheckpointedContext; with the probe's answer. `draft`: the context
    of a draft model (checkpoints before every decode with logits); `keep`: round checkpoints
    kept (a draft rolls back at most its draft length); `prompt_keep`, `min_step`: the prompt
    checkpoints (--ctx-checkpoints, --checkpoint-min-step)."""
    removal = memory_caps.probe_removal(ctx)
    if removal == memory_caps.FULL:
        return CheckpointedContext(ctx, every_decode=draft, keep=keep, prompt_keep=prompt_keep,
                                   min_step=min_step), removal  # fmt: skip
    return ctx, removal

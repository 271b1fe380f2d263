"""The DFlash (or DSpark) drafter's llama context: target features in, one block out.

The drafter is its own small model (architecture dflash) with a context made over the
target's (`ctx_other`), through which its graph borrows the target's token embeddings and
lm_head when the file has none. Its one graph works two ways, by what the batch holds:

* embedding rows (`inject`): one row per target position, the inputs of the target layers
  it reads concatenated; the graph fuses them and writes K/V at that position into the
  drafter's KV cache. Every target pass is injected, a verify pass's rejected rows too;
  the drafter truncates its cache to what the target keeps once the loop says (`truncate`).
* token rows (`block`): [the last token, mask, mask...] at the positions after the cache,
  attending over the injected positions and (non-causally, unless the file says otherwise)
  over each other; one pass gives the logits of every row. The block's own K/V is dropped
  right after, so the cache holds injected rows only: positions [0, n_past) are the
  target's positions [0, n_past), each a function of the tokens up to it.

That is llama.cpp's layout (common/speculative.cpp, draft-dflash), kept row for row: the same
rows injected in the same chunks (n_ubatch), the same block length (--spec-draft-n-max mask
rows, clamped to the block the drafter was trained on, whatever the round's budget), so the
same drafts. Everything libllama asserts on is checked first: a chunk never exceeds n_ubatch,
a block never exceeds n_batch, every row's width is the drafter's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from specgguf import interrupts
from specgguf.binding import engine
from specgguf.binding.engine import ll
from specgguf.binding.llama_ext import require_ext
from specgguf.errors import ExitCode, SpecggufError
from specgguf.forwarding import Forwarded
from specgguf.heads.dflash_info import DflashHead
from specgguf.heads.head_context import HeadContext, embd_view


class DflashContext(HeadContext):
    """One sequence's DFlash or DSpark drafter over one target context (seq 0 of each)."""

    def __init__(
        self,
        model: engine.Model,
        target: engine.Context,
        params: engine.ContextParams,
        head: DflashHead,
    ) -> None:
        self.what = "the DSpark drafter" if head.markov_rank else "the DFlash drafter"
        super().__init__(model, target, params, require_ext(f"--spec-type {head.spec_type}"))
        self.head = head
        # the pre-norm state (DSpark's confidence rows) and the block's attention, as
        # llama.cpp sets them
        self._x.set_embeddings_nextn(self.ptr, True, True)
        ll.llama_set_causal_attn(self.ptr, head.causal)
        self.n_embd = head.n_embd
        self.n_enc = len(head.target_layers) * head.n_embd

    # what the drafter reads of its header
    target_layers = Forwarded[tuple[int, ...]]("head")
    max_draft = Forwarded[int]("head")
    anchor_drafts = Forwarded[bool]("head")
    has_confidence = Forwarded[bool]("head")

    # -- memory ----------------------------------------------------------------------------

    def truncate(self, n: int) -> None:
        """Forget every position >= n (the target forgot them, or a block was decoded)."""
        self.forget(n)

    def restart(self, keep: int) -> None:
        """A new sequence whose first `keep` rows are still right (prefix reuse)."""
        self.truncate(keep)

    # -- the two ways of the graph ---------------------------------------------------------

    @interrupts.atomic
    def inject(self, features: np.ndarray, pos0: int) -> None:
        """Feature rows (n, n_enc) of target positions pos0.., written into the KV cache in
        chunks of n_ubatch (as llama.cpp injects them). Positions must continue the cache."""
        n = features.shape[0]
        assert features.shape[1] == self.n_enc and features.dtype == np.float32
        b = self._batch
        for start, m in self._chunks(pos0, n, self.n_ubatch, "drafter"):
            for j in range(m):
                idx = ll.llama_batch_ext_add_embd(b, 0, embd_view(features[start + j]))
                self._add_row(idx, pos0 + start + j, False)
            self._process(ll.LLAMA_PROCESS_TYPE_DECODE, "injection of the target's rows")
            self.n_past = pos0 + start + m

    def hear(self, pos0: int, hidden: Mapping[int, np.ndarray]) -> None:
        """A target pass at pos0.. with the target's hidden states: its rows injected, after
        dropping whatever the cache held from pos0 on. A gap before pos0 (never made by the
        loop) leaves the rows out: the drafter then stops drafting, the output unchanged."""
        features = np.concatenate(
            [np.asarray(hidden[lid], dtype=np.float32) for lid in self.head.target_layers],
            axis=1,
        )
        self.truncate(pos0)
        if self.n_past == pos0 and features.shape[0]:
            self.inject(np.ascontiguousarray(features), pos0)

    @interrupts.atomic
    def block(
        self, id_last: int, pos: int, n_rows: int
    ) -> tuple[np.ndarray, np.ndarray | None] | None:
        """One pass over [id_last, mask * (n_rows - 1)] at pos..: every row's logits (a copy,
        (n_rows, n_vocab)) and, for a DSpark drafter with a confidence head, each row's
        confidence; the block's own K/V is dropped again. None where the block would run
        past the context: no draft there (the target could not verify it either)."""
        if pos + n_rows > self.n_ctx:
            return None
        if pos != self.n_past:
            raise AssertionError(
                f"a block must follow the injected rows: {pos} after {self.n_past}"
            )
        if not 0 < n_rows <= self.n_batch:
            raise AssertionError(f"a block of {n_rows} rows, the batch holds 1..{self.n_batch}")
        b = self._batch
        ll.llama_batch_ext_clear(b)
        for i in range(n_rows):
            idx = ll.llama_batch_ext_add_token(b, 0, id_last if i == 0 else self.head.mask_token)
            if idx < 0:
                raise SpecggufError(
                    f"{self.model.path}: {self.what} refused its block", ExitCode.RUNTIME
                )
            self._add_row(idx, pos + i, True)
        try:
            self._process(ll.LLAMA_PROCESS_TYPE_DECODE, "block pass")
            self.n_past = pos + n_rows
            logits = ll.llama_get_logits(self.ptr)
            rows = np.ctypeslib.as_array(logits, shape=(n_rows, self.n_vocab)).copy()
            conf = None
            if self.head.has_confidence:
                nextn = self._x.get_embeddings_nextn(self.ptr)
                if nextn:
                    states = np.ctypeslib.as_array(nextn, shape=(n_rows, self.n_embd))
                    conf = states[:, 0].copy()
        finally:
            self.truncate(pos)
        return rows, conf

    def decode(self, tokens: Sequence[int], pos0: int, *, outputs: str = "last"):
        """What a cost measurement (bench's cost curve) times: with outputs "none", zero
        feature rows at pos0.. (an injection costs the same whatever the rows hold); else one
        block pass after them, the step of a DFlash drafter. Whoever times leaves the drafter
        empty (truncate(0)); the next generation then starts afresh."""
        self.truncate(pos0)
        if outputs == "none":
            self.inject(np.zeros((len(tokens), self.n_enc), dtype=np.float32), pos0)
            return None
        n_rows = min(self.head.max_draft + int(not self.head.anchor_drafts), self.n_batch)
        out = self.block(int(tokens[0]), pos0, min(n_rows, self.n_ctx - pos0))
        return None if out is None else out[0][-1:]

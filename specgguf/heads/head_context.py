"""What every drafter head's llama context shares (an EAGLE-3 head, a DFlash drafter).

A head is a small model whose context is made over the target's (`ctx_other`): its graph
borrows the target's token embeddings and lm_head through it when the file has none, and it
is as long as the target's. It is fed with libllama's extended batch (embedding rows beside
tokens) and keeps one sequence of KV cells that the head's own module rolls back with the
target. Each head's module (eagle3_head, dflash_head) adds only its input convention.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from specgguf import interrupts
from specgguf.binding import engine
from specgguf.binding.engine import ll
from specgguf.binding.llama_ext import LlamaExt
from specgguf.errors import ExitCode, SpecggufError


def embd_view(row: np.ndarray) -> ll.llama_embd:
    """One float32 row as libllama's embedding view (it copies the data when added)."""
    assert row.dtype == np.float32 and row.flags.c_contiguous
    return ll.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, row.shape[0])


class HeadContext:
    """One sequence's head context over one target context (seq 0 of each), with its batch."""

    #: how messages name the head ("the EAGLE-3 head")
    what = "the head"

    def __init__(
        self,
        model: engine.Model,
        target: engine.Context,
        params: engine.ContextParams,
        api: LlamaExt,
    ) -> None:
        self._x = api
        self.model = model
        cp = engine.llama_params(replace(params, n_ctx=target.n_ctx, n_seq_max=1))
        cp.ctx_other = target.ptr
        self.ptr = ll.llama_init_from_model(model.ptr, cp)
        if not self.ptr:
            raise SpecggufError(
                f"{model.path}: failed to create {self.what}'s context (run with -v)",
                ExitCode.RUNTIME,
            )
        self.n_vocab = model.n_vocab
        self.n_ctx = int(ll.llama_n_ctx(self.ptr))
        self.n_batch = int(ll.llama_n_batch(self.ptr))
        self.n_ubatch = int(ll.llama_n_ubatch(self.ptr))
        self.memory = ll.llama_get_memory(self.ptr)
        self._batch = ll.llama_batch_ext_init(self.ptr)
        if not self._batch:
            self.close()
            raise SpecggufError(
                f"{model.path}: could not make {self.what}'s batch", ExitCode.RUNTIME
            )
        self._pos = ll.llama_pos(0)
        #: positions the head's KV cache holds
        self.n_past = 0
        #: the sequence its rows were heard for (the drafter's, across generations)
        self.heard: list[int] = []

    @interrupts.atomic
    def forget(self, n: int) -> None:
        """Forget every head position >= n (an attention KV cache always can)."""
        n = max(0, n)
        if n < self.n_past:
            ll.llama_memory_seq_rm(self.memory, 0, n, -1)
            self.n_past = n

    def _chunks(self, pos0: int, n: int, size: int, who: str) -> Iterator[tuple[int, int]]:
        """(start, m) of each chunk of at most `size` of the n rows written at pos0.., the
        batch cleared for it: the caller fills it and processes it. The rows must continue
        the cache (`who` names the head in the assertion) and fit in the context."""
        if pos0 != self.n_past:
            raise AssertionError(f"{who} positions must continue: {pos0} after {self.n_past}")
        engine.check_room(pos0 + n, self.n_ctx)
        for start in range(0, n, size):
            ll.llama_batch_ext_clear(self._batch)
            yield start, min(size, n - start)

    def _process(self, kind: int, what: str) -> None:
        rc = ll.llama_process(self.ptr, kind, self._batch)
        if rc != 0:
            raise SpecggufError(
                f"{self.model.path}: {self.what}'s {what} failed (status {rc})", ExitCode.RUNTIME
            )

    def _add_row(self, idx: int, pos: int, output: bool) -> None:
        """Place the batch's row `idx` at `pos`, with its output (logits) or not."""
        self._pos.value = pos
        ll.llama_batch_ext_set_pos(self._batch, idx, ctypes.byref(self._pos))
        ll.llama_batch_ext_set_output_logits(self._batch, idx, output)

    def close(self) -> None:
        if getattr(self, "_batch", None):
            ll.llama_batch_ext_free(self._batch)
            self._batch = None
        if getattr(self, "ptr", None):
            ll.llama_free(self.ptr)
            self.ptr = None

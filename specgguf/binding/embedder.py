"""--embeddings: a text's vectors from the target model, read from a llama.cpp context of
their own with embeddings on (the generation's contexts keep computing logits only).

What it costs: one more context over the target's weights (shared, not loaded again) whose
KV cache holds one input at a time: `n_ctx` positions, all evaluated in one physical batch
(llama.cpp pools an input's rows within one batch), so an input longer than that is refused.
The server makes it with n_ctx = min(a slot's context, -b)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specgguf.binding import engine
from specgguf.errors import ExitCode, SpecggufError

ll = engine.ll

#: llama.h's LLAMA_POOLING_TYPE_NONE: one vector per token
POOLING_NONE = 0
#: llama.h's LLAMA_POOLING_TYPE_RANK: a reranker's classifier outputs per input (the score
#: of a query-document pair is the first)
POOLING_RANK = 4


class InputTooLong(ValueError):
    """An input longer than the embeddings context holds."""


class Embedder:
    """Embeddings of token sequences, one input at a time (on the server's worker thread)."""

    def __init__(self, model: engine.Model, n_ctx: int, *, threads: int = 0,
                 pooling: int | None = None) -> None:  # fmt: skip
        """`pooling`: llama.h's llama_pooling_type (--pooling), None: the model's own (its
        GGUF says; a chat model's is none: one vector per token)."""
        overrides: tuple[tuple[str, object], ...] = (("embeddings", True),)
        if pooling is not None:
            overrides += (("pooling_type", pooling),)
        params = engine.ContextParams(n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                                      n_threads=threads, overrides=overrides)  # fmt: skip
        self.ctx = engine.Context(model, params)
        # llama.cpp may round the context up: an input must fit one physical batch
        self.n_ctx = min(self.ctx.n_ctx, int(ll.llama_n_ubatch(self.ctx.ptr)))
        self.pooling = int(ll.llama_pooling_type(self.ctx.ptr))
        # rank pooling hands over the classifier's outputs (llama.cpp keeps that many floats
        # per sequence), not a hidden state: reading n_embd of them would read past its buffer
        self.n_embd = int(ll.llama_model_n_cls_out(model.ptr) if self.pooling == POOLING_RANK
                          else ll.llama_model_n_embd_out(model.ptr))  # fmt: skip
        # an encoder-only model (BERT-like) is run with llama_encode
        encoder_only = ll.llama_model_has_encoder(model.ptr) and not ll.llama_model_has_decoder(
            model.ptr)
        self._run = ll.llama_encode if encoder_only else ll.llama_decode
        self._batch = ll.llama_batch_init(self.n_ctx, 0, 1)

    @property
    def pooled(self) -> bool:
        return self.pooling != POOLING_NONE

    def embed(self, tokens: Sequence[int]) -> list[np.ndarray]:
        """The input's vectors: one (pooled), or one per token (pooling none); copies."""
        n = len(tokens)
        if n > self.n_ctx:
            raise InputTooLong(f"the input is {n} tokens; the embeddings context holds "
                               f"{self.n_ctx} (raise -b or -c)")  # fmt: skip
        ll.llama_memory_clear(self.ctx.memory, True)
        b = self._batch
        for i, t in enumerate(tokens):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, i, 1, 1
            b.seq_id[i][0] = 0
        b.n_tokens = n
        try:
            rc = self._run(self.ctx.ptr, b)
            if rc != 0:
                raise SpecggufError(f"llama.cpp failed to compute embeddings (code {rc})",
                                    ExitCode.RUNTIME)  # fmt: skip
            if self.pooled:
                rows = [ll.llama_get_embeddings_seq(self.ctx.ptr, 0)]
            else:
                rows = [ll.llama_get_embeddings_ith(self.ctx.ptr, i) for i in range(n)]
            if any(not r for r in rows):
                raise SpecggufError("llama.cpp returned no embeddings", ExitCode.RUNTIME)
            return [np.ctypeslib.as_array(r, shape=(self.n_embd,)).copy() for r in rows]
        finally:
            ll.llama_memory_clear(self.ctx.memory, True)

    def close(self) -> None:
        if self._batch is not None:
            ll.llama_batch_free(self._batch)
            self._batch = None
        self.ctx.close()

"""The MTP head: a context of type MTP over the target's own loaded model, which runs the
model's NextN layer (no second model file, no -md).

What the head computes at position q is the next-but-one token's distribution from two inputs
of one row: the token at q and the target's hidden state at q-1 (the trunk's last output, the
"nextn embedding"). So each row the target evaluates is paired, one position later, with the
token that follows it; the hidden state of a pass's last row waits for the first token of the
next pass (the drafter, specgguf.drafters.mtp, carries it). Drafting chains the head on
itself: the hidden state the head outputs at q stands in for the target's at q when the head
is fed the token it just proposed at q+1.

A model with several NextN layers (trained heads for the 1st, 2nd, ... token ahead) chains
them as llama.cpp does: every layer reads every target row, and draft step i runs layer i over
the whole draft so far, so a draft is at most as long as the model has layers.

The head's KV cache is a plain attention cache (the NextN layer attends over what it was fed
at earlier positions), so it rolls back by dropping positions, even over a hybrid target whose
own memory needs checkpoints. Everything llama.cpp would assert on is checked here first
(positions in order, rows within the batch and the context, token ids in the vocabulary, rows
of the model's width): a bad call raises instead of aborting the process.

A separate MTP drafter file (a Gemma-4 assistant, specgguf.heads.mtp_info) runs in the same
kind of context, over ITS model, with `target` given: it has no KV cache of its own (its layers
attend over the target's last two layers' cache, which llama.cpp shares through ctx_other), so
`feed` only records what the target's cache holds, every draft step of a round is a row at the
same position (the one after that cache), and all its layers run in each step (no chaining).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

from specgguf import interrupts
from specgguf.binding import engine
from specgguf.binding.llama_ext import require_ext
from specgguf.errors import ExitCode, SpecggufError

ll = engine.ll
_FLOAT_P = ctypes.POINTER(ctypes.c_float)
#: what the head is for, in messages (and in require_ext's, naming what lacks the calls)
PURPOSE = "--spec-type draft-mtp"


def load_with_mtp_layers(path, **kwargs) -> engine.Model:  # noqa: ANN001 - as engine.Model
    """engine.Model(path, **kwargs) with its NextN layers loaded, so that an MtpHead can run
    them (the trunk's own passes are the same either way)."""
    return engine.Model(path, load_mtp=True, **kwargs)


class MtpHead:
    """One sequence's MTP context over `model` (loaded by load_with_mtp_layers), beside the
    target's context `target_ptr`, with `params`' size, batch, threads and KV cache types.

    `tokens` is what its KV cache holds, position by position (`n_past` of them); `feed`
    appends rows without outputs (what the target evaluated), `step` one row with its logits
    and output hidden state (a draft step of a single NextN layer), `chain` a draft step of
    chained layers, `truncate` drops positions.
    """

    def __init__(
        self,
        model: engine.Model,
        target_ptr: int,
        params: engine.ContextParams,
        *,
        target: engine.Model | None = None,
    ) -> None:
        self.x = require_ext(PURPOSE)
        #: a separate drafter file over `target`'s cache (the module docstring)
        self.shares_cache = target is not None
        trunk = target if target is not None else model
        # the MTP graph asserts that the layers exist and that their tensors were loaded
        if target is None and not model.mtp_loaded:
            raise ValueError(f"{model.path}: not loaded with its MTP layers (load_with_mtp_layers)")
        #: the model's NextN layers: with several, each draft step runs the next one (a
        #: drafter file runs all of its layers in every step)
        n_nextn = int(ll.llama_model_n_layer_nextn(model.ptr))
        if n_nextn <= 0:
            raise SpecggufError(
                f"{model.path}: the loaded model has no MTP layers", ExitCode.INCOMPATIBLE
            )
        self.n_heads = 1 if self.shares_cache else n_nextn
        self.model = model
        self.n_embd = int(ll.llama_model_n_embd_out(model.ptr))
        if self.n_embd != trunk.n_embd:  # the head's input rows are the target's output rows
            raise SpecggufError(
                f"{model.path}: its MTP layers read rows of {self.n_embd}, the trunk writes "
                f"{trunk.n_embd}",
                ExitCode.INCOMPATIBLE,
            )
        self.hidden_layer = trunk.n_layer  # the trunk's layer count: its last output's id
        self.n_vocab = model.n_vocab
        cp = engine.llama_params(params)
        cp.ctx_type = ll.LLAMA_CONTEXT_TYPE_MTP
        # as llama.cpp's driver does; a drafter file's context cannot exist without it
        cp.ctx_other = target_ptr
        if self.shares_cache and not target_ptr:
            raise ValueError("a separate MTP drafter needs the target's context")
        cp.n_rs_seq = 0  # no recurrent state: the NextN layer is attention only
        ptr = ll.llama_init_from_model(model.ptr, cp)
        if not ptr:
            raise SpecggufError(
                f"{model.path}: failed to create the MTP context (run with -v)", ExitCode.RUNTIME
            )
        self.ptr = ptr
        self.n_ctx = int(ll.llama_n_ctx(ptr))
        self.n_batch = int(ll.llama_n_batch(ptr))
        self.memory = ll.llama_get_memory(ptr)
        # the head's own output hidden state only for rows that output (one per draft step)
        self.x.set_embeddings_nextn(ptr, True, True)
        self._batch = ll.llama_batch_ext_init(ptr)
        if not self._batch:
            ll.llama_free(ptr)
            raise SpecggufError("failed to allocate the MTP context's batch", ExitCode.RUNTIME)
        self._pos = ll.llama_pos(0)
        self._head = 0  # the NextN layer the MTP graph runs (llama_set_nextn_layer_offset)
        self.tokens: list[int] = []

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    # -- rows -----------------------------------------------------------------------------

    def _check(self, tokens: Sequence[int], pos0: int, hidden: np.ndarray) -> None:
        n = len(tokens)
        if pos0 != self.n_past:
            raise ValueError(f"MTP head: rows at {pos0}, the head holds {self.n_past} positions")
        if pos0 + n > self.n_ctx:
            raise SpecggufError(
                f"context full: the MTP head needs {pos0 + n} positions, -c is {self.n_ctx}",
                ExitCode.PROMPT,
            )
        if hidden.shape != (n, self.n_embd) or hidden.dtype != np.float32:
            raise ValueError(f"MTP head: hidden rows {hidden.shape}, expected ({n}, {self.n_embd})")
        if n and not 0 <= min(tokens) <= max(tokens) < self.n_vocab:
            raise ValueError("MTP head: a token id outside the vocabulary")

    def _select(self, head: int) -> None:
        """Run NextN layer `head` from the next pass on (the graph asserts it exists)."""
        if not 0 <= head < self.n_heads:
            raise ValueError(f"MTP head {head}: the model has {self.n_heads}")
        if head != self._head:
            self.x.set_nextn_layer_offset(self.ptr, head)
            self._head = head

    @interrupts.atomic
    def _process(
        self, tokens: Sequence[int], pos0: int, hidden: np.ndarray, last: bool, *, kept: bool = True
    ) -> None:
        """One llama_process of rows (tokens[j] at pos0+j, paired with hidden[j]); only the
        last row outputs, and only when `last`; `kept`: the rows stay in the head's cache."""
        b = self._batch
        ll.llama_batch_ext_clear(b)
        base = hidden.ctypes.data
        row_bytes = self.n_embd * 4
        n = len(tokens)
        for j in range(n):
            i = ll.llama_batch_ext_add_token(b, 0, tokens[j])
            self._pos.value = pos0 + j
            embd = ll.llama_embd(ctypes.cast(base + j * row_bytes, _FLOAT_P), 1, self.n_embd)
            if (
                i < 0
                or not ll.llama_batch_ext_set_pos(b, i, ctypes.byref(self._pos))
                or not ll.llama_batch_ext_set_embd_token(b, i, embd)
                or not ll.llama_batch_ext_set_output_logits(b, i, last and j == n - 1)
            ):
                raise SpecggufError(f"the MTP batch refused row {j} (status {i})", ExitCode.RUNTIME)
        rc = ll.llama_process(self.ptr, ll.LLAMA_PROCESS_TYPE_DECODE, b)
        if rc != 0:
            if not self.shares_cache:  # (a shared cache is the target's: nothing was written)
                ll.llama_memory_seq_rm(self.memory, 0, pos0, -1)  # it may leave cells behind
            raise SpecggufError(f"the MTP head's decode failed with status {rc}", ExitCode.RUNTIME)
        if kept:
            self.tokens.extend(tokens)

    def feed(self, tokens: Sequence[int], pos0: int, hidden: np.ndarray) -> None:
        """Read rows the target evaluated: tokens[j] at pos0+j with the target's hidden
        state of the row before it, hidden[j] (no outputs; split into batches). With several
        NextN layers every one reads them (each keeps its own layer of the KV cache: the
        positions are dropped and read again under the next layer, as llama.cpp does)."""
        hidden = np.ascontiguousarray(hidden, dtype=np.float32)
        self._check(tokens, pos0, hidden)
        if self.shares_cache:  # the target's own pass filled the cache this head reads
            self.tokens.extend(tokens)
            return
        for s in range(0, len(tokens), self.n_batch):
            e = min(len(tokens), s + self.n_batch)
            for head in range(self.n_heads):
                self._forget_from(pos0 + s)
                self._select(head)
                self._process(tokens[s:e], pos0 + s, hidden[s:e], last=False)
        self._select(0)

    def _outputs(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """The last pass's one output, batch row `row`: its logits (a view valid until the
        next call) and the head's output hidden state (a copy)."""
        logits = ll.llama_get_logits_ith(self.ptr, row)
        out = self.x.get_embeddings_nextn_ith(self.ptr, row)
        if not logits or not out:
            raise SpecggufError("the MTP head returned no output row", ExitCode.RUNTIME)
        logits = np.ctypeslib.as_array(logits, shape=(self.n_vocab,))
        return logits, np.ctypeslib.as_array(out, shape=(self.n_embd,)).copy()

    def chain(
        self, tokens: Sequence[int], pos0: int, hidden: np.ndarray, head: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """A draft step of chained NextN layers: step i runs layer i over the whole draft so
        far (tokens[t] at pos0+t with hidden[t]: the carried state, then each earlier step's
        output), since layer i's KV holds nothing of the draft yet; returns as `step`."""
        h = np.ascontiguousarray(hidden, dtype=np.float32)
        self._forget_from(pos0)
        self._check(tokens, pos0, h)
        self._select(head)
        try:
            self._process(tokens, pos0, h, last=True)
        finally:
            self._select(0)
        return self._outputs(len(tokens) - 1)

    def step(self, token: int, pos: int, hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One draft step: `token` at `pos` with `hidden` (the target's state at pos-1, or the
        head's own from the step before); returns the head's logits row (a view valid until
        the next call) and its output hidden state (a copy). Over a shared cache every step
        of a round is at the same `pos` (n_past), and nothing of it is kept."""
        h = np.ascontiguousarray(hidden, dtype=np.float32).reshape(1, -1)
        self._check([token], pos, h)
        self._process([token], pos, h, last=True, kept=not self.shares_cache)
        return self._outputs(0)

    def decode(self, tokens: Sequence[int], pos0: int, *, outputs: str = "last"):
        """Rows of `tokens` with zero hidden states at pos0..: what bench's cost curve times
        as a draft step (a step costs the same whatever the states hold). Whoever times
        leaves the head empty (truncate(0)): the next generation then starts afresh."""
        self.truncate(pos0)
        zeros = np.zeros((len(tokens), self.n_embd), dtype=np.float32)
        if outputs == "none" or not tokens:
            self.feed(tokens, pos0, zeros)
            return None
        self.feed(tokens[:-1], pos0, zeros[:-1])
        logits, _ = self.step(tokens[-1], pos0 + len(tokens) - 1, zeros[-1])
        return logits[None, :]

    # -- rollback ---------------------------------------------------------------------------

    @interrupts.atomic
    def _forget_from(self, p0: int) -> None:
        if p0 < self.n_past:
            if not self.shares_cache:  # a shared cache is the target's to roll back
                ll.llama_memory_seq_rm(self.memory, 0, p0, -1)
            del self.tokens[p0:]

    def truncate(self, n_keep: int) -> None:
        """Forget every position >= n_keep (an attention cache always can)."""
        n_keep = max(0, n_keep)
        if n_keep < self.n_past:
            self._forget_from(n_keep)

    def close(self) -> None:
        if self.ptr:
            ll.llama_batch_ext_free(self._batch)
            ll.llama_free(self.ptr)
            self.ptr = None

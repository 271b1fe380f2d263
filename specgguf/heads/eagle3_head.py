"""The EAGLE-3 head's llama context, and the input convention of its decoder.

The head is its own small model (architecture eagle3) with a context made over the target's
(`ctx_other`), through which its graph borrows the target's token embeddings and lm_head when
the file has none. It runs two graphs:

* the encoder (llama_process ENCODE): one fused row `g` of the head's width per target row,
  from the three target layers' hidden states of that row, concatenated in the head's order;
* the decoder (llama_process DECODE): at head position P it takes the pair (the token at P+1,
  g of P), so the row of the LAST token of every target pass cannot be written yet: its next
  token is not known. That row stays pending (`Boundary`) until whoever knows the token comes:
  the next prompt chunk (its first token completes it), or the draft's seed step (the
  target's newest token completes it, and its logits give the first draft token). Each
  further draft step feeds the drafted token with the head's own pre-norm state of the step
  before (llama_get_embeddings_nextn_ith) in place of g.

KV bookkeeping: positions [0, `settled`) of the head hold pairs of tokens the target has
accepted; positions past it hold draft steps or a verify pass's pairs with drafts that may be
rejected. The next pass truncates to what is settled before writing (llama.cpp's decoder
requires positions that continue its memory, Y = X + 1), and `accept` settles the rows whose
tokens were accepted and moves the boundary to the row of the last accepted one.

Everything libllama asserts on is checked here first: the encoder batch never exceeds the
head's n_ubatch, a decoder batch never exceeds its n_batch, every row's width is the head's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from specgguf import interrupts
from specgguf.binding import engine
from specgguf.binding.engine import ll
from specgguf.binding.llama_ext import require_ext
from specgguf.errors import ExitCode, SpecggufError
from specgguf.heads.eagle3_info import Eagle3Head
from specgguf.heads.head_context import HeadContext, embd_view

#: what the exit-10 line says needs the calls
FEATURE = "--spec-type draft-eagle3"


@dataclass
class Boundary:
    """The deferred row: g at `pos`, waiting for the token at pos+1."""

    pos: int
    g: np.ndarray  # (n_embd,) float32, owned


class Eagle3Context(HeadContext):
    """One sequence's EAGLE-3 head over one target context (seq 0 of each)."""

    what = "the EAGLE-3 head"

    def __init__(
        self,
        model: engine.Model,
        target: engine.Context,
        params: engine.ContextParams,
        head: Eagle3Head,
    ) -> None:
        super().__init__(model, target, params, require_ext(FEATURE))
        self.head = head
        self._x.set_embeddings_nextn(self.ptr, True, True)  # g (encoder) and pre-norm (decoder)
        self.n_embd = head.n_embd
        self.n_enc = len(head.target_layers) * head.target_hidden_size
        #: positions [0, settled) hold pairs of accepted tokens
        self.settled = 0
        self.boundary: Boundary | None = None
        # the last pass's g rows and first position: accept() rebases the boundary on them
        self._last_g: np.ndarray | None = None
        self._last_pos0 = 0
        # the last decoded step's pre-norm state (the next step's input), owned
        self._prenorm = np.zeros(self.n_embd, dtype=np.float32)

    @property
    def target_layers(self) -> tuple[int, ...]:
        return self.head.target_layers

    # -- memory ----------------------------------------------------------------------------

    def truncate(self, n: int) -> None:
        """Forget every head position >= n; what was settled past it is no longer."""
        self.forget(n)
        self.settled = min(self.settled, max(0, n))

    def restart(self, keep: int) -> None:
        """A new sequence whose first `keep` head rows are still right (prefix reuse): those
        are kept and settled, the rest and the boundary dropped."""
        self.truncate(keep)
        self.settled = self.n_past
        self.boundary = None
        self._last_g = None

    # -- the two graphs --------------------------------------------------------------------

    def encode(self, features: np.ndarray) -> np.ndarray:
        """g rows (n, n_embd) for target feature rows (n, n_enc), in chunks of n_ubatch (the
        encoder asserts its batch fits one ubatch)."""
        n = features.shape[0]
        assert features.shape[1] == self.n_enc and features.dtype == np.float32
        out = np.empty((n, self.n_embd), dtype=np.float32)
        b = self._batch
        for start in range(0, n, self.n_ubatch):
            m = min(self.n_ubatch, n - start)
            ll.llama_batch_ext_clear(b)
            for j in range(m):
                idx = ll.llama_batch_ext_add_embd(b, 0, embd_view(features[start + j]))
                # placeholder positions after the memory's (the encoder reads none)
                self._add_row(idx, self.n_past + j, True)
            self._process(ll.LLAMA_PROCESS_TYPE_ENCODE, "encoder")
            ptr = self._x.get_embeddings_nextn(self.ptr)
            if not ptr:
                raise SpecggufError(
                    f"{self.model.path}: the EAGLE-3 head's encoder gave no output",
                    ExitCode.RUNTIME,
                )
            out[start : start + m] = np.ctypeslib.as_array(ptr, shape=(m, self.n_embd))
        return out

    @interrupts.atomic
    def decode_pairs(
        self, tokens: Sequence[int], states: np.ndarray, pos0: int, *, output_last: bool
    ) -> np.ndarray | None:
        """Write pairs (tokens[j], states[j]) at pos0+j; the logits row of the last pair when
        `output_last` (its pre-norm state is then kept for the next step)."""
        n = len(tokens)
        if n == 0:
            return None
        b = self._batch
        for start, m in self._chunks(pos0, n, self.n_batch, "head"):
            final = start + m == n
            for j in range(m):
                k = start + j
                idx = ll.llama_batch_ext_add_token(b, 0, int(tokens[k]))
                if idx < 0:
                    raise SpecggufError(
                        f"{self.model.path}: the head refused token {tokens[k]}", ExitCode.RUNTIME
                    )
                if not ll.llama_batch_ext_set_embd_token(b, idx, embd_view(states[k])):
                    raise AssertionError(f"a head row of width {states.shape[1]} was refused")
                self._add_row(idx, pos0 + k, output_last and final and j == m - 1)
            self._process(ll.LLAMA_PROCESS_TYPE_DECODE, "decoder")
            self.n_past = pos0 + start + m
        if not output_last:
            return None
        pre = self._x.get_embeddings_nextn_ith(self.ptr, 0)
        self._prenorm[:] = np.ctypeslib.as_array(pre, shape=(self.n_embd,))
        logits = ll.llama_get_logits_ith(self.ptr, 0)
        return np.ctypeslib.as_array(logits, shape=(self.n_vocab,))

    # -- the convention --------------------------------------------------------------------

    def hear(
        self, tokens: Sequence[int], pos0: int, hidden: Mapping[int, np.ndarray], known: int
    ) -> None:
        """A target pass of `tokens` at pos0.. with the target's hidden states, when the
        first `known` tokens of the sequence are accepted ones: encode its rows, complete the
        pending boundary if this pass's first token is the one it waited for and no seed step
        wrote it (a prompt chunk after a chunk, a round nobody drafted in), and write every
        pair but the last row's, which becomes the new boundary. Rows pairing accepted tokens
        are settled at once (a prompt chunk's); a verify pass's wait for `accept`."""
        n = len(tokens)
        if n == 0:
            return
        features = np.concatenate(
            [np.asarray(hidden[lid], dtype=np.float32) for lid in self.head.target_layers],
            axis=1,
        )
        g = self.encode(np.ascontiguousarray(features))
        pair_tokens = [int(t) for t in tokens[1:]]
        pair_states = g[: n - 1]
        start = pos0
        bnd = self.boundary
        if bnd is not None and bnd.pos + 1 == pos0 and self.settled <= bnd.pos:
            pair_tokens.insert(0, int(tokens[0]))
            pair_states = np.concatenate([bnd.g[None, :], pair_states])
            start = bnd.pos
        self.truncate(min(self.settled, start))
        # positions must continue the head's memory; a gap (never made by the loop) leaves
        # the head without a boundary it can seed from: it stops drafting, output unchanged
        if self.n_past == start:
            self.decode_pairs(pair_tokens, pair_states, start, output_last=False)
        self.settled = min(self.n_past, max(self.settled, known - 1))
        self._last_g, self._last_pos0 = g, pos0
        self.boundary = Boundary(pos0 + n - 1, g[n - 1].copy())

    def accept(self, n_accepted: int) -> None:
        """The last heard pass was a verify pass of which `n_accepted` drafts were accepted:
        its rows before the first rejected one are settled, and the boundary moves to the row
        of the last accepted token (its pair waits for the target's own new token)."""
        g = self._last_g
        if g is None:
            return
        i = min(n_accepted, g.shape[0] - 1)
        pos = self._last_pos0 + i
        self.truncate(pos)
        self.settled = self.n_past
        self.boundary = Boundary(pos, g[i].copy())

    def seed(self, id_last: int) -> np.ndarray | None:
        """Complete the boundary with the target's newest token: the logits of the first
        draft token (None: no boundary yet, nothing to draft from)."""
        bnd = self.boundary
        if bnd is None:
            return None
        self.truncate(bnd.pos)
        if self.n_past != bnd.pos:  # the rows before it are missing: nothing to seed
            return None
        logits = self.decode_pairs([id_last], bnd.g[None, :], bnd.pos, output_last=True)
        self.settled = bnd.pos + 1
        return logits

    def step(self, token: int) -> np.ndarray:
        """Feed a drafted token with the head's pre-norm state of the step before: the
        logits of the next draft token."""
        logits = self.decode_pairs(
            [token], self._prenorm[None, :].copy(), self.n_past, output_last=True
        )
        assert logits is not None
        return logits

    def decode(self, tokens: Sequence[int], pos0: int, *, outputs: str = "last"):
        """Pairs of `tokens` with zero states at pos0..: what a cost measurement (bench's cost
        curve) times as a draft step, which costs the same whatever the states hold. Whoever
        times leaves the head empty (truncate(0)); the next generation then starts afresh."""
        self.truncate(pos0)
        zeros = np.zeros((len(tokens), self.n_embd), dtype=np.float32)
        logits = self.decode_pairs(tokens, zeros, pos0, output_last=outputs != "none")
        return None if logits is None else logits[None, :]

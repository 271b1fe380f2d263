"""--cache-ram N: a prompt cache in host memory, across requests and slots (llama-server's).

When a request's prompt is about to replace what a slot's KV cache holds, that sequence (its
tokens and llama.cpp's whole state of it) is saved here first; and when a request's prompt
shares a longer prefix with a saved sequence than with what its slot holds, that sequence is
loaded into the slot before the prompt is evaluated: only the rest is evaluated then. The
saved states are kept newest-used last and the oldest dropped once they would pass N MiB (-1:
no bound; 0: no cache). The target's KV cache only: a draft model re-evaluates what its own
cache lacks (a small model's cheap prefill).

The contexts call `swap` from their keep_prefix (specgguf.binding.engine.Context and a
server slot's batched.SequenceView), through the `state_handle` each gives: llama.cpp's
context pointer and the sequence id."""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from specgguf.binding import engine
from specgguf.core.context import common_prefix_len

ll = engine.ll

#: sequences shorter than this are not worth a save and a load
MIN_TOKENS = 16


class PromptCache:
    def __init__(self, limit_mib: int) -> None:
        """`limit_mib`: the bound in MiB, -1 for none."""
        self.limit = None if limit_mib < 0 else limit_mib << 20
        self.entries: OrderedDict[tuple[int, ...], bytes] = OrderedDict()
        self.size = 0
        #: what happened, for tests and /metrics-like reports: saves, loads, drops
        self.saved = self.loaded = self.dropped = 0

    def swap(self, ctx: Any, tokens: Sequence[int], n: int) -> int:
        """From `ctx.keep_prefix(tokens)`, where `n` positions of its cache already match:
        save what would be dropped, load a saved sequence that matches further, and return
        how many positions match now (the caller drops the rest)."""
        held = ctx.tokens
        if len(held) - n >= MIN_TOKENS and len(held) == ctx.n_past and not ctx.dirty:
            self._put(tuple(held), get_state(*ctx.state_handle()))
        best, key = n, None
        for k in self.entries:
            m = common_prefix_len(k, tokens)
            if m > best:
                best, key = m, k
        if key is None:
            return n
        state = self.entries[key]
        self.entries.move_to_end(key)
        ptr, seq = ctx.state_handle()
        ll.llama_memory_seq_rm(ll.llama_get_memory(ptr), seq, -1, -1)
        if not set_state(ptr, seq, state):  # nothing half-loaded stays: evaluated whole
            ll.llama_memory_seq_rm(ll.llama_get_memory(ptr), seq, -1, -1)
            ctx.tokens.clear()
            ctx.n_past = 0
            return 0
        ctx.tokens[:] = key
        ctx.n_past = len(key)
        self.loaded += 1
        return best

    def save(self, ctx: Any) -> bool:
        """--cache-idle-slots: save what an idle slot's context holds, ahead of any prompt
        replacing it, so that a request in another slot can load it; False where there is
        nothing worth saving or it is saved already (then it is counted as used now)."""
        held = tuple(ctx.tokens)
        if len(held) < MIN_TOKENS or len(held) != ctx.n_past or ctx.dirty:
            return False
        if held in self.entries:
            self.entries.move_to_end(held)
            return False
        self._put(held, get_state(*ctx.state_handle()))
        return True

    def clear(self) -> None:
        """Forget every saved sequence (they were computed under adapters now changed)."""
        self.dropped += len(self.entries)
        self.entries.clear()
        self.size = 0

    def _put(self, key: tuple[int, ...], state: bytes) -> None:
        if self.limit is not None and len(state) > self.limit:
            return
        old = self.entries.pop(key, None)
        if old is not None:
            self.size -= len(old)
        self.entries[key] = state
        self.size += len(state)
        self.saved += 1
        while self.limit is not None and self.size > self.limit:
            _, dropped = self.entries.popitem(last=False)
            self.size -= len(dropped)
            self.dropped += 1


def get_state(ptr: Any, seq: int) -> bytes:
    """llama.cpp's whole state of sequence `seq` (its KV cells, and a recurrent state)."""
    size = ll.llama_state_seq_get_size(ptr, seq)
    buf = (ctypes.c_uint8 * size)()
    got = ll.llama_state_seq_get_data(ptr, buf, size, seq)
    return bytes(buf)[:got]


def set_state(ptr: Any, seq: int, state: bytes | memoryview) -> bool:
    """Set sequence `seq` from what get_state returned (a writable buffer is read in place,
    not copied); False where llama.cpp did not take all of it."""
    size = len(state)
    writable = isinstance(state, memoryview) and not state.readonly
    array = ctypes.c_uint8 * size
    buf = array.from_buffer(state) if writable else array.from_buffer_copy(state)
    ok = ll.llama_state_seq_set_data(ptr, buf, size, seq) == size
    del buf  # releases the export of `state`
    return ok

"""What the speculative loop and the model drafter need of a model context, as a Protocol.

The loop is the paper's algorithm; it should not care whether the KV cache behind it lives in
llama.cpp (specgguf.backend.engine.Context satisfies this structurally), on another machine, or in a
numpy toy that a test builds in a millisecond. Importing this module imports no backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np

#: which rows of logits a decode returns: the last token's, every token's, or none (a prefill)
Outputs = Literal["last", "all", "none"]


class KVContext(Protocol):
    """One sequence's KV cache over a model.

    Positions are the caller's: `decode(tokens, pos0)` places tokens at pos0.. and returns
    logits for the rows asked for ("last", "all", "none"), valid until the next decode;
    `truncate(n)` forgets every position >= n (the rollback); `tokens` is what the cache
    holds, position by position; `keep_prefix(tokens)` keeps the longest cached prefix equal
    to the start of `tokens` and returns its length (prompt reuse)."""

    n_ctx: int
    n_past: int
    tokens: list[int]

    def decode(
        self, tokens: Sequence[int], pos0: int, *, outputs: Outputs = "last"
    ) -> np.ndarray | None: ...

    def truncate(self, n_keep: int) -> None: ...

    def keep_prefix(self, tokens: Sequence[int]) -> int: ...

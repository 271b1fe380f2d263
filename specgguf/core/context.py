"""What the speculative loop and the model drafter need of a model context, as a Protocol.

The loop is the paper's algorithm; it should not care whether the KV cache behind it lives in
llama.cpp (specgguf.binding.engine.Context satisfies this structurally), on another machine, or in a
numpy toy that a test builds in a millisecond. Importing this module imports no backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

if TYPE_CHECKING:
    from specgguf.core.draft import TargetPass

#: which rows of logits a decode returns: the last token's, every token's, or none (a prefill)
Outputs = Literal["last", "all", "none"]


class KVContext(Protocol):
    """One sequence's KV cache over a model.

    Positions are the caller's: `decode(tokens, pos0)` places tokens at pos0.. and returns
    logits for the rows asked for ("last", "all", "none"), valid until the next decode;
    `truncate(n)` forgets every position >= n (the rollback); `tokens` is what the cache
    holds, position by position; `keep_prefix(tokens)` keeps the longest cached prefix equal
    to the start of `tokens` and returns its length (prompt reuse). It is called once as each
    sequence begins, with nothing to keep (`[]`) where the prefix may not be reused: a
    server's shared context learns there that a request began (batched.SequenceView).

    For drafters that read hidden states (specgguf.core.draft.Drafter.hears), a target context
    also has `capture(layers)` (capture those layers' hidden states on every decode from now
    on) and takes `hear` in `decode`: called with each pass's TargetPass (a prompt longer than
    the batch is several passes). A context that serves only token drafters needs neither.

    A target that verifies tree drafts (specgguf.core.tree) also has `tree_width` (the most
    leaves one pass holds), `decode_tree(root, tokens, parents, pos0)` (the root and every
    node in one pass, a row of logits each) and `keep_path(path)` (keep the accepted branch,
    drop the rest); the loop reads `tree_width` with a default of 1, so a context without
    them verifies chains."""

    n_ctx: int
    n_past: int
    tokens: list[int]

    def decode(
        self,
        tokens: Sequence[int],
        pos0: int,
        *,
        outputs: Outputs = "last",
        hear: Callable[[TargetPass], None] | None = None,
    ) -> np.ndarray | None: ...

    def capture(self, layers: Sequence[int]) -> None: ...

    def truncate(self, n_keep: int) -> None: ...

    def keep_prefix(self, tokens: Sequence[int]) -> int: ...


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences (once per prompt, not per
    token; numpy keeps a 32k-token comparison well under a millisecond)."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n], dtype=np.int64) != np.asarray(b[:n], dtype=np.int64))
    return int(diff[0]) if diff.size else n

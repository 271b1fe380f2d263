"""`--cache-reuse N`: keep the cached chunks of the previous prompt that the new one repeats
further along, not only their common prefix.

An editor's prompts change in the middle as a person types (a line inserted above the
cursor shifts everything after it by a few tokens), so prefix reuse alone evaluates the whole
rest of the file again. Walking both sequences from the end of the common prefix, every run
of at least N tokens of the cache that equals the prompt at the current place is moved
there (its KV cells shifted to their new positions: the same tokens at the positions a fresh
evaluation would give them) and the cache tokens skipped on the way are dropped, as
llama-server does with the same option. A moved chunk's cells were computed after other
tokens than the ones now before it, which is the approximation this option accepts for
speed; prefix reuse alone stays exact.

Pure: the plan only; the context applies it (specgguf.binding.engine.Context.keep_prefix).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class Move(NamedTuple):
    """Cells [src, src + n) of the cache move to positions [dst, dst + n) (dst <= src); the
    cells in [dst, src) are dropped first."""

    src: int
    dst: int
    n: int


def reuse_moves(
    cached: Sequence[int], prompt: Sequence[int], n_prefix: int, min_chunk: int
) -> list[Move]:
    """The moves that keep every chunk of at least `min_chunk` tokens of `cached`, after
    their common prefix of `n_prefix` tokens, that `prompt` repeats at the place the
    walk has reached. The prompt's start is then cached up to the last move's end."""
    moves: list[Move] = []
    if min_chunk <= 0:
        return moves
    head_c = head_p = n_prefix
    while head_c < len(cached) and head_p < len(prompt):
        n = 0
        while (
            head_c + n < len(cached)
            and head_p + n < len(prompt)
            and cached[head_c + n] == prompt[head_p + n]
        ):
            n += 1
        if n >= min_chunk:
            moves.append(Move(head_c, head_p, n))
            head_c += n
            head_p += n
        else:
            head_c += 1
    return moves

"""`--cache-reuse N`: keep the cached chunks of the previous prompt that the new one repeats
further along, not only their common prefix.

An editor's prompts change in the middle as a person types: the window of lines above the
cursor loses its first tokens and gains the line just typed, a ring chunk of another file is
added or dropped, and everything after such a change moves. Walking the new prompt from the
end of the common prefix, every run of at least N tokens that the cache holds further along
is kept and moved to its place in the prompt (its KV cells shifted to the positions a fresh
evaluation would give them: the same tokens at the same positions). The cache tokens skipped
on the way are dropped. As llama-server does with the same option, a run is found after text
the prompt cut out (a shift down); here also after text the prompt inserts (a shift up): the
inserted tokens are a hole the context evaluates in place, before the chunk that follows it
(`ReusePlan.holes`), so the text after an edit is reused wherever it moved. A kept chunk's
cells were computed after other tokens than the ones now before it, which is the
approximation this option accepts for speed; prefix reuse alone stays exact.

A shift is not free: llama.cpp rotates the keys of every cell of the KV cache, used or not,
in one pass at the next decode (however many chunks moved), so its cost grows with the
context's size (-c), not with what moved. Where the chunks to shift hold fewer tokens than
that pass costs in evaluated tokens (`ReusePlan.worth_shifting`, the break-even the context
measured at load), they are evaluated again instead: cheaper, and exactly what a fresh
evaluation computes.

Pure: the plan only; the context applies it (specgguf.binding.engine.Context.keep_prefix).
Its cost is O(prompt) dictionary lookups once per request, never per token.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

#: tokens that key the search for a run (a run of N >= this many starts with such a key)
KEY_LEN = 4
#: cache places a prompt position tries before it counts as part of a hole: a run is looked
#: for where the cache repeats the prompt's next KEY_LEN tokens, the earliest first
CANDIDATES = 8


class Move(NamedTuple):
    """Cells [src, src + n) of the cache move to positions [dst, dst + n)."""

    src: int
    dst: int
    n: int


@dataclass(frozen=True)
class ReusePlan:
    """What a new prompt keeps of the cache: its common prefix of `n_prefix` tokens, then the
    `moves` in prompt order (both their sources and their destinations ascending). The
    prompt's start up to `end` is cached once the moves are made and the holes evaluated."""

    n_prefix: int
    moves: tuple[Move, ...] = ()

    @property
    def end(self) -> int:
        last = self.moves[-1] if self.moves else None
        return last.dst + last.n if last else self.n_prefix

    def dropped(self, n_cached: int) -> list[tuple[int, int]]:
        """The cache's position ranges [p0, p1) that no move keeps (p1 -1: to the end)."""
        out, head = [], self.n_prefix
        for m in self.moves:
            if m.src > head:
                out.append((head, m.src))
            head = m.src + m.n
        if head < n_cached:
            out.append((head, -1))
        return out

    def shift_order(self) -> list[Move]:
        """The moves to shift, in an order where no chunk lands on cells another still
        holds: those moving down first, left to right, then those moving up, right to
        left (after `dropped` is removed; a move in place needs no shift)."""
        down = [m for m in self.moves if m.dst < m.src]
        up = [m for m in self.moves if m.dst > m.src]
        return down + up[::-1]

    def holes(self) -> list[tuple[int, int]]:
        """The prompt's ranges [p0, p1) before `end` that no move fills: evaluated in
        place, in this order, before the rest of the prompt."""
        out, head = [], self.n_prefix
        for m in self.moves:
            if m.dst > head:
                out.append((head, m.dst))
            head = m.dst + m.n
        return out

    @property
    def n_holes(self) -> int:
        """How many tokens the holes hold (evaluated, not cached)."""
        return sum(b - a for a, b in self.holes())

    @property
    def shifts(self) -> bool:
        """Whether any chunk moves (a shift pass at the next decode)."""
        return any(m.dst != m.src for m in self.moves)

    def worth_shifting(self, break_even: int) -> ReusePlan:
        """This plan, or the part of it before its first move that shifts when the chunks
        from there on hold fewer than `break_even` tokens: evaluating them again costs less
        than the shift pass (0: always shift)."""
        first = next((i for i, m in enumerate(self.moves) if m.dst != m.src), None)
        if first is None or sum(m.n for m in self.moves[first:]) >= break_even:
            return self
        return ReusePlan(self.n_prefix, self.moves[:first])


def _run(cached: Sequence[int], prompt: Sequence[int], c: int, p: int, least: int) -> int:
    """How long the run of equal tokens at cached[c:], prompt[p:] is, or 0 when it is shorter
    than `least` (compared a slice at once: a repetitive text offers many places whose runs
    fall just short, and a token-by-token comparison of each would be quadratic)."""
    if len(prompt) - p < least or list(cached[c : c + least]) != list(prompt[p : p + least]):
        return 0
    n, limit = least, min(len(cached) - c, len(prompt) - p)
    while n + least <= limit and list(cached[c + n : c + n + least]) == list(
        prompt[p + n : p + n + least]
    ):
        n += least
    while n < limit and cached[c + n] == prompt[p + n]:
        n += 1
    return n


def plan_reuse(
    cached: Sequence[int],
    prompt: Sequence[int],
    n_prefix: int,
    min_chunk: int,
    *,
    holes: bool = True,
) -> ReusePlan:
    """The chunks of at least `min_chunk` tokens of `cached`, after their common prefix of
    `n_prefix` tokens, that `prompt` repeats, each found at the earliest cache place after
    the previous one. With `holes` False (a context that cannot evaluate a hole in place) a
    chunk is kept only where the prompt goes on right after the previous one, as
    llama-server keeps them: the walk ends at the first prompt token that no chunk starts."""
    if min_chunk <= 0:
        return ReusePlan(n_prefix)
    key_len = min(KEY_LEN, min_chunk)
    index: dict[tuple[int, ...], list[int]] = {}
    starts = range(n_prefix, len(cached) - min_chunk + 1)
    keys = zip(*(cached[n_prefix + k :] for k in range(key_len)), strict=False)
    for i, key in zip(starts, keys, strict=False):
        index.setdefault(key, []).append(i)
    moves: list[Move] = []
    head_c = head_p = n_prefix
    while head_p + min_chunk <= len(prompt) and head_c + min_chunk <= len(cached):
        places = index.get(tuple(prompt[head_p : head_p + key_len]), [])
        first = bisect_left(places, head_c)
        found = None
        for c in places[first : first + CANDIDATES]:
            n = _run(cached, prompt, c, head_p, min_chunk)
            if n:
                found = Move(c, head_p, n)
                break
        if found is not None:
            moves.append(found)
            head_c, head_p = found.src + found.n, found.dst + found.n
        elif holes:
            head_p += 1
        else:
            break
    return ReusePlan(n_prefix, tuple(moves))

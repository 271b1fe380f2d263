"""ngram-simple: propose what followed the most recent earlier occurrence of the last n tokens.

llama.cpp (common_ngram_simple_draft) rescans the whole history backwards every round, which
costs O(context) per round. We keep the same answer with an index that is updated once per
token: a dict from the hash of each n-gram to its most recent *eligible* start, where
"eligible" is exactly the set of starts llama.cpp's backward scan may return. A start j
becomes eligible once the history has length j + n + 2, so each observed token makes at most
one new start eligible and the dict entry for a key is always its most recent eligible start.

Semantics kept from llama.cpp (history H of length L, H[-1] the last sampled token):
- no proposal unless L >= size_n + size_m + 3;
- the pattern is H[L-n:]; candidate starts are 1 <= j <= L-n-2 (position 0 is never a match
  in llama.cpp because 0 is its "no match" sentinel, and j = L-n-1 is skipped by its scan);
- the match is the most recent candidate (not the earliest): recent text predicts best;
- the draft is H[j+n : j+n+k] with k = min(size_m, L-1-j-n), and nothing if k < size_n.
Deviation: llama.cpp accepts --spec-ngram-simple-min-hits but never reads it. We honour it
as "the pattern has at least min_hits eligible earlier occurrences", so the flag is not a silent
no-op; the default (1) gives exactly llama.cpp's behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence

from specgguf.core.draft import Draft, Drafter, DraftGate
from specgguf.drafters.ngram_params import NgramSimpleParams

#: Mersenne prime modulus and a fixed odd base for polynomial hashing of token windows. Two
#: different windows of the same length collide with probability <= length / 2**61; a
#: collision is caught by comparing tokens before a match is used, and then reads as "no match".
_MOD = (1 << 61) - 1
_BASE = 0x1F3D5B79A2C4E6F % _MOD


class PrefixHashedTokens:
    """A token history with polynomial prefix hashes, so any window's hash is O(1).

    Shared by the n-gram-map drafters: it lets an index key n-grams by an int instead of a
    tuple of n tokens (memory O(L) rather than O(L * n) for large size_n).
    """

    __slots__ = ("tokens", "_prefix", "_pow")

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self._prefix: list[int] = [0]
        self._pow: dict[int, int] = {}

    def clear(self) -> None:
        self.tokens = []
        self._prefix = [0]

    def __len__(self) -> int:
        return len(self.tokens)

    def append(self, token: int) -> None:
        self.tokens.append(token)
        self._prefix.append((self._prefix[-1] * _BASE + token) % _MOD)

    def window_hash(self, start: int, length: int) -> int:
        p = self._pow.get(length)
        if p is None:
            p = self._pow[length] = pow(_BASE, length, _MOD)
        return (self._prefix[start + length] - self._prefix[start] * p) % _MOD

    def same(self, a: int, b: int, length: int) -> bool:
        """Whether the windows at a and b hold the same tokens (collision check)."""
        t = self.tokens
        return t[a : a + length] == t[b : b + length]


class NgramSimple(Drafter):
    """Self-speculation by copying what followed the last n-gram's previous occurrence."""

    def __init__(self, size_n: int = 12, size_m: int = 48, min_hits: int = 1) -> None:
        NgramSimpleParams(size_n, size_m, min_hits)  # raises UsageError naming the flag
        self.size_n = size_n
        self.size_m = size_m
        self.min_hits = min_hits
        #: the longest draft this drafter makes on its own (llama.cpp's impl n_max)
        self.max_draft = size_m
        self._hist = PrefixHashedTokens()
        self._last_start: dict[int, int] = {}  # n-gram hash -> most recent eligible start
        self._count: dict[int, int] = {}  # n-gram hash -> number of eligible starts

    def begin(self, prompt: Sequence[int]) -> None:
        self._hist.clear()
        self._last_start.clear()
        self._count.clear()
        self.observe(prompt)

    def observe(self, tokens: Sequence[int]) -> None:
        hist, n = self._hist, self.size_n
        last, count = self._last_start, self._count
        for tok in tokens:
            hist.append(int(tok))
            j = len(hist) - n - 2  # the start that just became eligible
            if j >= 1:
                key = hist.window_hash(j, n)
                last[key] = j
                count[key] = count.get(key, 0) + 1

    def propose(self, budget: int, gate: DraftGate | None = None) -> Draft:
        return self.peek(budget)

    def peek(self, budget: int) -> Draft:
        hist, n, m = self._hist, self.size_n, self.size_m
        length = len(hist)
        if budget <= 0 or length < n + m + 3:
            return Draft()
        key = hist.window_hash(length - n, n)
        j = self._last_start.get(key)
        if j is None or not hist.same(j, length - n, n):
            return Draft()
        if self._count[key] < self.min_hits:
            return Draft()
        k = min(m, length - 1 - j - n)
        if k < n:  # llama.cpp: a match with fewer than size_n following tokens is not used
            return Draft()
        start = j + n
        return Draft(tokens=hist.tokens[start : start + min(k, budget)])

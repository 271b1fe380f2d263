"""ngram-map-k and ngram-map-k4v: n-gram keys mapped to the m-grams that followed them.

Both keep, per key n-gram (size_n tokens), statistics over its earlier occurrences whose whole
m-gram (size_m tokens) continuation is known. With history H of length L, a start j is used
once 1 <= j <= L - n - m - 3 (llama.cpp's bound `idx < cur_len - n - m - 1` with
cur_len = L - 1, and 0 being its "no match" sentinel); no proposal unless L >= 2n + m + 1.
Each observed token makes one start eligible, so the index costs O(1) hashing per token and a
proposal O(n + m), whatever the context length.

- map-k proposes the m tokens after the key's most recent eligible occurrence, capped by how
  many were accepted the last time that key drafted (the cap starts at size_m).
- map-k4v keeps up to 4 distinct continuations per key with occurrence counts (later new ones
  are not counted, as in llama.cpp) and proposes the most frequent one only when its count is at
  least twice the sum of the others; the cap is kept per continuation.

Deviations from llama.cpp (common/ngram-map.cpp), each because its behaviour is an artefact
of the implementation rather than a design choice:
- llama.cpp finds the key through a 2**18-slot hash table that keeps the *first* position
  inserted per slot and drops colliding keys, and computes k4v statistics by rescanning
  history up to that position. We always use the most recent eligible occurrence (as
  ngram-simple does) and count every eligible occurrence, exactly and incrementally.
- llama.cpp's k4v drafts the tokens after the matched position even when the winning
  continuation is another one; we draft the winning continuation, as its comment intends.
- llama.cpp's "hits" counts draft calls that found the key, so it depends on how often the
  loop asked; we count eligible occurrences of the key in the history, which depends only on
  the sequence. map-k ignores min_hits in llama.cpp; we apply it to both (default 1 = same).
- llama.cpp sets the cap to the accepted count even when the loop cut the draft to its own
  budget and every token was accepted, which would pin the cap at the loop's budget for good;
  we leave the cap alone in that one case, since the key was not the limit.
"""

from __future__ import annotations

from collections.abc import Sequence

from specgguf.core.draft import Draft, Drafter, DraftGate
from specgguf.core.tree import leaves as tree_leaves_of
from specgguf.core.tree import trie
from specgguf.drafters.ngram_params import NgramMapK4VParams, NgramMapKParams
from specgguf.drafters.ngram_simple import PrefixHashedTokens

#: llama.cpp's COMMON_NGRAM_MAX_VALUES and COMMON_NGRAM_MAX_VALUE_COUNT.
MAX_VALUES = 4
MAX_VALUE_COUNT = 16380


class _Value:
    """One continuation m-gram of a key: where it first occurred and how often it followed."""

    __slots__ = ("hash", "start", "count", "cap")

    def __init__(self, h: int, start: int, cap: int) -> None:
        self.hash = h
        self.start = start
        self.count = 1
        self.cap = cap


class _Key:
    """Statistics of one key n-gram."""

    __slots__ = ("last", "hits", "cap", "values")

    def __init__(self, cap: int) -> None:
        self.last = 0  # most recent eligible start of the key
        self.hits = 0  # number of eligible occurrences
        self.cap = cap  # map-k: accepted count at the key's last draft
        self.values: list[_Value] = []


class _NgramMapBase(Drafter):
    key_only: bool = True

    def __init__(self, size_n: int, size_m: int, min_hits: int) -> None:
        self.size_n = size_n
        self.size_m = size_m
        self.min_hits = min_hits
        #: the longest draft this drafter makes on its own (llama.cpp's impl n_max)
        self.max_draft = size_m
        self._hist = PrefixHashedTokens()
        self._keys: dict[int, _Key] = {}
        # What the last non-empty proposal came from, for feedback: (stats, truncated).
        self._pending: tuple[_Key | _Value, int, bool] | None = None

    def begin(self, prompt: Sequence[int]) -> None:
        self._hist.clear()
        self._keys.clear()
        self._pending = None
        self.observe(prompt)

    def observe(self, tokens: Sequence[int]) -> None:
        hist, n, m = self._hist, self.size_n, self.size_m
        for tok in tokens:
            hist.append(int(tok))
            j = len(hist) - n - m - 3  # the start that just became eligible
            if j >= 1:
                self._index(j)

    def _index(self, j: int) -> None:
        hist, n, m = self._hist, self.size_n, self.size_m
        kh = hist.window_hash(j, n)
        key = self._keys.get(kh)
        if key is None:
            key = self._keys[kh] = _Key(m)
        key.last = j
        key.hits += 1
        if self.key_only:
            return
        vh = hist.window_hash(j + n, m)
        for value in key.values:
            if value.hash == vh:
                if hist.same(value.start, j + n, m):
                    value.count = min(value.count + 1, MAX_VALUE_COUNT)
                return  # a hash collision between continuations is simply not counted
        if len(key.values) < MAX_VALUES:
            key.values.append(_Value(vh, j + n, m))

    def _choose(self, key: _Key) -> tuple[_Key | _Value, int, int] | None:
        """(stats to cap, start of the tokens to copy, cap) or None for no proposal."""
        if self.key_only:
            return key, key.last + self.size_n, key.cap
        best = key.values[0]
        for value in key.values[1:]:
            if value.count > best.count:  # ties keep the earlier continuation, as llama.cpp
                best = value
        others = sum(v.count for v in key.values) - best.count
        if others > 0 and best.count < 2 * others:
            return None
        return best, best.start, best.cap

    def _tree_of(self, key: _Key, budget: int) -> Draft:
        """The key's continuations as one tree, the most frequent first (map-k4v where a
        tree may be verified: the counts need not agree, the target picks). Each is capped
        as its chain would be; the caps are not learned from a tree's round."""
        hist, m = self._hist, self.size_m
        ranked = sorted(key.values, key=lambda v: -v.count)  # stable: ties keep the earlier
        paths = [hist.tokens[v.start : v.start + min(m, v.cap, budget)] for v in ranked]
        shape = self.tree
        tokens, parents = trie(
            paths, nodes=shape.node_cap(budget), width=min(shape.topk, self.tree_leaves)
        )
        if len(tree_leaves_of(parents)) > self.tree_leaves:  # (a trie's leaves <= its paths)
            return Draft()
        return Draft(tokens, None, parents) if tokens else Draft()

    def _lookup(
        self, budget: int, *, tree: bool = False
    ) -> tuple[Draft, tuple[_Key | _Value, int, bool] | None]:
        """The proposal, and what `feedback` should cap afterwards (pure); `tree`: the
        continuations as a tree where map-k4v keeps several."""
        hist, n, m = self._hist, self.size_n, self.size_m
        length = len(hist)
        if budget <= 0 or length < 2 * n + m + 1:
            return Draft(), None
        key = self._keys.get(hist.window_hash(length - n, n))
        if key is None or not hist.same(key.last, length - n, n):
            return Draft(), None
        if key.hits < self.min_hits:
            return Draft(), None
        if tree and not self.key_only and len(key.values) > 1:
            return self._tree_of(key, budget), None
        chosen = self._choose(key)
        if chosen is None:
            return Draft(), None
        stats, start, cap = chosen
        want = min(m, cap)
        count = min(want, budget)
        if count <= 0:
            return Draft(), None
        return Draft(tokens=hist.tokens[start : start + count]), (stats, count, count < want)

    def propose(self, budget: int, gate: DraftGate | None = None) -> Draft:
        tree = self.tree.branches and self.tree_leaves > 1
        draft, self._pending = self._lookup(budget, tree=tree)
        return draft

    def peek(self, budget: int) -> Draft:
        return self._lookup(budget)[0]

    def feedback(self, n_drafted: int, n_accepted: int) -> None:
        pending, self._pending = self._pending, None
        if pending is None or n_drafted <= 0:
            return
        stats, proposed, truncated = pending
        # the loop may send fewer tokens than proposed (auto cuts a long proposal to what
        # pays): a draft cut short by someone else that was wholly accepted says nothing
        # against this key's length, so its cap stays
        truncated = truncated or n_drafted < proposed
        accepted = max(0, min(n_accepted, n_drafted, self.size_m))
        if truncated and accepted >= n_drafted:
            return  # the loop's budget, not this key, limited the draft
        stats.cap = accepted


class NgramMapK(_NgramMapBase):
    """Key -> most recent continuation, capped by the key's last acceptance."""

    key_only = True

    def __init__(self, size_n: int = 12, size_m: int = 48, min_hits: int = 1) -> None:
        NgramMapKParams(size_n, size_m, min_hits)  # raises UsageError naming the flag
        super().__init__(size_n, size_m, min_hits)


class NgramMapK4V(_NgramMapBase):
    """Key -> up to 4 counted continuations; drafts only a clearly dominant one."""

    key_only = False

    def __init__(self, size_n: int = 12, size_m: int = 48, min_hits: int = 1) -> None:
        NgramMapK4VParams(size_n, size_m, min_hits)  # raises UsageError naming the flag
        super().__init__(size_n, size_m, min_hits)

"""DRY ("don't repeat yourself"): llama.cpp's `dry` stage, a penalty on every token that would
continue a repeat of an earlier passage of the sequence. Pure: token ids in, penalties out.

The definition, on the window W of the last N tokens of the sequence (the prompt's included;
N = dry_penalty_last_n, -1: the whole sequence), t its last position, A the allowed length:

- Nothing is penalised while W holds A tokens or fewer.
- Sequence breakers are strings. A token whose text contains a whole breaker is a breaker by
  itself; a token whose text ends with the start of a breaker is a breaker's head, and the
  tokenization of the rest of that breaker is its tail (at most 20 tokens). A breaker occurs
  where such a token is followed by its tail (a lone breaker token: at once). The limit R is
  the number of tokens after the most recent breaker occurrence that starts inside W (the
  longest tail, where that token starts several), or the length of W when none does.
  Nothing is penalised when R < A.
- The match length at an earlier position j of W is the number of tokens by which the text
  ending at j equals the text ending at t, counting only tokens of W (so at most j - w0 + 1,
  w0 the first position of W), and at most R. A match of at least A makes the token after j
  a continuation of the repeat; each such token, unless it is a breaker by itself, has its
  logit lowered by multiplier * base ** (L - A), L its longest match (the exponent is capped
  where base ** exponent would pass a float32's range, for bases above 1.000001).

Speculation needs this at every row of a verify pass, each after its own drafted prefix, and
llama.cpp's way (a Z-array over the whole window per token) would make that a scan of up to
the whole context per row in Python. `DryTrack` instead keeps the matches up to date as tokens
arrive: a match at j of length L >= A becomes one at j + 1 of length L + 1 when the new token
equals the token after j, and the new matches of length exactly A are the earlier positions
whose last A tokens are the sequence's last A (an index of A-grams). A step costs the number
of live matches plus the earlier occurrences of the last A-gram inside the window; the
breaker limit moves with the token (and the few heads whose tail it may complete).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

#: llama.cpp's bounds on a breaker: its bytes, and the tokens of a tail
MAX_BREAKER_BYTES = 40
MAX_TAIL_TOKENS = 20
#: the exponent cap: base ** cap stays within a float32 (log of its largest value)
_FLOAT32_MAX_LOG = np.float32(88.7228391)

_NO_IDS = np.empty(0, dtype=np.int64)
_NO_AMOUNTS = np.empty(0, dtype=np.float64)


@dataclass(frozen=True, eq=False)
class DryBreakers:
    """The sequence breakers as token ids. `single`: tokens that are a breaker by themselves
    (never penalised); `tails`: a head token -> the token tails that complete a breaker after
    it (each non-empty). Compared and hashed by identity (one per vocabulary and breaker
    list), so SamplerParams holding it stays hashable."""

    single: frozenset[int] = frozenset()
    tails: Mapping[int, tuple[tuple[int, ...], ...]] = field(default_factory=dict)

    @property
    def longest_tail(self) -> int:
        return max((len(t) for ts in self.tails.values() for t in ts), default=0)


NO_BREAKERS = DryBreakers()


def breakers_from_vocab(
    breakers: Sequence[str],
    pieces: Sequence[bytes],
    tokenize: Callable[[str], list[int]],
) -> DryBreakers:
    """The breakers `breakers` over a vocabulary: `pieces[i]` is token i's text (control
    tokens spelled out), `tokenize` the vocabulary's plain tokenizer (no BOS, no special
    tokens parsed). Each breaker is matched as bytes."""
    single: set[int] = set()
    tails: dict[int, set[tuple[int, ...]]] = {}
    for text in breakers:
        b = text.encode("utf-8")[:MAX_BREAKER_BYTES]
        if not b:
            continue
        rest: dict[int, tuple[int, ...]] = {}  # matched prefix length -> the tail's tokens
        first = b[:1]
        for tok, word in enumerate(pieces):
            if first not in word:
                continue
            if b in word:
                single.add(tok)
                continue
            # a proper prefix of the breaker at the very end of the token's text
            for j in range(1, min(len(b) - 1, len(word)) + 1):
                if word.endswith(b[:j]):
                    if j not in rest:
                        tail = b[j:].decode("utf-8", "replace")
                        rest[j] = tuple(tokenize(tail)[:MAX_TAIL_TOKENS])
                    if rest[j]:
                        tails.setdefault(tok, set()).add(rest[j])
                    else:  # a tail of no tokens: the token ends the breaker by itself
                        single.add(tok)
    return DryBreakers(frozenset(single), {h: tuple(sorted(ts)) for h, ts in tails.items()})


@dataclass(frozen=True)
class DrySettings:
    """The stage's numbers (SamplerParams' dry_*), the window as None for the whole sequence."""

    multiplier: float
    base: float
    allowed: int  # >= 1
    window: int | None
    breakers: DryBreakers

    @property
    def exponent_cap(self) -> int:
        """The largest exponent used (0: none), as llama.cpp computes it in float32."""
        if self.base <= 1.000001:
            return 0
        return int(_FLOAT32_MAX_LOG / np.log(np.float32(self.base)))


@dataclass(frozen=True)
class DryPoint:
    """The tracker after the token at position `last`: the live matches (earlier position ->
    match length, untruncated, >= the allowed length) and the most recent breaker occurrence
    (its first token's position, -1: none, and the tokens of its tail)."""

    last: int = -1
    matches: Mapping[int, int] = field(default_factory=dict)
    head: int = -1
    head_len: int = 0


class DryTrack:
    """The emitted sequence as DRY reads it: its tokens, the positions of each A-gram, and the
    point after its last token. `push` moves it on; `row` gives a verify row's point (after a
    drafted path) without changing it."""

    def __init__(self, settings: DrySettings) -> None:
        self.settings = settings
        self.tokens: list[int] = []
        self.grams: dict[tuple[int, ...], list[int]] = {}
        self.point = DryPoint()

    def push(self, tokens: Sequence[int]) -> None:
        a = self.settings.allowed
        for x in tokens:
            self.tokens.append(x)
            self.point = step(self.point, x, _View(self, ()), self.settings)
            t = len(self.tokens) - 1
            if t >= a - 1:
                self.grams.setdefault(tuple(self.tokens[t - a + 1 :]), []).append(t)

    def after(self, point: DryPoint, path: Sequence[int]) -> DryPoint:
        """The point after `path`'s last token, given `point`: the point after the tokens of
        `path` but its last (drafted tokens past the emitted sequence)."""
        return step(point, path[-1], _View(self, path), self.settings)

    def penalties(self, point: DryPoint, path: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
        """The penalised tokens at `point` (sorted ids) and what each loses; `path`: the
        drafted tokens the point is after."""
        return penalties(point, _View(self, path), self.settings)


class _View:
    """The emitted sequence followed by a drafted path: token at a position, and the earlier
    positions of an A-gram."""

    __slots__ = ("track", "path", "n")

    def __init__(self, track: DryTrack, path: Sequence[int]) -> None:
        self.track, self.path, self.n = track, path, len(track.tokens)

    def at(self, j: int) -> int:
        return self.track.tokens[j] if j < self.n else self.path[j - self.n]

    def gram(self, t: int, a: int) -> tuple[int, ...]:
        return tuple(self.at(i) for i in range(t - a + 1, t + 1))

    def earlier(self, gram: tuple[int, ...], t: int, lo: int) -> list[int]:
        """Positions j in [lo, t) whose last len(gram) tokens are `gram`."""
        listed = self.track.grams.get(gram, ())
        out = [j for j in listed[bisect_left(listed, lo) :] if j < t] if listed else []
        a = len(gram)
        for j in range(max(self.n, lo, a - 1), t):  # drafted positions before t
            if self.gram(j, a) == gram:
                out.append(j)
        return out


def _window_start(t: int, window: int | None) -> int:
    return 0 if window is None else max(0, t + 1 - window)


def step(p: DryPoint, x: int, seq: _View, s: DrySettings) -> DryPoint:
    """The point after token `x`, which `seq` holds at position p.last + 1."""
    t = p.last + 1
    a = s.allowed
    lo = _window_start(t, s.window)
    matches: dict[int, int] = {}
    for j, n in p.matches.items():
        if j + 1 >= lo and seq.at(j + 1) == x:
            matches[j + 1] = n + 1
    if t >= a - 1:
        for j in seq.earlier(seq.gram(t, a), t, lo):
            matches.setdefault(j, a)
    head, head_len = p.head, p.head_len
    br = s.breakers
    if x in br.single:
        head, head_len = t, 0
    if br.tails:
        for q in range(max(t - MAX_TAIL_TOKENS, 0, head), t):  # heads whose tail ends at x
            for tail in br.tails.get(seq.at(q), ()):
                n = t - q
                whole = len(tail) == n and all(seq.at(q + 1 + o) == tail[o] for o in range(n))
                if whole and (q > head or n > head_len):
                    head, head_len = q, n
    return DryPoint(t, matches, head, head_len)


def penalties(p: DryPoint, seq: _View, s: DrySettings) -> tuple[np.ndarray, np.ndarray]:
    """What DRY subtracts at point `p`: the penalised token ids (sorted) and their amounts."""
    t, a = p.last, s.allowed
    lo = _window_start(t, s.window)
    size = t + 1 - lo
    if size <= a:
        return _NO_IDS, _NO_AMOUNTS
    limit = size if p.head < lo else t - p.head - p.head_len
    if limit < a:
        return _NO_IDS, _NO_AMOUNTS
    longest: dict[int, int] = {}
    single = s.breakers.single
    for j, n in p.matches.items():
        n = min(n, j - lo + 1, limit)
        if n >= a:
            tok = seq.at(j + 1)
            if tok not in single and longest.get(tok, -1) < n:
                longest[tok] = n
    if not longest:
        return _NO_IDS, _NO_AMOUNTS
    ids = np.fromiter(longest.keys(), dtype=np.int64, count=len(longest))
    exps = np.fromiter(longest.values(), dtype=np.float64, count=len(longest)) - a
    cap = s.exponent_cap
    if cap > 0:
        exps = np.minimum(exps, cap)
    order = np.argsort(ids)
    return ids[order], (s.multiplier * np.power(s.base, exps))[order]

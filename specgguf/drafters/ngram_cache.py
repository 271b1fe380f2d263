"""ngram-cache: llama.cpp's classic lookup decoding over context, dynamic and static caches.

A cache maps an n-gram (1..4 tokens, padded to 4 with -1) to the counts of the tokens that
followed it. Each draft step (common_ngram_cache_draft) tries, in order:
1. the context cache (this sequence), longest n-gram first, with the lax thresholds;
2. the dynamic cache (earlier generations, from -lcd), same n-grams, strict thresholds;
3. the static cache (a corpus, from -lcs) alone, on the last 2 tokens, lax size-2 thresholds.
In 1 and 2 a candidate's count is weighted by 100 x its count in the static cache's part for
the last 2 tokens (or 1 if absent). A step that finds nothing ends the draft.

Files use llama.cpp's binary layout (common_ngram_cache_save/load), so caches made by
llama-lookup-create / llama-lookup interoperate: records of 4 x int32 n-gram, int32 count n,
then n x (int32 token, int32 count), little-endian (the layout llama.cpp writes on every
platform it is built for). Errors reading or writing one are SpecggufError with exit status
USAGE (1): the file is a command-line argument, and llama-lookup exits 1 when it cannot read it.

Choices that differ from llama.cpp, and why:
- Ties: llama.cpp takes the first maximum in unordered_map order (unspecified); among equal
  weighted scores we take the token with the larger count here (more evidence, and the one
  likelier to pass the percentage threshold), then the smallest token id, so a proposal never
  depends on hash-table order. This is the only source of differences we saw when comparing
  against llama.cpp's own functions on random sequences and caches.
- Cost: every part keeps its total and arg-max up to date as counts grow, so a step needs no
  scan of the part unless static weighting applies, and then only of the smaller of the part
  and the static part: a round's cost does not grow with the context.
- The context cache covers the whole sequence, including n-grams that span observe() chunks
  (speculative.cpp updates it per chunk and misses those; llama-lookup does not).
- A missing dynamic file is an empty cache, created on close (as llama-lookup); a missing
  static file is an error. The dynamic file is saved on close(), merged with every sequence's
  context cache, atomically (temp file, fsync, os.replace) so a crash never corrupts it.
  With -lcd, a later sequence also drafts from the contexts of earlier ones (they are merged
  into the dynamic cache at begin()), which is what "updated by generation" means.
- An n-gram longer than the sequence is skipped (llama.cpp reads out of bounds there).
- The draft length is min(the loop's budget, n_draft=8); 8 is llama.cpp's fixed n_draft.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from array import array
from collections.abc import Sequence

from specgguf.drafters.base import Draft, Drafter
from specgguf.drafters.ngram_params import NgramCacheParams
from specgguf.errors import SpecggufError, UsageError

NGRAM_MIN = 1
NGRAM_MAX = 4
NGRAM_STATIC = 2
TOKEN_NULL = -1
#: llama.cpp's fixed draft length for ngram-cache in common/speculative.cpp
N_DRAFT = 8
_INT32_MAX = 2**31 - 1

# Thresholds per n-gram size 1..4 (llama.cpp's draft_min_sample_size_* / draft_min_percent_*).
LAX_MIN_SAMPLES = (2, 2, 1, 1)
LAX_MIN_PERCENT = (66, 50, 50, 50)
STRICT_MIN_SAMPLES = (4, 3, 2, 2)
STRICT_MIN_PERCENT = (75, 66, 66, 66)

NgramKey = tuple[int, int, int, int]
_PAD = [(TOKEN_NULL,) * (NGRAM_MAX - s) for s in range(NGRAM_MAX + 1)]


def ngram_key(tokens: Sequence[int]) -> NgramKey:
    """The padded key of 1..4 tokens, as llama.cpp's common_ngram stores it."""
    return tuple(tokens) + _PAD[len(tokens)]  # type: ignore[return-value]


class NgramCounts:
    """n-gram -> {next token: count}, with each part's total and arg-max kept current.

    The summaries make a lookup O(1) for the common case; counts only ever grow, so a running
    maximum stays exact. Parts loaded from a file get their summary on first use, so loading
    a large static cache does not pay for n-grams this run never looks up.
    """

    __slots__ = ("parts", "_summary")

    def __init__(self) -> None:
        self.parts: dict[NgramKey, dict[int, int]] = {}
        # key -> [total, arg-max token (largest count, then smallest id), its count]
        self._summary: dict[NgramKey, list[int]] = {}

    def __len__(self) -> int:
        return len(self.parts)

    def add(self, key: NgramKey, token: int, count: int = 1) -> None:
        part = self.parts.get(key)
        if part is None:
            self.parts[key] = {token: count}
            self._summary[key] = [count, token, count]
            return
        s = self.summary(key)
        assert s is not None
        c = part.get(token, 0) + count
        part[token] = c
        s[0] += count
        if c > s[2] or (c == s[2] and token < s[1]):
            s[1], s[2] = token, c

    def summary(self, key: NgramKey) -> list[int] | None:
        s = self._summary.get(key)
        if s is None:
            part = self.parts.get(key)
            if part is None:
                return None
            best = max(part.values())
            tok = min(t for t, c in part.items() if c == best)
            s = self._summary[key] = [sum(part.values()), tok, best]
        return s

    def merge(self, other: NgramCounts) -> None:
        """Add all of other's counts (common_ngram_cache_merge)."""
        for key, part in other.parts.items():
            for tok, c in part.items():
                self.add(key, tok, c)


def _pick(
    counts: NgramCounts, key: NgramKey, part_static: dict[int, int]
) -> tuple[int, int, int] | None:
    """(token, its count, part total) maximising count x static weight, or None if unseen."""
    s = counts.summary(key)
    if s is None:
        return None
    total, max_tok, max_count = s
    if not part_static:
        return max_tok, max_count, total
    part = counts.parts[key]
    # Rank by (score, count, -token). Outside the static part score == count, so the running
    # arg-max (by count, then smallest token) is the best token there.
    best: tuple[int, int, int] | None = None  # best rank among tokens in both parts
    best_tok, best_count = TOKEN_NULL, 0
    small, large = (part, part_static) if len(part) <= len(part_static) else (part_static, part)
    for tok in small:
        if tok in large:
            c = part[tok]
            cand = (c * 100 * part_static[tok], c, -tok)
            if best is None or cand > best:
                best, best_tok, best_count = cand, tok, c
    if max_tok not in part_static and (best is None or (max_count, max_count, -max_tok) > best):
        # The overall arg-max has weight 1; it is the best token outside the static part.
        return max_tok, max_count, total
    return best_tok, best_count, total


def _try_primary(
    counts: NgramCounts,
    keys: list[NgramKey],
    part_static: dict[int, int],
    min_samples: tuple[int, ...],
    min_percent: tuple[int, ...],
) -> int | None:
    for i in range(len(keys) - 1, -1, -1):  # longest n-gram first
        picked = _pick(counts, keys[i], part_static)
        if picked is None:
            continue
        tok, count, total = picked
        if total < min_samples[i] or 100 * count < min_percent[i] * total:
            continue
        return tok
    return None


def _try_static(static: NgramCounts, key: NgramKey) -> int | None:
    s = static.summary(key)
    if s is None:
        return None
    total, tok, count = s
    i = NGRAM_STATIC - 1
    if total < LAX_MIN_SAMPLES[i] or 100 * count < LAX_MIN_PERCENT[i] * total:
        return None
    return tok


def draft_from_caches(
    tail: Sequence[int],
    n_draft: int,
    context: NgramCounts,
    dynamic: NgramCounts,
    static: NgramCounts,
) -> list[int]:
    """Up to n_draft tokens continuing `tail` (the last <= 4 tokens of a sequence of >= 2)."""
    seq = list(tail)
    out: list[int] = []
    while len(out) < n_draft:
        key_static = ngram_key(seq[-NGRAM_STATIC:])
        part_static = static.parts.get(key_static, {})
        keys = [ngram_key(seq[-s:]) for s in range(NGRAM_MIN, min(NGRAM_MAX, len(seq)) + 1)]
        tok = _try_primary(context, keys, part_static, LAX_MIN_SAMPLES, LAX_MIN_PERCENT)
        if tok is None:
            tok = _try_primary(dynamic, keys, part_static, STRICT_MIN_SAMPLES, STRICT_MIN_PERCENT)
        if tok is None:
            tok = _try_static(static, key_static)
        if tok is None:
            break
        out.append(tok)
        seq.append(tok)
    return out


# ---- files ---------------------------------------------------------------------------------


def _ints_from_bytes(data: bytes) -> array:
    ints = array("i")
    if ints.itemsize != 4:  # pragma: no cover - no supported platform has a 2- or 8-byte int
        raise RuntimeError("array('i') is not 32-bit here")
    ints.frombytes(data)
    if sys.byteorder == "big":  # pragma: no cover
        ints.byteswap()
    return ints


def load_ngram_cache(path: str | os.PathLike[str]) -> NgramCounts:
    """Read a llama.cpp n-gram cache file; raise SpecggufError if unreadable or corrupt."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read()
    except OSError as e:
        raise UsageError(f"cannot read lookup cache {name}: {e.strerror or e}") from None

    def corrupt(why: str) -> SpecggufError:
        return UsageError(f"corrupt lookup cache {name}: {why}")

    if len(data) % 4:
        raise corrupt(f"truncated ({len(data)} bytes is not a whole number of records)")
    ints = _ints_from_bytes(data)
    cache = NgramCounts()
    parts = cache.parts
    pos, end = 0, len(ints)
    while pos < end:
        if pos + NGRAM_MAX + 1 > end:
            raise corrupt(f"truncated record at byte {4 * pos}")
        n = ints[pos + NGRAM_MAX]
        if n <= 0:
            raise corrupt(f"record at byte {4 * pos} has {n} tokens")
        stop = pos + NGRAM_MAX + 1 + 2 * n
        if stop > end:
            raise corrupt(f"truncated record at byte {4 * pos}")
        key: NgramKey = tuple(ints[pos : pos + NGRAM_MAX])  # type: ignore[assignment]
        toks = ints[pos + NGRAM_MAX + 1 : stop : 2]
        counts = ints[pos + NGRAM_MAX + 2 : stop : 2]
        if min(counts) <= 0:
            raise corrupt(f"record at byte {4 * pos} has a count <= 0")
        if key not in parts:  # llama.cpp emplaces: the first record of a key wins
            part = dict(zip(toks, counts, strict=True))
            if len(part) != n:  # a repeated token: again the first one wins
                part = {}
                for tok, c in zip(toks, counts, strict=True):
                    part.setdefault(tok, c)
            parts[key] = part
        pos = stop
    return cache


def _cache_bytes(cache: NgramCounts) -> bytes:
    ints = array("i")
    for key, part in cache.parts.items():
        ints.extend(key)
        ints.append(len(part))
        for tok, c in part.items():
            ints.append(tok)
            ints.append(min(c, _INT32_MAX))
    if sys.byteorder == "big":  # pragma: no cover
        ints.byteswap()
    return ints.tobytes()


def save_ngram_cache(cache: NgramCounts, path: str | os.PathLike[str]) -> None:
    """Write a llama.cpp n-gram cache file atomically: the old file survives any failure."""
    name = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(name))
    data = _cache_bytes(cache)
    try:
        fd, tmp = tempfile.mkstemp(
            prefix=f".{os.path.basename(name)}.", suffix=".tmp", dir=directory
        )
    except OSError as e:
        raise UsageError(f"cannot write lookup cache {name}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            if hasattr(os, "fchmod"):  # mkstemp's 0600 would hide the cache from others
                os.fchmod(f.fileno(), 0o644)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, name)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise UsageError(f"cannot write lookup cache {name}: {e.strerror or e}") from None
        raise
    # Make the rename itself durable; not every platform lets us open a directory.
    with contextlib.suppress(OSError):
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


# ---- the drafter ---------------------------------------------------------------------------


class NgramCache(Drafter):
    """Lookup decoding from n-gram statistics of this sequence, past runs and a corpus."""

    cheap = True  # a lookup: shadow drafts for the cost model are free

    name = "ngram-cache"

    def __init__(
        self,
        static_path: str | os.PathLike[str] | None = None,
        dynamic_path: str | os.PathLike[str] | None = None,
        n_draft: int = N_DRAFT,
    ) -> None:
        NgramCacheParams(static_path, dynamic_path)  # type: ignore[arg-type]
        # llama.cpp treats an empty file name as "not given".
        self.static_path = os.fspath(static_path) if static_path else None
        self.dynamic_path = os.fspath(dynamic_path) if dynamic_path else None
        self.n_draft = n_draft
        #: the longest draft this drafter makes on its own (llama.cpp's impl n_max)
        self.max_draft = n_draft
        self._static = load_ngram_cache(self.static_path) if self.static_path else NgramCounts()
        if self.dynamic_path and os.path.exists(self.dynamic_path):
            self._dynamic = load_ngram_cache(self.dynamic_path)
        else:
            self._dynamic = NgramCounts()
        self._context = NgramCounts()
        self._tail: list[int] = []  # last NGRAM_MAX tokens
        self._length = 0
        self._begun = False
        self._closed = False

    def begin(self, prompt: Sequence[int]) -> None:
        if self._begun and self.dynamic_path:
            self._dynamic.merge(self._context)
        self._begun = True
        self._context = NgramCounts()
        self._tail = []
        self._length = 0
        self.observe(prompt)

    def observe(self, tokens: Sequence[int]) -> None:
        context, tail = self._context, self._tail
        for t in tokens:
            tok = int(t)
            self._length += 1
            for s in range(NGRAM_MIN, min(NGRAM_MAX, len(tail)) + 1):
                context.add(ngram_key(tail[-s:]), tok)
            tail.append(tok)
            if len(tail) > NGRAM_MAX:
                del tail[0]

    def propose(self, n_max: int) -> Draft:
        if n_max <= 0 or self._length < NGRAM_STATIC:
            return Draft()
        out = draft_from_caches(
            self._tail, min(n_max, self.n_draft), self._context, self._dynamic, self._static
        )
        return Draft(tokens=out) if out else Draft()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.dynamic_path:
            if self._begun:
                self._dynamic.merge(self._context)
            save_ngram_cache(self._dynamic, self.dynamic_path)

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
  static file is an error. With -lcd, a later sequence also drafts from the contexts of
  earlier ones (they are merged into the dynamic cache at begin()), which is what "updated by
  generation" means.
- Saving the dynamic file (on close) is safe against other writers and crashes: under an
  exclusive flock on a sidecar `.<name>.lock`, the file is read again and only THIS run's
  n-grams are added to what it holds now, so two runs that end together keep the union of
  their n-grams (llama-lookup would keep one run's). It is then written to `.<name>.<pid>.tmp`,
  fsynced and renamed over the file. A symlink is resolved first, so the link stays and its
  target is updated. Only a lock holder writes temp files, so any temp file found under the
  lock is a leftover of a killed writer and is removed.
- Reading is bounded: a file larger than max_cache_bytes() ($SPECGGUF_LOOKUP_CACHE_MAX_MB,
  default 64 MiB; a cache costs about 20 times its size in memory) is refused with one line,
  and anything but a regular file (a FIFO, a device) is refused without blocking on it.
- check_cache_paths() finds an unreadable -lcs or an unwritable -lcd before any model loads.
- An n-gram longer than the sequence is skipped (llama.cpp reads out of bounds there).
- The draft length is min(the loop's budget, n_draft=8); 8 is llama.cpp's fixed n_draft.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import time
from array import array
from collections.abc import Sequence

from specgguf.core.draft import Draft, Drafter, DraftGate
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


MAX_CACHE_MB_ENV = "SPECGGUF_LOOKUP_CACHE_MAX_MB"
DEFAULT_MAX_CACHE_MB = 64
#: how long a save waits for another process's save of the same file before giving up
LOCK_TIMEOUT_S = 30.0


def max_cache_bytes() -> int:
    """The largest cache file loaded: $SPECGGUF_LOOKUP_CACHE_MAX_MB MiB, default 64.

    Parsed into dicts, a cache costs about 20 times its file size in memory (measured: a 28 MB
    file took 520 MB), so 64 MiB is already more than a gigabyte."""
    raw = os.environ.get(MAX_CACHE_MB_ENV, "").strip()
    try:
        mb = float(raw) if raw else DEFAULT_MAX_CACHE_MB
    except ValueError:
        raise UsageError(f"{MAX_CACHE_MB_ENV}={raw!r}: not a number of MiB") from None
    if not mb > 0:
        raise UsageError(f"{MAX_CACHE_MB_ENV}={raw!r}: must be > 0")
    return int(mb * 1024 * 1024)


def _too_large(name: str, size: int, cap: int) -> UsageError:
    return UsageError(
        f"lookup cache {name} is {size / 2**20:.1f} MiB, more than the {cap / 2**20:.0f} MiB "
        f"loaded at most (about 20x that in memory); set {MAX_CACHE_MB_ENV} to allow more"
    )


def _read_bounded(name: str) -> bytes:
    """The bytes of a regular file of at most max_cache_bytes(); one UsageError line else.
    O_NONBLOCK: opening a FIFO named by mistake must not wait for a writer."""
    cap = max_cache_bytes()
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise UsageError(f"cannot read lookup cache {name}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"cannot read lookup cache {name}: not a regular file")
        if st.st_size > cap:
            raise _too_large(name, st.st_size, cap)
        chunks, total = [], 0
        while True:  # bounded even if the file grows while we read it
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                raise _too_large(name, total, cap)
        return b"".join(chunks)
    except OSError as e:
        raise UsageError(f"cannot read lookup cache {name}: {e.strerror or e}") from None
    finally:
        os.close(fd)


def load_ngram_cache(path: str | os.PathLike[str]) -> NgramCounts:
    """Read a llama.cpp n-gram cache file; raise SpecggufError if unreadable, too large or
    corrupt."""
    name = os.fspath(path)
    data = _read_bounded(name)

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


def _lock_path(real: str) -> str:
    directory, base = os.path.split(real)
    return os.path.join(directory, f".{base}.lock")


def _open_lock(real: str, flag: str) -> int:
    """The sidecar lock file's descriptor (created if needed; never deleted: removing a lock
    file others may hold open would let two writers in at once)."""
    try:
        return os.open(_lock_path(real), os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError as e:
        directory = os.path.dirname(real)
        if e.errno == errno.ENOENT and not os.path.isdir(directory):
            why = f"no such directory {directory}"
        elif e.errno == errno.ENOENT:  # a directory that takes no files: /proc, /sys
            why = f"not a writable regular file ({directory} takes no new files)"
        elif e.errno == errno.ENOTDIR:
            why = f"{directory} is not a directory"
        else:
            why = f"cannot create files in {directory}: {e.strerror or e}"
        raise UsageError(f"{flag} {real}: {why}") from None


@contextlib.contextmanager
def _locked(real: str, flag: str = "cannot write lookup cache"):
    """Hold an exclusive flock on the cache's sidecar lock file, waiting at most
    LOCK_TIMEOUT_S for another process's save (a kernel lock: a killed holder releases it)."""
    import fcntl

    fd = _open_lock(real, flag)
    try:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise UsageError(
                        f"{flag} {real}: still locked by another process after "
                        f"{LOCK_TIMEOUT_S:.0f} s ({_lock_path(real)})"
                    ) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # releases the lock


def _temp_path(real: str, pid: int) -> str:
    directory, base = os.path.split(real)
    return os.path.join(directory, f".{base}.{pid}.tmp")


def sweep_stale_temp_files(real: str) -> list[str]:
    """Remove `.<name>.<pid>.tmp` files left by writers killed mid-save. Call with the lock
    held: every writer holds it while its temp file exists, so any such file is stale."""
    directory, base = os.path.split(real)
    prefix, removed = f".{base}.", []
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return removed
    for entry in names:
        pid = entry[len(prefix) : -len(".tmp")]
        if entry.startswith(prefix) and entry.endswith(".tmp") and pid.isdigit():
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, entry))
                removed.append(entry)
    return removed


def _write_atomic(data: bytes, real: str) -> None:
    """Write to a pid-named temp file next to `real`, fsync, rename over `real`: the old file
    survives any failure, and no temp file outlives an exception."""
    directory = os.path.dirname(real)
    tmp = _temp_path(real, os.getpid())
    try:
        mode = stat.S_IMODE(os.stat(real).st_mode)  # keep the file's permissions
    except OSError:
        mode = 0o644  # mkstemp's 0600 would hide the cache from others
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as e:
        raise UsageError(f"cannot write lookup cache {real}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, real)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise UsageError(f"cannot write lookup cache {real}: {e.strerror or e}") from None
        raise
    # Make the rename itself durable; not every platform lets us open a directory.
    with contextlib.suppress(OSError):
        dfd = os.open(directory or ".", os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def save_ngram_cache(cache: NgramCounts, path: str | os.PathLike[str]) -> None:
    """Write a llama.cpp n-gram cache file atomically (replacing what it held), under the
    file's lock. A symlink's target is written, the link kept."""
    real = os.path.realpath(os.fspath(path))
    with _locked(real):
        sweep_stale_temp_files(real)
        _write_atomic(_cache_bytes(cache), real)


def merge_into_cache_file(new: NgramCounts, path: str | os.PathLike[str]) -> None:
    """Add `new`'s counts to the cache file at `path` (created if missing), under the file's
    lock: what other processes saved since this one loaded it is kept, not overwritten."""
    real = os.path.realpath(os.fspath(path))
    with _locked(real):
        sweep_stale_temp_files(real)
        current = load_ngram_cache(real) if os.path.exists(real) else NgramCounts()
        current.merge(new)
        _write_atomic(_cache_bytes(current), real)


def _check_readable(name: str, st: os.stat_result, cap: int, what: str, denied: str) -> None:
    """A cache file as `os.stat` found it: a regular file, within `cap` bytes, readable; one
    UsageError line starting with `what` otherwise (`denied`: its words for a refused read)."""
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{what}: not a regular file")
    if st.st_size > cap:
        raise _too_large(name, st.st_size, cap)
    if not os.access(name, os.R_OK):
        raise UsageError(f"{what}: {denied}")


def check_cache_paths(
    static_path: str | os.PathLike[str] | None, dynamic_path: str | os.PathLike[str] | None
) -> None:
    """Before any model is loaded: -lcs must be a readable regular file within the size cap;
    -lcd (its symlink target) must be such a file or not exist yet, in a directory where the
    lock and temp files can be created. One UsageError line otherwise: finding out only when
    the run saves, after generating, would throw the run's n-grams away."""
    cap = max_cache_bytes()
    if static_path:
        name = os.fspath(static_path)
        try:
            st = os.stat(name)
        except OSError as e:
            raise UsageError(f"cannot read lookup cache {name}: {e.strerror or e}") from None
        _check_readable(name, st, cap, f"cannot read lookup cache {name}", "permission denied")
    if dynamic_path:
        flag = "-lcd"
        real = os.path.realpath(os.fspath(dynamic_path))
        try:
            st = os.stat(real)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENOTDIR):
                raise UsageError(f"{flag} {real}: {e.strerror or e}") from None
            st = None  # a missing file is created; a bad directory is reported just below
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise UsageError(f"{flag} {real}: is a directory")
            _check_readable(real, st, cap, f"{flag} {real}", "permission denied (reading)")
            if not os.access(real, os.W_OK):
                raise UsageError(f"{flag} {real}: not a writable regular file (permission denied)")
        os.close(_open_lock(real, flag))  # the directory takes new files (lock, temp)
        directory = os.path.dirname(real) or "."
        if not os.access(directory, os.W_OK | os.X_OK):
            raise UsageError(f"{flag} {real}: cannot create files in {directory}")


# ---- the drafter ---------------------------------------------------------------------------


class NgramCache(Drafter):
    """Lookup decoding from n-gram statistics of this sequence, past runs and a corpus."""

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
        # what this run added (every finished sequence's context): merged into the file as it
        # is at save time, so other runs' additions since we loaded it are kept
        self._new = NgramCounts()
        self._tail: list[int] = []  # last NGRAM_MAX tokens
        self._length = 0
        self._begun = False
        self._closed = False

    def begin(self, prompt: Sequence[int]) -> None:
        if self._begun and self.dynamic_path:
            self._dynamic.merge(self._context)
            self._new.merge(self._context)
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

    def propose(self, budget: int, gate: DraftGate | None = None) -> Draft:
        return self.peek(budget)

    def peek(self, budget: int) -> Draft:
        if budget <= 0 or self._length < NGRAM_STATIC:
            return Draft()
        out = draft_from_caches(
            self._tail, min(budget, self.n_draft), self._context, self._dynamic, self._static
        )
        return Draft(tokens=out) if out else Draft()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.dynamic_path:
            if self._begun:
                self._dynamic.merge(self._context)
                self._new.merge(self._context)
            merge_into_cache_file(self._new, self.dynamic_path)

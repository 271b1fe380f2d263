"""`--spec-type suffix`: drafting from what this process wrote before (suffix decoding).

An agent loop repeats itself across requests: the same tool-call wrapper, the same file
written again with one change, the same test output quoted back. The n-gram types only see
the current request. This one also keeps the outputs of earlier requests in a bounded corpus
(per model and per API key: the session keeps one corpus per namespace) and drafts from the
longest context match in either, with the continuation scored by frequency, as vLLM's suffix
decoding does with its suffix trees:

1. find the earlier positions whose preceding tokens match the end of the sequence, for as
   long a stretch as possible (at most `max_depth` tokens): those are the candidates;
2. walk forward from them one token at a time, proposing the token most of them continue
   with, and keeping only the ones that agree; stop when that token's share falls below
   MIN_SHARE (the continuation is contested), at the end of the data, or after
   `ceil(SPEC_FACTOR x match length)` tokens (a short match earns a short draft).

The index keys every position by its last KEY_TOKENS tokens (a hash) and keeps, per key, the
MAX_PER_KEY most recent positions; a query extends each candidate backwards to measure its
match, so a proposal costs O(MAX_PER_KEY x max_depth) whatever the corpus size, and `observe`
costs O(1) per token. The corpus holds at most `cache_tokens` tokens of earlier outputs; the
oldest outputs go first, and their index entries with them, so memory stays bounded.

A proposal is a guess like any other: the verifier keeps the output exact.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, deque
from collections.abc import Sequence

from specgguf.core.draft import Draft, Drafter, DraftGate
from specgguf.drafters.ngram_params import SuffixParams

#: tokens that make an index key (the shortest match that can draft)
KEY_TOKENS = 2
#: the most recent positions kept per key (the candidates a query extends backwards)
MAX_PER_KEY = 32
#: a proposed token's share of the candidates still in agreement, at the least
MIN_SHARE = 0.34
#: the draft may be this many times the match's length (vLLM's max_spec_factor)
SPEC_FACTOR = 1.0
#: the shortest output worth keeping in the corpus
MIN_OUTPUT = 4


class _Index:
    """Token sequences with every position keyed by its last KEY_TOKENS tokens."""

    def __init__(self) -> None:
        self.seqs: dict[int, list[int]] = {}
        self._keys: dict[tuple[int, int], deque[tuple[int, int]]] = {}

    def add(self, sid: int, tokens: Sequence[int]) -> None:
        seq = self.seqs.setdefault(sid, [])
        for t in tokens:
            seq.append(int(t))
            i = len(seq)
            if i >= KEY_TOKENS:
                key = (seq[i - 2], seq[i - 1])
                dq = self._keys.get(key)
                if dq is None:
                    dq = self._keys[key] = deque(maxlen=MAX_PER_KEY)
                dq.append((sid, i))  # position i: the token after the key

    def drop(self, sid: int) -> None:
        seq = self.seqs.pop(sid, None)
        if seq is None:
            return
        for i in range(KEY_TOKENS, len(seq) + 1):
            key = (seq[i - 2], seq[i - 1])
            dq = self._keys.get(key)
            if dq is None:
                continue
            kept = [e for e in dq if e[0] != sid]
            if kept:
                self._keys[key] = deque(kept, maxlen=MAX_PER_KEY)
            else:
                del self._keys[key]

    def candidates(
        self, context: Sequence[int], max_depth: int, skip: tuple[int, int] | None = None
    ) -> tuple[int, list[tuple[int, int]]]:
        """(the longest match length, the positions that follow a match that long)."""
        if len(context) < KEY_TOKENS:
            return 0, []
        dq = self._keys.get((int(context[-2]), int(context[-1])))
        if not dq:
            return 0, []
        best, out = 0, []
        n_ctx = len(context)
        for sid, pos in dq:
            if (sid, pos) == skip:
                continue
            seq = self.seqs[sid]
            if pos >= len(seq):
                continue  # nothing follows it yet
            limit = min(max_depth, pos, n_ctx)
            m = KEY_TOKENS
            while m < limit and seq[pos - m - 1] == context[n_ctx - m - 1]:
                m += 1
            if m > best:
                best, out = m, [(sid, pos)]
            elif m == best:
                out.append((sid, pos))
        return best, out


def _continue(index: _Index, starts: list[tuple[int, int]], n: int) -> list[int]:
    """The frequency-scored walk from `starts` (step 2 of the module's docstring)."""
    alive = starts
    out: list[int] = []
    while alive and len(out) < n:
        counts: dict[int, int] = {}
        for sid, pos in alive:
            seq = index.seqs[sid]
            if pos + len(out) < len(seq):
                t = seq[pos + len(out)]
                counts[t] = counts.get(t, 0) + 1
        if not counts:
            break
        tok, c = max(counts.items(), key=lambda kv: (kv[1], -kv[0]))
        if c < MIN_SHARE * len(alive):
            break
        alive = [
            (sid, pos)
            for sid, pos in alive
            if pos + len(out) < len(index.seqs[sid]) and index.seqs[sid][pos + len(out)] == tok
        ]
        out.append(tok)
    return out


class SuffixCorpus:
    """Earlier outputs of one model and one namespace (API key), shared by its slots; at most
    `cache_tokens` tokens, oldest output dropped first. Thread-safe: slots add and query from
    their own threads."""

    def __init__(self, cache_tokens: int) -> None:
        self.cache_tokens = cache_tokens
        self._index = _Index()
        self._order: OrderedDict[int, int] = OrderedDict()  # sid -> length, oldest first
        self._total = 0
        self._next = 0
        self._lock = threading.Lock()

    @property
    def n_tokens(self) -> int:
        return self._total

    @property
    def n_outputs(self) -> int:
        return len(self._order)

    def add(self, output: Sequence[int]) -> None:
        """Keep one finished output (its last `cache_tokens` tokens at most)."""
        if len(output) < MIN_OUTPUT or self.cache_tokens <= 0:
            return
        output = output[-self.cache_tokens :]
        with self._lock:
            while self._order and self._total + len(output) > self.cache_tokens:
                sid, length = self._order.popitem(last=False)
                self._index.drop(sid)
                self._total -= length
            sid, self._next = self._next, self._next + 1
            self._index.add(sid, output)
            self._order[sid] = len(output)
            self._total += len(output)

    def clear(self) -> None:
        """Drop every output kept."""
        with self._lock:
            self._index = _Index()
            self._order.clear()
            self._total = 0

    def draft(self, context: Sequence[int], max_depth: int, budget: int) -> tuple[int, list[int]]:
        """(match length, proposal) for the sequence ending in `context`."""
        with self._lock:
            m, starts = self._index.candidates(context, max_depth)
            if not starts:
                return 0, []
            return m, _continue(self._index, starts, min(budget, _spec_len(m)))


def _spec_len(match: int) -> int:
    return math.ceil(SPEC_FACTOR * match)


class SuffixDrafter(Drafter):
    """Drafts from the current sequence (prompt and output so far) and from the corpus of
    earlier outputs, whichever matches longer; hands each finished output to the corpus."""

    def __init__(self, params: SuffixParams, corpus: SuffixCorpus | None = None) -> None:
        self.max_depth = params.max_depth
        self.max_draft = params.max_depth
        self.corpus = corpus if corpus is not None else SuffixCorpus(params.cache_tokens)
        self._own = _Index()
        self._seq: list[int] = []
        self._prompt_len = 0

    def _commit(self) -> None:
        if self._seq:
            self.corpus.add(self._seq[self._prompt_len :])

    def begin(self, prompt: Sequence[int]) -> None:
        self._commit()  # the previous sequence's output, now finished
        self._own = _Index()
        self._seq = [int(t) for t in prompt]
        self._prompt_len = len(self._seq)
        self._own.add(0, self._seq)

    def observe(self, tokens: Sequence[int]) -> None:
        self._seq.extend(int(t) for t in tokens)
        self._own.add(0, tokens)

    def _lookup(self, budget: int) -> Draft:
        if budget <= 0:
            return Draft()
        ctx = self._seq
        # the sequence's own last position is no candidate for itself
        m_own, starts = self._own.candidates(ctx, self.max_depth, skip=(0, len(ctx)))
        m_corpus, from_corpus = self.corpus.draft(ctx, self.max_depth, budget)
        if m_corpus > m_own:
            return Draft(tokens=from_corpus)
        if not starts:
            return Draft()
        return Draft(tokens=_continue(self._own, starts, min(budget, _spec_len(m_own))))

    def propose(self, budget: int, gate: DraftGate | None = None) -> Draft:
        return self._lookup(budget)

    def peek(self, budget: int) -> Draft:
        return self._lookup(budget)

    def forget(self) -> None:
        self.corpus.clear()
        self._seq = []  # nor is the sequence in hand kept at the next begin

    def close(self) -> None:
        self._commit()
        self._seq = []

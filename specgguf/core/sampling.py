"""The sampler chain, as pure numpy: logits row in, (sparse) probability distribution out.

Speculative sampling is only lossless when the draft's q and the target's p come out of the
SAME transforms, so there is exactly one implementation here and both sides call it.

The chain is llama.cpp's: logit bias first, then the stages in `SamplerParams.samplers` order
(default: penalties, DRY, top-n-sigma, top-k, typical, top-p, min-p, XTC, temperature; each stage
in specgguf.core.samplers), or, with mirostat on, logit bias, temperature and mirostat alone.
Top-p and min-p come BEFORE temperature, i.e. they look at softmax(logits) at temperature 1, so
that `--top-p 0.9 --temp 0.5` means what it means in llama.cpp. What depends on the sequence
(the penalties' counts, mirostat's mu, XTC's coin) comes in a `RowState`
(specgguf.core.chain_state): the state after that row's own prefix.

Distributions are kept sparse (token ids + probabilities over the survivors): with a 150k-token
vocabulary and top-k 40 that turns every later step into work on 40 numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import numpy as np

from specgguf.core import samplers as st
from specgguf.core.dry import DryBreakers

#: the infill stage drops text tokens below this probability (after merging)
INFILL_THRESHOLD = 0.2
#: the survivors it compares pairwise at most (top-k before it bounds them)
INFILL_MAX_CANDIDATES = 256


@dataclass(frozen=True)
class InfillStage:
    """llama.cpp's `infill` sampler, the last stage of an editor's chain: it prefers ending
    the completion where the model is unsure, and merges tokens that spell the start of
    another (so "re" and "return" count as one choice). Given the vocabulary's token bytes,
    its end-of-generation test and the token that ends a text.

    On the survivors of the stages before it (probabilities in decreasing order): when the
    end-of-generation tokens hold more than a third of the text tokens' mass divided by the
    number of survivors, only they stay; otherwise each token whose bytes start another's
    takes the lesser one's probability into the greater, text tokens under
    INFILL_THRESHOLD are dropped, and if no text token is left, the end token alone stays."""

    piece: Callable[[int], bytes]
    is_eog: Callable[[int], bool]
    end: int

    def apply(self, ids: np.ndarray, probs: np.ndarray) -> SparseDist:
        n = ids.size
        eog = np.array([self.is_eog(int(t)) for t in ids], dtype=bool)
        p_eog = float(probs[eog].sum())
        if 3 * p_eog * n > float(probs[~eog].sum()):
            return SparseDist(ids[eog], probs[eog] / p_eog)
        p = probs.astype(np.float64, copy=True)
        dead = np.zeros(n, dtype=bool)
        pieces = [self.piece(int(t)) for t in ids]
        for i0 in range(n):
            for i1 in range(n):
                if dead[i0]:
                    break
                if i0 == i1 or dead[i1]:
                    continue
                if pieces[i0] and pieces[i1].startswith(pieces[i0]):
                    dst, src = (i1, i0) if p[i1] > p[i0] else (i0, i1)
                    p[dst] += p[src]
                    p[src] = 0.0
                    dead[src] = True
        keep = ~dead & (eog | (p >= INFILL_THRESHOLD))
        if not (keep & ~eog).any():
            return one_hot(self.end)
        return SparseDist(ids[keep], p[keep] / p[keep].sum())


@dataclass(frozen=True)
class SamplerParams:
    """llama.cpp's names and defaults (`--temp 0.8 --top-k 40 --top-p 0.95 --min-p 0.05`, every
    other stage off). The flags and request fields that set each one are declared in
    specgguf.io.sampler_table."""

    temp: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typ_p: float = 1.0
    top_n_sigma: float = -1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    penalty_last_n: int = 64  # -1: the whole context
    penalty_repeat: float = 1.0
    penalty_freq: float = 0.0
    penalty_present: float = 0.0
    mirostat: int = 0  # 0 off, 1 or 2
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    min_keep: int = 0
    dry_multiplier: float = 0.0  # 0: off
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64  # 0: off, -1: the whole context
    dry_sequence_breakers: tuple[str, ...] = ("\n", ":", '"', "*")
    #: the breakers as token ids (core.dry), found in the target's vocabulary before a
    #: sequence starts (Generator.sampler_for); None: not yet
    dry_breakers: DryBreakers | None = None
    #: adaptive-p (runs last, and only where "adaptive_p" is in `samplers`; < 0: off)
    adaptive_target: float = -1.0
    adaptive_decay: float = 0.9
    #: the stages in order (specgguf.core.samplers.DEFAULT_ORDER's names)
    samplers: tuple[str, ...] = st.DEFAULT_ORDER
    #: (token id, bias) pairs added to the row first; -inf bans the token. A request's text
    #: (a str instead of an id) is tokenized before a sequence starts (core.sampler_vocab)
    logit_bias: tuple[tuple[int | str, float], ...] = field(default=())
    #: llama.cpp's infill stage after the chain (an editor's request asks for it; sampling
    #: only: a greedy row is the chain's top token)
    infill: InfillStage | None = None

    @property
    def greedy(self) -> bool:
        """llama.cpp samples greedily for temp <= 0 where the temperature stage runs (it then
        keeps the top token alone); a chain without it (an editor's `samplers` list) draws
        from what its stages leave at temperature 1, whatever `temp` says."""
        return self.temp <= 0.0 and (self.mirostat != 0 or "temperature" in self.samplers)

    @cached_property
    def penalizes(self) -> bool:
        """Whether the penalties stage changes anything (it reads the sequence's history)."""
        on = self.penalty_repeat != 1.0 or self.penalty_freq != 0.0 or self.penalty_present != 0.0
        return on and self.penalty_last_n != 0 and self.mirostat == 0 and (
            "penalties" in self.samplers
        )

    @cached_property
    def dries(self) -> bool:
        """Whether the DRY stage changes anything (it reads the sequence's history)."""
        on = self.dry_multiplier != 0.0 and self.dry_base >= 1.0 and self.dry_penalty_last_n != 0
        return on and self.mirostat == 0 and "dry" in self.samplers

    @cached_property
    def adapts(self) -> bool:
        """Whether adaptive-p reshapes the final distribution (it reads the sequence's
        history): listed in `samplers` (wherever: it always runs last), a target >= 0."""
        return self.mirostat == 0 and "adaptive_p" in self.samplers and self.adaptive_target >= 0

    @cached_property
    def stateful(self) -> bool:
        """Whether a row's distribution depends on more than its logits (its RowState)."""
        return self.penalizes or self.dries or self.adapts or self.mirostat != 0 or self._xtc_on

    @property
    def _xtc_on(self) -> bool:
        return (
            self.mirostat == 0 and "xtc" in self.samplers and self.xtc_probability > 0.0
            and self.xtc_threshold <= 0.5
        )  # fmt: skip

    @cached_property
    def active_stages(self) -> tuple[str, ...]:
        """The stages of `samplers` that change anything at these settings, in order (read
        for every row: computed once per params)."""
        off = {
            "penalties": not self.penalizes,
            "dry": not self.dries,
            "top_n_sigma": self.top_n_sigma <= 0.0,
            "top_k": self.top_k <= 0,
            "typ_p": self.typ_p >= 1.0,
            "top_p": self.top_p >= 1.0,
            "min_p": self.min_p <= 0.0,
            "xtc": not self._xtc_on,
            "adaptive_p": True,  # not a stage in place: the last step of _finish
        }
        return tuple(s for s in self.samplers if not off.get(s, False))

    @cached_property
    def sparse_lead(self) -> tuple[str, ...]:
        """The first active stages that change a few tokens of the whole row (penalties, DRY):
        applied as sparse changes before anything reads the row."""
        stages = self.active_stages if self.mirostat == 0 else ()
        n = 0
        while n < len(stages) and stages[n] in _SPARSE:
            n += 1
        return stages[:n]


#: stages that change a few named tokens of a row (their RowState says which, and how)
_SPARSE = frozenset({"penalties", "dry"})


class RowState(Protocol):
    """What a row's distribution depends on besides its logits (core.chain_state makes it):
    the penalised tokens and their counts, mirostat's mu, XTC's uniform for the position,
    the tokens DRY lowers and by how much."""

    pen_ids: np.ndarray  # int64, distinct
    pen_counts: np.ndarray  # float64, > 0
    mu: float
    xtc_u: float | None
    dry_ids: np.ndarray  # int64, sorted, distinct
    dry_amounts: np.ndarray  # float64
    adaptive: tuple[float, float]  # adaptive-p's (weighted sum, total weight)


@dataclass(frozen=True)
class SparseDist:
    """A distribution over a few token ids; every id not listed has probability 0."""

    ids: np.ndarray  # int64, distinct
    probs: np.ndarray  # float64, sums to 1
    #: the probabilities before adaptive-p reshaped them (None: `probs`), which its history
    #: averages
    pre: np.ndarray | None = None

    def prob(self, token: int) -> float:
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def pre_prob(self, token: int) -> float:
        """`token`'s probability before adaptive-p."""
        if self.pre is None:
            return self.prob(token)
        hit = np.flatnonzero(self.ids == token)
        return float(self.pre[hit[0]]) if hit.size else 0.0

    def top(self) -> tuple[int, float]:
        i = int(np.argmax(self.probs))
        return int(self.ids[i]), float(self.probs[i])

    def sample(self, rng: np.random.Generator) -> int:
        return self.sample_at(rng.random())

    def sample_at(self, u: float) -> int:
        """Inverse CDF at the uniform `u` (ids in the order the sampler chain left them, by
        decreasing logit): the same distribution and the same u give the same token."""
        if self.ids.size == 1:
            return int(self.ids[0])
        i = int(np.searchsorted(np.cumsum(self.probs), u * self.probs.sum(), side="right"))
        return int(self.ids[min(i, self.ids.size - 1)])


#: what each uniform of a sequence position is for (PositionRandom streams); CHAIN: the
#: chain's own coin at a position (XTC's), the same for every row scored there
SAMPLE, ACCEPT, DRAFT, CHAIN = 0, 1, 2, 3


def sibling(stream: int, n: int) -> int:
    """The stream of the n-th sibling at one position of a tree draft (n = 0: `stream`
    itself): each child tried at a node, or drawn by a sampling drafter, gets numbers of its
    own, and a chain's are those of before trees."""
    return stream + 4 * n

_MASK64 = (1 << 64) - 1


class PositionRandom:
    """Uniforms keyed by (seed, sequence position, purpose) instead of drawn in sequence.

    With a sequential generator, how many numbers a speculative round consumes depends on how
    much was drafted, so the same seed gives different (equally valid) text for different
    draft lengths, and `--spec-draft-n-max auto`, whose lengths follow measured timings,
    would not be reproducible at all. Keyed uniforms make the target's sample at a position a
    function of the seed, the position and p alone: a one-hot draft is accepted iff it equals
    that sample (probability p(x); on rejection the sample is distributed as p without x, the
    residual), so sampled speculative output is token for token the output of plain decoding
    with the same seed, whatever was drafted. (splitmix64: cheap, well mixed, no state.)
    """

    __slots__ = ("seed",)

    def __init__(self, seed: int) -> None:
        self.seed = seed & _MASK64

    def uniform(self, position: int, stream: int = SAMPLE) -> float:
        """The uniform of `stream` at `position`. Streams past the first four are the n-th
        sibling's of a tree draft (`sibling`): their own numbers, the first four unchanged."""
        lane, sib = stream & 3, stream >> 2
        z = (self.seed + 0x9E3779B97F4A7C15 * (position * 4 + lane + 1)) & _MASK64
        if sib:
            z = (z + 0xD1B54A32D192ED03 * sib) & _MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        z ^= z >> 31
        return (z >> 11) / float(1 << 53)


def one_hot(token: int) -> SparseDist:
    return SparseDist(np.array([token], dtype=np.int64), np.array([1.0]))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


#: rows shorter than this are partitioned directly (the grouped search below pays only on
#: vocabulary-sized rows)
_DIRECT_TOP_K = 4096
#: values per column in the grouped search
_GROUP = 64


def top_k_ids(logits: np.ndarray, k: int) -> np.ndarray:
    """Ids of the `k` largest logits, in no particular order.

    Why not `np.argpartition` on the whole row: over a 150k-token vocabulary it costs about
    0.6 ms, and a round needs it for every target row it reads and every draft token, which
    on a GPU (a 7B step in a few ms) would be a large part of the step. Instead the row is
    viewed as G columns of _GROUP values and their maxima are taken (one vectorised pass).
    The k columns with the largest maxima contain all k largest values: each of those
    columns holds a value >= m, the k-th largest column maximum, so the k-th largest value is
    >= m, and every value at least that large sits in a column whose maximum is >= m. Only
    those k * _GROUP candidates are partitioned. The values found are exactly the row's k
    largest; only which of several exactly equal values at the k-th place is kept can differ.
    """
    n = logits.shape[0]
    if k >= n:
        return np.arange(n)
    if n < _DIRECT_TOP_K or k * _GROUP * 4 > n:
        return np.argpartition(logits, n - k)[n - k :]
    g = n // _GROUP
    m = g * _GROUP
    col_max = logits[:m].reshape(_GROUP, g).max(axis=0)
    cols = np.argpartition(col_max, g - k)[g - k :]
    cand = (cols[None, :] + g * np.arange(_GROUP)[:, None]).ravel()
    if m < n:  # the tail that does not fill a row of the grid: always a candidate
        cand = np.concatenate([cand, np.arange(m, n)])
    vals = logits[cand]
    return cand[np.argpartition(vals, vals.size - k)[vals.size - k :]]


def sorted_top_k(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest logits as (ids, float64 values) by decreasing value; equal values by
    increasing id, so the order (which the inverse-CDF sampling walks) is fully defined."""
    ids = top_k_ids(logits, k)
    vals = logits[ids]
    if ids.size == logits.shape[0]:  # the whole row (top-k off): ids already increase
        order = np.argsort(-vals, kind="stable")
    else:
        order = np.lexsort((ids, -vals))
    return ids[order], vals[order].astype(np.float64)


def _softmax_sorted(x: np.ndarray) -> np.ndarray:
    """_softmax of values sorted in decreasing order (x[0] is the maximum): same numbers."""
    e = np.exp(x - x[0])
    return e / e.sum()


def _bias(params: SamplerParams) -> tuple[np.ndarray, np.ndarray]:
    """Logit bias as (distinct ids, summed biases)."""
    ids = np.fromiter((t for t, _ in params.logit_bias), dtype=np.int64)
    bias = np.fromiter((b for _, b in params.logit_bias), dtype=np.float64)
    uniq, inv = np.unique(ids, return_inverse=True)
    return uniq, np.bincount(inv, weights=bias, minlength=uniq.size)


def _sparse_changes(
    logits: np.ndarray, params: SamplerParams, row: RowState | None, lead: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """The tokens whose logits the logit bias and the `lead` stages (penalties, DRY, in
    order) change, sorted, and their new values: a few numbers instead of a changed copy of
    the row."""
    ids, vals = np.empty(0, dtype=np.int64), np.empty(0)
    n = logits.shape[0]
    if params.logit_bias:
        ids, bias = _bias(params)
        inside = ids < n
        ids, bias = ids[inside], bias[inside]
        vals = logits[ids].astype(np.float64) + bias
    if row is None:
        return ids, vals
    for stage in lead:
        if stage == "penalties":
            tok, inside = row.pen_ids, row.pen_ids < n
            tok, counts = tok[inside], row.pen_counts[inside]
            if tok.size:
                new = st.adjusted_values(
                    _current(logits, ids, vals, tok), counts, params.penalty_repeat,
                    params.penalty_freq, params.penalty_present,
                )  # fmt: skip
                ids, vals = _merged(ids, vals, tok, new)
        else:  # dry
            inside = row.dry_ids < n
            tok = row.dry_ids[inside]
            if tok.size:
                new = _current(logits, ids, vals, tok) - row.dry_amounts[inside]
                ids, vals = _merged(ids, vals, tok, new)
    return ids, vals


def _current(logits: np.ndarray, ids: np.ndarray, vals: np.ndarray, tok: np.ndarray) -> np.ndarray:
    """The logits of `tok` with the changes so far (`ids` sorted, their values `vals`)."""
    out = logits[tok].astype(np.float64)
    if ids.size:
        where = np.searchsorted(ids, tok)
        hit = (where < ids.size) & (ids[np.minimum(where, ids.size - 1)] == tok)
        out[hit] = vals[where[hit]]
    return out


def _merged(
    ids: np.ndarray, vals: np.ndarray, tok: np.ndarray, new: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The changes `ids`/`vals` with `tok` set to `new` (a later change wins), sorted by id."""
    all_ids = np.concatenate([tok, ids])
    all_ids, first = np.unique(all_ids, return_index=True)
    return all_ids, np.concatenate([new, vals])[first]


def _top_k_changed(
    logits: np.ndarray, k: int, ids: np.ndarray, vals: np.ndarray
) -> st.Candidates:
    """The k largest of the row with the logits of `ids` replaced by `vals`, without a copy
    of the row: a token of the new top k that kept its logit is among the row's k + len(ids)
    largest (at most len(ids) changed tokens stand above it that did not before)."""
    if not ids.size:  # nothing changed: the row's own top k
        top, vals = sorted_top_k(logits, k)
        return st.Candidates(top, vals, sorted=True)
    cand = np.union1d(top_k_ids(logits, min(k + ids.size, logits.shape[0])), ids)
    cv = logits[cand].astype(np.float64)
    if ids.size:
        cv[np.searchsorted(cand, ids)] = vals
    c = st.Candidates(cand, cv)
    st.top_k(c, k)
    return c


#: stages that never drop the top token (greedy reads the argmax past them)
_KEEPS_TOP = frozenset({"top_n_sigma", "top_k", "top_p", "min_p"})


def distribution(
    logits: np.ndarray, params: SamplerParams, row: RowState | None = None
) -> SparseDist:
    """Apply the chain to one logits row; `row`: the sequence's state at this row (None: a
    row without one, as a draft's, where penalties, mirostat's mu and XTC's coin are absent).

    `logits` may be a view into llama.cpp's output buffer: it is only read, never kept.
    Vocabulary-sized work only where a stage needs the whole row (top-n-sigma, top-k off,
    mirostat): the logit bias and the penalties change a few tokens (`_sparse_changes`), and
    a top-k after them reads the row once (`_top_k_changed`); everything after works on k
    numbers kept in decreasing order.
    """
    n = logits.shape[0]
    stages = params.active_stages if params.mirostat == 0 else ()
    lead = params.sparse_lead
    ids, vals = _sparse_changes(logits, params, row, lead)
    rest = stages[len(lead) :]
    if params.greedy and params.mirostat == 0:
        before = rest[: rest.index("temperature")] if "temperature" in rest else rest
        if set(before) <= _KEEPS_TOP:
            if not ids.size:
                return one_hot(int(np.argmax(logits)))
            return one_hot(int(_top_k_changed(logits, 1, ids, vals).ids[0]))
    if rest and rest[0] == "top_k" and params.top_k > 0 and params.top_k + ids.size < n:
        c = _top_k_changed(logits, params.top_k, ids, vals)
        rest = rest[1:]
    else:
        full = logits.astype(np.float64)
        if ids.size:
            full[ids] = vals
        c = st.Candidates(np.arange(n), full)
    return _finish(c, rest, params, row)


def _finish(
    c: st.Candidates, stages: tuple[str, ...], params: SamplerParams, row: RowState | None
) -> SparseDist:
    """The stages `stages` on `c`, then (mirostat on) temperature and mirostat, then the
    distribution: survivors by decreasing logit, softmax; greedy: the top one alone."""
    finite = c.vals > -np.inf
    if not finite.all() and finite.any():
        c.keep(finite)
    for name in stages:
        if name == "penalties":  # after another stage: on what it left
            _penalise(c, params, row)
        elif name == "dry":
            _dry(c, row)
        else:
            st.STAGES[name](c, params, row)
    if params.mirostat:
        st.temperature(c, params.temp, 0.0, 1.0)
        mu = row.mu if row is not None else 2.0 * params.mirostat_tau
        if params.mirostat == 1:
            st.mirostat_v1(c, mu)
        else:
            st.mirostat_v2(c, mu)
    c.sort()
    if params.greedy:
        c.keep_top()
    finite = c.vals > -np.inf
    if not finite.all() and finite.any():
        c.keep(finite)
    dist = SparseDist(c.ids.astype(np.int64, copy=False), _softmax_sorted(c.vals))
    if params.infill is not None and not params.greedy:
        dist = params.infill.apply(dist.ids, dist.probs)
    if params.adapts:
        history = row.adaptive if row is not None else adaptive_start(params)
        new = st.adaptive_p(dist.probs, params.adaptive_target, *history)
        dist = SparseDist(dist.ids, new, pre=dist.probs)
    return dist


def adaptive_start(params: SamplerParams) -> tuple[float, float]:
    """adaptive-p's history before any token: as if every earlier token had had the target
    probability (decay taken in [0, 0.99])."""
    decay = min(max(params.adaptive_decay, 0.0), 0.99)
    return params.adaptive_target / (1.0 - decay), 1.0 / (1.0 - decay)


def adaptive_after(
    history: tuple[float, float], p: float, params: SamplerParams
) -> tuple[float, float]:
    """adaptive-p's history after a token whose probability before its transform was p."""
    decay = min(max(params.adaptive_decay, 0.0), 0.99)
    return p + decay * history[0], 1.0 + decay * history[1]


def _penalise(c: st.Candidates, params: SamplerParams, row: RowState | None) -> None:
    if row is None or not row.pen_ids.size:
        return
    hit = np.isin(c.ids, row.pen_ids)
    if hit.any():
        at = np.searchsorted(row.pen_ids, c.ids[hit])
        c.vals = c.vals.copy()
        c.vals[hit] = st.adjusted_values(
            c.vals[hit], row.pen_counts[at], params.penalty_repeat, params.penalty_freq,
            params.penalty_present,
        )  # fmt: skip
        c.sorted = False


def _dry(c: st.Candidates, row: RowState | None) -> None:
    if row is None or not row.dry_ids.size:
        return
    hit = np.isin(c.ids, row.dry_ids)
    if hit.any():
        c.vals = c.vals.copy()
        c.vals[hit] -= row.dry_amounts[np.searchsorted(row.dry_ids, c.ids[hit])]
        c.sorted = False


def adjusted_row(logits: np.ndarray, params: SamplerParams, row: RowState | None) -> np.ndarray:
    """The row with the logit bias and the leading penalties and DRY applied: `logits`
    itself where none changes anything, else a copy (for a constrained row, whose allowed
    top-k is searched on the changed logits)."""
    ids, vals = _sparse_changes(logits, params, row, params.sparse_lead)
    if not ids.size:
        return logits
    out = logits.astype(np.float64)
    out[ids] = vals
    return out


def chain_on_sorted(
    ids: np.ndarray, vals: np.ndarray, params: SamplerParams, row: RowState | None = None
) -> SparseDist:
    """The chain after the logit bias, the leading penalties and DRY (`sparse_lead`) and
    top-k, on the survivors of top-k given by decreasing value (sorted_top_k's order). A
    constrained row (specgguf.core.constraint) enters here with its allowed top-k of
    `adjusted_row`."""
    stages = params.active_stages[len(params.sparse_lead) :] if params.mirostat == 0 else ()
    stages = tuple(s for s in stages if s != "top_k")
    c = st.Candidates(ids, vals.astype(np.float64, copy=False), sorted=True)
    return _finish(c, stages, params, row)


def top_k_confidence(logits: np.ndarray, k: int = 10) -> tuple[int, float]:
    """The draft's top token and its probability among its top-k at temperature 1.

    This is what llama.cpp's draft-simple compares with --spec-draft-p-min (its draft sampler
    is a lone top-k 10), so greedy drafting stops at the same places as upstream.
    """
    ids, vals = sorted_top_k(logits, min(k, logits.shape[0]))
    return int(ids[0]), float(_softmax_sorted(vals)[0])


def top_k_confidences(logits: np.ndarray, k: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """The row's k best tokens and each one's probability among them at temperature 1, best
    first: top_k_confidence's scale for every candidate a tree drafter weighs."""
    ids, vals = sorted_top_k(logits, min(k, logits.shape[0]))
    return ids, _softmax_sorted(vals)


def confidence_of(logits: np.ndarray, token: int, k: int = 10) -> float:
    """`token`'s weight against the row's top-k at temperature 1: for the argmax, exactly
    top_k_confidence's figure (a drafter that takes another token, as under a grammar,
    reports its confidence on the same scale)."""
    top = np.partition(logits, -k)[-k:] if logits.shape[0] > k else logits
    m = float(top.max())
    return float(np.exp(min(float(logits[token]) - m, 0.0)) / np.exp(top - m).sum())

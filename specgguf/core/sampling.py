"""The sampler chain, as pure numpy: logits row in, (sparse) probability distribution out.

Speculative sampling is only lossless when the draft's q and the target's p come out of the
SAME transforms, so there is exactly one implementation here and both sides call it.

The order and the semantics mirror llama.cpp's default chain (common/common.h, `samplers`):
top-k -> top-p -> min-p -> temperature -> sample. Note that llama.cpp applies top-p and min-p
BEFORE temperature, i.e. they look at softmax(logits) at temperature 1; we do the same so that
`--top-p 0.9 --temp 0.5` means what it means in llama.cpp. Penalties, DRY, XTC and typical-p
are not part of specgguf's surface (llama.cpp's defaults leave them off).

Distributions are kept sparse (token ids + probabilities over the survivors): with a 150k-token
vocabulary and top-k 40 that turns every later step into work on 40 numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

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
    """llama.cpp's names and defaults (`--temp 0.8 --top-k 40 --top-p 0.95 --min-p 0.05`);
    `infill`: llama.cpp's infill stage after them (an editor's request asks for it)."""

    temp: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    infill: InfillStage | None = None

    @property
    def greedy(self) -> bool:
        """llama.cpp samples greedily for temp <= 0; so do we."""
        return self.temp <= 0.0


@dataclass(frozen=True)
class SparseDist:
    """A distribution over a few token ids; every id not listed has probability 0."""

    ids: np.ndarray  # int64, distinct
    probs: np.ndarray  # float64, sums to 1

    def prob(self, token: int) -> float:
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

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


#: what each uniform of a sequence position is for (PositionRandom streams)
SAMPLE, ACCEPT, DRAFT = 0, 1, 2


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


def distribution(logits: np.ndarray, params: SamplerParams) -> SparseDist:
    """Apply the chain to one logits row. Greedy params give the one-hot argmax.

    `logits` may be a view into llama.cpp's output buffer: it is only read, never kept.
    No step touches the whole vocabulary more than once, and nothing is copied in full:
    greedy is one argmax, top-k is top_k_ids, and everything after it works on k numbers
    kept in decreasing order, so top-p and min-p each keep a prefix.
    """
    if params.greedy:
        return one_hot(int(np.argmax(logits)))

    n = logits.shape[0]
    ids, vals = sorted_top_k(logits, params.top_k if 0 < params.top_k < n else n)
    return chain_on_sorted(ids, vals, params)


def chain_on_sorted(ids: np.ndarray, vals: np.ndarray, params: SamplerParams) -> SparseDist:
    """The chain after top-k: top-p, min-p and temperature on the survivors of top-k, given
    by decreasing value (sorted_top_k's order). A constrained row (specgguf.core.constraint)
    enters here with its allowed top-k."""
    keep = ids.size

    # top-p on softmax at temperature 1: keep the shortest prefix whose mass reaches p.
    if params.top_p < 1.0:
        cum = np.cumsum(_softmax_sorted(vals))
        keep = int(np.searchsorted(cum, params.top_p, side="left")) + 1

    # min-p: keep tokens with p_i >= min_p * p_max, i.e. logit >= max + log(min_p) (the
    # first token always stays).
    if params.min_p > 0.0:
        keep = min(keep, max(1, int(np.count_nonzero(vals >= vals[0] + np.log(params.min_p)))))

    if keep < ids.size:
        ids, vals = ids[:keep], vals[:keep]
    with np.errstate(over="ignore"):
        scaled = vals / params.temp
        if not np.isfinite(scaled[0]):
            # a temperature so small (1e-320) that the logits overflow to inf, and inf - inf
            # is NaN: scale the distances from the top instead (the top at 0, the rest at
            # -inf or below it), so that the limit is greedy's one-hot
            scaled = (vals - vals[0]) / params.temp
    dist = SparseDist(ids.astype(np.int64, copy=False), _softmax_sorted(scaled))
    return params.infill.apply(dist.ids, dist.probs) if params.infill is not None else dist


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

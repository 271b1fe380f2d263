"""The stages of the sampler chain, one small function each, and the table of their names.

A stage takes the candidates left by the stages before it (token ids and float64 logits) and
returns the candidates it keeps, with their (possibly changed) logits. Stages that need an order
sort first (`Candidates.sort`: by decreasing logit, equal logits by increasing id); a stage that
only filters keeps the order it was given. Each stage means what the llama.cpp stage of the same
name means:

- penalties: a token seen c > 0 times among the last N tokens of the sequence has its logit
  divided by the repeat penalty (multiplied where the logit is <= 0), then lowered by
  c * frequency penalty + presence penalty. Applied as a sparse change (`adjusted_values`).
- dry: lowers the tokens that would continue a repeat of an earlier passage (specgguf.core.dry
  says which and by how much, from the sequence's history); a sparse change too.
- top_n_sigma: keeps logits >= max - n * std (std of the finite logits); n <= 0: off.
- top_k: the k largest; k <= 0: off.
- typical: locally typical sampling: orders by |surprise - entropy| and keeps the shortest
  prefix of that order whose mass exceeds p; p >= 1: off.
- top_p: the shortest prefix by decreasing probability whose mass reaches p; p >= 1: off.
- min_p: keeps p_i >= min_p * p_max; min_p <= 0: off.
- xtc: with probability xtc_probability (one uniform per position), removes every token whose
  probability is >= threshold except the least likely of them; a threshold > 0.5 or a
  probability <= 0: off.
- temperature: logits / temp; temp <= 0 keeps the top token alone (greedy); with a dynatemp
  range the temperature moves in [temp - range, temp + range] with the normalised entropy
  raised to the dynatemp exponent.
- adaptive_p: not a stage in place: where listed, it reshapes the final distribution last
  (`adaptive_p`), with the average probability of the tokens chosen so far.
- mirostat (v1, v2): replaces the chain after logit bias and temperature: v2 keeps the tokens
  whose surprise -log2 p is at most mu; v1 estimates the Zipf exponent from the 100 most
  likely tokens and keeps the top k that exponent and mu give. After each emitted token x,
  mu -= eta * (-log2 p(x) - tau) (`core.chain_state`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: the stage names llama.cpp's --samplers takes (and its aliases), and the one-letter codes
#: of --sampling-seq; order: llama.cpp's default chain
DEFAULT_ORDER: tuple[str, ...] = (
    "penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature",
)  # fmt: skip
CODES: dict[str, str] = {
    "e": "penalties", "d": "dry", "s": "top_n_sigma", "k": "top_k", "y": "typ_p", "p": "top_p",
    "m": "min_p", "x": "xtc", "t": "temperature", "a": "adaptive_p", "i": "infill",
}  # fmt: skip
ALIASES: dict[str, str] = {
    "top-k": "top_k", "top-p": "top_p", "nucleus": "top_p", "typical-p": "typ_p",
    "typical": "typ_p", "typ-p": "typ_p", "typ": "typ_p", "min-p": "min_p", "temp": "temperature",
    "top-n-sigma": "top_n_sigma", "typical_p": "typ_p",
    "adaptive-p": "adaptive_p", "adaptivep": "adaptive_p", "topk": "top_k", "topp": "top_p",
    "minp": "min_p", "typp": "typ_p", "topnsigma": "top_n_sigma",
}  # fmt: skip
#: the stages that run at the end of the chain wherever they are listed (adaptive-p draws the
#: token, as llama.cpp's does)
FINAL: tuple[str, ...] = ("adaptive_p",)
#: names llama.cpp knows that specgguf does not run: refused by name, never skipped
NOT_IMPLEMENTED: dict[str, str] = {
    # runs only last in a request's list (the server hands it the vocabulary): elsewhere, and
    # in --samplers, it is refused
    "infill": "the infill sampler (only last in a request's samplers list)",
}


class SamplerOrderError(ValueError):
    """A --samplers / --sampling-seq / `samplers` value names no known stage."""


def parse_order(value: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Stage names from --samplers ('top_k;top_p', also ',' separated), from a list of names
    (a request's `samplers`), or from --sampling-seq codes when `value` is one word of codes
    ('kpt'). Unknown names raise SamplerOrderError naming the first."""
    if isinstance(value, str):
        codes = value and set(value) <= CODES.keys()
        if codes and value not in ALIASES and value not in DEFAULT_ORDER:
            return tuple(CODES[c] for c in value)
        value = [v for v in value.replace(",", ";").split(";") if v.strip()]
    out = []
    for raw in value:
        if not isinstance(raw, str):
            raise SamplerOrderError(f"sampler names must be strings, not {raw!r}")
        name = raw.strip().lower()
        name = ALIASES.get(name, name)
        if name not in DEFAULT_ORDER and name not in FINAL and name not in NOT_IMPLEMENTED:
            known = ", ".join(DEFAULT_ORDER + FINAL)
            raise SamplerOrderError(f"unknown sampler {raw!r} (known: {known})")
        out.append(name)
    return tuple(out)


@dataclass
class Candidates:
    """What is left of a row: ids and float64 logits; `sorted`: by decreasing logit (equal
    logits by increasing id), the order the inverse-CDF sampling walks."""

    ids: np.ndarray
    vals: np.ndarray
    sorted: bool = False

    def sort(self) -> None:
        if not self.sorted:
            order = np.lexsort((self.ids, -self.vals))
            self.ids, self.vals, self.sorted = self.ids[order], self.vals[order], True

    def keep(self, mask_or_n) -> None:
        """Keep the first n (an int) or the entries of a boolean mask (order kept)."""
        if isinstance(mask_or_n, int | np.integer):
            self.ids, self.vals = self.ids[:mask_or_n], self.vals[:mask_or_n]
        else:
            self.ids, self.vals = self.ids[mask_or_n], self.vals[mask_or_n]

    def keep_top(self) -> None:
        """Keep the largest logit alone (the smallest id among equals), without a sort."""
        tied = np.flatnonzero(self.vals == self.vals.max())
        i = tied[np.argmin(self.ids[tied])]
        self.ids, self.vals, self.sorted = self.ids[i : i + 1], self.vals[i : i + 1], True

    def probs(self) -> np.ndarray:
        """Softmax of the logits (sorted or not); -inf logits get 0."""
        top = self.vals.max()
        e = np.exp(self.vals - top)
        return e / e.sum()


def adjusted_values(
    vals: np.ndarray,
    counts: np.ndarray,
    repeat: float,
    freq: float,
    present: float,
) -> np.ndarray:
    """The penalties on logits `vals` of tokens seen `counts` (> 0) times (a new array)."""
    out = np.where(vals <= 0, vals * repeat, vals / repeat)
    return out - counts * freq - present


def top_k(c: Candidates, k: int) -> None:
    n = c.ids.size
    if k <= 0 or k >= n:
        c.sort()
        return
    if not c.sorted:
        part = np.argpartition(c.vals, n - k)[n - k :]
        # equal values at the k-th place: keep the smallest ids, as the sorted order does
        kth = c.vals[part].min()
        tied = np.flatnonzero(c.vals == kth)
        if tied.size > np.count_nonzero(c.vals[part] == kth):
            above = part[c.vals[part] > kth]
            part = np.concatenate([above, np.sort(tied)[: k - above.size]])
        c.ids, c.vals = c.ids[part], c.vals[part]
        c.sort()
        return
    c.keep(k)


def top_p(c: Candidates, p: float, min_keep: int) -> None:
    if p >= 1.0 or c.ids.size <= 1:
        return
    c.sort()
    cum = np.cumsum(c.probs())
    n = int(np.searchsorted(cum, p, side="left")) + 1
    c.keep(max(n, min_keep, 1))


def min_p(c: Candidates, p: float, min_keep: int) -> None:
    if p <= 0.0 or c.ids.size <= 1:
        return
    c.sort()
    n = int(np.count_nonzero(c.vals >= c.vals[0] + np.log(p)))
    c.keep(max(n, min_keep, 1))


def typical(c: Candidates, p: float, min_keep: int) -> None:
    if p >= 1.0 or c.ids.size <= 1:
        return
    c.sort()
    probs = c.probs()
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.log(probs)
        entropy = -np.nansum(probs * logp)
        score = np.abs(-logp - entropy)
    order = np.argsort(score, kind="stable")
    cum = np.cumsum(probs[order])
    over = np.flatnonzero(cum > p)
    n = int(over[0]) + 1 if over.size else order.size
    n = max(n, min_keep, 1)
    c.keep(np.sort(order[:n]))  # back in decreasing-logit order


def top_n_sigma(c: Candidates, n: float) -> None:
    if n <= 0.0 or c.ids.size <= 1:
        return
    finite = c.vals[np.isfinite(c.vals)]
    if finite.size == 0:
        return
    top = finite.max()
    c.keep(c.vals >= top - n * finite.std())


def xtc(c: Candidates, probability: float, threshold: float, min_keep: int, u: float | None):
    """`u`: the position's uniform for this stage (None: it does not fire, as a draft's row
    without a position)."""
    if probability <= 0.0 or threshold > 0.5 or c.ids.size < 2 or u is None or u > probability:
        return
    c.sort()
    above = int(np.count_nonzero(c.probs() >= threshold))  # a prefix: sorted
    drop = above - 1
    if drop > 0 and c.ids.size - drop >= min_keep:
        c.ids, c.vals = c.ids[drop:], c.vals[drop:]


def temperature(c: Candidates, temp: float, dyn_range: float, dyn_exp: float) -> None:
    if dyn_range > 0.0 and c.ids.size > 1:
        lo, hi = max(0.0, temp - dyn_range), temp + dyn_range
        probs = c.probs()
        nz = probs[probs > 0]
        entropy = float(-(nz * np.log(nz)).sum())
        temp = lo + (hi - lo) * (entropy / np.log(c.ids.size)) ** dyn_exp
    if temp <= 0.0:
        c.keep_top()
        return
    with np.errstate(over="ignore"):
        scaled = c.vals / temp
    if not np.isfinite(scaled.max()):
        # so small a temperature (1e-320) that logits overflow: scale the distances from the
        # top instead, so that the limit is greedy's one-hot
        scaled = (c.vals - c.vals.max()) / temp
    c.vals = scaled


def mirostat_v2(c: Candidates, mu: float) -> None:
    """Keeps the tokens of surprise <= mu: in decreasing order, the prefix llama.cpp keeps
    (a filter, no sort of the whole row); the top token always stays."""
    keep = -np.log2(c.probs()) <= mu
    if not keep.any():
        c.keep_top()
        return
    c.keep(keep)


#: the Zipf estimate's sample: llama.cpp's common sampler reads the 100 most likely tokens
MIROSTAT_M = 100


def mirostat_v1(c: Candidates, mu: float) -> None:
    """`c`: the whole row (its size is the vocabulary's, which the estimate reads)."""
    n_vocab = c.ids.size
    probs = c.probs()
    m = min(MIROSTAT_M, probs.size)
    top = np.sort(np.partition(probs, probs.size - m)[probs.size - m :])[::-1]
    if m < 2:
        return
    i = np.arange(m - 1, dtype=np.float64)
    t = np.log((i + 2) / (i + 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.log(top[:-1] / top[1:])
    s_hat = float((t * b).sum() / (t * t).sum())
    eps = s_hat - 1
    with np.errstate(all="ignore"):
        k = ((eps * 2.0**mu) / (1 - float(n_vocab) ** -eps)) ** (1 / s_hat)
    top_k(c, max(int(k), 1) if np.isfinite(k) else n_vocab)


#: adaptive-p's transform: width of the favoured band around the target, the logit at the
#: target, how steeply logits fall away from it
ADAPTIVE_WIDTH, ADAPTIVE_PEAK, ADAPTIVE_SHARPNESS = 0.3, 5.0, 10.0


def adaptive_p(
    probs: np.ndarray, target: float, weighted_sum: float, total_weight: float
) -> np.ndarray:
    """adaptive-p on the final probabilities: the target moves against the average of the
    chosen tokens' probabilities so far (2 * target - average, within [0, 1]); each token
    gets the logit PEAK - SHARPNESS * d^2 / (1 + d), d = |p - moved target| / WIDTH
    (quadratic near the target, linear far from it), and the result is their softmax."""
    aim = min(max(target, 0.0), 1.0)
    if total_weight != 0.0:
        aim = min(max(2.0 * aim - weighted_sum / total_weight, 0.0), 1.0)
    d = np.abs(probs - aim) / ADAPTIVE_WIDTH
    logits = ADAPTIVE_PEAK - ADAPTIVE_SHARPNESS * d * d / (1.0 + d)
    e = np.exp(logits - logits.max())
    return e / e.sum()


#: the stages the chain runs by name (mirostat is not one: it replaces the chain); a stage is
#: called as fn(candidates, params, row) with the row's state (core.chain_state.RowState or None)
Stage = Callable[..., None]
STAGES: dict[str, Stage] = {
    "top_n_sigma": lambda c, s, r: top_n_sigma(c, s.top_n_sigma),
    "top_k": lambda c, s, r: top_k(c, s.top_k),
    "typ_p": lambda c, s, r: typical(c, s.typ_p, s.min_keep),
    "top_p": lambda c, s, r: top_p(c, s.top_p, s.min_keep),
    "min_p": lambda c, s, r: min_p(c, s.min_p, s.min_keep),
    "xtc": lambda c, s, r: xtc(
        c, s.xtc_probability, s.xtc_threshold, s.min_keep, r.xtc_u if r is not None else None
    ),
    "temperature": lambda c, s, r: temperature(c, s.temp, s.dynatemp_range, s.dynatemp_exponent),
}

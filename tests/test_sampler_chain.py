"""The sampler chain against a reference written from the stages' definitions, on small rows.

The reference is plain Python over (id, logit) pairs, one stage after another on the whole row,
with none of the chain's shortcuts (sparse penalties, the top-k search before the rest): where
the two agree on random rows and settings, the shortcuts are exact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from specgguf.core import samplers as st
from specgguf.core.chain_state import RowState
from specgguf.core.sampling import SamplerParams, distribution

V = 40


def _sorted(c):
    return sorted(c, key=lambda t: (-t[1], t[0]))


def _probs(c):
    top = max(v for _, v in c)
    e = [math.exp(v - top) for _, v in c]
    s = sum(e)
    return [x / s for x in e]


def reference(logits, p: SamplerParams, counts: dict[int, int], mu: float, u: float | None):
    """The chain as its stages are defined, token by token (a dict id -> probability)."""
    c = [(i, float(x)) for i, x in enumerate(logits)]
    bias: dict[int, float] = {}
    for t, b in p.logit_bias:
        bias[t] = bias.get(t, 0.0) + b
    c = [(i, v + bias.get(i, 0.0)) for i, v in c]
    c = [t for t in c if t[1] > -math.inf] or c[:1]
    mk = p.min_keep
    stages = p.samplers if not p.mirostat else ()
    for s in stages:
        if s == "penalties" and (p.penalty_last_n != 0):
            out = []
            for i, v in c:
                n = counts.get(i, 0)
                if n:
                    v = v * p.penalty_repeat if v <= 0 else v / p.penalty_repeat
                    v -= n * p.penalty_freq + p.penalty_present
                out.append((i, v))
            c = out
        elif s == "top_n_sigma" and p.top_n_sigma > 0 and len(c) > 1:
            vals = [v for _, v in c if v > -math.inf]
            mean = sum(vals) / len(vals)
            std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
            c = [t for t in c if t[1] >= max(vals) - p.top_n_sigma * std]
        elif s == "top_k" and p.top_k > 0:
            c = _sorted(c)[: p.top_k]
        elif s == "typ_p" and p.typ_p < 1 and len(c) > 1:
            c = _sorted(c)
            pr = _probs(c)
            h = -sum(x * math.log(x) for x in pr if x > 0)
            order = sorted(range(len(c)), key=lambda j: abs(-math.log(pr[j]) - h))
            cum, n = 0.0, len(order)
            for j, idx in enumerate(order):
                cum += pr[idx]
                if cum > p.typ_p and j + 1 >= max(mk, 1):
                    n = j + 1
                    break
            c = [c[j] for j in sorted(order[:n])]
        elif s == "top_p" and p.top_p < 1 and len(c) > 1:
            c = _sorted(c)
            pr, cum = _probs(c), 0.0
            for j, x in enumerate(pr):
                cum += x
                if cum >= p.top_p and j + 1 >= mk:
                    c = c[: j + 1]
                    break
        elif s == "min_p" and p.min_p > 0 and len(c) > 1:
            c = _sorted(c)
            pr = _probs(c)
            keep = [t for t, x in zip(c, pr, strict=True) if x >= p.min_p * pr[0]]
            c = keep if len(keep) >= max(mk, 1) else c[: max(mk, 1)]
        elif s == "xtc" and p.xtc_probability > 0 and p.xtc_threshold <= 0.5 and len(c) > 1:
            if u is not None and u <= p.xtc_probability:
                c = _sorted(c)
                n_above = sum(1 for x in _probs(c) if x >= p.xtc_threshold)
                if n_above > 1 and len(c) - (n_above - 1) >= mk:
                    c = c[n_above - 1 :]
        elif s == "temperature":
            t = p.temp
            if p.dynatemp_range > 0 and len(c) > 1:
                pr = _probs(c)
                h = -sum(x * math.log(x) for x in pr if x > 0)
                lo, hi = max(0.0, t - p.dynatemp_range), t + p.dynatemp_range
                t = lo + (hi - lo) * (h / math.log(len(c))) ** p.dynatemp_exponent
            c = _sorted(c)[:1] if t <= 0 else [(i, v / t) for i, v in c]
    if p.mirostat:
        c = _sorted(c)[:1] if p.temp <= 0 else [(i, v / p.temp) for i, v in c]
        c = _sorted(c)
        pr = _probs(c)
        if p.mirostat == 2:
            n = next((j for j, x in enumerate(pr) if -math.log2(x) > mu), len(c))
            c = c[: max(n, 1)]
        else:
            m = min(100, len(c))
            ts = [math.log((j + 2) / (j + 1)) for j in range(m - 1)]
            bs = [math.log(pr[j] / pr[j + 1]) for j in range(m - 1)]
            s_hat = sum(a * b for a, b in zip(ts, bs, strict=True)) / sum(a * a for a in ts)
            e = s_hat - 1
            k = ((e * 2**mu) / (1 - len(logits) ** -e)) ** (1 / s_hat)
            c = c[: max(int(k), 1)]
    c = _sorted(c)
    if p.temp <= 0:
        c = c[:1]
    return dict(zip([i for i, _ in c], _probs(c), strict=True))


def row(counts: dict[int, int], mu: float = 10.0, u: float | None = None) -> RowState:
    ids = np.array(sorted(counts), dtype=np.int64)
    return RowState(ids, np.array([float(counts[i]) for i in ids]), mu, u)


def check(logits, params, counts=None, mu=10.0, u=None):
    counts = counts or {}
    got = distribution(logits, params, row(counts, mu, u))
    want = reference(logits, params, counts, mu, u)
    assert dict(zip(got.ids.tolist(), [pytest.approx(x, abs=1e-9) for x in got.probs],
                    strict=True)) == want  # fmt: skip
    return got


SETTINGS = [
    {},
    {"top_k": 0},
    {"top_k": 5, "top_p": 0.5},
    {"penalty_repeat": 1.3, "penalty_freq": 0.4, "penalty_present": 0.6},
    {"penalty_repeat": 0.7, "top_k": 3},
    {"top_n_sigma": 1.0},
    {"top_n_sigma": 0.5, "top_k": 0, "min_p": 0.0},
    {"typ_p": 0.6},
    {"typ_p": 0.3, "min_keep": 4, "top_k": 0},
    {"xtc_probability": 1.0, "xtc_threshold": 0.05},
    {"xtc_probability": 0.5, "xtc_threshold": 0.02, "top_k": 0, "top_p": 1.0, "min_p": 0.0},
    {"dynatemp_range": 0.5, "dynatemp_exponent": 1.5},
    {"temp": 0.0, "penalty_repeat": 1.5},
    {"temp": 0.0, "typ_p": 0.4},
    {"mirostat": 2, "mirostat_tau": 3.0},
    {"mirostat": 1, "mirostat_tau": 3.0},
    {"mirostat": 2, "temp": 0.0},
    {"logit_bias": ((3, 5.0), (4, -math.inf), (3, 1.0))},
    {"logit_bias": ((7, 2.0),), "penalty_repeat": 1.2, "penalty_present": 1.5},
    {"samplers": ("temperature", "top_k", "penalties", "top_p"), "penalty_freq": 1.0},
    {"samplers": ("min_p", "xtc", "top_k"), "xtc_probability": 1.0, "min_p": 0.01},
    {"samplers": ("top_p",), "top_k": 2},
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(s) or "default")
def test_each_stage_and_order_matches_the_reference(settings):
    rng = np.random.default_rng(5)
    params = SamplerParams(**settings)
    for _ in range(20):
        logits = (rng.normal(size=V) * rng.uniform(0.5, 4)).astype(np.float32)
        counts = {int(t): int(rng.integers(1, 4)) for t in rng.choice(V, size=6, replace=False)}
        counts[int(np.argmax(logits))] = 2  # the top token is penalised: the order changes
        check(logits, params, counts, mu=float(rng.uniform(1, 8)), u=float(rng.random()))


def test_penalties_change_greedy_and_a_banned_token_never_comes():
    logits = np.zeros(V, dtype=np.float32)
    logits[3], logits[9] = 2.0, 1.9
    greedy = SamplerParams(temp=0.0, penalty_repeat=1.1)
    assert distribution(logits, greedy, row({3: 1})).top()[0] == 9
    assert distribution(logits, greedy, row({})).top()[0] == 3
    banned = SamplerParams(logit_bias=((3, -math.inf),))
    assert distribution(logits, banned).prob(3) == 0.0


def test_the_sparse_top_k_equals_the_top_k_of_the_changed_row_on_a_large_vocabulary():
    """A vocabulary large enough for the grouped top-k search, with penalties lifting and
    sinking tokens across the k-th place."""
    rng = np.random.default_rng(1)
    logits = rng.normal(size=20000).astype(np.float32)
    order = np.argsort(-logits)
    counts = {int(t): 1 for t in order[:30]} | {int(t): 3 for t in order[200:230]}
    params = SamplerParams(penalty_repeat=0.2, penalty_freq=-1.0, top_k=40, top_p=1.0, min_p=0)
    got = distribution(logits, params, row(counts))
    full = logits.astype(np.float64)
    ids = np.array(sorted(counts))
    full[ids] = st.adjusted_values(full[ids], np.array([counts[i] for i in ids], float),
                                   0.2, -1.0, 0.0)  # fmt: skip
    assert set(got.ids.tolist()) == set(np.argsort(-full, kind="stable")[:40].tolist())


@pytest.mark.parametrize(
    ("value", "order"),
    [
        ("kpt", ("top_k", "top_p", "temperature")),
        ("top_k;temp;nucleus", ("top_k", "temperature", "top_p")),
        (["min_p", "typical_p"], ("min_p", "typ_p")),
        ("edskypmxt", st.DEFAULT_ORDER),
    ],
)
def test_sampler_orders_parse(value, order):
    assert st.parse_order(value) == order


def test_an_unknown_sampler_is_refused_by_name():
    with pytest.raises(st.SamplerOrderError, match="'top_q'"):
        st.parse_order("top_k;top_q")

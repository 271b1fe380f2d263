"""The sampler chain matches llama.cpp's semantics on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from specgguf.core.sampling import SamplerParams, confidence_of, distribution, top_k_confidence


def test_greedy_is_one_hot_argmax() -> None:
    d = distribution(np.array([0.1, 3.0, 2.9, -1.0], dtype=np.float32), SamplerParams(temp=0))
    assert d.ids.tolist() == [1] and d.probs.tolist() == [1.0]


def test_top_k_keeps_k_highest() -> None:
    logits = np.array([0.0, 5.0, 1.0, 4.0, 3.0], dtype=np.float32)
    d = distribution(logits, SamplerParams(temp=1.0, top_k=2, top_p=1.0, min_p=0.0))
    assert sorted(d.ids.tolist()) == [1, 3]
    e = np.exp([5.0, 4.0])
    assert d.prob(1) == pytest.approx(e[0] / e.sum())


def test_top_p_is_applied_before_temperature() -> None:
    # softmax at T=1: [0.665, 0.245, 0.090] -> top-p 0.9 keeps two tokens (0.665 + 0.245 >= 0.9)
    logits = np.log(np.array([0.665, 0.245, 0.090], dtype=np.float32))
    d = distribution(logits, SamplerParams(temp=5.0, top_k=0, top_p=0.9, min_p=0.0))
    assert sorted(d.ids.tolist()) == [0, 1]
    # temperature then flattens only the survivors
    ratio = (0.665 / 0.245) ** (1 / 5.0)
    assert d.prob(0) / d.prob(1) == pytest.approx(ratio, rel=1e-4)


def test_min_p_relative_to_max() -> None:
    logits = np.log(np.array([0.5, 0.2, 0.03, 0.27], dtype=np.float32))
    d = distribution(logits, SamplerParams(temp=1.0, top_k=0, top_p=1.0, min_p=0.1))
    assert sorted(d.ids.tolist()) == [0, 1, 3]  # 0.03 < 0.1 * 0.5


def test_defaults_are_llama_cpps_and_keep_at_most_top_k_tokens() -> None:
    # (what llama.cpp's --temp/--top-k/--top-p/--min-p default to; a draft sampled with these
    # and a target verified with them use one chain, so q and p are comparable)
    p = SamplerParams()
    assert (p.temp, p.top_k, p.top_p, p.min_p) == (0.8, 40, 0.95, 0.05)
    # 50 equal best tokens: top-k keeps 40 of them, top-p 0.95 over those 40 (renormalised)
    # keeps 38 (38/40 = 0.95), min-p (relative to the max) drops none of the equal ones
    flat = np.zeros(1000, dtype=np.float32)
    flat[:50] = 1.0
    d = distribution(flat, p)
    assert d.ids.size == 38 and set(d.ids.tolist()) <= set(range(50))
    assert d.probs.sum() == pytest.approx(1.0)


def test_top_k_confidence_uses_top_10_softmax() -> None:
    logits = np.full(100, -10.0, dtype=np.float32)
    logits[7] = 2.0
    tok, p = top_k_confidence(logits)
    assert tok == 7
    assert p == pytest.approx(np.exp(2.0) / (np.exp(2.0) + 9 * np.exp(-10.0)))
    # another token on the same scale (a grammar-masked draft's choice), the argmax's alike
    assert confidence_of(logits, 7) == pytest.approx(p)
    assert confidence_of(logits, 3) == pytest.approx(np.exp(-12.0) * p)


# -- the vocabulary-sized fast path gives exactly what a full partition gives ---------------

def _reference_distribution(logits: np.ndarray, params: SamplerParams):
    """The chain as first written (a partition of the whole row, a stable sort, boolean masks):
    the optimised `distribution` must return the very same ids and probabilities."""
    n = logits.shape[0]
    if 0 < params.top_k < n:
        ids = np.argpartition(logits, n - params.top_k)[n - params.top_k :]
    else:
        ids = np.arange(n)
    vals = logits[ids].astype(np.float64)
    order = np.argsort(-vals, kind="stable")
    ids, vals = ids[order], vals[order]

    def softmax(x):
        e = np.exp(x - x.max())
        return e / e.sum()

    if params.top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(softmax(vals)), params.top_p, side="left")) + 1
        ids, vals = ids[:keep], vals[:keep]
    if params.min_p > 0.0:
        mask = vals >= vals[0] + np.log(params.min_p)
        mask[0] = True
        ids, vals = ids[mask], vals[mask]
    return ids.astype(np.int64), softmax(vals / params.temp)


@pytest.mark.parametrize("n", [100, 5000, 32003, 151936, 152064])
def test_top_k_ids_finds_the_k_largest(n: int) -> None:
    from specgguf.core.sampling import top_k_ids

    rng = np.random.default_rng(n)
    for scale in (0.5, 3.0, 30.0):
        row = (rng.standard_normal(n) * scale).astype(np.float32)
        for k in (1, 10, 40, 100):
            want = np.sort(np.argpartition(row, n - k)[n - k :])
            assert np.array_equal(np.sort(top_k_ids(row, k)), want), (n, scale, k)
    # the largest values all in one column of the grid, and all in the ragged tail
    row = np.zeros(n, dtype=np.float32)
    g = n // 64
    row[np.arange(40) * g % n] = np.arange(40) + 1.0
    assert set(top_k_ids(row, 40).tolist()) == set((np.arange(40) * g % n).tolist())
    row = np.zeros(n, dtype=np.float32)
    row[n - 5 :] = 1.0
    assert set(range(n - 5, n)) <= set(top_k_ids(row, 10).tolist())


@pytest.mark.parametrize("n", [1000, 151936])
def test_distribution_is_bit_identical_to_the_reference_chain(n: int) -> None:
    rng = np.random.default_rng(7)
    chains = [
        SamplerParams(),  # llama.cpp's defaults
        SamplerParams(temp=0.3, top_k=40, top_p=0.5, min_p=0.0),
        SamplerParams(temp=1.5, top_k=100, top_p=1.0, min_p=0.3),
        SamplerParams(temp=0.8, top_k=5, top_p=0.95, min_p=0.05),
        SamplerParams(temp=1.0, top_k=0, top_p=0.9, min_p=0.05),  # top-k off: the whole row
    ]
    for trial in range(30):
        row = (rng.standard_normal(n) * (1.0 + trial % 5 * 4)).astype(np.float32)
        for params in chains:
            got = distribution(row, params)
            ids, probs = _reference_distribution(row, params)
            assert np.array_equal(got.ids, ids) and np.array_equal(got.probs, probs)
            assert got.ids.dtype == np.int64


def test_equal_logits_are_ordered_by_id_so_sampling_is_defined() -> None:
    row = np.zeros(151936, dtype=np.float32)
    row[[9, 70000, 3, 150000]] = 5.0
    d = distribution(row, SamplerParams(temp=1.0, top_k=4, top_p=1.0, min_p=0.0))
    assert d.ids.tolist() == [3, 9, 70000, 150000]
    assert [d.sample_at(u) for u in (0.1, 0.3, 0.6, 0.9)] == [3, 9, 70000, 150000]


def test_top_k_confidence_matches_a_full_partition_on_a_vocabulary_row() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        row = (rng.standard_normal(151936) * 4).astype(np.float32)
        top = np.argpartition(row, row.size - 10)[row.size - 10 :]
        vals = row[top].astype(np.float64)
        e = np.exp(vals - vals.max())
        tok, p = top_k_confidence(row)
        assert tok == int(np.argmax(row))
        assert p == pytest.approx(float(e.max() / e.sum()), rel=1e-12)

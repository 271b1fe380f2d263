"""The sampler chain matches llama.cpp's semantics on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from specgguf.sampling import SamplerParams, distribution, top_k_confidence


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


def test_same_chain_for_draft_and_target_is_deterministic() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=1000).astype(np.float32)
    a = distribution(logits, SamplerParams())
    b = distribution(logits.copy(), SamplerParams())
    assert np.array_equal(a.ids, b.ids) and np.allclose(a.probs, b.probs)
    assert a.ids.size <= 40 and a.probs.sum() == pytest.approx(1.0)


def test_top_k_confidence_uses_top_10_softmax() -> None:
    logits = np.full(100, -10.0, dtype=np.float32)
    logits[7] = 2.0
    tok, p = top_k_confidence(logits)
    assert tok == 7
    assert p == pytest.approx(np.exp(2.0) / (np.exp(2.0) + 9 * np.exp(-10.0)))

"""The speculative sampling rule emits tokens distributed exactly as the target's p.

Statistical tests with fixed seeds: each compares an empirical distribution with p using the
total-variation distance, with a threshold that the tests' negative controls (a wrong residual,
a missing bonus token) exceed by a wide margin, so the tests have power, not just luck.
"""

from __future__ import annotations

import numpy as np
import pytest

from specgguf import acceptance
from specgguf.acceptance import Verdict, residual, verify
from specgguf.sampling import SparseDist, one_hot

V = 6
N = 40_000
TVD_OK = 0.015  # sampling noise at N=40k over 6 tokens is ~0.005


def dist(probs: np.ndarray) -> SparseDist:
    keep = probs > 0
    return SparseDist(np.flatnonzero(keep).astype(np.int64), probs[keep] / probs[keep].sum())


def dense(d: SparseDist) -> np.ndarray:
    out = np.zeros(V)
    out[d.ids] = d.probs
    return out


def random_pair(rng: np.random.Generator) -> tuple[SparseDist, SparseDist]:
    p = rng.dirichlet(np.ones(V) * 0.7)
    q = rng.dirichlet(np.ones(V) * 0.7)
    return dist(p), dist(q)


def first_token_histogram(p: SparseDist, q: SparseDist, k: int, seed: int) -> np.ndarray:
    """Draft k tokens from q (same q at every position), verify against p, count the first
    emitted token (the first proposal if accepted, else the correction)."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(V)
    for _ in range(N):
        props = [q.sample(rng) for _ in range(k)]
        v = verify(props, [q] * k, lambda _i: p, rng)
        counts[props[0] if v.n_accepted > 0 else v.token] += 1
    return counts / N


def tvd(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(a - b).sum())


@pytest.mark.parametrize("case_seed", [1, 2, 3])
@pytest.mark.parametrize("k", [1, 3])
def test_emitted_token_is_distributed_as_target(case_seed: int, k: int) -> None:
    p, q = random_pair(np.random.default_rng(case_seed))
    assert tvd(dense(p), dense(q)) > 0.2  # the pair really differs, so the rule has work to do
    assert tvd(first_token_histogram(p, q, k, seed=100 + case_seed), dense(p)) < TVD_OK


def test_negative_control_wrong_residual_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    """Resampling from p instead of max(0, p - q) must fail the same check."""
    p, q = random_pair(np.random.default_rng(1))
    monkeypatch.setattr(acceptance, "residual", lambda p_, q_: p_)
    assert tvd(first_token_histogram(p, q, 1, seed=101), dense(p)) > 3 * TVD_OK


def test_bonus_token_follows_last_target_distribution() -> None:
    """With q == p every proposal is accepted and the extra token must come from p_K."""
    rng = np.random.default_rng(7)
    p0, _ = random_pair(rng)
    p_last, _ = random_pair(rng)
    counts = np.zeros(V)
    for _ in range(N):
        props = [p0.sample(rng), p0.sample(rng)]
        v = verify(props, [p0, p0], lambda i: p0 if i < 2 else p_last, rng)
        assert v.n_accepted == 2
        counts[v.token] += 1
    assert tvd(counts / N, dense(p_last)) < TVD_OK
    # negative control: a loop that forgot the bonus and sampled p0 again would be this far off
    assert tvd(dense(p0), dense(p_last)) > 3 * TVD_OK


def test_one_hot_draft_accepts_with_probability_p_of_x() -> None:
    p = dist(np.array([0.5, 0.3, 0.2, 0, 0, 0]))
    rng = np.random.default_rng(3)
    accepted = sum(verify([1], None, lambda _i: p, rng).n_accepted for _ in range(N)) / N
    assert abs(accepted - 0.3) < 0.01


def test_one_hot_draft_residual_excludes_the_proposal() -> None:
    p = dist(np.array([0.5, 0.3, 0.2, 0, 0, 0]))
    r = residual(p, one_hot(1))
    assert r.prob(1) == 0.0
    assert r.prob(0) == pytest.approx(0.5 / 0.7)
    assert r.prob(2) == pytest.approx(0.2 / 0.7)


def test_greedy_accepts_while_equal_to_argmax() -> None:
    rows = [one_hot(4), one_hot(2), one_hot(5), one_hot(1)]
    rng = np.random.default_rng(0)
    assert verify([4, 2, 0], None, lambda i: rows[i], rng) == Verdict(2, 5)
    assert verify([4, 2, 5], None, lambda i: rows[i], rng) == Verdict(3, 1)
    assert verify([3], None, lambda i: rows[i], rng) == Verdict(0, 4)
    assert verify([], None, lambda i: rows[i], rng) == Verdict(0, 4)


def test_rows_after_a_rejection_are_never_computed() -> None:
    asked: list[int] = []

    def target(i: int) -> SparseDist:
        asked.append(i)
        return one_hot(9)

    verify([1, 2, 3], None, target, np.random.default_rng(0))
    assert asked == [0]

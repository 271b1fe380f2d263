"""The speculative sampling rule emits tokens distributed exactly as the target's p.

Statistical tests with fixed seeds: each compares an empirical distribution with p using the
total-variation distance, with a threshold that the tests' negative controls (a wrong residual,
a missing bonus token) exceed by a wide margin, so the tests have power, not just luck.
"""

from __future__ import annotations

import numpy as np
import pytest

from specgguf.core import acceptance
from specgguf.core.acceptance import Verdict, residual, verify
from specgguf.core.sampling import SparseDist, one_hot

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


# -- position-keyed randomness -----------------------------------------------------------------


def test_position_uniforms_are_deterministic_uniform_and_distinct_per_purpose():
    from specgguf.core.sampling import ACCEPT, DRAFT, SAMPLE, PositionRandom

    r = PositionRandom(42)
    xs = np.array([r.uniform(i) for i in range(50_000)])
    assert xs.min() >= 0.0 and xs.max() < 1.0
    assert abs(xs.mean() - 0.5) < 0.01 and abs(xs.var() - 1 / 12) < 0.003
    assert np.histogram(xs, bins=10, range=(0, 1))[0].min() > 4_700  # no empty corner
    assert abs(np.corrcoef(xs[:-1], xs[1:])[0, 1]) < 0.02  # neighbours independent
    assert r.uniform(7) == PositionRandom(42).uniform(7)
    assert len({r.uniform(7, s) for s in (SAMPLE, ACCEPT, DRAFT)}) == 3
    assert r.uniform(7) != PositionRandom(43).uniform(7)


def _toy_model(prefix: tuple[int, ...]) -> SparseDist:
    """A deterministic 'language model': a distribution over 6 tokens per prefix."""
    g = np.random.default_rng(hash(prefix) & 0xFFFFFFFF)
    p = g.dirichlet(np.ones(6) * 0.7)
    return SparseDist(np.arange(6, dtype=np.int64), p)


def test_one_hot_speculation_emits_exactly_the_plain_samples_whatever_is_drafted():
    from specgguf.core.sampling import PositionRandom

    rand = PositionRandom(7)
    plain: list[int] = []
    for pos in range(60):
        plain.append(_toy_model(tuple(plain)).sample_at(rand.uniform(pos)))
    chooser = np.random.default_rng(1)
    for _trial in range(20):
        seq: list[int] = []
        while len(seq) < 60:
            k = int(chooser.integers(0, 6))
            # proposals: sometimes the plain sample (a good drafter), sometimes a guess
            props = [
                plain[len(seq) + i] if chooser.random() < 0.6 else int(chooser.integers(0, 6))
                for i in range(min(k, 59 - len(seq)))
            ]
            base = len(seq)

            def p_at(i, prefix=tuple(seq), props=props):
                return _toy_model(prefix + tuple(props[:i]))

            v = verify(props, None, p_at, lambda i, s, base=base: rand.uniform(base + i, s))
            seq += [*props[: v.n_accepted], v.token]
        assert seq[:60] == plain

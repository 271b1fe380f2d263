"""adaptive-p: the transform on small vectors (numbers worked out by hand from its definition),
its place at the end of the chain, its average of the chosen tokens' probabilities, and
exactness under speculation (the average follows the drafted tokens row by row)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specgguf.core import chain_state
from specgguf.core.chain_state import ChainState
from specgguf.core.samplers import adaptive_p
from specgguf.core.sampling import SamplerParams, adaptive_after, adaptive_start, distribution
from specgguf.io import sampler_table
from tests.test_chain_speculation import Replay
from tests.test_loop_toy import PROMPT, NoisyOracle, run


def softmax(x):
    e = np.exp(np.asarray(x) - max(x))
    return e / e.sum()


def test_the_transform_by_hand():
    """p = (0.5, 0.3, 0.2), target 0.3 and a history at the target: distances from 0.3 in
    widths of 0.3 are 2/3, 0, 1/3; logits 5 - 10 d^2 / (1 + d) = 7/3, 5, 25/6."""
    got = adaptive_p(np.array([0.5, 0.3, 0.2]), 0.3, 0.3 / 0.1, 1 / 0.1)
    assert np.allclose(got, softmax([7 / 3, 5.0, 25 / 6]))
    # chosen tokens averaged 0.5 so far: the aim moves to 2 * 0.3 - 0.5 = 0.1, near 0.2
    moved = adaptive_p(np.array([0.5, 0.3, 0.2]), 0.3, 5.0, 10.0)
    assert int(np.argmax(moved)) == 2
    # the aim stays in [0, 1]: an average of 0.9 against 0.3 aims at 0, the least likely
    assert int(np.argmax(adaptive_p(np.array([0.5, 0.3, 0.2]), 0.3, 9.0, 10.0))) == 2


def test_the_history_is_an_exponential_average():
    params = SamplerParams(adaptive_target=0.4, adaptive_decay=0.5, samplers=("adaptive_p",))
    h = adaptive_start(params)
    assert h == pytest.approx((0.8, 2.0))  # as if every earlier token had had p = 0.4
    h = adaptive_after(h, 0.9, params)
    assert h == pytest.approx((0.9 + 0.5 * 0.8, 1 + 0.5 * 2.0))


def test_it_runs_last_and_only_where_listed():
    logits = np.array([3.0, 2.0, 1.0, 0.0, -1.0])
    plain = SamplerParams(temp=1.0, top_k=0, top_p=1.0, min_p=0.05)
    listed = SamplerParams(temp=1.0, top_k=0, top_p=1.0, min_p=0.05, adaptive_target=0.2,
                           samplers=("adaptive_p", "min_p", "temperature"))  # fmt: skip
    before = distribution(logits, plain)
    got = distribution(logits, listed)
    assert np.allclose(got.pre, before.probs)  # min-p and temperature first, then adaptive-p
    start = adaptive_start(listed)
    assert np.allclose(got.probs, adaptive_p(before.probs, 0.2, *start))
    off = SamplerParams(temp=1.0, top_k=0, top_p=1.0, min_p=0.05, samplers=("adaptive_p",))
    assert off.adaptive_target < 0 and not off.adapts  # listed, target < 0: a plain draw


def test_the_flag_without_the_stage_is_refused():
    with pytest.raises(sampler_table.SettingError, match="adaptive_p is in --samplers"):
        sampler_table.from_flags({"adaptive_target": 0.3})
    got = sampler_table.from_flags({"adaptive_target": 0.3, "sampling_seq": "ma"})
    assert got["samplers"] == ("min_p", "adaptive_p")
    with pytest.raises(sampler_table.SettingError):
        sampler_table.from_request({"adaptive_decay": 1.0})


ADAPTIVE = SamplerParams(temp=1.0, top_k=0, top_p=1.0, min_p=0.02, adaptive_target=0.25,
                         adaptive_decay=0.6,
                         samplers=("min_p", "temperature", "adaptive_p"))  # fmt: skip


def test_seeded_sampling_with_one_hot_drafts_equals_plain():
    for seed in (3, 4):
        plain, _ = run([], PROMPT, 50, sampler=ADAPTIVE, seed=seed)
        assert plain != run([], PROMPT, 50, sampler=SamplerParams(
            temp=1.0, top_k=0, top_p=1.0, min_p=0.02), seed=seed)[0]  # fmt: skip
        for drafter in (Replay(plain, 5), NoisyOracle(0.4, 4)):
            assert run([drafter], PROMPT, 50, sampler=ADAPTIVE, seed=seed)[0] == plain


def test_a_row_after_drafted_tokens_has_their_history():
    logits = [np.linspace(1, -1, 8) * (i + 1) for i in range(4)]
    chain = ChainState(ADAPTIVE, [1, 2, 3], None)
    dists = {i: distribution(logits[i], ADAPTIVE, None) for i in range(4)}
    rows = chain.round([0, 1, 2], [-1, 0, 1], 3)
    h = adaptive_start(ADAPTIVE)
    for r in range(1, 4):
        h = adaptive_after(h, dists[r - 1].pre_prob(r - 1), ADAPTIVE)
        assert rows.state(r, dists.__getitem__).adaptive == pytest.approx(h)
    assert math.isclose(rows.state(0, dists.__getitem__).adaptive[0], adaptive_start(ADAPTIVE)[0])


def test_a_mutant_whose_rows_ignore_the_drafted_prefix_is_caught(monkeypatch):
    real = chain_state.RoundRows.state
    monkeypatch.setattr(chain_state.RoundRows, "state", lambda self, r, d: real(self, 0, d))
    with pytest.raises(AssertionError):
        test_seeded_sampling_with_one_hot_drafts_equals_plain()

"""auto in a shared pass (-np > 1): a slot's draft is priced at what its tokens add to the pass
the other slots' rows are already in (cost_model.at_width), and a shared round's times are
not cost samples. Pure: no model."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from specgguf.auto.cost_model import Costs, at_width, best_k
from specgguf.auto.policy import AdaptivePolicy
from specgguf.core.rounds import Round

#: a GPU-like curve: a pass over up to 16 tokens costs about one step, then each token ~1 more
KNEE = 16
FLAT = tuple(1.0 + 0.01 * k if k < KNEE else 1.15 + (k - KNEE + 1) for k in range(64))


def test_alone_the_costs_are_unchanged():
    c = Costs(verify=FLAT, draft=0.1)
    assert at_width(c, 0) is c


def test_a_linear_curve_prices_a_draft_the_same_in_any_batch():
    """A CPU: each token costs one more step, so the marginal cost of k drafts is k, as alone."""
    linear = Costs(verify=tuple(1.0 + k for k in range(20)), draft=0.1)
    for others in (1, 5, 30):
        assert at_width(linear, others).verify == pytest.approx(linear.verify)


def test_drafts_pay_in_a_narrow_batch_and_stop_in_a_wide_one():
    c = Costs(verify=FLAT, draft=0.05)
    acceptance = 0.6
    k_alone, _ = best_k(c, acceptance, 8)
    k_narrow, _ = best_k(at_width(c, 3), acceptance, 8)
    k_wide, s_wide = best_k(at_width(c, 40), acceptance, 8)
    assert k_alone >= 4 and k_narrow >= 4  # below the knee drafts are nearly free
    assert (k_wide, s_wide) == (0, 1.0)  # past it they slow the whole pass: no draft
    straddling = at_width(c, KNEE - 3)  # 2 drafts still fit under the knee, a third does not
    assert straddling.verify[2] == pytest.approx(1.02)
    assert straddling.verify[3] > 1.9


@dataclass
class _Pass:
    others: int = 0


def test_the_policy_prices_by_the_pass_it_shares():
    policy = AdaptivePolicy(n_max_cap=4)
    for k, ms in enumerate(FLAT[:8]):
        for _ in range(4):
            policy.cost.add_verify(k, 10.0 * ms)
    policy.cost.changed()
    alone = policy.costs("d")
    shared = _Pass(others=40)
    policy.shared_pass = shared
    assert policy.costs("d").verify == pytest.approx(at_width(alone, 40).verify)
    shared.others = 0  # the pass is read each time, not once
    assert policy.costs("d").verify == pytest.approx(alone.verify)


def test_a_shared_round_is_no_cost_sample():
    policy = AdaptivePolicy(n_max_cap=4)
    policy.shared_pass = _Pass(others=5)
    for _ in range(4):  # (the first round follows the prompt: never a sample)
        policy.observe(Round(None, [], 0, [7], 0.0, 50.0))
    assert policy.cost.known_curve() == {}
    policy.shared_pass.others = 0
    policy.observe(Round(None, [], 0, [7], 0.0, 10.0))
    assert 0 in policy.cost.known_curve()  # alone: learned

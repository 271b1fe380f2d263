"""auto in a shared pass (-np > 1): a slot's draft is priced as if every sequence of the pass
drafted alike (cost_model.in_shared_pass), and a shared round's times are not cost samples.
Pure: no model."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from specgguf.auto.cost_model import Costs, best_k, in_shared_pass
from specgguf.auto.policy import AdaptivePolicy
from specgguf.core.rounds import Round

#: a GPU-like curve: a pass over up to 16 tokens costs about one step, then each token ~1 more
KNEE = 16
FLAT = tuple(1.0 + 0.01 * k if k < KNEE else 1.15 + (k - KNEE + 1) for k in range(64))
#: the F16 target on 2 CPU cores (measured): a pass over 1 + k tokens
F16 = (1.0, 1.30, 1.45, 1.55, 1.58, 1.85, 2.15, 2.3, 2.5)


def test_alone_the_costs_are_unchanged():
    c = Costs(verify=FLAT, draft=0.1)
    assert in_shared_pass(c, 0) is c


def test_the_pass_is_priced_as_every_sequence_drafting_alike():
    """Four sequences with k proposals each: a pass over 4 * (1 + k) rows, in units of the
    shared plain step (a pass over 4 rows)."""
    c = Costs(verify=FLAT, draft=0.1)
    shared = in_shared_pass(c, 3)
    for k in range(8):
        assert shared.verify[k] == pytest.approx(c.verify_cost(4 * (1 + k) - 1) / c.verify[3])


def test_drafts_pay_in_a_narrow_batch_and_stop_in_a_wide_one():
    c = Costs(verify=FLAT, draft=0.05)
    acceptance = 0.8
    k_alone, _ = best_k(c, acceptance, 8)
    k_two, _ = best_k(in_shared_pass(c, 1), acceptance, 8)
    k_wide, s_wide = best_k(in_shared_pass(c, 15), acceptance, 8)
    assert k_alone >= 4 and k_two >= 4  # 2 x 8 rows fit under the knee: drafts nearly free
    assert (k_wide, s_wide) == (0, 1.0)  # 16 sequences fill the knee already: no draft


def test_a_cpu_curve_drafts_less_and_less_as_the_batch_grows():
    """The measured F16 curve: alone a draft model pays at k 4 or more; four slots drafting
    together would widen every pass, so at most one token each; eight, none."""
    c = Costs(verify=F16, draft=0.25)
    assert best_k(c, 0.85, 8, margin=0.05)[0] >= 4
    assert best_k(in_shared_pass(c, 3), 0.85, 8, margin=0.05)[0] <= 1
    assert best_k(in_shared_pass(c, 7), 0.85, 8, margin=0.05)[0] == 0


@dataclass
class _Pass:
    peers: int = 0
    draft_cost: float | None = None  # what the server measured (None: not yet)

    def draft_pass_cost(self) -> float | None:
        return self.draft_cost


def test_the_policy_prices_by_the_pass_it_shares():
    policy = AdaptivePolicy(n_max_cap=4)
    for k, ms in enumerate(FLAT[:8]):
        for _ in range(4):
            policy.cost.add_verify(k, 10.0 * ms)
    policy.cost.changed()
    alone = policy.costs("d")
    shared = _Pass(peers=7)
    policy.shared_pass = shared
    assert policy.costs("d").verify == pytest.approx(in_shared_pass(alone, 7).verify)
    shared.peers = 0  # the pass is read each time, not once
    assert policy.costs("d").verify == pytest.approx(alone.verify)


def test_a_shared_round_is_no_cost_sample():
    policy = AdaptivePolicy(n_max_cap=4)
    policy.shared_pass = _Pass(peers=2)
    for _ in range(4):  # (the first round follows the prompt: never a sample)
        policy.observe(Round(None, [], 0, [7], 0.0, 50.0))
    assert policy.cost.known_curve() == {}
    policy.shared_pass.peers = 0
    policy.observe(Round(None, [], 0, [7], 0.0, 10.0))
    assert 0 in policy.cost.known_curve()  # alone: learned


def test_a_measured_draft_pass_replaces_the_solo_draft_cost():
    """Where the server has timed a draft pass over the shared width, that is the draft's
    cost in the shared pass; until then the draft is assumed to widen as the target does."""
    c = Costs(verify=F16, draft=0.21)
    assert in_shared_pass(c, 3).draft == 0.21
    assert in_shared_pass(c, 3, draft=0.55).draft == 0.55
    assert in_shared_pass(c, 3, draft=0.55).verify == in_shared_pass(c, 3).verify


def test_a_compute_bound_draft_beside_a_weight_bound_target_stops_in_a_batch():
    """The F16 target's pass over four rows costs about one over one row, the 0.5B Q4 draft's
    about 2.7 of its own: at 0.21 alone it pays for two slots, at the measured 0.55 it does
    not for four."""
    c = Costs(verify=F16, draft=0.21)
    assert best_k(in_shared_pass(c, 1), 0.85, 8, margin=0.05)[0] >= 1
    assert best_k(in_shared_pass(c, 3, draft=0.55), 0.85, 8, margin=0.05)[0] == 0


def test_the_policy_prices_a_model_drafter_by_the_measured_pass_and_an_ngram_not():
    policy = AdaptivePolicy(n_max_cap=4)
    for k, ms in enumerate(F16):
        for _ in range(4):
            policy.cost.add_verify(k, 100.0 * ms)
    policy.cost.changed()
    policy.shared_pass = _Pass(peers=3, draft_cost=0.6)
    assert policy.costs("draft-simple").draft == 0.6
    policy.shared_pass.draft_cost = None  # not measured yet: the solo cost
    assert policy.costs("draft-simple").draft == 1.0  # (unmeasured alone: as dear as the target)
    policy.attach([_Lookup()])
    policy.shared_pass.draft_cost = 0.6
    assert policy.costs("ngram-simple").draft == 0.0  # a lookup is no draft-model pass


@dataclass
class _Lookup:
    name: str = "ngram-simple"
    free: bool = True
    max_draft: int = 16

"""`--spec-draft-n-max auto`: the cost model's decisions on synthetic costs and acceptance
(pure, no model), then the policy inside the real loop on the tiny models (lossless)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from specgguf.auto.acceptance_estimator import AcceptanceSettings
from specgguf.auto.cost_model import (
    Costs,
    best_k,
    expected_tokens,
    speedups,
    worth_continuing,
)
from specgguf.auto.policy import AdaptivePolicy
from specgguf.auto.probes import ProbeScheduler, ProbeSettings
from specgguf.core.draft import Draft, Drafter

# the 1.5B target's k-token pass relative to 1 token, measured on a 2-core CPU
CPU_CURVE = (1.0, 1.5, 1.8, 1.6, 2.0, 2.15, 2.3, 2.55, 2.8)
FLAT_CURVE = tuple(1.0 + 0.03 * k for k in range(9))  # a memory-bound GPU


# -- pure functions ----------------------------------------------------------------------------


def test_expected_tokens_matches_closed_form():
    for a in (0.0, 0.3, 0.6, 0.9):
        for k in range(6):
            assert expected_tokens(a, k) == pytest.approx((1 - a ** (k + 1)) / (1 - a))
    assert expected_tokens(1.0, 4) == 5.0
    # per position: 1 + a1 + a1*a2 + ...; a short list repeats its last value
    assert expected_tokens([0.5, 0.5, 1.0], 3) == pytest.approx(1 + 0.5 + 0.25 + 0.25)
    assert expected_tokens([0.8], 2) == pytest.approx(1 + 0.8 + 0.64)
    assert expected_tokens(0.7, 0) == 1.0


def test_costs_extrapolate_past_the_measured_curve():
    c = Costs(verify=(1.0, 1.5, 2.0), draft=0.5)
    assert c.verify_cost(2) == 2.0
    assert c.verify_cost(4) == pytest.approx(3.0)  # average slope 0.5 per token
    assert c.round_cost(0) == 1.0  # a plain step drafts nothing
    assert c.round_cost(2) == pytest.approx(0.5 * 2 + 2.0)
    assert Costs(verify=(1.0,)).verify_cost(3) == 4.0  # nothing measured: a full step each


@pytest.mark.parametrize("verify", [tuple(1.0 + 0.5 * k for k in range(9)), CPU_CURVE])
def test_expensive_drafts_at_moderate_acceptance_do_not_speculate(verify):
    # the example: draft step 0.5, a 2-token pass 1.5, acceptance 0.6 -> plain decoding
    k, s = best_k(Costs(verify=verify, draft=0.5), 0.6, 8)
    assert (k, s) == (0, 1.0)
    assert all(x < 1.0 for x in speedups(Costs(verify=verify, draft=0.5), 0.6, 8)[1:])


def test_verify_cost_of_one_and_a_half_per_extra_token_never_pays():
    assert best_k(Costs(verify=tuple(1.0 + 1.5 * k for k in range(9)), draft=0.5), 0.6, 8)[0] == 0


def test_free_drafts_and_high_acceptance_draft_long():
    k, s = best_k(Costs(verify=CPU_CURVE, draft=0.0), 0.9, 8)
    assert k >= 6 and s > 2.0
    k, s = best_k(Costs(verify=FLAT_CURVE, draft=0.0), 0.9, 8)
    assert k == 8 and s > 4.0
    # a cheap draft model on a GPU: long drafts too
    assert best_k(Costs(verify=FLAT_CURVE, draft=0.1), 0.9, 8)[0] >= 6


def test_best_k_follows_acceptance_and_margin():
    costs = Costs(verify=CPU_CURVE, draft=0.5)
    ks = [best_k(costs, a, 8)[0] for a in (0.5, 0.8, 0.95, 0.99)]
    assert ks[0] == 0 and ks[-1] > 0
    assert ks == sorted(ks)  # more acceptance never means shorter drafts here
    k, s = best_k(costs, 0.99, 8)
    assert best_k(costs, 0.99, 8, margin=s - 1.0 + 0.01) == (0, 1.0)  # margin: not worth it
    assert best_k(costs, 0.99, 0) == (0, 1.0)  # n_max 0: nothing to choose


def test_empty_attempts_lower_the_expected_speedup():
    costs = Costs(verify=FLAT_CURVE, draft=0.2)
    s0 = best_k(costs, 0.9, 8)[1]
    s1 = best_k(costs, 0.9, 8, p_empty=0.5)[1]
    assert s1 < s0


def test_continue_drafting_stops_at_low_confidence_when_drafts_are_expensive():
    expensive = Costs(verify=CPU_CURVE, draft=0.5)
    cheap = Costs(verify=FLAT_CURVE, draft=0.02)
    kw = dict(p_reach=0.8, future=0.8, n_max=6)
    assert not worth_continuing(expensive, 1, a_next=0.2, **kw)
    assert worth_continuing(cheap, 1, a_next=0.2, **kw)
    assert worth_continuing(expensive, 1, a_next=0.99, p_reach=1.0, future=0.99, n_max=6)
    # never past n_max
    assert not worth_continuing(cheap, 6, a_next=1.0, p_reach=1.0, future=1.0, n_max=6)
    # the last allowed token needs no further draft decode: only its verify width counts
    assert worth_continuing(
        Costs(verify=FLAT_CURVE, draft=5.0), 5, a_next=0.9, p_reach=1.0, future=0.9, n_max=6
    )


# -- the policy on synthetic rounds ------------------------------------------------------------


@dataclass
class FakeRound:
    drafter: str | None
    proposed: list[int]
    n_accepted: int
    emitted: list[int]
    draft_ms: float
    verify_ms: float


@dataclass
class FakeDrafter:
    """A model drafter as AdaptivePolicy.attach sees it: it times its own proposals."""

    name: str = "draft-simple"
    max_draft: int = 8
    asks_per_token: bool = True
    timing: object | None = None


@dataclass
class Sim:
    """A speculative loop without a model: verify and draft times and acceptance are given."""

    verify: tuple[float, ...]  # relative, as CPU_CURVE
    draft: float  # relative per draft step
    acceptance: float
    step_ms: float = 70.0
    gated: bool = False
    confidence: float = 0.8
    seed: int = 0
    catch_up: float = 0.0  # relative cost per extra token the draft catches up on
    ks: list[int] = field(default_factory=list)

    def run(self, policy: AdaptivePolicy, rounds: int, drafter: FakeDrafter | None = None):
        from specgguf.core.draft import DraftTiming

        rng = random.Random(self.seed)
        d = drafter or FakeDrafter()
        policy.attach([d])
        tokens, ms = 0, 0.0
        pending = 1  # tokens the draft has not seen (the real drafter's catch-up)
        for _ in range(rounds):
            k = min(policy.budget(10_000), d.max_draft, policy.allowance(d.name))
            proposed, stopped = 0, False
            for pos in range(k):
                if self.gated and not policy.continue_drafting(d.name, pos, self.confidence):
                    stopped = True
                    break
                proposed += 1
            n_acc = 0
            while n_acc < proposed and rng.random() < self.acceptance:
                n_acc += 1
            v = self.verify[proposed] * self.step_ms
            dr = self.draft * (proposed + stopped) * self.step_ms
            if proposed or stopped:
                # as DraftModelDrafter times itself: its first decode catches up on the
                # `pending` tokens it has not seen, then one decode per further token
                decodes = proposed + stopped
                first = (self.draft + self.catch_up * (pending - 1)) * self.step_ms
                steps = self.draft * (decodes - 1) * self.step_ms
                d.timing = DraftTiming(first, pending, steps, decodes - 1, proposed)
                dr += self.catch_up * (pending - 1) * self.step_ms
                pending = 1
            else:
                pending += n_acc + 1
            policy.observe(
                FakeRound(
                    d.name if proposed else None,
                    [1] * proposed,
                    n_acc,
                    [0] * (n_acc + 1),
                    dr,
                    v,
                )
            )
            self.ks.append(proposed)
            tokens += n_acc + 1
            ms += v + dr
        return tokens / ms * self.step_ms  # speedup over plain decoding


def test_first_rounds_probe_instead_of_assuming_costs():
    policy = AdaptivePolicy(n_max_cap=8)
    policy.attach([FakeDrafter()])
    assert policy.budget(100) == 0  # nothing measured: the first round is a plain step
    sim = Sim(FLAT_CURVE, 0.1, 0.6)
    sim.run(policy, 6)
    assert policy.chosen[:6] == [0, 0, 1, 2, 3, 4]  # then 1, 2, 3, 4: measure each width
    assert policy.budget(2) <= 2  # never more than the loop allows


def test_policy_does_not_speculate_where_it_does_not_pay():
    policy = AdaptivePolicy(n_max_cap=8)
    speedup = Sim(CPU_CURVE, 0.5, 0.6).run(policy, 300)
    tail = policy.chosen[100:]
    assert tail.count(0) / len(tail) > 0.85  # plain decoding but for the probes
    assert speedup > 0.9  # close to plain: probing costs little
    summary = policy.summary()
    assert summary["drafters"]["draft-simple"]["best_k"] == 0
    assert summary["verify_cost_rel"]["1"] == pytest.approx(1.5, rel=0.01)


def test_policy_drafts_long_with_cheap_drafts_and_high_acceptance():
    policy = AdaptivePolicy(n_max_cap=8)
    speedup = Sim(FLAT_CURVE, 0.02, 0.95).run(policy, 300)
    assert sum(policy.chosen[150:]) / 150 > 6  # grew past the initial probes to long drafts
    assert speedup > 3.0


def test_policy_probes_after_runs_of_plain_steps_at_growing_intervals():
    probes = ProbeSettings(gap=4, gap_max=32, burst_rounds=2, budget=1.0)
    policy = AdaptivePolicy(n_max_cap=4, probes=probes, optimism=1.0)
    Sim(FLAT_CURVE, 0.3, 0.0).run(policy, 400)  # nothing is ever accepted
    chosen = policy.chosen[6:]  # after the initial probes
    starts = [i for i in range(1, len(chosen)) if chosen[i] > 0 and chosen[i - 1] == 0]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert len(starts) >= 6  # it keeps checking
    assert gaps == sorted(gaps)  # ... less and less often
    assert gaps[-1] <= 32 + 2 + 1  # ... but at least every gap_max rounds
    assert all(chosen[i + 1] > 0 for i in starts)  # a probe is a short burst, not one round


def test_exploration_stays_within_its_budget_when_probes_are_dear():
    # this CPU: the draft model does not pay, and resuming it after a skipped run means a
    # catch-up batch at ~0.12 target steps per token (measured here). Probing it again would
    # cost more than the exploration budget: auto stays at plain decoding after its probes.
    policy = AdaptivePolicy(n_max_cap=4)
    d = FakeDrafter(max_draft=4)
    policy.attach([d])
    speedup = Sim(CPU_CURVE, 0.5, 0.6, gated=True, catch_up=0.12).run(policy, 1000, d)
    s = policy.summary()
    assert s["explore_cost_steps"] <= 0.05 * 1000
    assert speedup > 0.95
    # n-gram lookup has nothing to catch up on and costs nothing: where it does not pay
    # (acceptance 0.3) it keeps being probed, as its old evidence fades, within the budget
    ngram = AdaptivePolicy(n_max_cap=4)
    nd = type("Ngram", (), {"name": "ngram-simple", "max_draft": 4, "timing": None})()
    ngram.attach([nd])
    speedup = Sim(CPU_CURVE, 0.0, 0.3).run(ngram, 1000, nd)
    assert ngram.probes > s["probes"] + 10
    assert ngram.summary()["explore_cost_steps"] <= 0.05 * 1000 + 5
    assert speedup > 0.9


def test_policy_notices_when_speculation_starts_paying():
    policy = AdaptivePolicy(n_max_cap=8)
    Sim(FLAT_CURVE, 0.3, 0.05, seed=1).run(policy, 200)
    assert policy.chosen[-30:].count(0) >= 22  # plain steps, but for the probes
    sim = Sim(FLAT_CURVE, 0.3, 0.97, seed=2)
    sim.run(policy, 200)
    resumed = next(i for i, k in enumerate(sim.ks) if k > 0)
    assert resumed <= 70  # found by a probe, not by chance
    assert sum(policy.chosen[-50:]) / 50 > 5


def test_per_position_acceptance_decays_to_recent_rounds():
    policy = AdaptivePolicy(n_max_cap=4)
    for _ in range(60):
        policy.observe(FakeRound("d", [1, 2, 3], 3, [1, 2, 3, 4], 1.0, 10.0))
    assert policy.acceptance("d")[0] > 0.95
    for _ in range(60):
        policy.observe(FakeRound("d", [1, 2, 3], 0, [5], 1.0, 10.0))
    acc = policy.acceptance("d")
    assert acc[0] < 0.2  # recent rejections dominate
    # positions 1, 2 were not reached in the recent rounds: old evidence fades towards the
    # previous position, it is not frozen at 1.0
    assert acc[1] < 0.9
    # a long run of plain steps: every count decays, the estimate goes back to the prior
    for _ in range(300):
        policy.observe(FakeRound(None, [], 0, [7], 0.0, 10.0))
    assert policy.acceptance("d")[0] == pytest.approx(policy.accept.settings.prior, abs=0.05)


def test_confidence_is_calibrated_online():
    policy = AdaptivePolicy(n_max_cap=2, acceptance=AcceptanceSettings(decay=1.0))
    assert policy.calibrated("d", 0.35) == pytest.approx(0.35)  # no data: trust the confidence
    d = FakeDrafter("d", max_draft=2)
    policy.attach([d])
    for _ in range(300):  # first tokens drafted at confidence 0.35 are always rejected
        k = min(policy.budget(100), d.max_draft, policy.allowance("d"))
        proposed = 0
        for pos in range(k):
            if not policy.continue_drafting("d", pos, 0.35 if pos == 0 else 0.95):
                break
            proposed += 1
        policy.observe(FakeRound("d" if proposed else None, [1] * proposed, 0, [2], 1.0, 10.0))
    assert policy.calibrated("d", 0.35) < 0.15
    assert policy.calibrated("d", 0.95) == pytest.approx(0.95)  # never reached: no evidence


def measured_policy(draft_rel: float, curve: tuple[float, ...], acc: float) -> AdaptivePolicy:
    policy = AdaptivePolicy(n_max_cap=6)
    d = FakeDrafter(max_draft=6)
    policy.attach([d])
    Sim(curve, draft_rel, acc, gated=True, confidence=0.9).run(policy, 80, d)
    return policy


def test_policy_continue_drafting_depends_on_cost_and_confidence():
    expensive = measured_policy(0.5, CPU_CURVE, 0.97)
    cheap = measured_policy(0.02, FLAT_CURVE, 0.97)
    for policy in (expensive, cheap):
        policy.schedule._ladder = []
        k = policy.budget(100)
        assert k >= 2, policy.summary()
        assert policy.continue_drafting("draft-simple", 0, 0.95)
    # position 1, unsure: the expensive draft stops, the cheap one keeps going
    assert not expensive.continue_drafting("draft-simple", 1, 0.3)
    assert cheap.continue_drafting("draft-simple", 1, 0.3)
    # ... unless a wrong guess is near certain: then the long drafts the cheap one makes
    # (worth several plain steps each) are better spent elsewhere
    assert not cheap.continue_drafting("draft-simple", 2, 0.01)


def test_the_gate_prices_a_draft_token_at_the_throughput_rounds_really_reach():
    """continue_drafting weighs a token's expected gain against its cost at the rate a unit
    of cost already buys. That rate is the measured one (tokens per step of the last rounds),
    not the plan's expected speedup: the plan is computed from the acceptance of the tokens
    the gate let through, the confident ones, and runs ahead of what rounds bring; a gate
    priced at it stopped drafts that would pay (on a GPU: a round that drafted one token and
    went plain, auto at 0.74 of a fixed length)."""
    policy = measured_policy(0.18, FLAT_CURVE, 0.97)
    policy.schedule._ladder = []
    assert policy.budget(100) >= 2
    plan = policy._plans["draft-simple"]
    assert plan.speedup > 2.0  # what the acceptance of confident tokens promises
    # rounds that in fact bring 1.3 tokens a step: a 45%-likely first token is worth its
    # step of the draft and its row of the pass
    policy._rate_tokens, policy._rate_steps = 13.0, 10.0
    assert policy.realized_rate() == pytest.approx(1.3)
    calibrated = policy.calibrated("draft-simple", 0.45)
    assert policy.continue_drafting("draft-simple", 0, 0.45), calibrated
    # rounds that bring 2.5 tokens a step: that same token is not worth it
    policy._rate_tokens, policy._rate_steps = 25.0, 10.0
    assert not policy.continue_drafting("draft-simple", 0, 0.45)
    # the rate is learned from the rounds' own timings, never below a plain step's
    fresh = AdaptivePolicy(n_max_cap=6)
    assert fresh.realized_rate() == 1.0
    fresh._learn_rate(1, 3.0)
    assert fresh.realized_rate() == 1.0


def test_an_unread_prompt_is_priced_as_one_batch_on_the_draft_model():
    """Until a catch-up has been timed, reading n tokens on the draft model costs one draft
    step scaled as the target's pass over n tokens is (the likely curve, extrapolated): a
    400-token prompt costs a GPU's draft model a few of its steps. Priced per token at half a
    step, a long prompt kept a draft model that pays x2 off for the whole answer."""
    d = Behind(lag=401)
    policy = AdaptivePolicy(n_max_cap=8)
    policy.attach([d])
    for k, rel in enumerate(FLAT_CURVE[:5]):
        policy.cost.add_verify(k, 10.0 * rel)
    policy.cost.add_draft("draft-simple", 0.0)  # (a drafter's first step is warm-up)
    policy.cost.add_draft("draft-simple", 2.0)  # 0.2 of a target step
    policy._cache.clear()
    batch = policy.catch_up_cost("draft-simple", 400)
    assert batch == pytest.approx(0.2 * (1.0 + 0.03 * 399), rel=0.05)
    assert batch < 0.05 * 400  # far below the old half a step per token (0.1 * 400)
    plan = _plan_for_tests(4, 2.0)
    assert policy._repays_catch_up(d.name, plan, 64)  # 32 steps saved against ~2.6
    # once a catch-up is timed, its measured per-token cost prices the next one
    policy.cost.add_catch_up("draft-simple", 0.01)
    assert policy.catch_up_cost("draft-simple", 400) == pytest.approx(4.0)
    assert policy.catch_up_cost("draft-simple", 0) == 0.0


def _plan_for_tests(k: int, speedup: float):
    from specgguf.auto.policy import _Plan

    return _Plan(k, speedup, probe=False)


def test_attach_gives_per_drafter_budgets_without_touching_the_drafters():
    model = FakeDrafter("draft-simple", 3)
    ngram = type(
        "Ngram", (), {"name": "ngram-simple", "max_draft": 48, "free": True, "timing": None}
    )()
    before = (dict(vars(model)), dict(vars(ngram)))
    policy = AdaptivePolicy(n_max_cap=8)
    policy.attach([ngram, model])
    assert policy.budget(100) == 0 and policy.allowance("draft-simple") == 0
    assert policy.allowance("ngram-simple") == 0
    assert policy.budget(100) == 0
    assert policy.budget(100) == 1
    assert policy.allowance("draft-simple") == 1 and policy.allowance("ngram-simple") == 1
    assert policy.allowance("not-attached") == 0 or policy.allowance("not-attached") > 1000
    policy.detach()
    assert (dict(vars(model)), dict(vars(ngram))) == before  # nothing written to a drafter
    assert policy.gate("draft-simple")(0, 0.9) in (True, False)


def test_draft_cost_ignores_catch_up_after_skipped_rounds():
    # a draft model that does not pay is skipped for runs of rounds; the round that resumes
    # it catches up on everything emitted meanwhile: that batch is measured apart (per
    # token), it is not the cost of a draft step
    policy = AdaptivePolicy(n_max_cap=8)
    d = FakeDrafter(max_draft=8)
    policy.attach([d])
    Sim(FLAT_CURVE, 0.1, 0.05, gated=True, catch_up=0.04).run(policy, 600, d)
    s = policy.summary()
    assert s["probes"] > 20  # resumed many times
    assert s["drafters"]["draft-simple"]["draft_cost_rel"] == pytest.approx(0.1, rel=0.1)
    assert policy.catch_up_cost("draft-simple", 10) == pytest.approx(0.4, rel=0.2)


def test_one_policy_can_serve_several_prompts():
    policy = AdaptivePolicy(n_max_cap=8)
    Sim(FLAT_CURVE, 0.02, 0.95).run(policy, 60)
    learned = policy.acceptance("draft-simple")
    policy.new_sequence()
    assert policy.acceptance("draft-simple") == learned
    policy.attach([FakeDrafter()])
    assert policy.budget(100) > 0  # no second round of initial probes: it drafts at once


def test_summary_reports_choices_costs_and_acceptance():
    policy = AdaptivePolicy(n_max_cap=8)
    Sim(CPU_CURVE, 0.5, 0.7).run(policy, 50)
    s = policy.summary()
    assert s["rounds"] == 50 == sum(s["chosen_k"].values())
    assert s["target_step_ms"] == pytest.approx(70.0)
    d = s["drafters"]["draft-simple"]
    assert d["draft_cost_rel"] == pytest.approx(0.5, rel=0.01)
    assert len(d["acceptance"]) == 8
    assert policy.report_lines()[0].startswith("auto: 50 rounds")


# -- in the real loop (tiny models) ------------------------------------------------------------


def test_auto_is_lossless_and_records_its_choices(tiny_target, tiny_draft):
    from specgguf.loading.session import LoadOptions, Session, SpecOptions
    from tests.test_speculative_tiny import greedy_under_auto

    load = LoadOptions(
        model=tiny_target, model_draft=tiny_draft, n_ctx=512, threads=1, flash_attn="off"
    )
    plain = Session(load, SpecOptions(types=[]))
    spec = Session(load, SpecOptions(types=["ngram-simple", "draft-simple"], n_max=8))
    try:
        for prompt in ["the cat sat on", "def main():\n    return"]:
            dec, policy = greedy_under_auto(plain, spec, prompt)
            assert len(policy.chosen) == dec.stats.rounds + dec.stats.plain_steps
            # the initial probes (a width nobody drafted for is tried again the next round),
            # in order; they may stop early where every drafter was found hopeless on the way
            # (the tiny models' timed costs decide that, so it depends on the machine's load)
            ch = policy.chosen[:12]
            ladder = [k for i, k in enumerate(ch) if ch[i - 1 : i] != [k]]
            if ladder[:5] != [0, 1, 2, 3, 4]:
                stop = next(i for i, k in enumerate(ladder) if k != i)
                assert stop >= 3 and ladder[:stop] == list(range(stop)), ladder
            assert dec.stats.n_drafted > 0
            assert all(d.max_draft in (8, 48) for d in dec.drafters)  # restored
            assert policy.summary()["rounds"] == len(policy.chosen)
    finally:
        spec.close()
        plain.close()


# -- cost ceilings, shadow drafts, self-timed drafters -----------------------------------------

# bench on the 2-core development machine: a pass over n tokens relative to one token
STEEP_CPU = (1.0, 1.57, 2.07, 2.58, 3.15, 3.59, 4.19, 6.02, 6.49)


def test_a_draft_that_cannot_pay_even_at_full_acceptance_is_dropped_for_good():
    # 0.5B draft at half a target step on this CPU: even 100% acceptance loses to plain
    # decoding, so after measuring that, auto never drafts again whatever the acceptance
    policy = AdaptivePolicy(n_max_cap=8)
    d = FakeDrafter(max_draft=8)
    policy.attach([d])
    sim = Sim(STEEP_CPU, 0.48, 0.98, gated=True, confidence=0.95, catch_up=0.12)
    speedup = sim.run(policy, 400, d)
    assert policy.hopeless("draft-simple")
    assert policy.ceiling("draft-simple") < 1.05
    first_plain_run = next(i for i in range(2, 400) if sim.ks[i] == 0)
    assert sum(sim.ks[first_plain_run:]) == 0  # no re-probe, not even a burst
    assert speedup > 0.98  # the price of finding out: a few probe rounds in 400
    s = policy.summary()
    # what that price was, by the policy's own account: the probes' time beyond the plain
    # steps their tokens would have taken (positive: they lost), and its bookkeeping
    assert 0 < s["probe_cost_steps"] < 0.02 * 400
    assert s["policy_ms"] > 0 and s["tokens"] > 400
    line = [x for x in policy.report_lines() if "cannot pay here" in x]
    assert line and "draft-simple" in line[0]


def test_a_draft_that_could_pay_is_not_declared_hopeless():
    policy = AdaptivePolicy(n_max_cap=8)
    d = FakeDrafter(max_draft=8)
    policy.attach([d])
    Sim(FLAT_CURVE, 0.1, 0.9, gated=True, confidence=0.95).run(policy, 60, d)
    assert not policy.hopeless("draft-simple")
    assert policy.ceiling("draft-simple") > 3


def test_unknown_widths_are_extrapolated_with_a_least_squares_slope():
    # one noisy cheap pass (width 3) must not tilt the extrapolation: the slope is fitted
    # through every known width and (0, 1), not taken from the two widest points
    policy = AdaptivePolicy(n_max_cap=8)
    for k, rel in ((0, 1.0), (1, 1.5), (2, 2.0), (3, 2.1)):
        for _ in range(3):
            policy.observe(FakeRound(None if k == 0 else "x", [1] * k, 0, [0], 0.0, 70.0 * rel))
    curve = policy.cost.likely_curve()
    slope = (0.5 * 1 + 1.0 * 2 + 1.1 * 3) / (1 + 4 + 9)
    assert curve[3] == pytest.approx(2.1)
    assert curve[6] == pytest.approx(2.1 + 3 * slope)
    assert curve[6] > 2.1 + 3 * 0.1  # the two widest points alone would say 0.1 per token


@dataclass
class Stream:
    """A cheap drafter over a known token stream: proposes the next tokens, right or wrong."""

    text: list[int]
    wrong_every: int = 0  # 0: always right; n: every n-th proposed token is wrong
    name: str = "ngram-simple"
    max_draft: int = 8
    free: bool = True
    pos: int = 0
    timing: None = None
    calls: int = 0

    def propose(self, n: int):
        from specgguf.core.draft import Draft

        self.calls += 1
        out = self.text[self.pos : self.pos + n]
        if self.wrong_every:
            out = [t if (self.pos + i) % self.wrong_every else -1 for i, t in enumerate(out)]
        return Draft(list(out))

    def peek(self, n: int):
        return self.propose(n)  # a lookup with no state to arm (counted: shadows measure)


def run_stream(policy: AdaptivePolicy, drafter: Stream, rounds: int) -> list[int]:
    """The loop, minus the model: what the cheap drafter proposes is checked against the
    stream; returns the number of proposals sent to the target per round."""
    sent = []
    for _ in range(rounds):
        k = min(policy.budget(10_000), drafter.max_draft, policy.allowance(drafter.name))
        proposed = drafter.propose(k).tokens if k > 0 else []
        n_acc = 0
        while n_acc < len(proposed) and proposed[n_acc] == drafter.text[drafter.pos + n_acc]:
            n_acc += 1
        emitted = drafter.text[drafter.pos : drafter.pos + n_acc + 1]
        drafter.pos += len(emitted)
        rel = STEEP_CPU[len(proposed)]
        policy.observe(
            FakeRound(
                "ngram-simple" if proposed else None, proposed, n_acc, emitted, 0.01, 70 * rel
            )
        )
        sent.append(len(proposed))
    return sent


def seeded(curve=STEEP_CPU) -> AdaptivePolicy:
    from specgguf.auto.profile import CostProfile, Estimate

    policy = AdaptivePolicy(n_max_cap=8)
    policy.seed(CostProfile({k: Estimate(c, 10.0) for k, c in enumerate(curve) if k}))
    return policy


def test_shadow_drafts_let_a_cheap_drafter_start_without_blind_probes():
    # a copy-heavy stretch: the lookup is always right. Its shadow drafts, asked while it
    # sits out, show that at once, so the first drafts the target sees are all accepted
    policy = seeded()
    drafter = Stream(list(range(2000)))
    policy.attach([drafter])
    sent = run_stream(policy, drafter, 60)
    first = next(i for i, k in enumerate(sent) if k > 0)
    assert first <= 8
    assert policy.summary()["drafters"]["ngram-simple"]["shadow_drafts"] > 0
    assert policy.acceptance("ngram-simple")[0] > 0.9
    assert sum(sent[-20:]) / 20 >= 3  # and it drafts long


def test_shadow_drafts_keep_a_useless_cheap_drafter_off_the_target():
    policy = seeded()
    drafter = Stream(list(range(2000)), wrong_every=1)  # every guess wrong
    policy.attach([drafter])
    sent = run_stream(policy, drafter, 300)
    assert sum(sent) == 0  # never a wasted verify pass: the shadows already said no
    assert drafter.calls >= 250  # ... because it kept measuring, for free
    assert policy.acceptance("ngram-simple")[0] < 0.2


def test_shadow_drafts_notice_when_a_cheap_drafter_starts_paying():
    policy = seeded()
    drafter = Stream(list(range(4000)), wrong_every=1)
    policy.attach([drafter])
    run_stream(policy, drafter, 200)
    drafter.wrong_every = 0  # the text turns repetitive
    sent = run_stream(policy, drafter, 100)
    # within about the memory of the decayed counts (0.97 per round): ~33 rounds
    assert next(i for i, k in enumerate(sent) if k > 0) <= 40
    assert sum(sent[-20:]) / 20 >= 3


def test_draft_cost_comes_from_the_drafters_own_timing():
    # a round's drafting: a 2-token catch-up (30 ms) + 2 decodes (40 ms) for 3 proposals:
    # 70/3 ms per proposal; a 10-token catch-up after skipped rounds is priced per token
    from specgguf.core.draft import DraftTiming

    d = FakeDrafter(max_draft=8)
    policy = AdaptivePolicy(n_max_cap=8)
    policy.attach([d])
    d.timing = DraftTiming()  # a propose that decoded nothing: no sample, not a 0 ms step
    for _ in range(4):
        policy.budget(100)
        policy.observe(FakeRound(None, [], 0, [0], 0.0, 70.0))
    assert not policy.cost.draft_known("draft-simple")
    for catch_up, ms in ((2, 30.0), (10, 100.0), (2, 30.0)):
        policy.budget(100)
        d.timing = DraftTiming(ms, catch_up, 40.0, 2, 3)
        policy.observe(FakeRound("draft-simple", [1, 2, 3], 3, [1, 2, 3, 4], ms + 40.0, 140.0))
    # the long catch-up round's own decodes (20 ms each) count as steps; its batch does not
    assert 70.0 / 3 > policy.cost.draft_ms["draft-simple"].mean > 20.0
    assert policy.catch_up_cost("draft-simple", 1) == pytest.approx(10.0 / 70.0)


def test_slots_in_one_pass_share_one_exploration_budget():
    """A probe of one slot holds every slot of the shared pass: with four slots, each may
    spend a quarter of what a sequence alone may."""

    sched = ProbeScheduler(8, ProbeSettings(budget=0.05, allowance=2.0))
    sched.elapsed = 100  # 0.05 * 100 + 2 = 7 target steps for a sequence alone
    sched.explore_spent = 3.0
    assert sched.may_explore()
    sched.share = 4  # 7 / 4 = 1.75 each
    assert not sched.may_explore()
    sched.explore_spent = 1.5
    assert sched.may_explore() and not sched.may_explore(liability=0.5)


class Behind(Drafter):
    """A draft model `lag` tokens behind the text (a prompt it has not read yet)."""

    name, asks_per_token = "draft-simple", True

    def __init__(self, lag: int) -> None:
        self.lag = lag

    @property
    def behind(self) -> int:
        return self.lag

    def begin(self, prompt): ...

    def observe(self, tokens): ...

    def propose(self, budget, gate=None):
        return Draft()


def test_a_draft_model_starts_only_where_the_rest_of_the_answer_repays_its_catch_up():
    """Starting a draft model that is behind (a prompt it has not read, tokens emitted while
    it sat out) costs its catch-up first: at the plan's speedup the rest of the sequence
    must win that back, which a short answer behind a long prompt does not."""
    from specgguf.auto.policy import AdaptivePolicy, _Plan

    d = Behind(lag=1)
    policy = AdaptivePolicy(n_max_cap=8)
    policy.attach([d])
    policy.catch_up_cost = lambda name, tokens: 0.05 * tokens  # target steps per token read
    plan = _Plan(4, 1.3, probe=False)  # saves (1 - 1/1.3) = 0.23 of a step per token
    d.lag = 1  # nothing to read: always worth it
    assert policy._repays_catch_up(d.name, plan, 2)
    d.lag = 201  # 10 steps of catch-up
    assert policy._repays_catch_up(d.name, plan, 48)  # 11.1 saved
    assert not policy._repays_catch_up(d.name, plan, 40)  # 9.2 saved
    assert policy._repays_catch_up(d.name, plan, 1 << 30)  # an open-ended answer
    d.lag = 401
    assert not policy._repays_catch_up(d.name, plan, 48)


def test_a_probe_does_not_make_a_draft_model_read_a_prompt_it_cannot_repay():
    """The first rounds' probes send nothing to a draft model whose catch-up even its
    ceiling could not win back in the tokens left: a 900-token prompt read at 0.12 steps a
    token costs ~108 steps, and a draft that brings at most x1.25 (a step of 0.55 on a CPU's
    verify curve) saves at most ~40 of a 200-token answer. Where the draft step's cost is
    unknown, the probe goes out (it is what measures it); an open-ended answer repays
    anything."""
    def first_probe(limit: int, draft_rel: float | None) -> int:
        policy = AdaptivePolicy(n_max_cap=8)
        policy.attach([Behind(lag=901)])
        policy.catch_up_cost = lambda name, tokens: 0.12 * tokens
        if draft_rel is not None:
            for k, rel in enumerate(CPU_CURVE[:5]):
                policy.cost.add_verify(k, 70.0 * rel)
            policy.cost.add_draft("draft-simple", 0.0)  # (a drafter's first step is warm-up)
            policy.cost.add_draft("draft-simple", 70.0 * draft_rel)
            policy._cache.clear()
        return policy._plan_probe(limit, 1)["draft-simple"].k  # a first rounds' probe

    assert first_probe(200, draft_rel=0.55) == 0
    assert first_probe(1 << 30, draft_rel=0.55) == 1
    assert first_probe(200, draft_rel=None) == 1


def test_a_free_draft_passes_the_round_to_a_drafter_in_line_that_plans_better(monkeypatch):
    """The first non-empty draft takes the round, so a weak n-gram guess must not take it from
    a draft model that plans a better one: trim sends nothing, and the next drafter drafts.
    Once that drafter has been asked (it stands before in line, or drafted nothing), the
    free guess goes out as its own cost model says."""
    from specgguf.auto.policy import _Plan

    policy = AdaptivePolicy(n_max_cap=8)
    free = Stream(text=[1, 2, 3] * 20, name="suffix", max_draft=16)
    policy.attach([free, FakeDrafter()])
    for k, rel in enumerate(FLAT_CURVE):
        policy.cost.add_verify(k, 70.0 * rel)
    acc = {"suffix": [0.45, 0.8, 0.9], "draft-simple": [0.97, 1.0, 1.0]}
    monkeypatch.setattr(policy, "acceptance", lambda name: acc[name])
    plans = {"suffix": _Plan(16, 1.5, probe=False), "draft-simple": _Plan(5, 2.5, probe=False)}
    monkeypatch.setattr(policy, "_plans", plans)
    policy._asked = {"suffix"}
    assert policy.trim("suffix", 2) == 0  # x~1.4 expected against the draft model's x2.5
    policy._asked = {"suffix", "draft-simple"}
    assert policy.trim("suffix", 2) == 2  # nobody better left in line: it pays on its own
    plans["draft-simple"] = _Plan(0, 1.0, probe=False)  # the draft model sits this round out
    policy._asked = {"suffix"}
    assert policy.trim("suffix", 2) == 2


def test_a_probes_hope_shrinks_with_evidence_to_the_fixed_optimism():
    """What a probe may hope for: the estimate plus one standard error where a position has
    few trials (one rejection is not a verdict), plus the fixed optimism once there are many."""
    from specgguf.auto.acceptance_estimator import AcceptanceEstimator

    est = AcceptanceEstimator(width=4)
    est.add_round("d", 4, 0)  # one round, its first token rejected
    acc = est.acceptance("d")
    hoped = est.optimistic("d", 0.15)
    assert acc[0] == pytest.approx(0.25)
    assert hoped[0] == pytest.approx(0.25 + (0.25 * 0.75 / 2) ** 0.5)  # > 0.25 + 0.15
    assert hoped[1] == pytest.approx(acc[1] + 0.15)  # never reached: the fixed optimism
    for i in range(60):
        est.add_round("d", 4, i % 2)  # the first token accepted every other round
    acc, hoped = est.acceptance("d"), est.optimistic("d", 0.15)
    assert 0.4 < acc[0] < 0.6
    assert hoped[0] == pytest.approx(acc[0] + 0.15)  # 61 trials: the standard error is small

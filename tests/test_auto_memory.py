"""auto across runs: what the machine profile remembers must never stop it from winning.

The regime: a target that streams its weights every step (the default 1.5B target as F16 on a
2-core CPU, like a ~6B Q4 model; any GPU), where a 0.5B draft step costs ~0.27 of a target
step and a verify pass over 1 + k tokens little more than a plain step. There a draft model
accepted 85% of the time pays ~1.5x. Each test runs the real AdaptivePolicy on simulated
rounds (tests.test_adaptive.Sim: costs and acceptance given, decisions real) several times in
a row through one profile file, as consecutive `run`s do.
"""

from __future__ import annotations

import json

import pytest

from specgguf.auto.cost_model import Costs, best_k, needed_acceptance, speedups
from specgguf.auto.policy import AdaptivePolicy
from specgguf.auto.preload import (
    RECHECK_RUNS,
    cannot_pay,
    plan_draft_load,
    without_draft_cost,
)
from specgguf.auto.profile import (
    AcceptanceMemory,
    CostProfile,
    Estimate,
    load_profile,
    note_skipped_load,
    save_profile,
)
from tests.test_adaptive import FakeDrafter, Sim

#: the F16 target's pass over 1 + k tokens relative to a plain step (measured here)
F16_CURVE = (1.0, 1.30, 1.45, 1.55, 1.58, 1.85, 2.15, 2.3, 2.5)
F16_DRAFT = 0.27
#: the Q4 target on a 2-core AVX-512 CPU, where a pass costs nearly a step per extra token,
#: and its 0.5B draft: a draft step is most of a target step
Q4_CURVE = (1.0, 1.67, 2.24, 2.72, 3.34, 3.96, 4.6, 5.3, 5.94)
Q4_DRAFT = 0.68
ROUNDS = 80  # ~200 tokens a run


def best_fixed(curve, draft: float, acceptance: float, n_max: int = 8) -> float:
    return max(speedups(Costs(verify=curve, draft=draft), acceptance, n_max))


def one_run(
    path, sim: Sim, *, rounds: int = ROUNDS, recheck: bool = False
) -> tuple[AdaptivePolicy, float]:
    """A `run` under auto: seeded from the profile at `path` (as the Generator seeds it: for a
    re-check of a draft model left out, without its stored draft cost), then its measurements
    saved."""
    policy = AdaptivePolicy(n_max_cap=8)
    prior = load_profile(path)
    policy.seed(without_draft_cost(prior, "draft-simple") if recheck else prior)
    speedup = sim.run(policy, rounds, FakeDrafter(max_draft=8))
    measured = policy.export_profile()
    if measured is not None:  # (None: a run that never drafted measured no width)
        save_profile(path, measured)
    return policy, speedup


def f16_sim(seed: int, **kw) -> Sim:
    base = dict(verify=F16_CURVE, draft=F16_DRAFT, acceptance=0.85, gated=True,
                confidence=0.85, seed=seed)  # fmt: skip
    base.update(kw)
    return Sim(**base)


def assert_drafts_near_the_best(path, sim: Sim, share: float) -> None:
    """One more run through the profile at `path` drafts (more tokens sent than rounds) and
    reaches `share` of the best fixed draft length's speed-up."""
    _, speedup = one_run(path, sim)
    assert sum(sim.ks) > ROUNDS
    assert speedup >= share * best_fixed(F16_CURVE, F16_DRAFT, 0.85)


def test_every_run_through_one_profile_drafts_near_the_best_fixed_length(tmp_path):
    path = tmp_path / "p.json"
    best = best_fixed(F16_CURVE, F16_DRAFT, 0.85)
    assert best > 1.35  # the regime: a draft model pays
    for run in range(6):
        sim = f16_sim(run)
        policy, speedup = one_run(path, sim)
        drafted = sum(sim.ks)
        assert drafted > ROUNDS, f"run {run} drafted {drafted} tokens"
        assert speedup >= 0.9 * best, f"run {run}: x{speedup:.2f} vs best fixed x{best:.2f}"
        assert policy.summary()["drafters"]["draft-simple"]["why_not"] is None
    remembered = load_profile(path).acceptance["draft-simple"]
    assert remembered.rate() == pytest.approx(0.85, abs=0.06)
    assert remembered.best >= 0.8


def test_a_warm_run_drafts_from_its_first_rounds(tmp_path):
    path = tmp_path / "p.json"
    one_run(path, f16_sim(0))
    sim = f16_sim(1)
    one_run(path, sim)
    assert sum(sim.ks[:6]) >= 6  # the remembered acceptance: no warm-up of plain steps


def test_a_profile_without_acceptance_still_drafts(tmp_path):
    # what profiles written before acceptance was kept look like: costs known well, nothing
    # about acceptance. The prior (0.5) says no; auto must measure instead of trusting it.
    path = tmp_path / "p.json"
    one_run(path, f16_sim(0))
    old = json.loads(path.read_text())
    for key in ("acceptance", "skipped_loads", "disturbed_runs"):
        old.pop(key)
    path.write_text(json.dumps(old))
    for run in range(3):
        assert_drafts_near_the_best(path, f16_sim(run + 1), 0.9)


def test_a_low_remembered_acceptance_is_re_measured_when_the_drafter_paid_before(tmp_path):
    # a stretch of text the draft does not know (acceptance 0.2), after runs where it paid:
    # the next code run still tries it early, and drafts once it sees 85% again
    path = tmp_path / "p.json"
    for run in range(2):
        one_run(path, f16_sim(run))
    for run in range(3):
        one_run(path, f16_sim(10 + run, acceptance=0.2, confidence=0.2))
    assert_drafts_near_the_best(path, f16_sim(20), 0.85)


def test_a_disturbed_run_cannot_flip_the_next_runs_decision(tmp_path):
    path = tmp_path / "p.json"
    for run in range(3):
        one_run(path, f16_sim(run))
    quiet = load_profile(path)
    # another process had the cores: every step twice as slow, the draft dearer still
    one_run(path, f16_sim(5, draft=0.6, step_ms=140.0))
    after = load_profile(path)
    assert after.disturbed_runs == 1
    assert after.target_step_ms == quiet.target_step_ms
    assert after.draft["draft-simple"].value == pytest.approx(
        quiet.draft["draft-simple"].value, rel=0.1
    )
    for run in range(3):
        assert_drafts_near_the_best(path, f16_sim(6 + run), 0.9)
    assert load_profile(path).disturbed_runs == 0


def test_a_machine_that_stays_slower_is_followed(tmp_path):
    path = tmp_path / "p.json"
    one_run(path, f16_sim(0))
    for run in range(4):
        one_run(path, f16_sim(1 + run, step_ms=140.0))
    assert load_profile(path).target_step_ms == pytest.approx(140.0, rel=0.05)


def test_a_drafter_that_cannot_pay_stays_off_at_a_bounded_cost(tmp_path):
    # the F16 regime's costs, but a draft the target rarely agrees with
    # over six 128-token runs; the initial probes included (the price of measuring the cost
    # curve, paid until the profile knows it)
    path = tmp_path / "p.json"
    plain_steps = spent = 0.0
    for run in range(6):
        policy, _ = one_run(path, f16_sim(run, acceptance=0.2, confidence=0.2), rounds=128)
        s = policy.summary()
        plain_steps += s["tokens"]
        spent += max(0.0, s["probe_cost_steps"])
        if run > 0:
            why = s["drafters"]["draft-simple"]["why_not"]
            assert why is not None and "too low: needs" in why
            assert why.startswith(("measured acceptance", "remembered acceptance"))
    # at most half the exploration budget (5%), the cold first run included: its first few
    # trials cannot tell 0.2 from 0.45, so it probes a few rounds more than the warm ones
    assert spent / plain_steps < 0.025


def test_a_hopeless_draft_model_is_not_loaded_and_is_re_checked(tmp_path):
    # the Q4 pair on this CPU: a draft step costs most of a target step; no acceptance pays.
    # Each `run` asks plan_draft_load first, as cli/run_cmd.py does.
    path = tmp_path / "p.json"
    seen = []
    for run in range(2 + 3 * RECHECK_RUNS):
        plan = plan_draft_load(load_profile(path), "draft-simple", 8)
        if plan.skip is not None:
            assert plan.skip.ceiling < 1.05
            assert "not loaded" in plan.skip.notice() and "--spec-draft-n-max" in plan.skip.notice()
            note_skipped_load(path, "draft-simple")
            seen.append("skip")
            continue
        sim = Sim(Q4_CURVE, Q4_DRAFT, 0.85, gated=True, confidence=0.85, seed=run)
        one_run(path, sim, recheck=plan.recheck)
        seen.append("recheck" if plan.recheck else "load")
    first_skip = seen.index("skip")
    assert first_skip <= 3  # a verdict from one short run is confirmed once, then trusted
    rest = seen[first_skip:]
    # from then on: RECHECK_RUNS - 1 runs without the draft, one that measures it again
    period = ["skip"] * (RECHECK_RUNS - 1) + ["recheck"]
    assert rest[: 2 * RECHECK_RUNS] == period * 2
    assert load_profile(path).skipped_loads.get("draft-simple", 0) < RECHECK_RUNS


def test_a_draft_that_pays_or_is_unknown_is_always_loaded():
    f16 = CostProfile(
        {k: Estimate(c, 20.0) for k, c in enumerate(F16_CURVE) if k},
        {"draft-simple": Estimate(F16_DRAFT, 20.0)},
        100.0,
    )
    assert cannot_pay(f16, "draft-simple", 8) is None
    thin = CostProfile({1: Estimate(1.67, 2.0)}, {"draft-simple": Estimate(0.68, 2.0)}, 30.0)
    assert cannot_pay(thin, "draft-simple", 8) is None  # one width: the curve is not known
    assert cannot_pay(None, "draft-simple", 8) is None


def test_needed_acceptance_is_where_drafting_starts_to_pay():
    costs = Costs(verify=F16_CURVE, draft=F16_DRAFT)
    need, k = needed_acceptance(costs, 8, margin=0.05)
    assert best_k(costs, need + 0.01, 8, margin=0.05)[0] > 0
    assert best_k(costs, need - 0.01, 8, margin=0.05)[0] == 0
    assert 1 <= k <= 8
    assert needed_acceptance(Costs(verify=Q4_CURVE, draft=Q4_DRAFT), 8, margin=0.05) is None


def test_remembered_acceptance_fades_towards_new_runs_and_keeps_its_best():
    a = AcceptanceMemory([40.0, 34.0], [34.0, 29.0], best=0.86)
    low = AcceptanceMemory([20.0, 4.0], [4.0, 1.0])
    merged = a
    for _ in range(3):
        merged = merged.merged(low)
    assert merged.rate() < 0.4  # three runs of another text take over
    assert merged.best == pytest.approx(0.86 - 3 * 0.03)  # ... its best fades slowly
    assert AcceptanceMemory.from_json(merged.to_json()).rate() == pytest.approx(merged.rate())


@pytest.mark.parametrize(
    "bad",
    [
        {"trials": [1, 2], "hits": [1]},
        {"trials": [1], "hits": [2]},
        {"trials": ["1"], "hits": [0]},
        {"trials": [1], "hits": [0], "best": 2},
    ],
)
def test_a_damaged_acceptance_entry_makes_the_profile_unreadable_not_fatal(tmp_path, bad):
    path = tmp_path / "p.json"
    obj = CostProfile({1: Estimate(1.3, 5.0)}).to_json()
    obj["acceptance"] = {"draft-simple": bad}
    path.write_text(json.dumps(obj))
    assert load_profile(path) is None


#: a GPU's costs (an H200 measured with a 7B f16 target): a pass over 1 + k tokens costs
#: little more than a plain step, a draft step a fifth of one
GPU_CURVE = (1.0, 1.22, 1.23, 1.23, 1.25, 1.30, 1.28, 1.29, 1.33)
GPU_DRAFT = 0.19


def test_one_rejected_first_draft_does_not_keep_a_paying_drafter_off(tmp_path):
    """A run whose profile knows the costs but no acceptance for this pair: its first draft
    meets a rejection at the first token (one round in six or seven at 85%). One trial is
    thin evidence (the estimate falls to 0.25, under which nothing pays): the drafter is
    tried again at once, not after dozens of plain rounds (what an H200 showed: 19 of 49)."""
    import random

    path = tmp_path / "p.json"
    save_profile(path, CostProfile(
        verify={k: Estimate(v, 6.0) for k, v in enumerate(GPU_CURVE) if k},
        draft={"draft-simple": Estimate(GPU_DRAFT, 6.0)}, target_step_ms=7.0))  # fmt: skip
    # a seed whose first acceptance draw is a rejection
    seed = next(s for s in range(100) if random.Random(s).random() >= 0.85)
    sim = Sim(verify=GPU_CURVE, draft=GPU_DRAFT, acceptance=0.85, gated=True, confidence=0.85,
              step_ms=7.0, seed=seed)  # fmt: skip
    _, speedup = one_run(path, sim, rounds=60)
    first = next(i for i, k in enumerate(sim.ks) if k)
    again = next(i for i, k in enumerate(sim.ks) if k and i > first)
    assert again - first <= 3, sim.ks[:30]
    assert speedup >= 0.85 * best_fixed(GPU_CURVE, GPU_DRAFT, 0.85)

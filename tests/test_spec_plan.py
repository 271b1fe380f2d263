"""One call's speculation is resolved once (specgguf.spec_plan): the command line's options,
a request's overrides, bench's whole configurations. Pure: no model."""

from __future__ import annotations

from specgguf.loading.session import SpecOptions
from specgguf.spec_plan import CappedLengths, SpecOverrides, SpecPlan

AUTO = SpecOptions(types=["ngram-map-k", "draft-simple"], n_max=8, adaptive=True)
FIXED = SpecOptions(types=["draft-simple"], n_max=3)


def test_the_lengths_follow_from_the_plan():
    assert SpecPlan(AUTO).lengths == "auto"
    assert SpecPlan(FIXED).lengths == "fixed"
    assert SpecPlan(AUTO, cap=2).lengths == "capped"


def test_no_overrides_leave_the_plan_as_it_is():
    plan = SpecPlan(AUTO, fresh_policy=True, namespace="cfg")
    assert plan.overridden(SpecOverrides()) is plan


def test_a_request_n_max_caps_every_drafter_and_stops_auto():
    plan = SpecPlan(AUTO).overridden(SpecOverrides(n_max=2))
    assert plan.lengths == "capped" and plan.cap == 2
    assert plan.spec.n_max == 2 and not plan.spec.adaptive
    assert plan.spec.types == AUTO.types


def test_disabled_or_zero_decodes_plainly():
    for o in (SpecOverrides(enabled=False), SpecOverrides(n_max=0)):
        plan = SpecPlan(AUTO, cap=3).overridden(o)
        assert not plan.speculates and plan.lengths == "fixed" and plan.cap is None


def test_n_min_and_p_min_keep_the_lengths():
    plan = SpecPlan(AUTO).overridden(SpecOverrides(n_min=1, p_min=0.5))
    assert plan.lengths == "auto" and (plan.spec.n_min, plan.spec.p_min) == (1, 0.5)


def test_a_fixed_n_max_drafts_probabilistically_when_sampling_unless_asked_for_greedy():
    from specgguf.core.sampling import SamplerParams

    hot, cold = SamplerParams(temp=0.8), SamplerParams(temp=0)
    assert not SpecPlan(AUTO).spec.drafts_probabilistically(hot)  # auto's lengths: one-hot
    fixed = SpecPlan(AUTO).overridden(SpecOverrides(n_max=4)).spec
    assert fixed.drafts_probabilistically(hot) and not fixed.drafts_probabilistically(cold)
    greedy = SpecPlan(AUTO).overridden(SpecOverrides(n_max=4, draft_sampling="greedy"))
    assert not greedy.spec.drafts_probabilistically(hot) and greedy.lengths == "capped"
    alone = SpecPlan(AUTO).overridden(SpecOverrides(draft_sampling="probabilistic"))
    assert alone.lengths == "auto" and alone.spec.drafts_probabilistically(hot)


def test_the_grammar_drafter_joins_only_when_asked():
    assert SpecPlan(AUTO).constrained().spec.types == AUTO.types
    asked = SpecOptions(types=["ngram-map-k"], adaptive=True, grammar_draft=True)
    assert SpecPlan(asked).constrained().spec.types == ["grammar", "ngram-map-k"]
    plain = SpecOptions(types=[], grammar_draft=True)
    assert SpecPlan(plain).constrained().spec.types == []  # nothing speculates: nothing joins


def test_a_cap_limits_every_drafter():
    cap = CappedLengths(2)
    assert cap.budget(10) == 2 and cap.allowance("ngram-map-k") == 2 and cap.trim("x", 48) == 2

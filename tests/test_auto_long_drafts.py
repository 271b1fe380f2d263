"""auto and long n-gram drafts: the verify cost of wide passes is measured where it is used
(not extrapolated from short ones), a long proposal is cut to what pays round by round, and
the free n-gram drafters join the default --spec-type. Synthetic rounds, no model."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from specgguf.auto.policy import AdaptivePolicy
from specgguf.auto.profile import CostProfile, Estimate, plausible_verify
from specgguf.core.draft import Draft
from specgguf.drafters.spec_types import AUTO_DEFAULT_NGRAM, default_spec_types, parse_spec_types
from tests.test_adaptive import FakeRound  # a round as auto's policy reads it

#: a 2-core CPU's target pass over n tokens, in plain steps (llama.cpp's own benchmark tool):
#: steep up to ~9 tokens, then the batched kernels make each extra token cost a fraction
POINTS = {1: 1.0, 2: 2.1, 4: 3.3, 8: 6.7, 9: 7.3, 12: 7.8, 16: 8.5, 32: 14.6, 48: 18.6, 64: 24.5}


def pass_cost(n_tokens: int) -> float:
    ns = sorted(POINTS)
    if n_tokens in POINTS:
        return POINTS[n_tokens]
    lo = max(x for x in ns if x < n_tokens)
    hi = min(x for x in ns if x > n_tokens)
    return POINTS[lo] + (POINTS[hi] - POINTS[lo]) * (n_tokens - lo) / (hi - lo)


STEP_MS = 30.0


@dataclass
class Copy:
    """An n-gram drafter over a text being copied: proposes up to `size_m` next tokens; a
    position of the text differs from what it remembers with probability 1 / `wrong_every`
    (0: never; 1: always), at random but the same positions for every run."""

    text: list[int]
    size_m: int = 48
    wrong_every: int = 0
    name: str = "ngram-simple"
    free: bool = True
    pos: int = 0
    silent_until: int = 0  # proposes nothing before this position (a lookup still empty)
    timing: None = None  # a lookup times nothing (specgguf.core.draft.Drafter.timing)
    wrong: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.max_draft = self.size_m
        if self.wrong_every:
            rng = random.Random(7)
            self.wrong = {i for i in range(len(self.text)) if rng.random() < 1 / self.wrong_every}

    def propose(self, n: int) -> Draft:
        start = self.pos
        if start < self.silent_until:
            return Draft()
        out = self.text[start : start + min(n, self.size_m)]
        return Draft([-1 if start + i in self.wrong else t for i, t in enumerate(out)])

    peek = propose  # a lookup with no state to arm


def simulate(policy: AdaptivePolicy | None, drafter: Copy, rounds: int, fixed: int = 0):
    """The loop without a model, as SpeculativeDecoder runs it: budget, propose, trim, verify
    (pass cost from POINTS), observe. Returns (speedup over plain, tokens sent per round)."""
    tokens = 0
    steps = 0.0
    sent: list[int] = []
    if policy is not None:
        policy.attach([drafter])
    for _ in range(rounds):
        if policy is not None:
            k = min(policy.budget(10_000), drafter.max_draft, policy.allowance(drafter.name))
            proposed = drafter.propose(k).tokens if k > 0 else []
            if proposed:
                proposed = proposed[: policy.trim(drafter.name, len(proposed))]
        else:
            proposed = drafter.propose(fixed).tokens
        truth = drafter.text[drafter.pos :]
        n_acc = 0
        while n_acc < len(proposed) and proposed[n_acc] == truth[n_acc]:
            n_acc += 1
        emitted = truth[: n_acc + 1]
        drafter.pos += len(emitted)
        cost = pass_cost(len(proposed) + 1)
        if policy is not None:
            policy.observe(
                FakeRound(drafter.name if proposed else None, proposed, n_acc, emitted, 0.01,
                      STEP_MS * cost)  # fmt: skip
            )
        tokens += len(emitted)
        steps += cost
        sent.append(len(proposed))
    return tokens / steps, sent


def best_fixed(wrong_every: int, rounds: int) -> float:
    text = list(range(100_000))
    return max(
        simulate(None, Copy(text, size_m=m, wrong_every=wrong_every, pos=10_000), rounds, m)[0]
        for m in (1, 2, 4, 8, 12, 16, 24, 32, 48)
    )


def test_cold_auto_finds_long_drafts_on_a_copied_text():
    # the 'print the whole file with this edit' case: every proposal is right. A line fitted
    # to short passes says a 49-token pass costs ~35 steps; measured, it costs 18.6
    policy = AdaptivePolicy(n_max_cap=8)
    speed, sent = simulate(policy, Copy(list(range(100_000))), 200)
    assert max(sent) >= 40  # it did send long drafts
    assert sum(sent[-50:]) / 50 >= 40  # and keeps sending them
    late, _ = simulate(policy, Copy(list(range(100_000))), 100)
    assert late >= 0.9 * best_fixed(0, 100)
    assert late > 2.0
    # the wide passes were measured, not extrapolated, and would go into the profile
    exported = policy.export_profile()
    assert exported is not None and max(exported.verify) >= 40


def test_cold_auto_measures_its_widths_even_if_the_lookup_is_silent_at_first():
    # an n-gram index that has nothing to propose during the initial probes (the first
    # tokens of an answer, before its first repeated n-gram) must not leave auto with no
    # measured width at all: with none known no draft can look worth it, and a cold run
    # would decode plainly to the end (it did: x1.00 on the edit prompts, replayed)
    policy = AdaptivePolicy(n_max_cap=8)
    _, sent = simulate(policy, Copy(list(range(100_000)), silent_until=12), 200)
    assert sum(sent[-50:]) / 50 >= 40
    assert policy.summary()["verify_cost_rel"].keys() >= {"1", "2", "3", "4"}


def test_a_profile_that_knows_only_short_passes_still_finds_long_drafts():
    # a profile measured before (k = 1..8 only): the curve's slope there says long passes
    # cannot pay; auto must measure a wide pass instead of believing the extrapolation
    profile = CostProfile({k: Estimate(pass_cost(k + 1), 20.0) for k in range(1, 9)})
    policy = AdaptivePolicy(n_max_cap=8)
    policy.seed(profile)
    _, sent = simulate(policy, Copy(list(range(100_000))), 150)
    assert sum(sent[-50:]) / 50 >= 40


def test_partial_acceptance_cuts_long_proposals_to_what_pays():
    # one token in 12 differs: a 48-token proposal is rejected after ~11 on average
    policy = AdaptivePolicy(n_max_cap=8)
    text = list(range(100_000))
    simulate(policy, Copy(text, wrong_every=12), 200)
    drafter = Copy(text, wrong_every=12, pos=10_000)
    speed, sent = simulate(policy, drafter, 300)
    assert max(sent) < 48  # never the whole proposal
    assert speed >= 0.9 * best_fixed(12, 300)


def test_text_that_is_never_copied_stays_plain():
    policy = AdaptivePolicy(n_max_cap=8)
    speed, sent = simulate(policy, Copy(list(range(100_000)), wrong_every=1), 300)
    assert sum(sent[50:]) == 0  # shadows say no: no wasted wide pass
    assert speed >= 0.97


def test_trim_leaves_model_drafters_and_probes_alone():
    policy = AdaptivePolicy(n_max_cap=8)
    assert policy.trim("unknown", 5) == 5  # no plan: as proposed


def test_implausible_costs_never_reach_the_cost_model():
    # a profile written while another process competed for the CPU: a 5-token pass at 0.41
    # of a plain step is impossible; such entries are ignored, the sane ones kept
    assert not plausible_verify(4, 0.41)
    assert not plausible_verify(2, 40.0)
    assert plausible_verify(4, 3.3) and plausible_verify(47, 18.6)
    poisoned = CostProfile({1: Estimate(2.1, 10.0), 4: Estimate(0.41, 10.0)})
    policy = AdaptivePolicy(n_max_cap=8)
    policy.seed(poisoned)
    known = policy.cost.known_curve()
    assert 4 not in known and known[1] == pytest.approx(2.1)


def test_a_profile_follows_a_machine_that_changed():
    old = CostProfile({4: Estimate(3.3, 40.0)})
    new = CostProfile({4: Estimate(1.2, 10.0)})  # e.g. a GPU build now
    once = old.merged(new)
    assert once.verify[4].value < 2.3  # halfway at once, not 40:10 for the stale value
    twice = once.merged(new)
    assert twice.verify[4].value < 1.8  # and closer after a second run
    # small differences (noise) still merge as weighted means
    calm = old.merged(CostProfile({4: Estimate(3.5, 10.0)}))
    assert calm.verify[4].value == pytest.approx((3.3 * 40 + 3.5 * 10) / 50)


def test_the_default_spec_type_under_auto_includes_free_drafters():
    assert default_spec_types(have_draft_model=False, auto=True) == list(AUTO_DEFAULT_NGRAM)
    with_draft = default_spec_types(have_draft_model=True, auto=True)
    assert with_draft[-1] == "draft-simple" and set(AUTO_DEFAULT_NGRAM) <= set(with_draft)
    # a fixed draft length keeps llama.cpp's meaning
    assert parse_spec_types(None, have_draft_model=False, auto=False) == []
    assert parse_spec_types(None, have_draft_model=True, auto=False) == ["draft-simple"]
    # an explicit list is the user's, and `none` is plain decoding
    assert parse_spec_types("none", have_draft_model=True, auto=True) == []
    assert parse_spec_types("ngram-mod", have_draft_model=False, auto=True) == ["ngram-mod"]

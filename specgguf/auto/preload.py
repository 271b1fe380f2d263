"""Whether `run` should load the draft model at all, from this machine's profile.

Loading a draft model that auto will never use costs a second or more and hundreds of MB per
run. Where the profile says that drafting with it cannot pay on this machine even at 100%
acceptance (a CPU on which a draft step costs most of a target step) — the same verdict that
makes a run seeded from that profile never probe it — `run --spec-draft-n-max auto` leaves it
out, and says so. The machine or the build may change, so every RECHECK_RUNS-th such run loads
it anyway and measures it again (that run's costs reset the count). A fixed
`--spec-draft-n-max N` never asks: it always loads what it was given.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specgguf.auto.policy import AdaptivePolicy
from specgguf.auto.profile import CostProfile

#: a draft model left out this many runs in a row is loaded again to re-measure it
RECHECK_RUNS = 8
#: draft-step samples the profile must hold before it may leave the draft model out: with
#: fewer, the run loads it and measures it again (a verdict from one short run waits for a
#: second opinion)
CONFIDENT_SAMPLES = 2.0


@dataclass(frozen=True)
class SkipVerdict:
    """A draft model that cannot pay here: its best speedup at 100% acceptance (`ceiling`)."""

    name: str
    ceiling: float

    def notice(self) -> str:
        return (
            f"note: the draft model is not loaded: this machine's profile says {self.name} "
            f"cannot pay here (x{self.ceiling:.2f} even at 100% acceptance); it is measured "
            f"again every {RECHECK_RUNS}th run, and a fixed --spec-draft-n-max N always loads it"
        )


@dataclass(frozen=True)
class DraftLoadPlan:
    """`skip`: leave the draft model out (why); `recheck`: load it although the profile says
    it cannot pay, and measure its cost again (seed auto without the stored draft cost)."""

    skip: SkipVerdict | None = None
    recheck: bool = False


def plan_draft_load(profile: CostProfile | None, name: str, n_max_cap: int) -> DraftLoadPlan:
    """What to do with drafter `name`'s model under `--spec-draft-n-max auto`."""
    verdict = cannot_pay(profile, name, n_max_cap)
    if verdict is None or profile is None:
        return DraftLoadPlan()
    thin = profile.draft[name].weight < CONFIDENT_SAMPLES
    if thin or profile.skipped_loads.get(name, 0) + 1 >= RECHECK_RUNS:
        return DraftLoadPlan(recheck=True)
    return DraftLoadPlan(skip=verdict)


def without_draft_cost(profile: CostProfile | None, name: str) -> CostProfile | None:
    """`profile` minus `name`'s draft cost: a run seeded with it measures that cost again."""
    if profile is None:
        return None
    return replace(profile, draft={n: e for n, e in profile.draft.items() if n != name})


def cannot_pay(profile: CostProfile | None, name: str, n_max_cap: int) -> SkipVerdict | None:
    """A verdict when `profile` is confident that drafter `name` cannot pay here whatever
    the text; None when it could, or the profile does not know enough to say."""
    if profile is None or name not in profile.draft:
        return None
    policy = AdaptivePolicy(n_max_cap=n_max_cap)
    policy.seed(profile)
    if not policy.hopeless(name):
        return None
    return SkipVerdict(name, policy.ceiling(name))

"""One call's speculation, resolved once: the SpecPlan.

A call's speculative settings come from three places: the command line (the session's
SpecOptions: the types, draft lengths, the drafters' options), the call itself (a server
request's `speculative.n_max`, `n_min`, `p_min`: SpecOverrides), and for `bench` a whole
configuration (its types and every axis, a fresh auto policy seeded from the machine profile,
n-gram drafters of its own). They are merged here, once, into a SpecPlan; the Generator builds
the decoder from the plan and merges nothing afterwards.

How a round's draft length is chosen follows from the plan (`lengths`):
- "fixed": llama.cpp's rule, at most spec.n_max tokens from a draft model, an n-gram type up
  to its own size_m;
- "capped": a request's `speculative.n_max`, at most `cap` tokens from ANY drafter
  (CappedLengths);
- "auto": `--spec-draft-n-max auto`, the cost model (specgguf.auto.policy), with the slot's
  long-lived policy or, for `fresh_policy`, one of the call's own seeded from `profile`.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, replace
from typing import Any, Literal

from specgguf.auto.profile import CostProfile
from specgguf.loading.session import SpecOptions

Lengths = Literal["fixed", "capped", "auto"]


@dataclass(frozen=True)
class SpecOverrides:
    """Per-call speculative settings, as llama-server's request fields `speculative.n_max`,
    `speculative.n_min`, `speculative.p_min`, and specgguf's `speculative.draft_sampling`
    (--spec-draft-sampling for this call). `n_max` fixes the draft length for this call:
    at most n_max tokens per round from any drafter (the `auto` policy sits it out), so under
    draft sampling `auto` a sampled call then drafts probabilistically unless it asks for
    `greedy`; `enabled=False` or `n_max=0` decodes plainly."""

    enabled: bool = True
    n_max: int | None = None
    n_min: int | None = None
    p_min: float | None = None
    draft_sampling: str | None = None  # one of DRAFT_SAMPLING_MODES


@dataclass(frozen=True)
class SpecPlan:
    """What one call speculates with: the drafters' options (`spec`: types in priority order,
    n_max, n_min, p_min, draft sampling, n-gram options), a per-call cap on every drafter's
    draft (`cap`, a request's speculative.n_max), whether auto runs a policy of the call's own
    (`fresh_policy`, seeded from `profile`: bench's runs start as a new `run` does), and the
    key the call's n-gram drafters are kept under (`namespace`; None: the slot's own)."""

    spec: SpecOptions
    cap: int | None = None
    fresh_policy: bool = False
    profile: CostProfile | None = None
    namespace: Hashable | None = None

    @property
    def lengths(self) -> Lengths:
        if self.cap is not None:
            return "capped"
        return "auto" if self.spec.adaptive else "fixed"

    @property
    def speculates(self) -> bool:
        return bool(self.spec.types)

    def overridden(self, o: SpecOverrides) -> SpecPlan:
        """This plan with one request's fields on top (the plan itself when it sets none)."""
        if not o.enabled or o.n_max == 0:
            return replace(self, spec=replace(self.spec, types=[], adaptive=False), cap=None)
        changes: dict[str, Any] = {}
        if o.n_max is not None:
            changes.update(n_max=o.n_max, adaptive=False)
        if o.n_min is not None:
            changes["n_min"] = o.n_min
        if o.p_min is not None:
            changes["p_min"] = o.p_min
        if o.draft_sampling is not None:
            changes["draft_sampling"] = o.draft_sampling
        if not changes:
            return self
        cap = o.n_max if o.n_max is not None else self.cap
        return replace(self, spec=replace(self.spec, **changes), cap=cap)

    def constrained(self) -> SpecPlan:
        """Under a grammar: the grammar drafter first, where the options ask for it
        (SpecOptions.grammar_draft) and something speculates at all."""
        spec = self.spec
        if not spec.types or not spec.grammar_draft or "grammar" in spec.types:
            return self
        return replace(self, spec=replace(spec, types=["grammar", *spec.types]))


class CappedLengths:
    """The "capped" lengths: at most n draft tokens per round from ANY drafter (an n-gram
    drafter would otherwise propose up to its own size); a BudgetPolicy for the loop."""

    def __init__(self, n: int) -> None:
        self.n = n

    def budget(self, limit: int) -> int:
        return min(limit, self.n)

    def allowance(self, name: str) -> int:
        return self.n

    def trim(self, name: str, n: int) -> int:
        return min(n, self.n)

    def gate(self, name: str) -> None:
        return None

    def allows_tree(self, name: str) -> bool:
        return True  # the shape the command line asked for

    def observe(self, rnd: Any) -> None:
        pass

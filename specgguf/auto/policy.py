"""`--spec-draft-n-max auto`: how much each drafter may propose, round by round.

The policy front. Its parts: cost_model (pure: what a round of k proposals is expected to
emit and cost), cost_estimator (verify and draft costs measured on this machine, with the
machine profile as prior), acceptance_estimator (per drafter and per position, with shadow
drafts and a confidence calibration), probes (when to measure instead of exploit, within an
exploration budget). This module combines them into the answers the speculative loop asks
(specgguf.core.rounds.BudgetPolicy):

- `budget(limit)`: the round's limit (0: a plain step);
- `allowance(name)`: how many tokens drafter `name` may propose this round;
- `trim(name, n)`: how many of the n tokens a free drafter proposed to send;
- `gate(name)`: the per-token question a model drafter asks (`continue_drafting`);
- `observe(round)`: learn from the finished round.

It never touches what is accepted, only how much is proposed, so the output is exactly as
lossless as with a fixed n_max; and it never writes to a drafter: it reads their names, caps
and timings, and asks free drafters for pure shadow drafts (`peek`).

Priors never speculate blindly: an unmeasured verify width is priced at a full target step per
extra token, an unmeasured draft cost at one target step per token, and acceptance starts at
0.5 (weight of one round), or at what earlier runs on this pair measured (the machine
profile). No prior can by itself keep a drafter off for good: while a drafter could pay at an
acceptance it has plausibly shown (this run or before), or has never been measured at all,
probes keep measuring it within the exploration budget, the first of them early in each run.
On a GPU verify(k) is ~1 and drafts are cheap, so long drafts win; on a 2-core CPU a draft
model rarely pays, while free n-gram drafts on text that is being copied pay most at widths of
16-48 tokens, where a pass costs a fraction of a step per token.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

from specgguf.auto.acceptance_estimator import AcceptanceEstimator, AcceptanceSettings
from specgguf.auto.cost_estimator import CostEstimator
from specgguf.auto.cost_model import (
    Costs,
    best_k,
    in_shared_pass,
    needed_acceptance,
    speedups,
    tree_ceiling,
    worth_continuing,
)
from specgguf.auto.probes import ProbeScheduler, ProbeSettings
from specgguf.auto.profile import AcceptanceMemory, CostProfile
from specgguf.auto.tree_choice import TreeChoice
from specgguf.core.draft import Drafter, DraftGate
from specgguf.core.tree import first_chain
from specgguf.drafters.draft_lengths import AUTO_N_MAX_CAP

#: the widest verify pass auto models. Free drafters (n-gram lookups) propose up to their own
#: size_m (48 by default), and on CPUs a long pass costs far less per token than a short one
#: (the batched kernels take over past ~9 tokens), so their widths must be priced too.
MAX_WIDTH = 64


class SharedPass(Protocol):
    """The last pass that held this sequence's rows along with other sequences' (a server's
    slots decoded in one batch): `peers` other sequences in it; `draft_pass_cost()`: a
    draft-model pass over that many sequences in units of a target pass over as many rows,
    as measured where they run (None: not measured yet)."""

    peers: int

    def draft_pass_cost(self) -> float | None: ...


@dataclass
class _Drafter:
    """What the policy knows of a drafter; read from it at `attach`, never written back."""

    cap: int  # the longest draft it may make: its own cap, within the widths priced
    free: bool = False  # free to draft (an n-gram lookup): shadow drafts measure it
    gated: bool = False  # asks `continue_drafting` per token (a model drafter)
    pending: int = 1  # tokens a model drafter must catch up on before its next draft
    source: Drafter | None = None  # the drafter itself: read for `peek` and `timing` only


@dataclass
class _RoundState:
    """continue_drafting's view of the current round, for one drafter."""

    p_reach: float = 1.0  # P(every proposal so far is accepted), by the calibration
    confidences: list[float] = field(default_factory=list)  # of the proposed tokens
    stopped: bool = False  # the policy said stop (after the draft computed that position)


@dataclass
class _Plan:
    k: int  # budget for this drafter this round
    speedup: float  # what the model expects of it
    probe: bool


def _first_chain_outcome(rnd: Any) -> tuple[int, int]:
    """(proposals, accepted) of a round's chain; for a tree round, of its first chain (the
    drafter's own best guesses: what its per-position acceptance measures, a branch kept
    elsewhere in the tree being the tree's gain, not the chain's)."""
    if getattr(rnd, "parents", None) is None:
        return len(rnd.proposed), int(rnd.n_accepted)
    chain = first_chain(rnd.parents)
    kept = 0
    for node, on_chain in zip(rnd.path, chain, strict=False):
        if node != on_chain:
            break
        kept += 1
    return len(chain), kept


class AdaptivePolicy:
    """Budget policy for `SpeculativeDecoder(..., budget_policy=...)`.

    Wiring (what `run --spec-draft-n-max auto` and `bench` do, through the Generator):

        policy = AdaptivePolicy(n_max_cap=8)
        policy.seed(profile)              # optional: this machine's measured costs
        decoder = session.decoder(sampler, n, seed, budget_policy=policy)
        policy.attach(decoder.drafters)   # their names, caps, kinds, timings
        ... generate ...
        policy.detach()

    `attach` lets the policy give each drafter its own budget, so a draft model that does not
    pay is skipped outright instead of catching up and then stopping at position 0, and lets
    it shadow free drafters that sit a round out.
    """

    KNOWN_WEIGHT = 3.0  # a profile width with this many samples is not probed again
    HOPELESS_RECHECK = 32  # rounds a "cannot pay here" verdict stands before it is re-checked
    HOPEFUL_RECHECK = 8  # ... and a "can pay" verdict
    FIRST_PROBE_K = 2  # the longest probe of a model drafter this run has not measured yet
    RATE_DECAY = 0.9  # per round: the realized throughput follows the last ~10 rounds

    def __init__(
        self,
        n_max_cap: int = AUTO_N_MAX_CAP,  # the longest draft a draft MODEL may make
        *,
        width_cap: int = MAX_WIDTH,
        cost_decay: float = 0.9,
        acceptance: AcceptanceSettings = AcceptanceSettings(),
        probes: ProbeSettings = ProbeSettings(),
        margin: float = 0.05,
        optimism: float = 0.15,
    ) -> None:
        if n_max_cap < 1:
            raise ValueError("n_max_cap must be >= 1")
        self.cap = n_max_cap  # longest draft of a model drafter
        #: widest pass priced: a free drafter may propose up to this (its own cap permitting)
        self.width = max(n_max_cap, width_cap)
        self.margin = margin
        self.optimism = optimism  # acceptance bonus under which a re-probe must look useful
        self.cost = CostEstimator(self.width, decay=cost_decay)
        self.accept = AcceptanceEstimator(self.width, acceptance)
        self.schedule = ProbeScheduler(n_max_cap, probes)
        self._drafters: dict[str, _Drafter] = {}
        self._plans: dict[str, _Plan] = {}
        self._asked: set[str] = set()  # the drafters the loop has asked this round, in order
        self._round: dict[str, _RoundState] = {}  # continue_drafting's state this round
        #: k returned by each budget() call, in order (what `auto` chose round by round)
        self.chosen: list[int] = []
        #: proposals actually verified each round (a free drafter's budget is its whole cap,
        #: what it then sends is its proposal as cut by `trim`)
        self.sent: list[int] = []
        #: the policy's own bookkeeping time: with the probes' net cost, auto's cost against
        #: plain decoding is measured, not guessed
        self.overhead_ms = 0.0
        self.seeded = False  # from this machine's stored profile
        self.warmed = False  # from the warm-up's timings only (specgguf.warmup)
        self._fresh_widths: frozenset[int] = frozenset()  # the warm-up's (CostProfile.fresh)
        self._observed = 0
        self._seen_timing: dict[str, Any] = {}  # a model drafter's last DraftTiming, consumed
        #: name -> (hopeless?, the round it was decided, what was known then)
        self._hopeless_memo: dict[str, tuple[bool, int, tuple[int, bool]]] = {}
        self._cache: dict[tuple, Any] = {}  # per-drafter derived estimates, cleared by observe
        #: the passes this sequence shares with others (a server's slots decoded together;
        #: None alone), given by whoever builds the decoder (the Generator): drafts are priced
        #: as if every sequence of the last pass drafted alike (in_shared_pass); the costs are
        #: learned from the rounds it verified alone (the others' wait is in a shared round's
        #: times)
        self.shared_pass: SharedPass | None = None
        #: chain or tree, per drafter whose shape branches (measured rates, the cost model's
        #: veto first)
        self.trees = TreeChoice()
        #: tokens emitted and their cost in target steps, both faded by RATE_DECAY per round:
        #: the throughput this sequence really reaches (continue_drafting's exchange rate)
        self._rate_tokens = 0.0
        self._rate_steps = 0.0
        #: the last budget() call's answer and its reason (the loop copies it into the round)
        self.last_decision: dict[str, Any] | None = None

    # -- attaching, sequences, the machine profile ------------------------------------------

    def attach(self, drafters: Sequence[Any]) -> None:
        self.detach()
        self._cache.clear()
        for d in drafters:
            free = bool(getattr(d, "free", False))
            info = self._model(d.name)
            info.free = free
            info.gated = info.gated or bool(getattr(d, "asks_per_token", False))
            # a free drafter may propose as far as its own cap; a model drafter up to n_max
            info.cap = max(1, min(int(d.max_draft), self.width if free else self.cap))
            info.source = d

    def longest_draft(self) -> int:
        """The longest draft any attached drafter may make this sequence: a draft model's
        n_max cap, a free drafter's own length (size_m) up to the widest pass priced. What
        the statistics report as n_draft under auto (the drafts really are that long)."""
        caps = [info.cap for info in self._drafters.values() if info.source is not None]
        return max(caps, default=self.cap)

    def detach(self) -> None:
        for info in self._drafters.values():
            info.source = None

    def seed(self, profile: CostProfile | None) -> None:
        """Start from costs measured by earlier runs on this machine (specgguf.auto.profile);
        probe widths the profile knows well are not probed again."""
        if profile is None:
            return
        known = self.cost.seed(profile)
        self._fresh_widths = profile.fresh
        self.seeded = known and profile.stored
        self.warmed = known and not profile.stored
        for name, mem in profile.acceptance.items():
            if mem.trials and mem.trials[0] > 0:
                # a best of 0 with too few rounds to show anything says nothing
                shown = mem.best if mem.best > 0 or mem.shown() is not None else None
                self.accept.seed(name, mem.trials, mem.hits, shown)
        self._cache.clear()
        self._hopeless_memo.clear()

    def export_profile(self) -> CostProfile | None:
        """What THIS run measured (not the priors it was seeded with), for
        specgguf.auto.profile.save_profile to merge into the machine's profile: costs, and
        the model drafters' acceptance."""
        gated = {n for n, m in self._drafters.items() if m.gated}
        out = self.cost.export(gated)
        acceptance = {}
        for name in sorted(gated):
            counts = self.accept.run_counts(name)
            if counts is not None:
                acceptance[name] = AcceptanceMemory(*counts)
        if acceptance:
            out = out if out is not None else CostProfile()
            out.acceptance = acceptance
        return out

    def new_sequence(self) -> None:
        """Start another prompt with what was learned (costs, acceptance, calibration): for
        --jsonl batches and conversations, where one policy can serve every decoder. The
        initial probes are not repeated; call `attach` with the new decoder's drafters."""
        for m in self._drafters.values():
            m.pending = 1  # what the drafter itself is behind by is its own `behind`
        self._observed = 0
        self._round = {}
        self._plans = {}
        self.schedule.new_sequence()

    def _model(self, name: str) -> _Drafter:
        m = self._drafters.get(name)
        if m is None:
            m = self._drafters[name] = _Drafter(cap=self.cap)
        return m

    # -- estimates ---------------------------------------------------------------------------

    @property
    def probes(self) -> int:
        return self.schedule.probes

    @property
    def probe_cost(self) -> float:
        return self.schedule.probe_cost

    @property
    def shadow_samples(self) -> int:
        return self.accept.shadow_samples

    def target_step_ms(self) -> float | None:
        return self.cost.target_step_ms()

    def verify_curve(self) -> tuple[float, ...]:
        return self.cost.verify_curve()

    def cap_of(self, name: str) -> int:
        """The longest draft `name` may make: its own cap, within the widths auto prices."""
        m = self._drafters.get(name)
        return m.cap if m is not None else self.cap

    def acceptance(self, name: str) -> list[float]:
        return self.accept.acceptance(name)

    def calibrated(self, name: str, confidence: float) -> float:
        return self.accept.calibrated(name, confidence)

    def _draft_rel(self, name: str) -> float | None:
        d = self.cost.draft_rel(name)
        if d is None:
            m = self._drafters.get(name)
            return 0.0 if m is not None and m.free else None
        return d

    def _peers(self) -> int:
        """Other sequences in the last pass this sequence shared (0: alone)."""
        return self.shared_pass.peers if self.shared_pass is not None else 0

    def costs(self, name: str) -> Costs:
        peers = self._peers()
        m = self._drafters.get(name)
        # a model drafter's step in a shared pass, as the server measured that pass's width
        shared_draft = (
            self.shared_pass.draft_pass_cost()
            if peers and self.shared_pass is not None and not (m is not None and m.free)
            else None
        )
        key = ("costs", name, peers, shared_draft)
        if key not in self._cache:
            d = self._draft_rel(name)
            # unmeasured: as dear as the target (probes measure it)
            costs = Costs(
                verify=self.cost.verify_curve(),
                draft=1.0 if d is None else d,
                rollback=self.cost.rollback_rel(),
            )
            self._cache[key] = in_shared_pass(costs, peers, draft=shared_draft)
        return self._cache[key]

    def ceiling(self, name: str) -> float:
        """The best speedup drafting with `name` could reach if every proposal were accepted,
        under the costs known now (unknown widths extrapolated along the known curve)."""
        key = ("ceiling", name)
        if key not in self._cache:
            d = self._draft_rel(name)
            costs = Costs(verify=self.cost.likely_curve(), draft=1.0 if d is None else d)
            self._cache[key] = max(speedups(costs, 1.0, self.cap_of(name)))
        return self._cache[key]

    def hopeless(self, name: str) -> bool:
        """Drafting with `name` cannot pay on this machine whatever the text: even at 100%
        acceptance the draft steps plus the wider pass cost more than the tokens they bring.
        Only decided once its draft cost and at least two verify widths are known (measured or
        from the profile); such a drafter is never probed again, which is what keeps auto
        within a hair of plain decoding where speculation cannot win (a small CPU)."""
        # either verdict is cheap to keep: costs drift slowly, so a "yes" is re-checked every
        # HOPELESS_RECHECK rounds (the hot path of auto on a machine where it decodes
        # plainly), a "no" every HOPEFUL_RECHECK (the hot path where it drafts: the ceiling
        # walks the whole extended curve, and on a GPU a round is only a few ms)
        # (a verdict also ends when what is known changes in kind: another width measured,
        # the draft cost measured here for the first time)
        known = (len(self.cost.known_widths()), self.cost.draft_known(name))
        memo = self._hopeless_memo.get(name)
        if memo is not None:
            verdict, since, then = memo
            if then == known and self._observed - since < (
                self.HOPELESS_RECHECK if verdict else self.HOPEFUL_RECHECK
            ):
                return verdict
        if self._draft_rel(name) is None or known[0] < 2:
            return False
        verdict = self.ceiling(name) < 1.0 + self.margin
        self._hopeless_memo[name] = (verdict, self._observed, known)
        return verdict

    def catch_up_cost(self, name: str, tokens: int) -> float:
        """Cost, in target steps, of the catch-up a model drafter needs before it can draft
        again after sitting out: reading `tokens` tokens in one batch (0 for n-gram
        drafters, which see every token anyway).

        Measured in this run: its per-token cost times `tokens`. Unmeasured: one draft step
        scaled as the target's pass of that width is (the likely verify curve, extrapolated
        past the widest measured pass). A batch costs far less per token than a step, and
        the more so the wider it is: a draft model that has not read a 400-token prompt yet
        pays about two of its steps for it on a GPU, not 400. (Priced at half a step per
        token, such a drafter never looked worth starting on a long prompt: a fresh process
        decoded the whole answer plainly.)"""
        m = self._drafters.get(name)
        if m is None or not m.gated or tokens <= 0:
            return 0.0
        measured = self.cost.catch_up_rel(name)
        if measured is not None:
            return measured * tokens
        draft = self.costs(name).draft
        return draft * Costs(verify=self.cost.likely_curve()).verify_cost(tokens - 1)

    def _behind(self, name: str) -> int:
        """Tokens drafter `name` must read before its next draft: the drafter's own count
        (a draft model that has not read the prompt yet is behind by all of it), else the
        policy's (tokens emitted while it sat out)."""
        m = self._drafters[name]
        own = m.source.behind if isinstance(m.source, Drafter) else 0
        return max(own, m.pending)

    def _catch_up_liability(self, name: str) -> float:
        """What starting to draft with `name` now costs before its first draft step, in
        target steps (its catch-up; the token emitted last round is part of any draft)."""
        return self.catch_up_cost(name, self._behind(name) - 1)

    def _may_explore(self, name: str | None = None) -> bool:
        """Within the exploration budget, counting what probing `name` would cost right now:
        resuming a skipped draft model means catching it up on everything emitted meanwhile."""
        liability = self._catch_up_liability(name) if name is not None else 0.0
        return self.schedule.may_explore(liability)

    def _repays_catch_up(self, name: str, plan: _Plan, limit: int) -> bool:
        """Whether starting to draft with model drafter `name` can win back its catch-up in
        the `limit` tokens this sequence may still emit: at the plan's speedup s, a token
        costs 1/s of a step instead of 1, so the rest of the sequence saves at most
        (1 - 1/s) * limit steps (a 48-token answer does not repay reading a long prompt on
        the draft model; an open-ended one always does)."""
        cost = self._catch_up_liability(name)
        return cost <= 0.0 or (1.0 - 1.0 / max(plan.speedup, 1.0)) * limit > cost

    def _hoped_acceptance(self, name: str) -> list[float]:
        """The acceptance a probe of `name` hopes for: `optimism` above the estimate, or one
        standard error where that is more (thin evidence: acceptance_estimator.optimistic),
        and not less than the best rate it has plausibly shown (this run, or remembered from
        earlier runs, until this run measures it); 100% when it was never measured anywhere."""
        acc = self.accept.optimistic(name, self.optimism)
        if self._drafters[name].free or self.accept.measured_here(name):
            return acc
        shown = self.accept.plausible(name)
        floor = 1.0 if shown is None else shown
        return [max(a, floor) for a in acc]

    def _could_pay(self, name: str) -> bool:
        """Whether drafting with `name` would pay at the acceptance a probe hopes for: a probe
        that cannot change the decision is not worth its price."""
        acc = self._hoped_acceptance(name)
        priced = self.costs(name)
        costs = Costs(verify=self.cost.likely_curve(), draft=priced.draft, rollback=priced.rollback)
        p_empty = self.accept.p_empty(name)
        k, _ = best_k(costs, acc, self.cap_of(name), margin=self.margin, p_empty=p_empty)
        return k > 0

    def _worth_probing(self, name: str, limit: int) -> bool:
        """A re-probe burst for `name` after a run of plain steps: only if it is not hopeless
        on this machine, its acceptance could plausibly make it pay, what it must catch up on
        first could be won back in the `limit` tokens left, and the exploration budget allows
        it. Cheap drafters are measured by shadow drafts instead, so they are probed only while
        no verify width is known at all."""
        if self._drafters[name].free and self.cost.known_widths():
            return False
        return (
            not self.hopeless(name)
            and self._could_pay(name)
            and self._catch_up_repaid_at_best(name, limit)
            and self._may_explore(name)
        )

    def _catch_up_repaid_at_best(self, name: str, limit: int) -> bool:
        """Whether a model drafter that has not read the text yet could win its catch-up
        back in `limit` tokens even at its ceiling (every proposal accepted): a probe that
        must first read a 1,000-token prompt on a draft model that can bring at most x1.1
        costs more than the whole answer could save, so it is not sent (and its acceptance
        stays unmeasured until an answer long enough to repay it). A draft step of unknown
        cost gives no ceiling to judge by: such a drafter is probed, which measures it."""
        if self._draft_rel(name) is None:
            return True
        return self._repays_catch_up(name, _Plan(1, self.ceiling(name), probe=True), limit)

    # -- plans -------------------------------------------------------------------------------

    def _wide_probe(self, name: str, acc: Sequence[float], current: float) -> _Plan | None:
        """A free drafter whose acceptance says long drafts would be accepted, while passes
        that wide were never measured here: priced at the optimistic curve, would a width
        past the measured ones clearly beat the best measured plan? Then send that width, so
        its cost is measured where it is used instead of extrapolated from short passes (on
        CPUs the cost per token falls steeply past ~9 tokens, so a line fitted to short passes
        hides a 2x on "print the whole file" prompts). The probe is charged to the exploration
        budget only for what it loses; one whose tokens are accepted pays for itself."""
        widest = max(self.cost.known_widths(), default=0)
        cap = self.cap_of(name)
        if widest <= 0 or widest >= cap:
            return None
        optimistic = Costs(verify=self.cost.optimistic_curve())
        k, s = best_k(optimistic, acc, cap, margin=self.margin)
        if k <= widest or s <= max(1.0, current) * (1.0 + self.margin):
            return None
        if not self._may_explore():
            return None
        self.schedule.probes += 1
        return _Plan(k, s, probe=True)

    def _plan_model(self) -> dict[str, _Plan]:
        """Each drafter's best plan under the current estimates (a wide probe for a free
        drafter when one looks worth it), then now and then a wider pass for the others."""
        plans: dict[str, _Plan] = {}
        for name, m in self._drafters.items():
            if self.hopeless(name):
                plans[name] = _Plan(0, 1.0, probe=False)
                continue
            costs, acc = self.costs(name), self.acceptance(name)
            cap = self.cap_of(name)
            p_empty = self.accept.p_empty(name)
            k, s = best_k(costs, acc, cap, margin=self.margin, p_empty=p_empty)
            if m.free:
                probe = self._wide_probe(name, acc, s)
                if probe is not None:
                    plans[name] = probe
                    continue
            if k > 0 and m.gated:
                # continue_drafting cuts low-confidence tails, so allow the length that pays
                # when the draft is confident (the best calibrated bin), never less than k.
                top = self.accept.best_calibrated(name)
                k_up, _ = best_k(costs, [max(a, top) for a in acc], cap, margin=self.margin)
                k = max(k, k_up)
            if k > 0 and m.free:
                k = cap  # a free drafter proposes what it has; `trim` cuts it to what pays
            plans[name] = _Plan(k, s, probe=False)
        self._plan_wider(plans)
        return plans

    def _plan_wider(self, plans: dict[str, _Plan]) -> None:
        """Wider passes than the widest measured one are priced at a full target step per
        extra token. When the measured curve's slope says a wider one could pay a model
        drafter, try the next width now and then, so a GPU can grow past the ladder (free
        drafters grow through `_wide_probe`)."""
        widest = self.cost.widest_measured()
        nxt = self.schedule.next_wider(widest)
        if nxt is None or widest <= 0:
            return
        hopeful = [n for n in self._drafters if not self.hopeless(n)]
        if not hopeful:
            return
        curve = self.cost.verify_curve()[: widest + 1]
        wants = [
            name
            for name in hopeful
            if not self._drafters[name].free
            and best_k(
                Costs(verify=curve, draft=self.costs(name).draft),
                self.acceptance(name),
                nxt,
                margin=self.margin,
                p_empty=self.accept.p_empty(name),
            )[0]
            > widest
        ]
        if wants and self.schedule.widening_due():
            for name in wants:
                plans[name] = _Plan(nxt, plans[name].speedup, probe=True)
            self.schedule.probes += 1

    def _plan_probe(
        self, limit: int, k: int | None = None, names: Sequence[str] | None = None
    ) -> dict[str, _Plan]:
        """Probe plans: width k for every drafter (or those `names`), or each drafter's least
        bad k >= 1 under the current estimates; none for a drafter whose catch-up the `limit`
        tokens left could not repay."""
        plans = {}
        for name in self._drafters:
            if (
                (names is not None and name not in names)
                or self.hopeless(name)
                or not self._catch_up_repaid_at_best(name, limit)
            ):
                plans[name] = _Plan(0, 1.0, probe=False)
                continue
            kk = k
            if kk is None:
                # the k that would pay best at the acceptance the probe hopes for; a model
                # drafter not yet measured in this run starts short (cheap probes first)
                cap = self.cap_of(name)
                sp = speedups(self.costs(name), self._hoped_acceptance(name), cap)
                kk = max(range(1, cap + 1), key=lambda j: (sp[j], -j))
                if self._drafters[name].gated and not self.accept.measured_here(name):
                    kk = min(kk, self.FIRST_PROBE_K)
            plans[name] = _Plan(kk, 1.0, probe=True)
        return plans

    def _known_well(self, k: int) -> bool:
        """An initial probe width the profile knows well enough to skip (if no model
        drafter's draft cost is still unknown): measured there with KNOWN_WEIGHT samples, or
        lying between two widths this process's warm-up timed (its 2- and 5-token passes,
        moments ago on this machine): the line between them prices it well enough, and each
        ladder probe on a CPU costs up to two plain steps for one token."""
        unknown_draft = any(
            m.gated and self._draft_rel(n) is None for n, m in self._drafters.items()
        )
        if unknown_draft:
            return False
        prior = self.cost.prior_verify.get(k)
        if prior is not None and prior.weight >= self.KNOWN_WEIGHT:
            return True
        fresh = [j for j in self._fresh_widths if j in self.cost.prior_verify]
        return any(j <= k for j in fresh) and any(j >= k for j in fresh)

    # -- the loop's questions ----------------------------------------------------------------

    def budget(self, limit: int) -> int:
        """Draft budget for the next round (0: a plain step), at most `limit`."""
        t0 = time.perf_counter()
        try:
            return self._budget(limit)
        finally:
            self.overhead_ms += (time.perf_counter() - t0) * 1e3

    def _budget(self, limit: int) -> int:
        default = 0
        charged = False
        why = "plan"
        self.schedule.share = 1 + self._peers()  # the server explores within one budget
        ladder = self.schedule.next_ladder_width(
            self._known_well,
            lambda: bool(self._drafters) and all(self.hopeless(n) for n in self._drafters),
        )
        if ladder is not None:  # initial probes: measure the cost curve rather than assume it
            default = ladder
            plans = self._plan_probe(limit, default)
            self.schedule.probes += default > 0
            why = "first rounds: measuring this width"
        else:
            plans = self._plan_model()
            unrepaid = False  # a plan dropped: its catch-up would not be won back
            for name, plan in plans.items():
                m = self._drafters[name]
                if plan.k and m.gated and not self._repays_catch_up(name, plan, limit):
                    plans[name] = _Plan(0, 1.0, probe=False)
                    unrepaid = True
            if all(p.k == 0 for p in plans.values()):
                names = self.schedule.idle_round(
                    lambda: [n for n in self._drafters if self._worth_probing(n, limit)],
                    any_drafter=bool(self._drafters),
                )
                if names is not None:  # a burst of probes: one round is too little evidence
                    plans = self._plan_probe(limit, names=names)
                    self.schedule.probes += 1
                    # no drafter known yet (not attached, none has proposed): a short probe
                    default = 1 if not plans else 0
                    why = "probe burst after plain steps"
                elif unrepaid:
                    why = "catch-up not repaid in the tokens left"
                else:
                    why = "no drafter pays at the current estimates"
            elif self.schedule.drafting_round():
                # while speculating, a plain step now and then keeps the unit of every cost
                # (the plain step's time, which drifts with the context) measured
                plans = {n: _Plan(0, p.speedup, probe=False) for n, p in plans.items()}
                why = "plain step: re-measuring the unit"
            elif any(p.probe for p in plans.values()):
                why = "probe: a wider pass"
            # (the initial probes are the price of measuring at all: not charged)
            charged = default > 0 or any(p.probe for p in plans.values())
        in_probe = default > 0 or any(p.probe for p in plans.values())
        self.schedule.start_round(probe=in_probe, charged=charged)
        self._plans = plans
        self._asked = set()
        if limit > 0:
            self._shadow_idle(plans)
        k = max((p.k for p in plans.values()), default=default)
        k = max(0, min(k, limit, self.width))
        self.chosen.append(k)
        #: what this round was allowed and why, with each drafter's plan and how far each
        #: model drafter is behind (what its catch-up must read first) (--trace's `auto`)
        self.last_decision = {
            "k": k,
            "why": why,
            "plans": {n: [p.k, round(p.speedup, 3)] for n, p in plans.items()},
            "behind": {n: self._behind(n) for n, m in self._drafters.items() if m.gated},
        }
        return k

    def allowance(self, name: str) -> int:
        """How many tokens drafter `name` may propose this round (after `budget`): its plan,
        or no limit of the policy's own for a drafter it has no plan for. (The loop asks the
        drafters in priority order: those asked so far this round are behind `name`'s turn.)"""
        self._asked.add(name)
        plan = self._plans.get(name)
        if plan is None:
            return 0 if self._drafters.get(name) is not None else 1 << 30
        return min(plan.k, self.cap_of(name))

    def _shadow_idle(self, plans: dict[str, _Plan]) -> None:
        """Free drafters that sit this round out are asked what they would have proposed (a
        pure query); the tokens emitted next say how much of it would have been accepted."""
        for name, m in self._drafters.items():
            p = plans.get(name)
            if not m.free or (p is not None and p.k > 0):
                continue
            self._shadow(name, m)

    def _shadow(self, name: str, m: _Drafter) -> None:
        """Ask free drafter `name` what it would propose (a pure query), to be scored against
        the tokens emitted next, where its acceptance estimate wants a sample."""
        keep = self.accept.wants_shadow(name)
        if m.source is None or keep is None:
            return
        try:
            draft = m.source.peek(m.cap)
        except Exception:  # a shadow is never worth a failed generation
            return
        self.accept.add_shadow(name, draft.tokens[:keep] if keep else draft.tokens)

    def trim(self, name: str, n: int) -> int:
        """How many of the `n` tokens that `name` just proposed to send to the target.

        Model drafters are cut token by token (`continue_drafting`); a free drafter proposes
        all it has and is cut here, at the length with the best expected tokens per unit of
        verify cost under this drafter's per-position acceptance: a long proposal from a text
        that keeps being copied goes out whole, one from a text that drifts is cut short;
        none of it when a drafter later in line plans a better round (`_next_in_line`), which
        then takes the round. A probe goes out whole (it measures that width)."""
        t0 = time.perf_counter()
        try:
            m = self._drafters.get(name)
            plan = self._plans.get(name)
            if m is None or not m.free or plan is None or plan.probe or n <= 1:
                return n
            k, s = best_k(self.costs(name), self.acceptance(name), n)
            if k and s < self._next_in_line():
                self._shadow(name, m)  # it passes the round on, and still learns from it
                return 0
            return k
        finally:
            self.overhead_ms += (time.perf_counter() - t0) * 1e3

    def _next_in_line(self) -> float:
        """The best speedup a drafter not yet asked this round plans (1.0: none drafts). The
        first non-empty draft takes the round (llama.cpp's order), so a free drafter's
        proposal that is expected to pay less than what a later drafter plans would take the
        round from it: a two-token n-gram guess that half the time fails, ahead of a draft
        model that is right nine times in ten. `trim` then passes the round on."""
        return max(
            (
                p.speedup
                for n, p in self._plans.items()
                if p.k > 0 and not p.probe and n not in self._asked
            ),
            default=1.0,
        )

    def allows_tree(self, name: str) -> bool:
        """Whether `name`, whose shape branches, may grow a tree this round: never where the
        cost model says no tree of its shape can beat this round's chain
        (cost_model.tree_ceiling), never on a probe (it measures a chain's width); else as
        the measured rates of its chain and tree rounds say (TreeChoice)."""
        m = self._drafters.get(name)
        plan = self._plans.get(name)
        shape = getattr(m.source, "tree", None) if m is not None else None
        if shape is None or not shape.branches or plan is None or plan.k <= 0 or plan.probe:
            return False
        nodes = shape.node_cap(plan.k)
        # the tree's wider pass as the curve most likely is (widths past the widest measured
        # rise at the measured slope), not at the prior a plan is priced at (a full step per
        # unmeasured row), which no tree could ever beat, so none would ever be measured
        costs = replace(self.costs(name), verify=self.cost.likely_curve())
        ceiling = tree_ceiling(costs, self.acceptance(name), plan.k, nodes)
        return self.trees.wants_tree(name, can_pay=ceiling > 1.0 + self.margin)

    def gate(self, name: str) -> DraftGate:
        """The per-token question for model drafter `name` this round."""
        return partial(self.continue_drafting, name)

    def continue_drafting(self, name: str, position: int, confidence: float) -> bool:
        """Asked by a model drafter before it proposes token `position` (0-based) of this
        round, whose top probability is `confidence`: is that token still worth its cost?
        (calibrated confidence; continue iff some longer draft has positive net value
        tokens - rate * extra cost, rate being the throughput this sequence really reaches:
        `realized_rate`)."""
        m = self._model(name)
        m.gated = True
        st = self._round.get(name)
        if position == 0 or st is None:
            st = self._round[name] = _RoundState()
        plan = self._plans.get(name)
        n_max = plan.k if plan is not None else self.cap_of(name)
        if position >= n_max:
            ok = False
        elif plan is not None and plan.probe:
            ok = True  # a probe measures the full width
        else:
            a_now = self.calibrated(name, confidence)
            acc = self.acceptance(name)
            ok = worth_continuing(
                self.costs(name),
                position,
                p_reach=st.p_reach,
                a_next=a_now,
                future=acc[position + 1 :] or acc[-1:],
                n_max=n_max,
                rate=self.realized_rate(),
            )
            if ok:
                st.p_reach *= a_now
        if ok:
            st.confidences.append(confidence)
        else:
            st.stopped = True
        return ok

    def realized_rate(self) -> float:
        """Tokens per target step over the last rounds, as measured (at least 1: a plain
        step's): what a unit of cost already buys, so a draft token is worth proposing only
        if it brings more than that (maximising tokens per cost over many rounds means
        maximising tokens - rate * cost in each, at the rate reached). Not the plan's
        expected speedup: that comes from the acceptance of the tokens the gate let through,
        the confident ones, so it runs ahead of what rounds bring, and a gate priced at it
        stops drafts that would pay (on a GPU, auto at 0.74 of a fixed length)."""
        if self._rate_steps <= 0.0:
            return 1.0
        return max(1.0, self._rate_tokens / self._rate_steps)

    def _learn_rate(self, emitted: int, steps: float | None) -> None:
        if steps is None or steps <= 0.0:
            return
        d = self.RATE_DECAY
        self._rate_tokens = self._rate_tokens * d + emitted
        self._rate_steps = self._rate_steps * d + steps

    # -- learning ----------------------------------------------------------------------------

    def observe(self, rnd: Any) -> None:
        """Learn from a finished round (specgguf.core.rounds.Round)."""
        t0 = time.perf_counter()
        try:
            self._observe(rnd)
        finally:
            self.overhead_ms += (time.perf_counter() - t0) * 1e3

    def _observe(self, rnd: Any) -> None:
        k = len(rnd.proposed)
        self.sent.append(k)
        self._observed += 1
        # a pass shared with other sequences is no cost sample: timed from this sequence's
        # side it holds the wait for the others too (acceptance is learned all the same)
        solo = self._peers() == 0
        if self._observed > 1 and solo:  # the first round follows the prompt's pass
            self.cost.add_verify(k, float(rnd.verify_ms))
        rollback_ms = getattr(rnd, "rollback_ms", 0.0)
        if k > 0 and rnd.n_accepted < k:  # a rejection: what undoing it cost the target
            self.cost.add_rollback(float(rollback_ms))
        self.cost.changed()
        self._cache.clear()  # estimates change only here
        base = self.target_step_ms()
        spent = float(rnd.draft_ms) + float(rnd.verify_ms) + float(rollback_ms)
        cost = spent / base if base else None
        self.schedule.end_round(
            k, len(rnd.emitted), cost, width_known=bool(self.cost.known_widths())
        )
        if self._observed > 1 and solo:  # (the first round follows the prompt's pass)
            self._learn_rate(len(rnd.emitted), cost)
        self.accept.next_round()
        self.accept.resolve_shadows(rnd.emitted)
        timed = self._learn_draft_timing(base, learn=solo)
        rounds, self._round = self._round, {}
        for name, m in self._drafters.items():
            if m.gated:
                ran = name in rounds or (k > 0 and rnd.drafter == name) or name in timed
                m.pending = 1 if ran else m.pending + len(rnd.emitted)
        for name, st in rounds.items():
            empty = st.stopped and not st.confidences and not (k and rnd.drafter == name)
            self.accept.add_attempt(name, empty=empty)
        if k == 0 or not rnd.drafter:
            return
        m = self._drafters.get(rnd.drafter)
        shape = getattr(m.source, "tree", None) if m is not None else None
        if shape is not None and shape.branches:
            self.trees.observe(
                rnd.drafter, tree=rnd.parents is not None, tokens=len(rnd.emitted), ms=spent
            )
        k, n_acc = _first_chain_outcome(rnd)
        st = rounds.get(rnd.drafter)
        self.accept.add_round(rnd.drafter, k, n_acc, st.confidences if st is not None else ())

    def _learn_draft_timing(self, base: float | None, *, learn: bool = True) -> set[str]:
        """Draft costs from the model drafters' own timing of their last proposal.

        The cost model charges `draft` per proposal, so that is what is measured: a round's
        drafting time (the catch-up of the 1-2 tokens emitted last round, then one decode per
        further proposal, plus a decode whose token was judged not worth proposing) divided by
        the tokens proposed; after a full acceptance the catch-up is a 2-token batch, dearer
        than a step, and it belongs in the price. An attempt that proposed nothing counts its
        time as one proposal's (the p_empty case). A longer catch-up (resuming a skipped draft
        model) is priced per token instead. Returns the names that decoded this round (with
        `learn` False, a shared pass's round, their times are not samples)."""
        timed: set[str] = set()
        for name, m in self._drafters.items():
            t = m.source.timing if m.source is not None else None
            if t is None or t is self._seen_timing.get(name) or t.catch_up_tokens <= 0:
                continue  # nothing new (or nothing decoded): no sample
            self._seen_timing[name] = t
            timed.add(name)
            if not learn:
                continue
            if t.catch_up_tokens <= 2:
                self.cost.add_draft(name, (t.catch_up_ms + t.steps_ms) / max(1, t.proposed))
                continue
            if base and t.catch_up_tokens >= 4:
                self.cost.add_catch_up(name, t.catch_up_ms / t.catch_up_tokens / base)
            if t.steps and t.proposed > 1:  # the decodes after the catch-up, one per proposal
                self.cost.add_draft(name, t.steps_ms / t.steps)
        return timed

    # -- reporting ---------------------------------------------------------------------------

    def why_not(self, name: str) -> str | None:
        """Why `name` does not draft under the current estimates, in one phrase (None when it
        would): its costs cannot pay at any acceptance, or the acceptance it showed (this run,
        or remembered from earlier runs) is below what paying needs here."""
        costs = self.costs(name)
        cap = self.cap_of(name)
        p_empty = self.accept.p_empty(name)
        if best_k(costs, self.acceptance(name), cap, margin=self.margin, p_empty=p_empty)[0]:
            return None
        if self.hopeless(name):
            return f"cannot pay here (x{self.ceiling(name):.2f} even at 100% acceptance)"
        need = needed_acceptance(costs, cap, margin=self.margin, p_empty=p_empty)
        if need is None:
            return "cannot pay at the measured costs even at 100% acceptance"
        if self.accept.measured_here(name):
            what = "measured acceptance"
        elif self.accept.remembered(name):
            what = "remembered acceptance"
        else:
            return f"acceptance not measured yet (needs {need[0]:.2f} at k {need[1]})"
        # what the decision reads: the current estimate (recent rounds weigh most) over the
        # positions that length would draft, as one rate comparable with the need
        acc = self.acceptance(name)[: need[1]]
        return f"{what} {sum(acc) / len(acc):.2f} too low: needs {need[0]:.2f} at k {need[1]}"

    def summary(self) -> dict[str, Any]:
        """What `auto` chose and why: chosen-k histogram, measured costs, acceptance."""
        base = self.target_step_ms()
        known = self.cost.known_curve()
        drafters = {}
        for name in self._drafters:
            costs, acc = self.costs(name), self.acceptance(name)
            p_empty = self.accept.p_empty(name)
            k, s = best_k(costs, acc, self.cap_of(name), margin=self.margin, p_empty=p_empty)
            d_rel = self._draft_rel(name)
            dm = self.cost.draft_ms.get(name)
            drafters[name] = {
                "draft_ms_per_token": round(dm.mean, 3) if dm is not None and dm.known else None,
                "draft_cost_rel": round(d_rel, 4) if d_rel is not None else None,
                "ceiling": round(self.ceiling(name), 4),
                "hopeless": self.hopeless(name),
                "acceptance": [round(a, 4) for a in acc[: self.cap_of(name)]],
                **self.accept.summary(name),
                "best_k": k,
                "expected_speedup": round(s, 4),
                "why_not": self.why_not(name),
            }
            if self.trees.knows(name):
                drafters[name]["trees"] = self.trees.summary(name)
        hist = Counter(self.chosen)
        sched = self.schedule
        return {
            "n_max_cap": self.cap,
            "width_cap": self.width,
            "rounds": len(self.chosen),
            "probes": sched.probes,
            "explore_cost_steps": round(sched.explore_spent, 3),
            "probe_cost_steps": round(sched.probe_cost, 3),
            "tokens": sched.elapsed,
            "policy_ms": round(self.overhead_ms, 3),
            "chosen_k": {str(k): hist[k] for k in sorted(hist)},
            "mean_k": round(sum(self.chosen) / len(self.chosen), 3) if self.chosen else 0.0,
            "mean_sent": round(sum(self.sent) / len(self.sent), 3) if self.sent else 0.0,
            "tokens_per_pass": round(sched.elapsed / len(self.sent), 3) if self.sent else 0.0,
            "target_step_ms": round(base, 3) if base else None,
            "verify_cost_rel": {
                str(k): round(c, 4) for k, c in sorted(known.items()) if math.isfinite(c)
            },
            "profile_seeded": self.seeded,
            "warm_up_seeded": self.warmed,
            "drafters": drafters,
        }

    def report_lines(self) -> list[str]:
        """A few lines for stderr after `run --spec-draft-n-max auto`."""
        s = self.summary()
        lines = [
            f"auto: {s['rounds']} rounds, mean k {s['mean_k']:.2f} allowed, "
            f"{s['mean_sent']:.2f} sent, {s['tokens_per_pass']:.2f} tokens per pass, "
            f"probes {s['probes']} "
            f"(cost {s['probe_cost_steps']:+.2f} steps), bookkeeping {s['policy_ms']:.1f} ms, "
            "chosen k " + " ".join(f"{k}:{n}" for k, n in s["chosen_k"].items()),
        ]
        if s["target_step_ms"]:
            lines.append(
                f"auto: target step {s['target_step_ms']:.1f} ms, verify cost by k "
                + " ".join(f"{k}:{c:.2f}" for k, c in s["verify_cost_rel"].items())
                + (" (with this machine's profile)" if s["profile_seeded"] else "")
                + (" (with the warm-up's timings)" if s["warm_up_seeded"] else "")
            )
        for name, d in s["drafters"].items():
            cost = f"{d['draft_cost_rel']:.2f}" if d["draft_cost_rel"] is not None else "?"
            lines.append(
                f"auto: {name}: draft step {cost} of a target step, acceptance "
                + " ".join(f"{a:.2f}" for a in d["acceptance"][:4])
                + f", best k {d['best_k']} (x{d['expected_speedup']:.2f})"
                + (f"; not drafting: {d['why_not']}" if d["why_not"] else "")
            )
        return lines

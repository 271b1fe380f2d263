"""`--spec-draft-n-max auto`: choose how much to draft from measured costs and acceptance.

Speculation pays only when the tokens a round is expected to emit outweigh what the round
costs. In units of one plain target step (a 1-token pass), a round with k proposals costs

    C(k) = draft * k + verify(k)         (verify(0) = 1: a plain step, no drafting)

and emits E(k) = 1 + a1 + a1*a2 + ... + a1*...*ak tokens, where a_i is the probability that
proposal i is accepted given that proposals 1..i-1 were (the expected gain of speculative
sampling; constant a gives (1 - a^(k+1)) / (1 - a)). The speedup over plain decoding is
E(k) / C(k); `best_k` picks the k in 0..n_max that maximises it, and k = 0 (do not speculate)
whenever nothing beats 1. On a GPU verify(k) is ~1 and drafts are cheap, so long drafts win; on
a 2-core CPU (draft step 0.5, verify(1) 1.5, verify(3) 1.8 plain steps) they rarely do.

`AdaptivePolicy` is the speculative loop's budget policy (specgguf.speculative): it learns
verify(k) and the per-token draft cost from the rounds' own timings, acceptance per drafter and
per draft position from decayed counts, and a confidence -> acceptance calibration for model
drafters; it answers `budget(limit)` before each round and `continue_drafting(...)` before each
further draft token. It never touches what is accepted, only how much is proposed, so the
output is exactly as lossless as with a fixed n_max.

Priors never speculate blindly: an unmeasured verify width is priced at a full target step
per extra token, an unmeasured draft cost at one target step per token, and acceptance starts
at 0.5 (weight of one round). So the first rounds are explicit probes, k = 0, 1, 2, 3, 4, that
measure the costs; a wider pass (6, 8, ...) is tried now and then once the measured curve's
slope says it could pay. Acceptance is counted per drafter and per position with counts that
decay every round (0.97), so after a run of k = 0 rounds the old evidence has faded; the
policy then probes again, a burst of 3 rounds at growing intervals (8, 16, 32, 64 rounds),
so it notices when speculation starts paying (e.g. the text turns repetitive and n-gram
lookup hits). Probing is not free, and re-probing a skipped draft model is dear: it must first
catch up on every token emitted meanwhile (on the 2-core CPU a batch costs ~0.12 target steps
per token). So probes after the initial ones must fit an exploration budget, 5% of the plain
time elapsed, counting what past probes cost beyond plain steps plus the catch-up a probe of
that drafter would need now: auto then never trails plain decoding by more than its initial
probes and a few percent, and where probes are cheap (n-gram lookup, a GPU) it probes freely.

Per token, `continue_drafting` prices the next draft token with the draft's confidence
calibrated online (10 bins, decayed counts, a bin without data trusts the confidence itself):
continue iff some longer draft has positive net value  tokens - rate * extra cost, where
rate is the speedup the policy expects anyway (worth_continuing).

Pure module: no llama_cpp import; the decision functions take plain numbers.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specgguf.profile import CostProfile, Estimate, plausible_draft, plausible_verify
from specgguf.spec_types import AUTO_N_MAX_CAP

Acceptance = float | Sequence[float]

#: the longest draft `--spec-draft-n-max auto` lets a draft MODEL make unless told otherwise
DEFAULT_N_MAX_CAP = AUTO_N_MAX_CAP  # (defined with the spec types: the CLI reads it)
#: the widest verify pass auto models. Free drafters (n-gram lookups) propose up to their own
#: size_m (48 by default), and on CPUs a long pass costs far less per token than a short one
#: (the batched kernels take over past ~9 tokens), so their widths must be priced too.
MAX_WIDTH = 64
#: what a wide probe assumes of passes wider than any measured: this share of the slope of
#: the measured ones (see _optimistic_curve)
WIDE_SLOPE_OPTIMISM = 0.5


# -- pure cost model ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Costs:
    """Costs relative to one plain target step.

    verify[k] is the cost of one target pass over 1 + k tokens (k proposals), verify[0] is the
    plain step itself (normally 1.0). Past the end of the tuple the curve is extrapolated with
    its average slope (at least `min_slope` per token). `draft` is the cost of one draft step
    (one draft-model decode; ~0 for n-gram lookup).
    """

    verify: tuple[float, ...] = (1.0,)
    draft: float = 0.0
    min_slope: float = 0.0

    def verify_cost(self, k: int) -> float:
        v = self.verify
        if k < len(v):
            return v[k]
        last = len(v) - 1
        slope = (v[last] - v[0]) / last if last > 0 else 1.0
        return v[last] + (k - last) * max(slope, self.min_slope)

    def round_cost(self, k: int) -> float:
        """Cost of a round with k proposals: k draft steps (the first is the draft catching up
        on the last emitted token, the others decode the proposals) and one verify pass."""
        return self.draft * k + self.verify_cost(k) if k > 0 else self.verify_cost(0)


def _acc(acceptance: Acceptance, i: int) -> float:
    """Acceptance of position i (0-based); a short sequence repeats its last value."""
    if isinstance(acceptance, (int, float)):
        a = float(acceptance)
    elif len(acceptance) == 0:
        a = 0.0
    else:
        a = float(acceptance[min(i, len(acceptance) - 1)])
    return min(1.0, max(0.0, a))


def expected_tokens(acceptance_per_position: Acceptance, k: int) -> float:
    """Expected tokens one round emits with k proposals: 1 + sum_j prod_{i<=j} a_i.

    `acceptance_per_position[i]` is P(proposal i accepted | proposals before it accepted); a
    float means the same rate everywhere, which gives (1 - a^(k+1)) / (1 - a).
    """
    total, reach = 1.0, 1.0
    for i in range(max(0, k)):
        reach *= _acc(acceptance_per_position, i)
        total += reach
    return total


def speedups(
    costs: Costs, acceptance: Acceptance, n_max: int, *, p_empty: float = 0.0
) -> list[float]:
    """Expected speedup over plain decoding for k = 0..n_max (index k); speedups[0] == 1.

    `p_empty`: probability that a drafting attempt ends before its first token (a model
    drafter that, after one draft step, finds its guess not worth proposing); such a round
    costs that draft step plus a plain step and emits one token.
    (Asked several times a round for widths up to 64: one plain loop, no per-k method calls;
    numpy's per-call overhead is larger than this whole loop at these sizes.)
    """
    n = max(0, n_max)
    base = costs.verify_cost(0)
    p = min(1.0, max(0.0, p_empty))
    q = 1.0 - p
    if isinstance(acceptance, (int, float)):
        acc = [min(1.0, max(0.0, float(acceptance)))] * n
    else:
        acc = [0.0 if a < 0.0 else 1.0 if a > 1.0 else a for a in acceptance[:n]]
        acc += [acc[-1] if acc else 0.0] * (n - len(acc))
    verify, draft = costs.verify, costs.draft
    known = len(verify)
    empty = p * (draft + base)
    out = [1.0]
    expected, reach = 1.0, 1.0  # expected_tokens(acceptance, k), built up one k at a time
    for k in range(1, n + 1):
        reach *= acc[k - 1]
        expected += reach
        v = verify[k] if k < known else costs.verify_cost(k)
        out.append((q * expected + p) * base / (q * (draft * k + v) + empty))
    return out


def best_k(
    costs: Costs,
    acceptance: Acceptance,
    n_max: int,
    *,
    margin: float = 0.0,
    p_empty: float = 0.0,
) -> tuple[int, float]:
    """The draft length in 0..n_max with the highest expected speedup, and that speedup.

    A k > 0 is chosen only if its speedup exceeds 1 + margin (the margin keeps noise-level
    gains from switching speculation on); ties go to the shorter draft. (0, 1.0) means
    "do not speculate".
    """
    best, best_s = 0, 1.0
    for k, s in enumerate(speedups(costs, acceptance, n_max, p_empty=p_empty)):
        if k > 0 and s > 1.0 + margin and s > best_s + 1e-12:
            best, best_s = k, s
    return best, best_s


def worth_continuing(
    costs: Costs,
    position: int,
    *,
    p_reach: float,
    a_next: float,
    future: Acceptance,
    n_max: int,
    rate: float = 1.0,
) -> bool:
    """Whether a model drafter that has proposed `position` tokens this round should propose
    one more, whose acceptance (given the earlier ones were accepted) is `a_next`.

    `p_reach`: probability that every earlier proposal is accepted; `future`: acceptance of the
    positions after this one (per position, as in `expected_tokens`, index 0 = position + 1);
    `n_max`: the most tokens this round may draft; `rate`: what a unit of cost is worth in
    tokens (the throughput the policy expects anyway, >= 1 plain step's token).

    Stopping now leaves the round at `position` proposals. Continuing to j > position adds the
    expected tokens of positions position..j-1 and costs the extra verify width plus the draft
    decodes still needed: the logits for this token are already computed (sunk), but each
    token kept before n_max is decoded at once to get the next position's logits. Continue iff
    some j has positive net value  gain_tokens - rate * extra_cost.
    """
    i = position
    if i >= n_max:
        return False
    v_i = costs.verify_cost(i)
    gain, reach = 0.0, p_reach * min(1.0, max(0.0, a_next))
    for j in range(i + 1, n_max + 1):
        if j > i + 1:
            reach *= _acc(future, j - i - 2)
        gain += reach
        draft_steps = (j - i) if j < n_max else (j - i - 1)
        extra = costs.draft * draft_steps + costs.verify_cost(j) - v_i
        if gain - rate * extra > 1e-12:
            return True
    return False


# -- online estimates --------------------------------------------------------------------------


class _DecayedMean:
    """Mean with exponentially decaying weights; robust to one-off outliers once warm."""

    __slots__ = ("mean", "weight", "n")

    def __init__(self) -> None:
        self.mean = 0.0
        self.weight = 0.0
        self.n = 0

    def add(self, x: float, decay: float) -> None:
        if self.n >= 3 and self.mean > 0:  # a stall (another process, a long catch-up) is
            x = min(max(x, self.mean / 3), self.mean * 3)  # clipped, not averaged in whole
        self.weight = self.weight * decay + 1.0
        self.mean += (x - self.mean) / self.weight
        self.n += 1

    @property
    def known(self) -> bool:
        return self.n > 0


class _DrafterModel:
    """What the policy has learned about one drafter (by its --spec-type name)."""

    def __init__(self, cap: int, bins: int) -> None:
        self.draft_ms = _DecayedMean()  # per proposed token
        self.trials = [0.0] * cap  # position i reached (earlier proposals all accepted)
        self.hits = [0.0] * cap  # ... and accepted
        self.cal_trials = [0.0] * bins  # confidence bin -> reached
        self.cal_hits = [0.0] * bins  # ... and accepted
        self.gated = False  # asks continue_drafting (a model drafter with confidences)
        self.cheap = False  # an n-gram lookup: free to draft, shadow drafts measure acceptance
        self.shadow_trials = 0  # shadow drafts resolved
        self.attempts = 0.0  # decayed: rounds in which continue_drafting was asked
        self.empties = 0.0  # ... and said stop before the first token
        self.rounds = 0
        self.empty_attempts = 0  # asked, and stopped before the first token
        self.pending = 1  # tokens a model drafter must catch up on before its next draft
        self.catch_up = _DecayedMean()  # target steps per caught-up token (relative)
        self.tokens_drafted = 0
        self.tokens_accepted = 0

    def decay(self, f: float) -> None:
        for arr in (self.trials, self.hits, self.cal_trials, self.cal_hits):
            for i in range(len(arr)):
                arr[i] *= f
        self.attempts *= f
        self.empties *= f

    def p_empty(self) -> float:
        return self.empties / (self.attempts + 1.0)  # prior: attempts do propose


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


class AdaptivePolicy:
    """Budget policy for `SpeculativeDecoder(..., budget_policy=...)`.

    Wiring (what `run --spec-draft-n-max auto` and `bench` do):

        policy = AdaptivePolicy(n_max_cap=8)
        decoder = session.decoder(sampler, n, seed, budget_policy=policy)
        policy.attach(decoder.drafters)   # per-drafter budgets + continue_drafting hooks
        ... generate ...
        policy.detach()                   # restores the drafters' own caps

    `attach` is optional but better: it lets the policy give each drafter its own budget
    (through `drafter.max_draft`, restored by `detach`), so a draft model that does not pay is
    skipped outright instead of catching up and then stopping at position 0; and it sets
    `drafter.policy` on model drafters so `continue_drafting` is asked per token.
    """

    PROBE_LADDER = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
    PRIOR_WEIGHT = 6.0  # samples a profile's estimate counts as at most
    KNOWN_WEIGHT = 3.0  # a profile width with this many samples is not probed again
    HOPELESS_RECHECK = 32  # rounds a "cannot pay here" verdict stands before it is re-checked
    INITIAL_PROBE_MAX = 4
    EXPAND_EVERY = 8  # rounds between tries of the next wider pass while the widest one pays
    REFRESH_EVERY = 32  # rounds between plain steps that re-measure the unit while drafting

    def __init__(
        self,
        n_max_cap: int = DEFAULT_N_MAX_CAP,
        *,
        width_cap: int = MAX_WIDTH,
        decay: float = 0.97,
        cost_decay: float = 0.9,
        prior_acceptance: float = 0.5,
        prior_weight: float = 1.0,
        confidence_bins: int = 10,
        margin: float = 0.05,
        probe_gap: int = 8,
        probe_gap_max: int = 64,
        probe_rounds: int = 3,
        explore_budget: float = 0.05,
        explore_allowance: float = 2.0,
        optimism: float = 0.15,
    ) -> None:
        if n_max_cap < 1:
            raise ValueError("n_max_cap must be >= 1")
        self.cap = n_max_cap  # longest draft of a model drafter
        #: widest pass priced: a free drafter may propose up to this (its own cap permitting)
        self.width = max(n_max_cap, width_cap)
        self._caps: dict[str, int] = {}  # per drafter: min(its own cap, width)
        self.decay = decay
        self.cost_decay = cost_decay
        self.prior_acceptance = prior_acceptance
        self.prior_weight = prior_weight
        self.bins = confidence_bins
        self.margin = margin
        self.probe_gap0 = probe_gap
        self.probe_gap_max = probe_gap_max
        self.probe_rounds = probe_rounds
        self._burst = 0
        #: exploration may cost at most this fraction of the time plain decoding would take
        self.explore_budget = explore_budget
        self.explore_allowance = explore_allowance  # target steps, once per generation
        self.optimism = optimism  # acceptance bonus under which a re-probe must look useful
        self._explore_spent = 0.0  # what probe rounds cost beyond plain steps (target steps)
        self._elapsed = 0  # tokens emitted so far (what plain decoding would spend steps on)
        self._probing = False  # the round in flight is a probe (charged to exploration)
        self._in_probe = False  # ... any probe, the initial ones included
        #: what all probe rounds cost beyond the plain steps their tokens would have taken
        #: (target steps; negative if they paid), and the policy's own bookkeeping time: with
        #: these two, auto's cost against plain decoding is measured, not guessed
        self.probe_cost = 0.0
        self.overhead_ms = 0.0
        self._burst_names: list[str] = []
        self._since_plain = 0  # rounds since the last plain step (k = 0)
        self._observed = 0

        self._verify = [_DecayedMean() for _ in range(self.width + 1)]  # ms, by #proposals
        # the last raw times by width: the profile gets their medians, which a burst of
        # contention (another process on the CPU) cannot drag the way it drags a mean
        self._verify_samples: list[deque[float]] = [deque(maxlen=64) for _ in self._verify]
        self._drafters: dict[str, _DrafterModel] = {}
        widths = [k for k in self.PROBE_LADDER if k < n_max_cap] + [n_max_cap]
        #: initial probes (k = 0 first: the plain step is the unit of every cost)
        # (two plain steps: the first round after the prompt is slower than the others and
        # is not taken as a sample, see observe)
        self._ladder = [0] + [k for k in widths if k <= self.INITIAL_PROBE_MAX]
        #: wider passes are measured only once the narrower ones show that they might pay
        self._wider = [k for k in widths if k > self.INITIAL_PROBE_MAX]
        self._tick = 0
        self._zero_run = 0
        self._gap = probe_gap
        self._plans: dict[str, _Plan] = {}
        self._attached: list[tuple[Any, int]] = []
        # continue_drafting's state within the current round, per drafter name
        self._round: dict[str, _RoundState] = {}
        #: k returned by each budget() call, in order (what `auto` chose round by round)
        self.chosen: list[int] = []
        #: proposals actually verified each round (a free drafter's budget is its whole cap,
        #: what it then sends is its proposal as cut by `trim`)
        self.sent: list[int] = []
        self._cache: dict[tuple, Any] = {}  # derived estimates, cleared by observe()
        self.probes = 0
        # what a machine profile (specgguf.profile) said before this run measured anything
        self._prior_verify: dict[int, Estimate] = {}
        self._prior_draft: dict[str, Estimate] = {}
        self.seeded = False
        # shadow drafts of cheap (n-gram) drafters on rounds they sat out: [name, tokens, hits]
        self._shadows: list[list[Any]] = []
        self.shadow_samples = 0
        self._seen_timing: dict[str, Any] = {}  # a model drafter's last DraftTiming, consumed
        self._hopeless_memo: dict[str, int] = {}  # name -> round of the last "cannot pay"

    # -- attaching to drafters ------------------------------------------------------------------

    def attach(self, drafters: Sequence[Any]) -> None:
        self.detach()
        self._cache.clear()
        for d in drafters:
            self._attached.append((d, int(d.max_draft)))
            cheap = bool(getattr(d, "cheap", False))
            self._model(d.name).cheap = cheap
            # a free drafter may propose as far as its own cap; a model drafter up to n_max
            self._caps[d.name] = max(1, min(int(d.max_draft), self.width if cheap else self.cap))
            if hasattr(d, "policy"):
                d.policy = self
                self._drafters[d.name].gated = True

    # -- the machine profile ----------------------------------------------------------------

    def seed(self, profile: CostProfile | None) -> None:
        """Start from costs measured by earlier runs on this machine (specgguf.profile). Each
        prior counts as at most PRIOR_WEIGHT samples, so this run's own measurements soon
        dominate; probe widths the profile knows well are not probed again."""
        if profile is None:
            return
        cap = self.PRIOR_WEIGHT
        self._prior_verify = {
            k: Estimate(e.value, min(e.weight, cap))
            for k, e in profile.verify.items()
            if 1 <= k <= self.width and e.weight > 0 and plausible_verify(k, e.value)
        }
        self._prior_draft = {
            n: Estimate(e.value, min(e.weight, cap))
            for n, e in profile.draft.items()
            if e.weight > 0 and plausible_draft(e.value)
        }
        self.seeded = bool(self._prior_verify)
        self._cache.clear()
        self._hopeless_memo.clear()

    def export_profile(self) -> CostProfile | None:
        """What THIS run measured (not the priors it was seeded with), for
        specgguf.profile.save_profile to merge into the machine's profile."""
        base = self.target_step_ms()
        if not base or not self._verify[0].known:
            return None
        # medians of this run's own samples, each width against the plain step's median;
        # a ratio no pass can have (a wide pass cheaper than a plain step, or dearer than
        # that many plain steps twice over) comes from a disturbed run and is not kept
        unit = statistics.median(self._verify_samples[0]) if self._verify_samples[0] else base
        verify = {}
        for k in range(1, len(self._verify)):
            samples = self._verify_samples[k]
            if not samples or unit <= 0:
                continue
            rel = statistics.median(samples) / unit
            if plausible_verify(k, rel):
                verify[k] = Estimate(rel, float(len(samples)))
        draft = {
            name: Estimate(m.draft_ms.mean / base, float(m.draft_ms.n))
            for name, m in self._drafters.items()
            if m.gated and m.draft_ms.known and plausible_draft(m.draft_ms.mean / base)
        }
        if not verify and not draft:
            return None
        return CostProfile(verify, draft, round(base, 3))

    def new_sequence(self) -> None:
        """Start another prompt with what was learned (costs, acceptance, calibration): for
        --jsonl batches and conversations, where one policy can serve every decoder. The
        initial probes are not repeated; call `attach` with the new decoder's drafters."""
        for m in self._drafters.values():
            m.pending = 1  # a model drafter's begin() catches up on the prompt itself
        self._observed = 0
        self._round = {}
        self._plans = {}
        self._since_plain = 0
        self._zero_run = 0
        self._burst = 0

    def detach(self) -> None:
        for d, cap in self._attached:
            d.max_draft = cap
            if getattr(d, "policy", None) is self:
                d.policy = None
        self._attached = []

    def _model(self, name: str) -> _DrafterModel:
        m = self._drafters.get(name)
        if m is None:
            m = self._drafters[name] = _DrafterModel(self.width, self.bins)
        return m

    # -- estimates -------------------------------------------------------------------------------

    def target_step_ms(self) -> float | None:
        """Estimated plain-step time; if k = 0 was never measured, the cheapest pass seen
        (which makes every wider pass look relatively dearer: the pessimistic side)."""
        if self._verify[0].known:
            return self._verify[0].mean
        known = [v.mean for v in self._verify if v.known]
        return min(known) if known else None

    def verify_curve(self) -> tuple[float, ...]:
        key = ("curve",)
        if key not in self._cache:
            self._cache[key] = self._verify_curve()
        return self._cache[key]

    def _verify_curve(self) -> tuple[float, ...]:
        """Relative verify cost for k = 0..cap: measured where known, linearly interpolated
        between measurements, and beyond the widest measured pass extrapolated with a full
        target step per extra token until a probe measures it."""
        known = self._known_curve()
        if not known:
            return tuple(1.0 + k for k in range(self.width + 1))
        known[0] = known.get(0, 1.0)
        ks = sorted(known)
        out = []
        j = 0  # ks[j] <= k < ks[j + 1]
        for k in range(self.width + 1):
            while j + 1 < len(ks) and ks[j + 1] <= k:
                j += 1
            lo = ks[j]
            if k == lo:
                out.append(known[k])
            elif j + 1 < len(ks):
                h = ks[j + 1]
                out.append(known[lo] + (known[h] - known[lo]) * (k - lo) / (h - lo))
            else:
                out.append(known[lo] + (k - lo) * 1.0)
        return tuple(out)

    def _known_curve(self) -> dict[int, float]:
        """Relative verify cost by width where measured this run or known from the profile,
        the two weighted by their sample counts (a copy: callers may change it)."""
        key = ("known",)
        if key not in self._cache:
            self._cache[key] = self._compute_known_curve()
        return dict(self._cache[key])

    def _compute_known_curve(self) -> dict[int, float]:
        base = self.target_step_ms()
        out: dict[int, float] = {}
        for k in range(self.width + 1):
            v, prior = self._verify[k], self._prior_verify.get(k)
            num = den = 0.0
            if v.known and base:
                num, den = v.mean / base * v.n, float(v.n)
            if prior is not None:
                num, den = num + prior.value * prior.weight, den + prior.weight
            if den > 0:
                out[k] = num / den
        return out

    def _known_widths(self) -> list[int]:
        return sorted(k for k in self._known_curve() if k > 0)

    def cap_of(self, name: str) -> int:
        """The longest draft `name` may make: its own cap, within the widths auto prices."""
        return self._caps.get(name, self.cap)

    def _optimistic_curve(self) -> tuple[float, ...]:
        """The verify curve as cheap as it plausibly is: measured where known, interpolated
        between, and past the widest measured pass rising at HALF the slope of the measured
        ones. Batched kernels make each extra token of a wide pass cost less than one of a
        short pass (on a 2-core CPU about 0.8 of a step per token up to 9 tokens, 0.35 from
        16 to 64), so half the short slope is a fair guess of how cheap wide passes might be,
        and a line through the short ones is not. What a wide probe is decided on; never what
        a plan is priced at."""
        key = ("optimistic",)
        if key not in self._cache:
            curve = list(self.verify_curve())
            known = self._known_curve()
            widths = [k for k in known if k > 0]
            if widths:
                w = max(widths)
                slope = sum(k * (known[k] - 1.0) for k in widths) / sum(k * k for k in widths)
                slope = max(0.0, slope) * WIDE_SLOPE_OPTIMISM
                for k in range(w + 1, len(curve)):
                    curve[k] = known[w] + slope * (k - w)
            self._cache[key] = tuple(curve)
        return self._cache[key]

    def _wide_probe(self, name: str, acc: Sequence[float], current: float) -> _Plan | None:
        """A free drafter whose acceptance says long drafts would be accepted, while passes
        that wide were never measured here: priced at the optimistic curve, would a width
        past the measured ones clearly beat the best measured plan? Then send that width, so
        its cost is measured where it is used instead of extrapolated from short passes (on
        CPUs the cost per token falls steeply past ~9 tokens, so a line fitted to short passes
        hides a 2x on "print the whole file" prompts). The probe is charged to the exploration
        budget only for what it loses; one whose tokens are accepted pays for itself."""
        widest = max(self._known_widths(), default=0)
        cap = self.cap_of(name)
        if widest <= 0 or widest >= cap:
            return None
        k, s = best_k(Costs(verify=self._optimistic_curve()), acc, cap, margin=self.margin)
        if k <= widest or s <= max(1.0, current) * (1.0 + self.margin):
            return None
        if not self._may_explore():
            return None
        self.probes += 1
        return _Plan(k, s, probe=True)

    def trim(self, name: str, n: int) -> int:
        """How many of the `n` tokens that `name` just proposed to send to the target.

        Model drafters are cut token by token (`continue_drafting`); a free drafter proposes
        all it has and is cut here, at the length with the best expected tokens per unit of
        verify cost under this drafter's per-position acceptance: a long proposal from a text
        that keeps being copied goes out whole, one from a text that drifts is cut short. A
        probe goes out whole (it measures that width)."""
        t0 = time.perf_counter()
        try:
            m = self._drafters.get(name)
            plan = self._plans.get(name)
            if m is None or not m.cheap or plan is None or plan.probe or n <= 1:
                return n
            k, _ = best_k(self.costs(name), self.acceptance(name), n)
            return k
        finally:
            self.overhead_ms += (time.perf_counter() - t0) * 1e3

    def acceptance(self, name: str) -> list[float]:
        key = ("acc", name)
        if key not in self._cache:
            self._cache[key] = self._acceptance(name)
        return list(self._cache[key])

    def _acceptance(self, name: str) -> list[float]:
        """Estimated P(accept position i | earlier ones accepted), i = 0..cap-1: decayed
        counts shrunk towards the previous position's estimate (the first towards the prior)."""
        m = self._drafters.get(name)
        out: list[float] = []
        prior = self.prior_acceptance
        w = self.prior_weight
        for i in range(self.width):
            t, h = (m.trials[i], m.hits[i]) if m else (0.0, 0.0)
            a = (h + w * prior) / (t + w)
            out.append(a)
            prior = a
        return out

    def calibrated(self, name: str, confidence: float) -> float:
        """P(accept | the draft's confidence), binned and decayed; a bin without data says
        the confidence itself (a draft at 0.9 is right ~90% of the time if calibrated)."""
        c = min(1.0, max(0.0, confidence))
        m = self._drafters.get(name)
        if m is None:
            return c
        b = min(self.bins - 1, int(c * self.bins))
        return (m.cal_hits[b] + self.prior_weight * c) / (m.cal_trials[b] + self.prior_weight)

    def costs(self, name: str) -> Costs:
        key = ("costs", name)
        if key not in self._cache:
            self._cache[key] = self._costs(name)
        return self._cache[key]

    def _costs(self, name: str) -> Costs:
        d = self._draft_rel(name)
        # unmeasured: as dear as the target (probes measure it)
        return Costs(verify=self.verify_curve(), draft=1.0 if d is None else d, min_slope=0.0)

    def _draft_rel(self, name: str) -> float | None:
        """One draft step of `name` relative to a plain target step: measured this run and/or
        known from the profile (weighted by samples); None when neither knows."""
        base = self.target_step_ms()
        m = self._drafters.get(name)
        num = den = 0.0
        if m is not None and m.draft_ms.known and base:
            num, den = m.draft_ms.mean / base * m.draft_ms.n, float(m.draft_ms.n)
        prior = self._prior_draft.get(name)
        if prior is not None:
            num, den = num + prior.value * prior.weight, den + prior.weight
        if den > 0:
            return num / den
        return 0.0 if m is not None and m.cheap else None

    # -- the loop's hooks -----------------------------------------------------------------------

    def _plan_model(self) -> dict[str, _Plan]:
        plans: dict[str, _Plan] = {}
        for name, m in self._drafters.items():
            if self.hopeless(name):
                plans[name] = _Plan(0, 1.0, probe=False)
                continue
            costs, acc = self.costs(name), self.acceptance(name)
            cap = self.cap_of(name)
            k, s = best_k(costs, acc, cap, margin=self.margin, p_empty=m.p_empty())
            if m.cheap:
                probe = self._wide_probe(name, acc, s)
                if probe is not None:
                    plans[name] = probe
                    continue
            if k > 0 and m.gated:
                # continue_drafting cuts low-confidence tails, so allow the length that pays
                # when the draft is confident (the best calibrated bin), never less than k.
                top = max(
                    (
                        (m.cal_hits[b] + self.prior_weight * (b + 0.5) / self.bins)
                        / (m.cal_trials[b] + self.prior_weight)
                        for b in range(self.bins)
                        if m.cal_trials[b] >= 1.0
                    ),
                    default=0.0,
                )
                k_up, _ = best_k(costs, [max(a, top) for a in acc], cap, margin=self.margin)
                k = max(k, k_up)
            if k > 0 and m.cheap:
                k = cap  # a free drafter proposes what it has; `trim` cuts it to what pays
            plans[name] = _Plan(k, s, probe=False)
        # Wider passes than the widest measured one are priced at a full target step per extra
        # token. When the measured curve's average slope says a wider one could pay, try the
        # next width now and then, so a GPU (or free n-gram drafts) can grow past the ladder.
        widest = max((k for k, v in enumerate(self._verify) if v.known), default=0)
        nxt = next((k for k in self._wider if k > widest), None)
        hopeful = [n for n in self._drafters if not self.hopeless(n)]
        if nxt is not None and widest > 0 and hopeful:
            curve = self.verify_curve()[: widest + 1]
            wants = [
                name
                for name, m in self._drafters.items()
                if name in hopeful
                and not m.cheap  # free drafters grow through _wide_probe
                and best_k(
                    Costs(verify=curve, draft=self.costs(name).draft),
                    self.acceptance(name),
                    nxt,
                    margin=self.margin,
                    p_empty=m.p_empty(),
                )[0]
                > widest
            ]
            if wants:
                self._tick += 1
                if self._tick % self.EXPAND_EVERY == 0 and self._may_explore():
                    for name in wants:
                        plans[name] = _Plan(nxt, plans[name].speedup, probe=True)
                    self.probes += 1
        return plans

    def _plan_probe(
        self, k: int | None = None, names: Sequence[str] | None = None
    ) -> dict[str, _Plan]:
        plans = {}
        for name in self._drafters:
            if (names is not None and name not in names) or self.hopeless(name):
                plans[name] = _Plan(0, 1.0, probe=False)
                continue
            kk = k
            if kk is None:  # the least bad k >= 1 under current estimates
                cap = self.cap_of(name)
                sp = speedups(self.costs(name), self.acceptance(name), cap)
                kk = max(range(1, cap + 1), key=lambda j: (sp[j], -j))
            plans[name] = _Plan(kk, 1.0, probe=True)
        return plans

    def budget(self, limit: int) -> int:
        """Draft budget for the next round (0: a plain step), at most `limit`."""
        t0 = time.perf_counter()
        try:
            return self._budget(limit)
        finally:
            self.overhead_ms += (time.perf_counter() - t0) * 1e3

    def _budget(self, limit: int) -> int:
        default = 0
        ladder = self._next_ladder_width()
        if ladder is not None:  # initial probes: measure the cost curve rather than assume it
            default = ladder
            plans = self._plan_probe(default)
            self.probes += default > 0
        else:
            plans = self._plan_model()
            if all(p.k == 0 for p in plans.values()):
                self._zero_run += 1
                if self._zero_run >= self._gap:  # time to check whether speculation pays now
                    names = [n for n in self._drafters if self._worth_probing(n)]
                    if names or (not self._drafters and self._may_explore()):
                        self._burst, self._burst_names = self.probe_rounds, names
                        self._zero_run = 0
                        self._gap = min(self._gap * 2, self.probe_gap_max)
                if self._burst > 0:  # a few rounds in a row: one round is too little evidence
                    self._burst -= 1
                    plans = self._plan_probe(names=self._burst_names)
                    self.probes += 1
                    # no drafter known yet (not attached, none has proposed): a short probe
                    default = 1 if not plans else 0
            else:
                self._zero_run = 0
                self._burst = 0
                self._gap = self.probe_gap0
                if self._since_plain >= self.REFRESH_EVERY:
                    # while speculating, a plain step now and then keeps the unit of every
                    # cost (the plain step's time, which drifts with the context) measured
                    plans = {n: _Plan(0, p.speedup, probe=False) for n, p in plans.items()}
        self._plans = plans
        # (the initial probes are the price of measuring at all: not charged to exploration)
        self._in_probe = default > 0 or any(p.probe for p in plans.values())
        self._probing = ladder is None and self._in_probe
        for d, cap in self._attached:
            p = plans.get(d.name)
            d.max_draft = min(cap, p.k) if p is not None else 0
            if d.max_draft == 0 and cap > 0 and limit > 0 and getattr(d, "cheap", False):
                self._shadow(d, min(cap, self.width))
        k = max((p.k for p in plans.values()), default=default)
        k = max(0, min(k, limit, self.width))
        self.chosen.append(k)
        return k

    def _next_ladder_width(self) -> int | None:
        """The next initial probe width, skipping what the machine profile already knows well
        and stopping early once every drafter is known to be hopeless; None when done."""
        while self._ladder:
            k = self._ladder.pop(0)
            if k == 0:
                return 0
            if self._drafters and all(self.hopeless(n) for n in self._drafters):
                self._ladder.clear()
                return None
            prior = self._prior_verify.get(k)
            known = prior is not None and prior.weight >= self.KNOWN_WEIGHT
            unknown_draft = any(
                m.gated and self._draft_rel(n) is None for n, m in self._drafters.items()
            )
            if not known or unknown_draft:
                return k
        return None

    def _worth_probing(self, name: str) -> bool:
        """A re-probe burst for `name` after a run of plain steps: only if it is not hopeless
        on this machine, its acceptance could plausibly make it pay, and the exploration budget
        allows it. Cheap drafters are measured by shadow drafts instead, so they are probed
        only while no verify width is known at all."""
        m = self._drafters[name]
        if m.cheap and self._known_widths():
            return False
        return not self.hopeless(name) and self._could_pay(name) and self._may_explore(name)

    def _shadow(self, drafter: Any, n: int) -> None:
        """Ask a cheap drafter that sits this round out what it would have proposed; the
        tokens emitted next say how much of it the target would have accepted (exactly, under
        greedy decoding; in expectation when sampling, since an n-gram draft is one-hot and
        P(accept) = p(token) = P(the sampled token is that token)).

        One long shadow per drafter at a time: shadows started on consecutive rounds cover
        the same stretch of text, so they would count one lucky (or unlucky) stretch many
        times over at every depth, and the estimate would swing with it. While a long one is
        pending, the drafter's first token is still scored every round (a one-token shadow):
        those are different positions of the text, and they are what notices quickly that a
        drafter has started (or stopped) guessing right."""
        pending = [sh for sh in self._shadows if sh[0] == drafter.name]
        if len(pending) >= 2:
            return
        try:
            draft = drafter.propose(n)
        except Exception:  # a shadow is never worth a failed generation
            return
        if draft.tokens:
            toks = list(draft.tokens[: 1 if pending else n])
            self._shadows.append([drafter.name, toks, 0])

    def _resolve_shadows(self, emitted: Sequence[int]) -> None:
        """Score pending shadows position by position as the tokens arrive (a position's
        outcome is known as soon as its token is emitted; waiting for the whole shadow would
        keep a 48-token draft's evidence back for 48 plain steps)."""
        keep = []
        for sh in self._shadows:
            name, toks, hits = sh
            m = self._model(name)
            done = False
            for t in emitted:
                ok = toks[hits] == t
                if hits < self.width:
                    m.trials[hits] += 1.0
                    m.hits[hits] += 1.0 if ok else 0.0
                if not ok:
                    done = True
                    break
                hits += 1
                if hits == len(toks):
                    done = True
                    break
            sh[2] = hits
            if done:
                m.shadow_trials += 1
                self.shadow_samples += 1
            else:
                keep.append(sh)
        self._shadows = keep

    def _likely_curve(self) -> tuple[float, ...]:
        key = ("likely",)
        if key not in self._cache:
            self._cache[key] = self._compute_likely_curve()
        return self._cache[key]

    def _compute_likely_curve(self) -> tuple[float, ...]:
        """The verify curve as the policy expects it to be: measured where known, and beyond
        the widest measured pass extrapolated with the least-squares slope of the measured
        points through (0, 1) (what the ceiling uses; the plan itself prices unmeasured widths
        at a full step)."""
        curve = list(self.verify_curve())
        known = self._known_curve()
        widths = [k for k in known if k > 0]
        if not widths:
            return tuple(curve)
        w = max(widths)
        # least-squares slope of the known points through (0, 1): one noisy pass cannot tilt
        # the whole extrapolation the way the slope between the two widest ones could
        slope = sum(k * (known[k] - 1.0) for k in widths) / sum(k * k for k in widths)
        slope = max(0.0, slope)
        for k in range(w + 1, len(curve)):
            curve[k] = curve[w] + slope * (k - w)
        return tuple(curve)

    def ceiling(self, name: str) -> float:
        """The best speedup drafting with `name` could reach if every proposal were accepted,
        under the costs known now (unknown widths extrapolated along the known curve)."""
        key = ("ceiling", name)
        if key not in self._cache:
            d = self._draft_rel(name)
            costs = Costs(verify=self._likely_curve(), draft=1.0 if d is None else d)
            self._cache[key] = max(speedups(costs, 1.0, self.cap_of(name)))
        return self._cache[key]

    def hopeless(self, name: str) -> bool:
        """Drafting with `name` cannot pay on this machine whatever the text: even at 100%
        acceptance the draft steps plus the wider pass cost more than the tokens they bring.
        Only decided once its draft cost and at least two verify widths are known (measured or
        from the profile); such a drafter is never probed again, which is what keeps auto
        within a hair of plain decoding where speculation cannot win (a small CPU)."""
        # a "yes" is cheap to keep: costs drift slowly, so it is re-checked every
        # HOPELESS_RECHECK rounds (this is the hot path of auto on a machine where it decodes
        # plainly, and on a GPU a round is only a few ms)
        memo = self._hopeless_memo.get(name)
        if memo is not None and self._observed - memo < self.HOPELESS_RECHECK:
            return True
        if self._draft_rel(name) is None or len(self._known_widths()) < 2:
            return False
        verdict = self.ceiling(name) < 1.0 + self.margin
        if verdict:
            self._hopeless_memo[name] = self._observed
        else:
            self._hopeless_memo.pop(name, None)
        return verdict

    def catch_up_cost(self, name: str) -> float:
        """Cost, in target steps, of each token a model drafter must catch up on when it is
        resumed after being skipped (0 for n-gram drafters, which see every token anyway).
        Unmeasured: half a draft step per token (a batch is cheaper per token than steps)."""
        m = self._drafters.get(name)
        if m is None or not m.gated:
            return 0.0
        return m.catch_up.mean if m.catch_up.known else 0.5 * self.costs(name).draft

    def _may_explore(self, name: str | None = None) -> bool:
        """Probes after the initial ones stay within `explore_budget` of the elapsed plain
        time, counting what probing `name` would cost right now: resuming a skipped draft
        model means catching it up on everything emitted meanwhile, a cost that grows with the
        skipped run. Where that is dear (a CPU on which a batch costs nearly as much per token
        as a step) auto stops probing the draft model and stays within a few percent of plain
        decoding; where probes are cheap, or pay for themselves, it probes freely."""
        liability = 0.0
        if name is not None:
            m = self._drafters[name]
            liability = self.catch_up_cost(name) * max(0, m.pending - 1)
        allowed = self.explore_budget * self._elapsed + self.explore_allowance
        return self._explore_spent + liability <= allowed

    def _could_pay(self, name: str) -> bool:
        """Whether drafting with `name` would pay if its acceptance were `optimism` higher
        than estimated: a probe that cannot change the decision is not worth its price."""
        m = self._drafters[name]
        acc = [min(1.0, a + self.optimism) for a in self.acceptance(name)]
        costs = Costs(verify=self._likely_curve(), draft=self.costs(name).draft)
        k, _ = best_k(costs, acc, self.cap_of(name), margin=self.margin, p_empty=m.p_empty())
        return k > 0

    def continue_drafting(self, name: str, position: int, confidence: float) -> bool:
        """Asked by a model drafter before it proposes token `position` (0-based) of this
        round, whose top probability is `confidence`: is that token still worth its cost?"""
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
                rate=max(1.0, plan.speedup if plan is not None else 1.0),
            )
            if ok:
                st.p_reach *= a_now
        if ok:
            st.confidences.append(confidence)
        else:
            st.stopped = True
        return ok

    def observe(self, rnd: Any) -> None:
        """Learn from a finished round (specgguf.speculative.Round)."""
        t0 = time.perf_counter()
        try:
            self._observe(rnd)
        finally:
            self.overhead_ms += (time.perf_counter() - t0) * 1e3

    def _observe(self, rnd: Any) -> None:
        k = len(rnd.proposed)
        self.sent.append(k)
        self._observed += 1
        self._since_plain = 0 if k == 0 else self._since_plain + 1
        if k <= self.width and self._observed > 1:  # the first round follows the prompt's pass
            self._verify[k].add(float(rnd.verify_ms), self.cost_decay)
            self._verify_samples[k].append(float(rnd.verify_ms))
        self._elapsed += len(rnd.emitted)
        base = self.target_step_ms()
        if self._probing and base:
            # a probe's price: its time beyond the plain steps its tokens would have taken,
            # including a model drafter's catch-up on everything emitted while it was skipped
            cost = (float(rnd.draft_ms) + float(rnd.verify_ms)) / base
            self._explore_spent = max(0.0, self._explore_spent + cost - len(rnd.emitted))
        if self._in_probe and base:
            cost = (float(rnd.draft_ms) + float(rnd.verify_ms)) / base
            self.probe_cost += cost - len(rnd.emitted)
        self._probing = self._in_probe = False
        for m in self._drafters.values():
            m.decay(self.decay)
        self._cache.clear()  # estimates change only here
        self._resolve_shadows(rnd.emitted)
        timed = self._learn_draft_timing(base)
        rounds, self._round = self._round, {}
        # A model drafter's first step catches up on every token it has not seen; after rounds
        # in which it was skipped that is a batch, whose time says nothing about one draft
        # step. Such rounds are left out of the draft-cost estimate.
        clean: dict[str, bool] = {}
        for name, m in self._drafters.items():
            if not m.gated:
                continue
            clean[name] = m.pending <= 2
            ran = name in rounds or (k > 0 and rnd.drafter == name) or name in timed
            if name in timed:
                pass  # the drafter timed its own steps and catch-up
            elif ran and not clean[name] and base and m.draft_ms.known:
                # what the catch-up batch cost beyond the draft steps themselves, per token
                st = rounds.get(name)
                steps = (k if rnd.drafter == name else 0) + (1 if st and st.stopped else 0)
                extra = float(rnd.draft_ms) - max(1, steps) * m.draft_ms.mean
                m.catch_up.add(max(0.0, extra) / (m.pending - 1) / base, self.cost_decay)
            m.pending = 1 if ran else m.pending + len(rnd.emitted)
        # A model drafter that was asked and stopped before its first token spent one draft
        # step for nothing: the budget weighs such empty attempts in (`p_empty`).
        for name, st in rounds.items():
            m = self._model(name)
            m.attempts += 1.0
            if st.stopped and not st.confidences and not (k and rnd.drafter == name):
                m.empties += 1.0
                m.empty_attempts += 1
                if k == 0 and clean.get(name, True) and name not in timed:
                    m.draft_ms.add(float(rnd.draft_ms), self.cost_decay)
        if k == 0 or not rnd.drafter:
            return
        m = self._model(rnd.drafter)
        st = rounds.get(rnd.drafter)
        # draft steps: one per proposal, plus the one whose token was then judged not worth it
        steps = k + (1 if st is not None and st.stopped else 0)
        if clean.get(rnd.drafter, True) and rnd.drafter not in timed:
            m.draft_ms.add(float(rnd.draft_ms) / steps, self.cost_decay)
        n_acc = int(rnd.n_accepted)
        m.rounds += 1
        m.tokens_drafted += k
        m.tokens_accepted += n_acc
        for i in range(min(k, self.width)):
            if i > n_acc:
                break  # never reached: an earlier proposal was rejected
            m.trials[i] += 1.0
            m.hits[i] += 1.0 if i < n_acc else 0.0
        for i, c in enumerate(st.confidences[:k] if st is not None else []):
            if i > n_acc:
                break
            b = min(self.bins - 1, int(min(1.0, max(0.0, c)) * self.bins))
            m.cal_trials[b] += 1.0
            m.cal_hits[b] += 1.0 if i < n_acc else 0.0

    def _learn_draft_timing(self, base: float | None) -> set[str]:
        """Draft costs from model drafters that time themselves (DraftModelDrafter.timing).

        The cost model charges `draft` per proposal, so that is what is measured: a round's
        drafting time (the catch-up of the 1-2 tokens emitted last round, then one decode per
        further proposal, plus a decode whose token was judged not worth proposing) divided by
        the tokens proposed; after a full acceptance the catch-up is a 2-token batch, dearer
        than a step, and it belongs in the price. An attempt that proposed nothing counts its
        time as one proposal's (the p_empty case). A longer catch-up (resuming a skipped draft
        model) is priced per token instead. Returns the names measured this way, whose
        round-level timing is then not used."""
        timed: set[str] = set()
        for d, _cap in self._attached:
            t = getattr(d, "timing", None)
            if t is None or t is self._seen_timing.get(d.name) or t.catch_up_tokens <= 0:
                continue  # nothing new (or nothing decoded): no sample
            self._seen_timing[d.name] = t
            m = self._model(d.name)
            timed.add(d.name)
            if t.catch_up_tokens <= 2:
                m.draft_ms.add((t.catch_up_ms + t.steps_ms) / max(1, t.proposed), self.cost_decay)
                continue
            if base and t.catch_up_tokens >= 4:
                m.catch_up.add(t.catch_up_ms / t.catch_up_tokens / base, self.cost_decay)
            if t.steps and t.proposed > 1:  # the decodes after the catch-up, one per proposal
                m.draft_ms.add(t.steps_ms / t.steps, self.cost_decay)
        return timed

    # -- reporting ---------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """What `auto` chose and why: chosen-k histogram, measured costs, acceptance."""
        base = self.target_step_ms()
        known = self._known_curve()
        drafters = {}
        for name, m in self._drafters.items():
            costs, acc = self.costs(name), self.acceptance(name)
            k, s = best_k(costs, acc, self.cap_of(name), margin=self.margin, p_empty=m.p_empty())
            d_rel = self._draft_rel(name)
            drafters[name] = {
                "draft_ms_per_token": round(m.draft_ms.mean, 3) if m.draft_ms.known else None,
                "draft_cost_rel": round(d_rel, 4) if d_rel is not None else None,
                "ceiling": round(self.ceiling(name), 4),
                "hopeless": self.hopeless(name),
                "shadow_drafts": m.shadow_trials,
                "acceptance": [round(a, 4) for a in acc[: self.cap_of(name)]],
                "rounds": m.rounds,
                "empty_attempts": m.empty_attempts,
                "tokens_drafted": m.tokens_drafted,
                "tokens_accepted": m.tokens_accepted,
                "best_k": k,
                "expected_speedup": round(s, 4),
            }
        hist = Counter(self.chosen)
        return {
            "n_max_cap": self.cap,
            "width_cap": self.width,
            "rounds": len(self.chosen),
            "probes": self.probes,
            "explore_cost_steps": round(self._explore_spent, 3),
            "probe_cost_steps": round(self.probe_cost, 3),
            "tokens": self._elapsed,
            "policy_ms": round(self.overhead_ms, 3),
            "chosen_k": {str(k): hist[k] for k in sorted(hist)},
            "mean_k": round(sum(self.chosen) / len(self.chosen), 3) if self.chosen else 0.0,
            "mean_sent": round(sum(self.sent) / len(self.sent), 3) if self.sent else 0.0,
            "tokens_per_pass": round(self._elapsed / len(self.sent), 3) if self.sent else 0.0,
            "target_step_ms": round(base, 3) if base else None,
            "verify_cost_rel": {
                str(k): round(c, 4) for k, c in sorted(known.items()) if math.isfinite(c)
            },
            "profile_seeded": self.seeded,
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
            )
        for name, d in s["drafters"].items():
            cost = f"{d['draft_cost_rel']:.2f}" if d["draft_cost_rel"] is not None else "?"
            lines.append(
                f"auto: {name}: draft step {cost} of a target step, acceptance "
                + " ".join(f"{a:.2f}" for a in d["acceptance"][:4])
                + f", best k {d['best_k']} (x{d['expected_speedup']:.2f})"
                + (
                    f"; cannot pay here (x{d['ceiling']:.2f} even at 100% acceptance)"
                    if d["hopeless"]
                    else ""
                )
            )
        return lines

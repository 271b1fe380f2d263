"""How likely each drafter's proposals are to be accepted, position by position.

Counts decay every round (by `decay`), so old evidence fades and a text that starts (or stops)
repeating itself is noticed. Four sources:
- what earlier runs on this pair measured (the machine profile's AcceptanceMemory), seeded as
  a few rounds' worth of counts that fade faster than this run's own (SEED_DECAY), so the
  first rounds start from what the pair did before and this run's rounds soon decide;
- real rounds: position i of a drafter's proposal was reached (earlier ones accepted) and was
  or was not accepted;
- shadow drafts of free drafters (n-gram lookups) on rounds they sat out: what they would
  have proposed, scored against the tokens that were then emitted (exactly, under greedy
  decoding; in expectation when sampling, since an n-gram draft is one-hot and
  P(accept) = p(token) = P(the sampled token is that token));
- for model drafters, a confidence -> acceptance calibration (binned, decayed), which the
  per-token decision uses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DrafterRecord:
    """What has been observed of one drafter (by its --spec-type name)."""

    width: int
    bins: int
    trials: list[float] = field(default_factory=list)  # position i reached
    hits: list[float] = field(default_factory=list)  # ... and accepted
    cal_trials: list[float] = field(default_factory=list)  # confidence bin -> reached
    cal_hits: list[float] = field(default_factory=list)  # ... and accepted
    attempts: float = 0.0  # decayed: rounds in which the per-token question was asked
    empties: float = 0.0  # ... and the answer was "stop" before the first token
    rounds: int = 0
    empty_attempts: int = 0
    shadow_trials: int = 0  # shadow drafts resolved
    tokens_drafted: int = 0
    tokens_accepted: int = 0
    #: this run's real rounds, undecayed, by position (what the profile is given)
    run_trials: list[float] = field(default_factory=list)
    run_hits: list[float] = field(default_factory=list)
    #: the best acceptance earlier runs showed (the profile's), None if none is remembered
    remembered_best: float | None = None
    seeded: bool = False  # earlier runs' counts were seeded (the profile remembered some)
    #: what earlier runs measured, by position (fading by SEED_DECAY a round)
    seed_trials: list[float] = field(default_factory=list)
    seed_hits: list[float] = field(default_factory=list)
    #: ... the same trials as seeded, never faded: how much evidence the seed was
    seed_given: list[float] = field(default_factory=list)
    #: positions 0..span-1 may hold counts (this run's or seeded); past it every count is 0,
    #: so the per-round fading and the estimates walk only these (a draft model's 8 of 64)
    span: int = 0

    def __post_init__(self) -> None:
        self.trials = [0.0] * self.width
        self.hits = [0.0] * self.width
        self.cal_trials = [0.0] * self.bins
        self.cal_hits = [0.0] * self.bins
        self.run_trials = [0.0] * self.width
        self.run_hits = [0.0] * self.width
        self.seed_trials = [0.0] * self.width
        self.seed_hits = [0.0] * self.width
        self.seed_given = [0.0] * self.width

    def decay(self, f: float, seed_f: float) -> None:
        n = self.span
        for arr in (self.trials, self.hits):
            for i in range(n):
                arr[i] *= f
        for arr in (self.cal_trials, self.cal_hits):
            for i in range(len(arr)):
                arr[i] *= f
        if self.seed_trials[0] > 1e-3:
            for arr in (self.seed_trials, self.seed_hits):
                for i in range(n):
                    arr[i] *= seed_f
        self.attempts *= f
        self.empties *= f


@dataclass
class _Shadow:
    name: str
    tokens: list[int]
    hits: int = 0


@dataclass(frozen=True)
class AcceptanceSettings:
    """How acceptance is learned (AdaptivePolicy's `acceptance`)."""

    decay: float = 0.97  # per round: old evidence fades
    prior: float = 0.5  # the acceptance assumed before any evidence
    prior_weight: float = 1.0  # ... worth this many trials
    bins: int = 10  # the draft's confidence, binned for calibration


class AcceptanceEstimator:
    """Per-drafter, per-position acceptance with a prior, shadow drafts and calibration."""

    #: shadows pending per drafter: one long one and a one-token one (see `wants_shadow`)
    MAX_PENDING_SHADOWS = 2
    #: what earlier runs measured counts as this many rounds at most: enough to draft from
    #: the first round on, few enough that this run's own rounds soon outweigh it
    SEED_ROUNDS = 6.0
    SEED_DECAY = 0.8  # per round: after ~5 rounds this run's own counts outweigh the seed

    def __init__(self, width: int, settings: AcceptanceSettings = AcceptanceSettings()) -> None:
        self.width = width
        self.settings = settings
        self.records: dict[str, DrafterRecord] = {}
        self._shadows: list[_Shadow] = []
        self.shadow_samples = 0
        self._cache: dict[str, list[float]] = {}

    def record(self, name: str) -> DrafterRecord:
        r = self.records.get(name)
        if r is None:
            r = self.records[name] = DrafterRecord(self.width, self.settings.bins)
        return r

    # -- learning ---------------------------------------------------------------------------

    def seed(
        self, name: str, trials: Sequence[float], hits: Sequence[float], best: float | None
    ) -> None:
        """Start `name` from what earlier runs measured on this pair: their per-position
        counts scaled to SEED_ROUNDS rounds at most, and the best acceptance they showed."""
        r = self.record(name)
        r.seeded = r.seeded or sum(trials) > 0
        f = min(1.0, self.SEED_ROUNDS / trials[0]) if trials and trials[0] > 0 else 0.0
        n = min(self.width, len(trials), len(hits))
        for i in range(n):
            r.seed_trials[i] += trials[i] * f
            r.seed_hits[i] += hits[i] * f
            r.seed_given[i] += trials[i] * f
        r.span = max(r.span, n)
        r.remembered_best = best
        self._cache.pop(name, None)

    def next_round(self) -> None:
        """A round finished: old evidence fades by one step."""
        for r in self.records.values():
            r.decay(self.settings.decay, self.SEED_DECAY)
        self._cache.clear()

    def add_round(
        self, name: str, k: int, n_accepted: int, confidences: Sequence[float] = ()
    ) -> None:
        """A verified proposal of k tokens of which the first n_accepted were accepted, with
        the model drafter's confidence in each (empty for n-gram drafts)."""
        r = self.record(name)
        r.rounds += 1
        r.tokens_drafted += k
        r.tokens_accepted += n_accepted
        for i in range(min(k, self.width)):
            if i > n_accepted:
                break  # never reached: an earlier proposal was rejected
            hit = 1.0 if i < n_accepted else 0.0
            r.trials[i] += 1.0
            r.hits[i] += hit
            r.run_trials[i] += 1.0
            r.run_hits[i] += hit
            r.span = max(r.span, i + 1)
        bins = self.settings.bins
        for i, c in enumerate(confidences[:k]):
            if i > n_accepted:
                break
            b = min(bins - 1, int(min(1.0, max(0.0, c)) * bins))
            r.cal_trials[b] += 1.0
            r.cal_hits[b] += 1.0 if i < n_accepted else 0.0
        self._cache.pop(name, None)

    def add_attempt(self, name: str, *, empty: bool) -> None:
        """A model drafter was asked per token this round; `empty`: it stopped before its
        first token (one draft step spent for nothing, what `p_empty` weighs in)."""
        r = self.record(name)
        r.attempts += 1.0
        if empty:
            r.empties += 1.0
            r.empty_attempts += 1

    # -- shadow drafts ----------------------------------------------------------------------

    def wants_shadow(self, name: str) -> int | None:
        """How many tokens of a shadow draft of `name` to keep: None (enough pending), 1 (a
        long one is pending), or 0 meaning all of it.

        One long shadow per drafter at a time: shadows started on consecutive rounds cover
        the same stretch of text, so they would count one lucky (or unlucky) stretch many
        times over at every depth, and the estimate would swing with it. While a long one is
        pending, the drafter's first token is still scored every round: those are different
        positions of the text, and they are what notices quickly that a drafter has started
        (or stopped) guessing right."""
        pending = sum(1 for s in self._shadows if s.name == name)
        if pending >= self.MAX_PENDING_SHADOWS:
            return None
        return 1 if pending else 0

    def add_shadow(self, name: str, tokens: Sequence[int]) -> None:
        if tokens:
            self._shadows.append(_Shadow(name, list(tokens)))

    def resolve_shadows(self, emitted: Sequence[int]) -> None:
        """Score pending shadows position by position as the tokens arrive (a position's
        outcome is known as soon as its token is emitted; waiting for the whole shadow would
        keep a 48-token draft's evidence back for 48 plain steps)."""
        keep = []
        for sh in self._shadows:
            r = self.record(sh.name)
            done = False
            for t in emitted:
                ok = sh.tokens[sh.hits] == t
                if sh.hits < self.width:
                    r.trials[sh.hits] += 1.0
                    r.hits[sh.hits] += 1.0 if ok else 0.0
                    r.span = max(r.span, sh.hits + 1)
                if not ok:
                    done = True
                    break
                sh.hits += 1
                if sh.hits == len(sh.tokens):
                    done = True
                    break
            if done:
                r.shadow_trials += 1
                self.shadow_samples += 1
            else:
                keep.append(sh)
            self._cache.pop(sh.name, None)
        self._shadows = keep

    # -- readings ---------------------------------------------------------------------------

    def acceptance(self, name: str) -> list[float]:
        """Estimated P(accept position i | earlier ones accepted), i = 0..width-1: decayed
        counts shrunk towards the previous position's estimate (the first towards the
        prior). A copy: callers may change it."""
        acc = self._cache.get(name)
        if acc is None:
            acc = self._cache[name] = self._compute(name)
        return list(acc)

    def _compute(self, name: str) -> list[float]:
        r = self.records.get(name)
        out: list[float] = []
        prior = self.settings.prior
        w = self.settings.prior_weight
        if r is None:
            return [prior] * self.width
        span = r.span
        for i in range(span):
            t, h = r.trials[i] + r.seed_trials[i], r.hits[i] + r.seed_hits[i]
            a = (h + w * prior) / (t + w)
            out.append(a)
            prior = a
        # past the span no position has a count: each estimate is the one before it
        out.extend([prior] * (self.width - span))
        return out

    def optimistic(self, name: str, least: float) -> list[float]:
        """`acceptance` raised by `least`, and at the first position by one standard error of
        its estimate where that is more (a rate over the trials this run and the profile's
        seed, as seeded, gave it, plus the prior's weight): what a probe may hope for.

        Why: one unlucky round must not make a drafter look not worth another try for dozens
        of rounds. A first draft whose first token was rejected leaves an estimate of 0.25
        from one trial; at 0.25 + `least` no draft length pays, while the drafter's real rate
        may be 0.8 (an H200 run decoded 19 of its 49 rounds plainly so). With many trials the
        standard error is small and `least` decides. Only the first position: it gates every
        other, and deeper positions' estimates lean on it (with their own few trials lifted
        too, a drafter that cannot pay was re-probed twice as often). The trials counted are
        not the decayed ones: fading lets a changed text move the estimate, but evidence once
        seen does not become thin again."""
        acc = self.acceptance(name)
        r = self.records.get(name)
        out = [min(1.0, a + least) for a in acc]
        n = r.run_trials[0] + r.seed_given[0] if r is not None and acc else 0.0
        if n > 0:
            a = acc[0]
            se = math.sqrt(a * (1.0 - a) / (n + self.settings.prior_weight))
            out[0] = min(1.0, a + max(least, se))
        return out

    def calibrated(self, name: str, confidence: float) -> float:
        """P(accept | the draft's confidence), binned and decayed; a bin without data says
        the confidence itself (a draft at 0.9 is right ~90% of the time if calibrated)."""
        c = min(1.0, max(0.0, confidence))
        r = self.records.get(name)
        if r is None:
            return c
        bins, w = self.settings.bins, self.settings.prior_weight
        b = min(bins - 1, int(c * bins))
        return (r.cal_hits[b] + w * c) / (r.cal_trials[b] + w)

    def best_calibrated(self, name: str) -> float:
        """The acceptance of the most confident bin with data (0 if none): how far a model
        drafter may go when its draft is confident."""
        r = self.records.get(name)
        if r is None:
            return 0.0
        bins, w = self.settings.bins, self.settings.prior_weight
        return max(
            (
                (r.cal_hits[b] + w * (b + 0.5) / bins) / (r.cal_trials[b] + w)
                for b in range(bins)
                if r.cal_trials[b] >= 1.0
            ),
            default=0.0,
        )

    def measured_here(self, name: str) -> bool:
        """Whether this run has verified a proposal of `name`'s."""
        r = self.records.get(name)
        return r is not None and r.rounds > 0

    def plausible(self, name: str) -> float | None:
        """The acceptance rate `name` has plausibly shown: the best of this run's and the best
        remembered one; None when it was never measured (it might be anything)."""
        r = self.records.get(name)
        if r is None:
            return None
        shown = []
        rate = self.run_rate(name)
        if rate is not None:
            shown.append(rate)
        if r.remembered_best is not None:
            shown.append(r.remembered_best)
        return max(shown) if shown else None

    def run_rate(self, name: str) -> float | None:
        """This run's acceptance rate of `name` (accepted / reached, all positions)."""
        r = self.records.get(name)
        if r is None or r.rounds == 0 or r.run_trials[0] <= 0:
            return None
        return sum(r.run_hits) / sum(r.run_trials)

    def remembered(self, name: str) -> bool:
        """Whether earlier runs' acceptance of `name` was seeded (the machine profile's)."""
        r = self.records.get(name)
        return r is not None and r.seeded

    def run_counts(self, name: str) -> tuple[list[float], list[float]] | None:
        """This run's real rounds of `name` by position (trials, hits), trailing zeros cut;
        None if it verified none."""
        r = self.records.get(name)
        if r is None or r.rounds == 0:
            return None
        n = max((i + 1 for i, t in enumerate(r.run_trials) if t > 0), default=0)
        return list(r.run_trials[:n]), list(r.run_hits[:n])

    def p_empty(self, name: str) -> float:
        r = self.records.get(name)
        return r.empties / (r.attempts + 1.0) if r else 0.0  # prior: attempts do propose

    def summary(self, name: str) -> dict[str, Any]:
        r = self.record(name)
        return {
            "shadow_drafts": r.shadow_trials,
            "rounds": r.rounds,
            "empty_attempts": r.empty_attempts,
            "tokens_drafted": r.tokens_drafted,
            "tokens_accepted": r.tokens_accepted,
        }

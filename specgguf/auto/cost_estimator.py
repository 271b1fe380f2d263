"""What a verify pass and a draft step cost on this machine, learned from the rounds' timings.

Every cost is relative to one plain target step (a 1-token pass), whose own time is measured
too: relative costs survive a change of context length or clock speed better than
milliseconds. Sources, weighted by their sample counts: this run's measurements and the
machine profile's (specgguf.auto.profile), each of whose estimates counts as at most
PRIOR_WEIGHT samples so this run's own soon dominate.

The verify curve has three readings, for three questions:
- `verify_curve`: measured widths, interpolated between them, and past the widest measured
  pass a full step per extra token: what a plan is priced at (never optimistic);
- `likely_curve`: past the widest measured pass the least-squares slope of the measured ones:
  what a drafter's ceiling is judged by;
- `optimistic_curve`: past the widest measured pass HALF that slope: what a wide probe is
  decided on (on CPUs each extra token of a wide pass costs far less than one of a short
  pass, so a line through short passes hides the win of long n-gram drafts).
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any

from specgguf.auto.profile import CostProfile, Estimate, plausible_draft, plausible_verify

#: what an optimistic curve assumes of passes wider than any measured: this share of the
#: measured ones' slope
WIDE_SLOPE_OPTIMISM = 0.5


class DecayedMean:
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


def _least_squares_slope(known: dict[int, float], widths: list[int]) -> float:
    """Slope of the known points through (0, 1): one noisy pass cannot tilt it the way the
    slope between the two widest ones could."""
    return max(0.0, sum(k * (known[k] - 1.0) for k in widths) / sum(k * k for k in widths))


class CostEstimator:
    """Verify cost by width (0..width) and draft cost per drafter, relative to a plain step."""

    PRIOR_WEIGHT = 6.0  # samples a profile's estimate counts as at most

    def __init__(self, width: int, *, decay: float = 0.9) -> None:
        self.width = width
        self.decay = decay
        self._verify = [DecayedMean() for _ in range(width + 1)]  # ms, by #proposals
        # the last raw times by width: the profile gets their medians, which a burst of
        # contention (another process on the CPU) cannot drag the way it drags a mean
        self._samples: list[deque[float]] = [deque(maxlen=64) for _ in self._verify]
        self._measured: set[int] = set()  # the widths with a sample (the curve's loops walk
        # these and the profile's, not every width up to 64, each round)
        self.draft_ms: dict[str, DecayedMean] = {}  # per proposed token, by drafter
        self._draft_samples: dict[str, deque[float]] = {}  # ... raw, for the profile's median
        self.catch_up: dict[str, DecayedMean] = {}  # target steps per caught-up token
        #: ms of the target's rollback after a rejected proposal (Round.rollback_ms); this
        #: run's only: the profile does not keep it (it belongs to the model, not the machine)
        self.rollback_ms = DecayedMean()
        self.prior_verify: dict[int, Estimate] = {}
        self.prior_draft: dict[str, Estimate] = {}
        self._cache: dict[tuple, Any] = {}

    # -- learning ---------------------------------------------------------------------------

    def seed(self, profile: CostProfile) -> bool:
        """Start from a machine profile (implausible entries ignored); True if it knew any
        verify width."""
        cap = self.PRIOR_WEIGHT
        self.prior_verify = {
            k: Estimate(e.value, min(e.weight, cap))
            for k, e in profile.verify.items()
            if 1 <= k <= self.width and e.weight > 0 and plausible_verify(k, e.value)
        }
        self.prior_draft = {
            n: Estimate(e.value, min(e.weight, cap))
            for n, e in profile.draft.items()
            if e.weight > 0 and plausible_draft(e.value)
        }
        self.changed()
        return bool(self.prior_verify)

    def add_verify(self, k: int, ms: float) -> None:
        if 0 <= k <= self.width:
            self._verify[k].add(ms, self.decay)
            self._samples[k].append(ms)
            self._measured.add(k)

    def add_draft(self, name: str, ms_per_token: float) -> None:
        """A draft step's time. A drafter's first one in a run is not a sample: like the
        first target pass after the prompt, it pays for warming up (the draft model's
        memory-mapped weights read for the first time), and one such outlier in a short run
        could make the profile say that the draft cannot pay here."""
        samples = self._draft_samples.get(name)
        if samples is None:
            self._draft_samples[name] = deque(maxlen=64)
            return
        samples.append(ms_per_token)
        self.draft_ms.setdefault(name, DecayedMean()).add(ms_per_token, self.decay)

    def add_catch_up(self, name: str, steps_per_token: float) -> None:
        self.catch_up.setdefault(name, DecayedMean()).add(steps_per_token, self.decay)

    def add_rollback(self, ms: float) -> None:
        self.rollback_ms.add(ms, self.decay)

    def changed(self) -> None:
        """Forget derived curves (after new samples): they are cached between rounds."""
        self._cache.clear()

    def _cached(self, key: tuple, compute: Any) -> Any:
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    # -- readings ---------------------------------------------------------------------------

    def measured(self, k: int) -> bool:
        return self._verify[k].known

    def widest_measured(self) -> int:
        return max(self._measured, default=0)

    def target_step_ms(self) -> float | None:
        """Estimated plain-step time; if k = 0 was never measured, the cheapest pass seen
        (which makes every wider pass look relatively dearer: the pessimistic side)."""
        if self._verify[0].known:
            return self._verify[0].mean
        known = [v.mean for v in self._verify if v.known]
        return min(known) if known else None

    def known_curve(self) -> dict[int, float]:
        """Relative verify cost by width where measured this run or known from the profile,
        the two weighted by their sample counts (a copy: callers may change it)."""
        return dict(self._cached(("known",), self._compute_known_curve))

    def _compute_known_curve(self) -> dict[int, float]:
        base = self.target_step_ms()
        out: dict[int, float] = {}
        for k in sorted(self._measured | self.prior_verify.keys()):
            v, prior = self._verify[k], self.prior_verify.get(k)
            num = den = 0.0
            if v.known and base:
                num, den = v.mean / base * v.n, float(v.n)
            if prior is not None:
                num, den = num + prior.value * prior.weight, den + prior.weight
            if den > 0:
                out[k] = num / den
        return out

    def known_widths(self) -> list[int]:
        return sorted(k for k in self.known_curve() if k > 0)

    def verify_curve(self) -> tuple[float, ...]:
        return self._cached(("curve",), self._compute_verify_curve)

    def _compute_verify_curve(self) -> tuple[float, ...]:
        """Relative verify cost for k = 0..width: measured where known, linearly interpolated
        between measurements, and beyond the widest measured pass a full target step per
        extra token until a probe measures it."""
        known = self.known_curve()
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

    def _extended(self, share: float) -> tuple[float, ...]:
        """verify_curve with the widths past the widest known one rising at `share` of the
        known points' least-squares slope."""
        curve = list(self.verify_curve())
        known = self.known_curve()
        widths = [k for k in known if k > 0]
        if not widths:
            return tuple(curve)
        w = max(widths)
        slope = _least_squares_slope(known, widths) * share
        for k in range(w + 1, len(curve)):
            curve[k] = known[w] + slope * (k - w)
        return tuple(curve)

    def likely_curve(self) -> tuple[float, ...]:
        """The curve as it most likely is (what a drafter's ceiling is judged by)."""
        return self._cached(("likely",), lambda: self._extended(1.0))

    def optimistic_curve(self) -> tuple[float, ...]:
        """The curve as cheap as it plausibly is (what a wide probe is decided on, never what
        a plan is priced at)."""
        return self._cached(("optimistic",), lambda: self._extended(WIDE_SLOPE_OPTIMISM))

    def draft_rel(self, name: str) -> float | None:
        """One draft step of `name` relative to a plain target step: measured this run and/or
        known from the profile (weighted by samples); None when neither knows."""
        base = self.target_step_ms()
        m = self.draft_ms.get(name)
        num = den = 0.0
        if m is not None and m.known and base:
            num, den = m.mean / base * m.n, float(m.n)
        prior = self.prior_draft.get(name)
        if prior is not None:
            num, den = num + prior.value * prior.weight, den + prior.weight
        return num / den if den > 0 else None

    def draft_known(self, name: str) -> bool:
        m = self.draft_ms.get(name)
        return m is not None and m.known

    def rollback_rel(self) -> float:
        """The target's rollback after a rejection relative to a plain step: ~0 on an
        attention KV cache, a restore plus a re-decode on a recurrent or hybrid model (0 until
        a rejection has been timed)."""
        base = self.target_step_ms()
        m = self.rollback_ms
        return m.mean / base if m.known and base else 0.0

    def catch_up_rel(self, name: str) -> float | None:
        m = self.catch_up.get(name)
        return m.mean if m is not None and m.known else None

    # -- the machine profile ------------------------------------------------------------------

    def export(self, model_drafters: set[str]) -> CostProfile | None:
        """What THIS run measured (not the priors it was seeded with), for
        specgguf.auto.profile.save_profile to merge into the machine's profile: medians of
        this run's own samples, each width against the plain step's median. A ratio no pass
        can have (a wide pass cheaper than a plain step, or dearer than that many plain steps
        twice over) comes from a disturbed run and is not kept."""
        base = self.target_step_ms()
        if not base or not self._verify[0].known:
            return None
        unit = statistics.median(self._samples[0]) if self._samples[0] else base
        verify = {}
        for k in range(1, len(self._verify)):
            samples = self._samples[k]
            if not samples or unit <= 0:
                continue
            rel = statistics.median(samples) / unit
            if plausible_verify(k, rel):
                verify[k] = Estimate(rel, float(len(samples)))
        draft = {}
        for name, m in self.draft_ms.items():
            samples = self._draft_samples.get(name)
            if name not in model_drafters or not m.known or not samples:
                continue
            rel = statistics.median(samples) / unit
            if plausible_draft(rel):
                draft[name] = Estimate(rel, float(len(samples)))
        if not verify and not draft:
            return None
        return CostProfile(verify, draft, round(base, 3))

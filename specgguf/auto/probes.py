"""When auto spends rounds on measuring instead of on its best guess, and what that may cost.

Priors never speculate blindly, so the first rounds are explicit probes, k = 0, 1, 2, 3, 4,
that measure the cost curve (k = 0 first: the plain step is the unit of every cost), skipping
widths the machine profile already knows well. Later:
- a wider pass than any measured is tried now and then (every EXPAND_EVERY rounds) while the
  measured curve says it could pay, so a GPU can grow past the initial ladder;
- after a run of plain steps, a burst of probe rounds (3 in a row: one round is too little
  evidence) at growing intervals (8, 16, 32, 64 rounds), to notice a text that starts to pay;
  the first plain round of each sequence may start one at once (a model drafter has nothing
  to catch up on yet, so that is when a probe of it is cheapest): this is what measures, in
  every run, a drafter whose remembered acceptance might otherwise keep it off for good;
- while drafting, a plain step every REFRESH_EVERY rounds keeps the unit measured.

Probing is not free, and re-probing a skipped draft model is dear (it must first catch up on
every token emitted meanwhile). So probes after the initial ones must fit an exploration
budget: what past probes cost beyond the plain steps their tokens would have taken, plus the
catch-up a probe would need now, stays within `budget` (5%) of the elapsed plain time plus a
once-per-generation `allowance`. The initial probes are the price of measuring at all and are
not charged to it; every probe's net cost is still counted (`probe_cost`) for the report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: the widths the initial probes and the widening tries walk through
PROBE_LADDER = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
INITIAL_PROBE_MAX = 4  # the initial ladder stops here; wider widths wait until they may pay
EXPAND_EVERY = 8  # rounds between tries of the next wider pass while the widest one pays
REFRESH_EVERY = 32  # rounds between plain steps that re-measure the unit while drafting


@dataclass(frozen=True)
class ProbeSettings:
    """How often probes come back and what they may cost (AdaptivePolicy's `probes`)."""

    gap: int = 8  # plain rounds before the first re-probe burst; doubles after each burst
    gap_max: int = 64  # ... up to this many
    burst_rounds: int = 3  # probe rounds in a burst
    budget: float = 0.05  # what charged probes may cost, a share of the elapsed plain time
    allowance: float = 2.0  # ... plus these target steps once per generation


class ProbeScheduler:
    def __init__(self, n_max_cap: int, settings: ProbeSettings = ProbeSettings()) -> None:
        widths = [k for k in PROBE_LADDER if k < n_max_cap] + [n_max_cap]
        # (two plain steps: the first round after the prompt is slower than the others and
        # is not taken as a sample)
        self._ladder = [0] + [k for k in widths if k <= INITIAL_PROBE_MAX]
        self._wider = [k for k in widths if k > INITIAL_PROBE_MAX]
        self.settings = settings
        self._gap = settings.gap
        self._zero_run = 0
        self._fresh = True  # no idle round yet in this sequence: a burst may start at once
        self._burst = 0
        self._burst_names: list[str] = []
        self._tick = 0
        self.since_plain = 0  # rounds since the last plain step
        self.elapsed = 0  # tokens emitted (what plain decoding would spend steps on)
        self.explore_spent = 0.0  # what charged probes cost beyond plain steps (target steps)
        self.probe_cost = 0.0  # ... all probes, the initial ones included (may be negative)
        self.probes = 0  # probe rounds planned
        self._charged = False  # the round in flight is a charged probe
        self._in_probe = False  # ... any probe
        self._ladder_now: int | None = None  # the initial probe width in flight
        #: the sequences that decode in one pass with this one (a server's slots in lockstep:
        #: a probe's draft steps hold every one of them), set by the policy each round; each
        #: gets that share of the budget, so the server as a whole explores within it
        self.share = 1

    # -- what the next round is -----------------------------------------------------------

    def next_ladder_width(
        self, known_well: Callable[[int], bool], give_up: Callable[[], bool]
    ) -> int | None:
        """The next initial probe width, skipping those `known_well` (from the profile, with
        every draft cost known), stopping early when `give_up` (every drafter hopeless);
        None when the ladder is done."""
        self._ladder_now = None
        while self._ladder:
            k = self._ladder.pop(0)
            if k == 0:
                return 0
            if give_up():
                self._ladder.clear()
                return None
            if not known_well(k):
                self._ladder_now = k
                return k
        return None

    def next_wider(self, widest: int) -> int | None:
        """The next width past `widest` that the widening tries may measure."""
        return next((k for k in self._wider if k > widest), None)

    def widening_due(self) -> bool:
        """Asked each round in which some drafter could use a wider pass: every
        EXPAND_EVERY-th such round, if the exploration budget allows it."""
        self._tick += 1
        return self._tick % EXPAND_EVERY == 0 and self.may_explore()

    def idle_round(
        self, candidates: Callable[[], Sequence[str]], any_drafter: bool
    ) -> list[str] | None:
        """A round on which no drafter's plan drafts: the drafters to probe now (a burst
        after a long enough run of plain steps), or None for a plain step."""
        self._zero_run += 1
        fresh, self._fresh = self._fresh, False
        if fresh or self._zero_run >= self._gap:  # time to check whether it pays now
            names = list(candidates())
            if names or (not any_drafter and self.may_explore()):
                self._burst, self._burst_names = self.settings.burst_rounds, names
                self._zero_run = 0
                self._gap = min(self._gap * 2, self.settings.gap_max)
        if self._burst > 0:
            self._burst -= 1
            return self._burst_names
        return None

    def drafting_round(self) -> bool:
        """A round on which some drafter's plan drafts; True if a refreshing plain step is
        due instead."""
        self._zero_run = 0
        self._burst = 0
        self._gap = self.settings.gap
        return self.since_plain >= REFRESH_EVERY

    def new_sequence(self) -> None:
        self.since_plain = 0
        self._zero_run = 0
        self._fresh = True
        self._burst = 0

    # -- the exploration budget -----------------------------------------------------------

    def may_explore(self, liability: float = 0.0) -> bool:
        """A probe now, with `liability` target steps of catch-up it would need, stays within
        the exploration budget (this sequence's `share` of it)."""
        s = self.settings
        allowed = (s.budget * self.elapsed + s.allowance) / max(1, self.share)
        return self.explore_spent + liability <= allowed

    def start_round(self, *, probe: bool, charged: bool) -> None:
        self._in_probe = probe
        self._charged = charged

    def end_round(
        self, k: int, emitted: int, cost_steps: float | None, *, width_known: bool = True
    ) -> None:
        """Account for the finished round: k proposals, `emitted` tokens, its draft + verify
        time in target steps (None while no plain step is known); `width_known`: some pass
        wider than one token has been measured (or is known from the profile)."""
        self.since_plain = 0 if k == 0 else self.since_plain + 1
        self.elapsed += emitted
        if self._ladder_now and k == 0 and not width_known:
            # an initial probe that nobody drafted for (an n-gram lookup with nothing to
            # propose yet) measured nothing; while no width at all is known it waits for the
            # next round. Without this a cold start whose free drafter has nothing to say in
            # its first rounds would know no verify width, and with none known no draft can
            # look worth it: the run would decode plainly to the end.
            self._ladder.insert(0, self._ladder_now)
        self._ladder_now = None
        if cost_steps is not None:
            if self._charged:
                # a probe's price: its time beyond the plain steps its tokens would have
                # taken, including a model drafter's catch-up on what it skipped
                self.explore_spent = max(0.0, self.explore_spent + cost_steps - emitted)
            if self._in_probe:
                self.probe_cost += cost_steps - emitted
        self._charged = self._in_probe = False

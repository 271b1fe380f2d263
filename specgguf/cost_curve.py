"""This machine's cost curve: a target pass over k tokens against one over 1, and a draft step,
timed directly on the loaded contexts, as a machine profile that seeds `auto`.

Two users: `bench` measures the whole curve (PASS_GRID, several repetitions) and stores it;
the warm-up at load (specgguf.warmup) measures three widths once or twice, so that a process
that finds no profile still starts its first request knowing what a pass and a draft step
cost here."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specgguf.auto.profile import CostProfile, Estimate

#: tokens per target pass at which the cost curve is measured: every width up to 16, where the
#: CPU kernels change most, then sparser (what lies between is interpolated)
PASS_GRID = (*range(1, 17), 24, 32, 48, 64)


@dataclass
class CostCurve:
    """This machine's costs, relative to one plain target step (a 1-token pass)."""

    target_ms: dict[int, float]  # median ms of a target pass over n tokens (n = 1..)
    draft_ms: float | None  # median ms of one draft-model step (1 token), None: no draft
    samples: int = 0  # timings behind each median
    #: the --spec-type whose draft step `draft_ms` is (what the profile stores it as)
    draft_type: str = "draft-simple"

    @property
    def step_ms(self) -> float:
        return self.target_ms[1]

    def verify(self) -> tuple[float, ...]:
        """Index k = proposals: a pass over k + 1 tokens relative to 1, linearly interpolated
        between the measured widths (PASS_GRID)."""
        ns = sorted(self.target_ms)
        out = []
        for n in range(1, ns[-1] + 1):
            if n in self.target_ms:
                out.append(self.target_ms[n] / self.step_ms)
                continue
            lo = max(x for x in ns if x < n)
            hi = min(x for x in ns if x > n)
            t = self.target_ms[lo] + (self.target_ms[hi] - self.target_ms[lo]) * (n - lo) / (
                hi - lo
            )
            out.append(t / self.step_ms)
        return tuple(out)

    @property
    def draft_rel(self) -> float | None:
        return self.draft_ms / self.step_ms if self.draft_ms is not None else None

    def to_profile(self, weight: float | None = None) -> CostProfile:
        """These medians as a machine profile (specgguf.auto.profile) that seeds `auto`, each
        estimate counting `weight` samples (default: the samples behind the medians)."""
        w = float(max(1, self.samples)) if weight is None else weight
        verify = {
            n - 1: Estimate(ms / self.step_ms, w) for n, ms in self.target_ms.items() if n > 1
        }
        draft = {self.draft_type: Estimate(self.draft_rel, w)} if self.draft_rel is not None else {}
        return CostProfile(verify, draft, round(self.step_ms, 3))

    def as_dict(self) -> dict[str, Any]:
        return {
            "target_step_ms": round(self.step_ms, 3),
            "draft_step_ms": round(self.draft_ms, 3) if self.draft_ms is not None else None,
            "draft_step_rel": round(self.draft_rel, 4) if self.draft_rel is not None else None,
            "samples": self.samples,
            # tokens in one target pass -> its cost relative to a 1-token pass
            "pass_cost_rel": {
                str(n): round(ms / self.step_ms, 4) for n, ms in sorted(self.target_ms.items())
            },
        }

def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3

def measure_cost_curve(
    source: Any,
    tokens: Sequence[int],
    max_k: int,
    reps: int = 5,
    pool: CostSamples | None = None,
    grid: Sequence[int] = PASS_GRID,
    warm: bool = False,
) -> CostCurve:
    """Time target passes over 1..max_k+1 tokens (all logits, as a verify pass) after the
    prompt, and one draft step, each `reps` times interleaved, and return the medians. KV
    caches are rolled back after every pass. With `pool`, the samples are added to it and the
    medians are over everything pooled (run_bench samples between prompts, so one busy moment
    on a shared machine cannot skew the whole curve). `source`: a Generator or a Session (its
    `timing_contexts`). `grid`: the pass widths (in tokens) timed below the widest; `warm`:
    one untimed pass of each context first (the first pass pays set-up: thread pools, weights
    read for the first time)."""
    pool = pool if pool is not None else CostSamples()
    target, dctx, draft_tokens, draft_type = source.timing_contexts(tokens)
    pool.draft_type = draft_type
    n0 = max(0, len(tokens) - 1)
    room = target.n_ctx - n0
    widest = max(1, min(max_k + 1, room))
    filler = (list(tokens) * (widest // max(1, len(tokens)) + 1))[:widest]
    target.truncate(0)
    if n0:
        target.decode(list(tokens[:n0]), 0, outputs="none")
    # a draft with another vocabulary reads the same text in its own tokens
    dtoks, dfill = list(tokens), filler[:1]
    if dctx is not None and draft_tokens is not None:
        dtoks = draft_tokens
        dfill = dtoks[-1:]
    dn0 = max(0, min(len(dtoks) - 1, dctx.n_ctx - 1)) if dctx is not None else 0
    if dctx is not None:
        dctx.truncate(0)
        if dn0:
            dctx.decode(dtoks[:dn0], 0, outputs="none")
    widths = [n for n in grid if n < widest] + [widest]
    if warm:
        target.decode(filler[:1], n0, outputs="last")
        target.truncate(n0)
        if dctx is not None:
            dctx.decode(dfill, dn0, outputs="last")
            dctx.truncate(dn0)
    for _ in range(max(1, reps)):
        for n in widths:
            ms = _timed(lambda n=n: target.decode(filler[:n], n0, outputs="all"))
            pool.target.setdefault(n, []).append(ms)
            target.truncate(n0)
        if dctx is not None:
            pool.draft.append(_timed(lambda: dctx.decode(dfill, dn0, outputs="last")))
            dctx.truncate(dn0)
    target.truncate(0)
    if dctx is not None:
        dctx.truncate(0)
    return pool.curve()

@dataclass
class CostSamples:
    """Raw timings behind a CostCurve (ms), by tokens per target pass."""

    target: dict[int, list[float]] = field(default_factory=dict)
    draft: list[float] = field(default_factory=list)
    draft_type: str = "draft-simple"

    def curve(self) -> CostCurve:
        return CostCurve(
            target_ms={n: statistics.median(v) for n, v in sorted(self.target.items())},
            draft_ms=statistics.median(self.draft) if self.draft else None,
            samples=min((len(v) for v in self.target.values()), default=0),
            draft_type=self.draft_type,
        )

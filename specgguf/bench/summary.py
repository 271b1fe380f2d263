"""Bench's rows: each configuration's runs summarized against plain decoding, pair by pair."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specgguf.bench.configs import PLAIN, BenchConfig

if TYPE_CHECKING:
    from specgguf.bench import BenchResult, RunResult


@dataclass
class Spread:
    median: float
    lo: float
    hi: float

    @classmethod
    def of(cls, xs: Sequence[float]) -> Spread | None:
        return cls(statistics.median(xs), min(xs), max(xs)) if xs else None

    def as_dict(self, nd: int = 4) -> dict[str, float]:
        return {
            "median": round(self.median, nd),
            "min": round(self.lo, nd),
            "max": round(self.hi, nd),
        }

@dataclass
class ConfigSummary:
    config: BenchConfig
    tps: Spread | None
    ratio: Spread | None  # tokens/s over plain's, pair by pair
    ratio_by_class: dict[str, float]
    accept_rate: float
    mean_acceptance_length: float
    per_position_acceptance: list[float]
    n_drafted: int
    same_as_plain: tuple[int, int] | None  # (identical runs, runs); greedy only
    auto: dict[str, Any] | None  # merged AdaptivePolicy summaries
    stalled_pairs: int = 0  # pairs left out of the ratios (see STARVED)
    tokens_per_pass: float = 0.0  # tokens emitted per target pass (plain decoding: 1)

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.config.label,
            "spec_type": list(self.config.types) or ["none"],
            "n_max": "auto" if self.config.auto else self.config.n_max,
            "run_flags": self.config.run_flags(),
            "tokens_per_second": self.tps.as_dict(3) if self.tps else None,
            "ratio_to_plain": self.ratio.as_dict() if self.ratio else None,
            "stalled_pairs": self.stalled_pairs,
            "ratio_by_class": {k: round(v, 4) for k, v in self.ratio_by_class.items()},
            "accept_rate": round(self.accept_rate, 4),
            "mean_acceptance_length": round(self.mean_acceptance_length, 4),
            "per_position_acceptance": [round(a, 4) for a in self.per_position_acceptance],
            "n_drafted": self.n_drafted,
            "tokens_per_pass": round(self.tokens_per_pass, 3),
            "same_text_as_plain": (
                {"identical": self.same_as_plain[0], "runs": self.same_as_plain[1]}
                if self.same_as_plain
                else None
            ),
            "auto": self.auto,
        }

def _merge_auto(summaries: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not summaries:
        return None
    hist: dict[str, int] = {}
    for s in summaries:
        for k, n in s["chosen_k"].items():
            hist[k] = hist.get(k, 0) + n
    rounds = sum(hist.values())
    mean_k = sum(int(k) * n for k, n in hist.items()) / rounds if rounds else 0.0
    tokens = sum(s.get("tokens", 0) for s in summaries)
    probe_cost = sum(s.get("probe_cost_steps", 0.0) for s in summaries)
    policy_steps = sum(
        s.get("policy_ms", 0.0) / s["target_step_ms"] for s in summaries if s.get("target_step_ms")
    )
    return {
        "rounds": rounds,
        "probes": sum(s["probes"] for s in summaries),
        "tokens": tokens,
        "probe_cost_steps": round(probe_cost, 3),
        "policy_steps": round(policy_steps, 4),
        # what auto cost beyond plain decoding, from its own timings: probe rounds' time beyond
        # the plain steps their tokens would take, plus its bookkeeping, per plain step
        "overhead_vs_plain": round((probe_cost + policy_steps) / tokens, 4) if tokens else None,
        "chosen_k": dict(sorted(hist.items(), key=lambda kv: int(kv[0]))),
        "mean_k": round(mean_k, 3),
        "last": summaries[-1],  # the last run's estimates (costs, acceptance, best k)
    }

#: a run that got less than this fraction of the bench's median CPU share (process CPU time /
#: wall time) was starved by something else on the machine (on 2 cores one competing process
#: makes llama.cpp's threads wait on each other): its pair is left out of the ratios, and
#: counted. A steady background load lowers every run's share alike and drops nothing.
STARVED = 0.5

def summarize(result: BenchResult) -> list[ConfigSummary]:
    plain = {(r.prompt, r.rep): r for r in result.runs[PLAIN]}
    shares = [r.cpu_share for runs in result.runs.values() for r in runs if r.cpu_share > 0]
    typical = statistics.median(shares) if shares else 0.0

    def stalled(r: RunResult) -> bool:
        return 0 < r.cpu_share < STARVED * typical

    rows = []
    for cfg in result.configs:
        runs = result.runs[cfg]
        ratios: list[float] = []
        by_class: dict[str, list[float]] = {}
        same = compared = dropped = 0
        for r in runs:
            ref = plain.get((r.prompt, r.rep))
            if ref is None or ref.tps <= 0:
                continue
            compared += 1
            same += r.tokens == ref.tokens
            if stalled(ref) or stalled(r):
                dropped += 1
                continue
            ratios.append(r.tps / ref.tps)
            by_class.setdefault(result.prompts[r.prompt].cls, []).append(r.tps / ref.tps)
        drafted = sum(r.timings["draft_n"] for r in runs)
        accepted = sum(r.timings["draft_n_accepted"] for r in runs)
        drafting_rounds = sum(r.timings["rounds"] for r in runs)
        emitted_by_run = [r.timings.get("predicted_n", len(r.tokens)) for r in runs]
        emitted = sum(emitted_by_run)
        # a run's first token came from its prompt's pass: that pass counts, as one made it
        passes = (
            drafting_rounds
            + sum(r.timings.get("plain_steps", 0) for r in runs)
            + sum(1 for n in emitted_by_run if n)
        )
        pos: list[float] = []
        for r in runs:  # weighted by drafting rounds, as RunStats counts them
            for i, a in enumerate(r.timings["per_position_acceptance"]):
                while len(pos) <= i:
                    pos.append(0.0)
                pos[i] += a * r.timings["rounds"]
        rows.append(
            ConfigSummary(
                config=cfg,
                tps=Spread.of([r.tps for r in runs]),
                ratio=Spread.of(ratios),
                ratio_by_class={c: statistics.median(v) for c, v in by_class.items()},
                accept_rate=accepted / drafted if drafted else 0.0,
                mean_acceptance_length=1.0 + accepted / drafting_rounds if drafting_rounds else 0.0,
                per_position_acceptance=[p / drafting_rounds for p in pos]
                if drafting_rounds
                else [],
                n_drafted=drafted,
                same_as_plain=(same, compared) if result.greedy and not cfg.plain else None,
                stalled_pairs=dropped,
                tokens_per_pass=emitted / passes if passes else 0.0,
                auto=_merge_auto([r.auto for r in runs if r.auto is not None]),
            )
        )
    return rows

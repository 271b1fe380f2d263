"""`specgguf bench`: does speculation pay on THIS machine, and with which settings?

Plain decoding and each speculative configuration run on the same prompts with the models
loaded once, interleaved (for each prompt: plain, A, B, ..., then the next prompt or repeat),
after one short untimed warm-up run per configuration. Speed is the decode rate (tokens after
the prompt / their time, prefill excluded); each configuration's ratio to plain decoding is
taken pair by pair (same prompt, same repetition, back to back), which cancels most of the
drift of a shared machine. The target's cost curve (a pass over k tokens vs over 1, the draft
step vs the target step) is measured too, so the report can say WHY a configuration pays or
not (specgguf.auto.policy's cost model), and the recommendation is the best measured
configuration, or plain decoding when none beats it by more than `margin`.

Every run goes through the library's Generator (specgguf.generator), as `run` does: each
configuration is one GenParams (its spec options as `run`'s flags set them, its own n-gram
drafters, and under auto a fresh policy seeded from the machine's profile), so a row measures
what `run` with the row's flags would do.

This module runs the bench; one job per module beside it: the configuration axes (axes), the
configurations and their labels (configs), the prompts (prompts), the cost curve (costs),
each run's Generator call (params), the rows (summary), the verdict (verdict) and the --json
report (report). Separate from the CLI (cli/bench_cmd.py) so it can be tested on the tiny
models.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specgguf.auto.policy import MAX_WIDTH
from specgguf.auto.profile import CostProfile
from specgguf.bench.axes import (
    AXES,
    parse_n_max_list,
    parse_size_m_list,
    parse_tree_list,
    with_size_m,
)
from specgguf.bench.configs import CONTROL, PLAIN, BenchConfig, parse_configs, tree_room
from specgguf.bench.costs import (
    PASS_GRID,
    CostCurve,
    CostSamples,
    machine_profile,
    measure_cost_curve,
    save_costs,
)
from specgguf.bench.params import gen_params
from specgguf.bench.prompts import BUILTIN_PROMPTS, BenchPrompt, load_prompts, parse_prompt_lines
from specgguf.bench.report import to_json
from specgguf.bench.summary import STARVED, ConfigSummary, Spread, _merge_auto, summarize
from specgguf.bench.verdict import (
    IDLE_MEAN_K,
    MARGIN,
    Recommendation,
    command_line,
    conditional_acceptance,
    model_view,
    recommend,
)
from specgguf.drafters.draft_lengths import AUTO_N_MAX_CAP
from specgguf.drafters.registry import SPEC_TYPES

if TYPE_CHECKING:  # the generator needs the runtime; parsing and reports do not
    from specgguf.generator import Generator

__all__ = [
    "AXES", "BUILTIN_PROMPTS", "CONTROL", "IDLE_MEAN_K", "MARGIN", "PASS_GRID", "PLAIN",
    "STARVED", "BenchConfig", "BenchOptions", "BenchPrompt", "BenchResult", "ConfigSummary",
    "CostCurve", "CostSamples", "Recommendation", "RunResult", "Spread", "_merge_auto",
    "command_line", "conditional_acceptance", "gen_params", "load_prompts", "machine_profile",
    "measure_cost_curve", "model_view", "parse_configs", "parse_n_max_list",
    "parse_prompt_lines", "parse_size_m_list", "parse_tree_list", "recommend", "run_bench",
    "run_one", "save_costs", "summarize", "to_json", "total_steps", "tree_room", "with_size_m",
]  # fmt: skip


@dataclass
class RunResult:
    prompt: int
    rep: int
    tokens: list[int]
    tps: float
    timings: dict[str, Any]
    auto: dict[str, Any] | None = None
    cpu_share: float = 0.0  # process CPU seconds per wall second during the run (0: unknown)
    text: str = ""  # what the run wrote (not in the report: tokens are what pairs compare)

def run_one(
    gen: Generator,
    cfg: BenchConfig,
    tokens: list[int],
    *,
    n_predict: int,
    sampler: Any,
    seed: int,
    ignore_eos: bool,
    prompt: int = -1,
    rep: int = -1,
    profile: CostProfile | None = None,
) -> RunResult:
    """Generate once with `cfg` through the Generator (see gen_params)."""
    params = gen_params(
        cfg,
        gen.spec,
        n_predict=n_predict,
        sampler=sampler,
        seed=seed,
        ignore_eos=ignore_eos,
        profile=profile,
    )
    generation = gen.generate(tokens, params)
    out: list[int] = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    try:
        for chunk in generation:
            if chunk.round is not None:
                out.extend(chunk.round.emitted)
    finally:
        generation.finish("interrupted")  # a no-op after the last round; detaches auto
    wall = time.perf_counter() - wall0
    gen.forget_outputs()  # each run as a new `run`: no prompt drafts its earlier answer
    stats = generation.stats
    return RunResult(
        prompt,
        rep,
        out,
        stats.predicted_per_second,
        stats.timings(),
        generation.auto_summary,
        cpu_share=(time.process_time() - cpu0) / wall if wall > 0 else 0.0,
        text=generation.text,
    )

@dataclass
class BenchOptions:
    n_predict: int = 128
    repeat: int = 1
    warmup: bool = True
    seed: int = 0
    ignore_eos: bool = False
    cost_reps: int = 3  # cost-curve samples before the runs (2 more after each prompt)
    #: auto runs start from this machine's profile (what `run` would read) merged with the
    #: curve this bench measures; False: every auto run starts cold, measuring its own costs
    warm_auto: bool = True
    profile: CostProfile | None = None  # the machine's profile as read before the bench

@dataclass
class BenchResult:
    configs: list[BenchConfig]
    prompts: list[BenchPrompt]
    runs: dict[BenchConfig, list[RunResult]]
    costs: CostCurve
    greedy: bool
    options: BenchOptions
    load: tuple[float, float, float] | None = None
    interrupted: bool = False  # Ctrl-C: only the runs that finished
    rows: list[ConfigSummary] = field(default_factory=list)

Progress = Callable[[str], None]

def run_bench(
    gen: Generator,
    configs: Sequence[BenchConfig],
    prompts: Sequence[BenchPrompt],
    sampler: Any,
    options: BenchOptions,
    progress: Progress | None = None,
) -> BenchResult:
    """Measure every configuration on every prompt (see the module docstring). The n-gram
    drafters each configuration kept are closed at the end (Generator.close)."""
    configs = list(configs)
    if PLAIN not in configs:
        configs.insert(0, PLAIN)
    tick = progress or (lambda _label: None)
    tokenized = [gen.tokenize(p.text) for p in prompts]
    runs: dict[BenchConfig, list[RunResult]] = {c: [] for c in configs}

    seed_profile: CostProfile | None = None

    def one(cfg: BenchConfig, toks: list[int], n: int, pi: int, rep: int) -> RunResult:
        return run_one(
            gen,
            cfg,
            toks,
            n_predict=n,
            sampler=sampler,
            seed=options.seed,
            ignore_eos=options.ignore_eos,
            prompt=pi,
            rep=rep,
            profile=seed_profile,
        )

    def seed_from(curve: CostCurve) -> CostProfile | None:
        if not options.warm_auto:
            return None
        measured = curve.to_profile()
        return options.profile.merged(measured) if options.profile is not None else measured

    try:
        if options.warmup:
            for cfg in configs:
                tick(f"warm-up {cfg.label}")
                one(cfg, tokenized[0], min(16, options.n_predict), -1, -1)
        tick("cost curve")
        max_k = max([AUTO_N_MAX_CAP] + [c.n_max or 0 for c in configs if c.uses_n_max])
        if any(SPEC_TYPES[t].free for c in configs for t in c.types):
            max_k = MAX_WIDTH  # n-gram drafts reach their size_m (48 by default)
        pool = CostSamples()
        costs = measure_cost_curve(gen, tokenized[0], max_k, options.cost_reps, pool)
        seed_profile = seed_from(costs)
        interrupted = False
        try:
            for pi, toks in enumerate(tokenized):
                for rep in range(options.repeat):
                    for cfg in configs:
                        tick(f"{prompts[pi].cls} #{pi + 1} {cfg.label}")
                        runs[cfg].append(one(cfg, toks, options.n_predict, pi, rep))
                # a few more cost samples between prompts, at this prompt's context length
                costs = measure_cost_curve(gen, toks, max_k, 2, pool)
                seed_profile = seed_from(costs)
        except KeyboardInterrupt:
            # Ctrl-C: report the runs that finished (a pair needs its plain run, which always
            # comes first in its block); before any measured run there is nothing to report.
            if not runs[configs[0]]:
                raise
            interrupted = True
    finally:
        gen.close()
    result = BenchResult(
        configs,
        list(prompts),
        runs,
        costs,
        greedy=getattr(sampler, "greedy", False),
        options=options,
        load=os.getloadavg() if hasattr(os, "getloadavg") else None,
        interrupted=interrupted,
    )
    result.rows = summarize(result)
    return result

def total_steps(n_configs: int, n_prompts: int, options: BenchOptions) -> int:
    """How many progress ticks run_bench makes."""
    return (n_configs if options.warmup else 0) + 1 + n_configs * n_prompts * options.repeat

"""`specgguf bench`: plain decoding vs speculative configurations on this machine, and a verdict.

Results (a table, or one JSON object with --json) go to stdout; the progress bar goes to
stderr, and only when stderr is a terminal. The measuring itself is specgguf.bench.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer
from specgguf_cli import options as o
from specgguf_cli import sampler_flags
from specgguf_cli.table_flags import with_table_flags

from specgguf.drafters.draft_lengths import AUTO_N_MAX_CAP
from specgguf.drafters.ngram_options import SIZE_M_TYPES

SpecTypes = typer.Option(
    None,
    "--spec-type",
    envvar="LLAMA_ARG_SPEC_TYPE",
    help="Configurations to compare with plain decoding (always measured, as `none`). Repeat "
    "the flag or separate configurations with ';'. Each is a comma list of types as for "
    "`run` (a combination: ngram-simple,draft-simple), optionally with ':N', ':A..B' or "
    "':auto' for its draft lengths, e.g. --spec-type 'draft-simple:2..4;ngram-simple' "
    "--spec-type draft-simple:auto. A lone `none` adds a control row: plain decoding measured "
    "again like a configuration, which shows this machine's noise floor. Default: "
    "draft-simple, ngram-simple and draft-simple:auto (without a draft model: ngram-simple "
    "and ngram-simple:auto).",
)
NMaxList = typer.Option(
    "3",
    "--spec-draft-n-max",
    envvar="LLAMA_ARG_SPEC_DRAFT_N_MAX",
    help="Draft lengths for configurations using draft-simple without ':N': a comma list of "
    f"N, A..B and auto (e.g. 2,3,auto). auto chooses 0..{AUTO_N_MAX_CAP} each round from "
    "measured costs.",
)
SweepNMax = typer.Option(
    None,
    "--sweep-n-max",
    help="Try these draft lengths (A..B or a comma list, e.g. 1..8) for every draft-simple "
    "configuration without ':N'; replaces --spec-draft-n-max.",
)
SweepSizeM = typer.Option(
    None,
    "--sweep-size-m",
    help=f"Run every configuration that uses {o.one_of(list(SIZE_M_TYPES))} once per size_m "
    "in this comma list (e.g. 8,16,32,48): how long their drafts may be.",
)
SweepTree = typer.Option(
    None,
    "--sweep-tree",
    help="Run every configuration with a type that grows trees (draft-simple, "
    "ngram-map-k4v) once per tree shape in this comma list: K "
    "(--spec-tree-topk K) or KxN (with --spec-tree-nodes N); 1 is the chain, e.g. 1,2,3x10.",
)
NPredict = typer.Option(
    128, "-n", "--n-predict", help="Tokens to generate per run (bench default: 128)."
)
Temp = typer.Option(
    0.0,
    "--temp",
    help="Temperature. Bench default: 0 (greedy), so every configuration must produce the "
    "same text as plain decoding and the speeds compare the same work.",
)
PromptClass = typer.Option(
    None,
    "--prompt-class",
    help="Only prompts of these classes (repeat or comma list), e.g. rewrite. The built-in "
    "set has code, chat, rewrite and edit (fix one thing, print the whole file).",
)
PerClass = typer.Option(0, "--per-class", help="At most N prompts of each class (0: all).")
Repeat = typer.Option(
    1, "--repeat", help="Measured runs per prompt and configuration (interleaved)."
)
Warmup = typer.Option(
    True, "--warmup/--no-warmup", help="One short untimed run per configuration first."
)
BenchJson = typer.Option(
    False, "--json", help="Print one JSON object on stdout instead of the table."
)
BenchPrompt = typer.Option(
    None, "-p", "--prompt", help="Benchmark this one prompt (else -f, else the built-in set)."
)
BenchFile = typer.Option(
    None,
    "-f",
    "--file",
    help='Prompts: JSON Lines of {"class": ..., "prompt": ...} (a file that is not JSON Lines '
    "is one prompt). Default: the built-in set scripts/bench_prompts.jsonl.",
)


def _refuse_removed_types(values: list[str] | None, *, from_env: bool) -> None:
    """Refuse `--spec-type draft` as `run` does, with the same line, in bench's own syntax too.

    The start-up check (specgguf.migrate.refuse) reads a comma list; bench's value also holds
    ';' between configurations and ':' before draft lengths (`ngram-simple;draft:2`), which
    hide the type from it. So each configuration's types are checked here, before anything
    is loaded.
    """
    from specgguf.errors import UsageError
    from specgguf.migrate import removed_flags as lg

    name = lg.SPEC_TYPE_ENV if from_env else lg.SPEC_TYPE_FLAG
    for value in values or []:
        for item in value.split(";"):
            types = item.partition(":")[0]
            if lg.removed_type(types) is not None:
                raise UsageError(lg.spec_type_message(name, types, env=from_env))


@with_table_flags("bench")
@o.with_session_flags
def bench(
    ctx: typer.Context,
    spec_type: list[str] | None = SpecTypes,
    spec_draft_n_max: str = NMaxList,
    no_auto_profile: bool = o.NoAutoProfile,
    sweep_n_max: str | None = SweepNMax,
    sweep_size_m: str | None = SweepSizeM,
    sweep_tree: str | None = SweepTree,
    flags: o.SessionFlags = None,  # every flag of o.SESSION_FLAGS and the n-gram options
    n_predict: int = NPredict,
    prompt: str | None = BenchPrompt,
    file: Path | None = BenchFile,
    prompt_class: list[str] | None = PromptClass,
    per_class: int = PerClass,
    repeat: int = Repeat,
    warmup: bool = Warmup,
    seed: int = o.Seed,
    temp: float = Temp,
    top_k: int = sampler_flags.option("top_k"),
    top_p: float = sampler_flags.option("top_p"),
    min_p: float = sampler_flags.option("min_p"),
    ignore_eos: bool = o.IgnoreEos,
    json_out: bool = BenchJson,
    quiet: bool = o.Quiet,
) -> int:
    """Measure plain decoding against speculative configurations and recommend one.

    Models are loaded once; for each prompt, plain decoding and every configuration run back
    to back (after a short warm-up), so each configuration's speed is compared with plain
    decoding pair by pair. The target's cost curve (a k-token pass vs 1 token, a draft step vs
    a target step) is measured too. The report ends with the `specgguf run` command to use, or
    "do not speculate here". With no -m, uses the pulled default pair. Prompts are sent as raw
    text (the built-in chat and rewrite prompts carry the ChatML markup of the default pair).
    """
    from specgguf.bench import (
        BenchOptions,
        load_prompts,
        parse_configs,
        parse_n_max_list,
        parse_size_m_list,
        parse_tree_list,
        recommend,
        run_bench,
        to_json,
        total_steps,
        tree_room,
    )
    from specgguf.core.sampling import SamplerParams
    from specgguf.drafters.registry import PRIORITY, needs_draft_model
    from specgguf.errors import UsageError

    source = ctx.get_parameter_source("spec_type")
    _refuse_removed_types(spec_type, from_env=getattr(source, "name", "") == "ENVIRONMENT")
    flags.check(n_predict=n_predict, temp=temp, top_p=top_p, min_p=min_p, seed=seed)
    if n_predict < 1:
        raise UsageError(f"invalid value for -n/--n-predict: {n_predict} (bench needs >= 1)")
    if repeat < 1:
        raise UsageError(f"invalid value for --repeat: {repeat} (must be >= 1)")
    if per_class < 0:
        raise UsageError(f"invalid value for --per-class: {per_class} (must be >= 0)")
    if sweep_n_max is not None:
        n_max_values = parse_n_max_list(sweep_n_max, what="--sweep-n-max")
    else:
        n_max_values = parse_n_max_list(spec_draft_n_max)

    default_pair = flags.model is None
    model, model_draft = o.resolve_models(flags.model, flags.model_draft)
    size_m_values = parse_size_m_list(sweep_size_m) if sweep_size_m is not None else []
    tree_values = parse_tree_list(sweep_tree) if sweep_tree is not None else []
    configs = parse_configs(
        spec_type,
        n_max_values,
        have_draft_model=model_draft is not None,
        size_m_values=size_m_values,
        draft_type=o.draft_type_for(model_draft),
        tree_values=tree_values,
    )
    classes = [c for v in (prompt_class or []) for c in v.split(",")]
    prompts = load_prompts(prompt, file, classes, per_class)
    o.check_lookup_caches([t for c in configs for t in c.types], flags.ngram)

    from specgguf.generator import Generator
    from specgguf.loading.session import resolve_seed

    all_types = sorted({t for c in configs for t in c.types}, key=PRIORITY.index)
    # n_max 3: each configuration sets its own draft length per run
    session = flags.open_session(
        model, model_draft, all_types, 3, tree_room=tree_room(configs, flags.tree_shape)
    )
    if not quiet:
        for warning in session.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    from specgguf.binding.devices import placement_line

    placed = placement_line(session.placement)
    if placed and not quiet:
        print(placed, file=sys.stderr)
    try:
        options = BenchOptions(
            n_predict=n_predict,
            repeat=repeat,
            warmup=warmup,
            seed=resolve_seed(seed),
            ignore_eos=ignore_eos,
            warm_auto=not no_auto_profile,
        )
        profile_file = None
        if not no_auto_profile:
            from specgguf.bench import machine_profile

            profile_file, options.profile = machine_profile(session.load)
        sampler = SamplerParams(temp=temp, top_k=top_k, top_p=top_p, min_p=min_p)
        gen = Generator(session, sampler=sampler, seed=options.seed, ignore_eos=ignore_eos)
        show = not quiet and sys.stderr.isatty()
        with _progress(show, total_steps(len(configs), len(prompts), options)) as tick:
            result = run_bench(gen, configs, prompts, sampler, options, progress=tick)
        if profile_file is not None and result.costs.target_ms:
            # what bench measured is what `run --spec-draft-n-max auto` starts from next time
            from specgguf.bench import save_costs

            save_costs(profile_file, result.costs)
    finally:
        session.close()

    model_args: list[str] = []
    if not default_pair:
        model_args = ["-m", str(model)]
        if model_draft is not None and any(needs_draft_model(c.types) for c in configs):
            model_args += ["-md", str(model_draft)]
    rec = recommend(result.rows, result.costs, model_args=model_args, ngram=flags.ngram)
    if json_out:
        extra = {
            "model": str(model),
            "draft_model": str(model_draft) if model_draft is not None else None,
            "temp": temp,
        }
        if session.placement:
            extra["placement"] = {k: v.as_dict() for k, v in session.placement.items()}
        sys.stdout.write(json.dumps(to_json(result, rec, extra), ensure_ascii=False) + "\n")
    else:
        _print_report(result, rec, temp)
    sys.stdout.flush()
    if result.interrupted:
        from specgguf.errors import ExitCode

        return int(ExitCode.INTERRUPTED)
    return 0


class _progress:
    """A rich progress bar on stderr (a no-op when hidden); yields the tick callback."""

    def __init__(self, show: bool, total: int) -> None:
        self.show = show
        self.total = total
        self.bar = None

    def __enter__(self):
        if not self.show:
            return lambda _label: None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.bar = Progress(
            TextColumn("bench"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            console=Console(stderr=True),
            transient=True,
        )
        self.bar.start()
        task = self.bar.add_task("", total=self.total)
        first = [True]

        def tick(label: str) -> None:
            if not first[0]:
                self.bar.advance(task)
            first[0] = False
            self.bar.update(task, description=label)

        return tick

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


def _fmt_spread(s, fmt: str, prefix: str = "") -> str:
    if s is None:
        return "-"
    if s.lo == s.hi:
        return f"{prefix}{s.median:{fmt}}"
    return f"{prefix}{s.median:{fmt}} ({s.lo:{fmt}}-{s.hi:{fmt}})"


def _print_report(result, rec, temp: float) -> None:
    from rich.console import Console
    from rich.table import Table

    out = sys.stdout
    console = Console(file=out, highlight=False, width=None if out.isatty() else 200)
    classes = list(dict.fromkeys(p.cls for p in result.prompts))
    counts = {c: sum(p.cls == c for p in result.prompts) for c in classes}
    load = f", load {result.load[0]:.2f}" if result.load else ""
    console.print(
        f"bench: {len(result.prompts)} prompts ("
        + ", ".join(f"{c} {n}" for c, n in counts.items())
        + f"), -n {result.options.n_predict}, "
        + ("greedy" if result.greedy else f"--temp {temp}")
        + f", repeat {result.options.repeat}{load}"
        + (" (INTERRUPTED: the runs that finished)" if result.interrupted else "")
    )
    cores = os.cpu_count() or 1
    if result.load and result.load[0] > cores:
        console.print(
            f"warning: load average {result.load[0]:.2f} on {cores} cores: other processes "
            "compete for the CPU, so these timings are noisy"
        )
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("config")
    table.add_column("t/s median (min-max)", justify="right")
    table.add_column("vs none", justify="right")
    if len(classes) > 1:
        for c in classes:
            table.add_column(c, justify="right")
    table.add_column("accept", justify="right")
    table.add_column("mean len", justify="right")
    table.add_column("tok/pass", justify="right")
    table.add_column("accept by position")
    if result.greedy:
        table.add_column("same text", justify="right")
    table.add_column("auto k")
    for row in result.rows:
        cfg = row.config
        cells = [
            cfg.label,
            _fmt_spread(row.tps, ".2f"),
            "1" if cfg.plain else _fmt_spread(row.ratio, ".2f", "x"),
        ]
        if len(classes) > 1:
            cells += [
                ""
                if cfg.plain
                else f"x{row.ratio_by_class[c]:.2f}"
                if c in row.ratio_by_class
                else "-"
                for c in classes
            ]
        drafting = row.n_drafted > 0
        cells += [
            f"{100 * row.accept_rate:.1f}%" if drafting else "-",
            f"{row.mean_acceptance_length:.2f}" if drafting else "-",
            f"{row.tokens_per_pass:.2f}",
            " ".join(f"{a:.2f}" for a in row.per_position_acceptance[:8]) if drafting else "-",
        ]
        if result.greedy:
            cells.append("" if row.same_as_plain is None else "{}/{}".format(*row.same_as_plain))
        auto = row.auto
        cells.append(
            f"mean {auto['mean_k']:.2f} ("
            + " ".join(f"{k}:{n}" for k, n in auto["chosen_k"].items())
            + ")"
            if auto
            else ""
        )
        table.add_row(*cells)
    console.print(table)
    costs = result.costs
    curve = " ".join(
        f"{n}:{ms / costs.step_ms:.2f}" for n, ms in sorted(costs.target_ms.items()) if n > 1
    )
    console.print(
        f"cost curve: target step {costs.step_ms:.1f} ms; a pass over n tokens costs (n:x) {curve}"
    )
    if costs.draft_ms is not None:
        console.print(
            f"cost curve: draft step {costs.draft_ms:.1f} ms = {costs.draft_rel:.2f} of a "
            "target step"
        )
    for line in rec.model_view:
        console.print(f"cost model: {line}")
    for row in result.rows:
        a = row.auto
        if a and a.get("overhead_vs_plain") is not None:
            console.print(
                f"auto: {row.config.label}: its probes cost {a['probe_cost_steps']:+.2f} target "
                f"steps and its bookkeeping {a['policy_steps']:.3f} over {a['tokens']} tokens: "
                f"{a['overhead_vs_plain']:+.1%} against plain decoding by its own timings "
                "(the ratios above also carry this machine's noise: compare a `none` control row)"
            )
    stalled = sum(r.stalled_pairs for r in result.rows if not r.config.plain)
    if stalled:
        console.print(
            f"note: {stalled} pair(s) left out of the ratios: a run got less than half the "
            "usual CPU time (another process took it; rerun with --repeat)"
        )
    if result.greedy:
        diverged = [
            r for r in result.rows if r.same_as_plain and r.same_as_plain[0] < r.same_as_plain[1]
        ]
        if diverged:
            console.print(
                "note: greedy output differed from plain decoding for "
                + ", ".join(r.config.label for r in diverged)
                + " (a k-token pass rounds differently from a 1-token pass; divergence at "
                "near-ties of the target's top logits)"
            )
    if rec.speculate:
        console.print(f"recommendation: {rec.command}   (expected x{rec.expected_speedup:.2f})")
    else:
        console.print(f"recommendation: do not speculate here: {rec.command}   (x1.00)")
    console.print(f"  {rec.reason}")

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

Separate from the CLI (cli/bench_cmd.py) so it can be tested on the tiny models.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgguf.auto.cost_model import Costs, best_k
from specgguf.auto.policy import DEFAULT_N_MAX_CAP, MAX_WIDTH
from specgguf.auto.profile import CostProfile, Estimate
from specgguf.drafters.draft_lengths import N_MAX_LIMIT, in_range
from specgguf.drafters.ngram_options import SIZE_M_TYPES
from specgguf.drafters.registry import SPEC_TYPES
from specgguf.drafters.spec_types import default_spec_types, parse_spec_types
from specgguf.errors import PromptError, UsageError

if TYPE_CHECKING:  # the generator needs the runtime; parsing and reports do not
    from specgguf.generator import Generator, GenParams

#: auto's largest draft (`--spec-draft-n-max auto` chooses 0..AUTO_CAP each round)
AUTO_CAP = DEFAULT_N_MAX_CAP
#: a speculative configuration is recommended only if its median ratio beats plain by this
MARGIN = 0.03
#: an auto configuration that drafted less than this on average per round is plain decoding
IDLE_MEAN_K = 0.05
#: tokens per target pass at which the cost curve is measured: every width up to 16, where the
#: CPU kernels change most, then sparser (what lies between is interpolated)
PASS_GRID = (*range(1, 17), 24, 32, 48, 64)
#: the prompt set shipped with specgguf (one JSON object per line: {"class", "prompt"})
BUILTIN_PROMPTS = Path(__file__).resolve().parent.parent / "scripts" / "bench_prompts.jsonl"


# -- configurations ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchConfig:
    """One way of decoding: spec types (empty: plain) and draft length (None: auto).

    `control`: plain decoding measured again as if it were a configuration (`--spec-type
    none`), so the report shows what a ratio of identical work looks like on this machine:
    the noise floor every other ratio has to clear."""

    types: tuple[str, ...] = ()
    n_max: int | None = 3
    control: bool = False
    #: `run` with no --spec-type and no --spec-draft-n-max: what a user gets by default
    default: bool = False
    size_m: int | None = None  # --sweep-size-m: the n-gram types' size_m for this row

    @property
    def plain(self) -> bool:
        """The reference every ratio is taken against (not the control)."""
        return not self.types and not self.control

    @property
    def auto(self) -> bool:
        return bool(self.types) and self.n_max is None

    @property
    def uses_n_max(self) -> bool:
        """--spec-draft-n-max only bounds draft-simple (n-gram types have their own size_m),
        except in auto mode, where the policy's cap bounds every drafter."""
        return self.auto or "draft-simple" in self.types

    @property
    def label(self) -> str:
        if self.plain:
            return "none"
        if self.control:
            return "none (control)"
        name = ",".join(self.types)
        if self.default:
            return f"default ({name} auto)"
        if self.size_m is not None:
            name += f" m={self.size_m}"
        if self.auto:
            return f"{name} auto"
        return f"{name} n_max={self.n_max}" if self.uses_n_max else name

    def run_flags(self) -> list[str]:
        """The `specgguf run` flags that select this configuration."""
        if not self.types:
            return ["--spec-type", "none"]
        if self.default:
            return []
        flags = ["--spec-type", ",".join(self.types)]
        if self.uses_n_max:
            flags += ["--spec-draft-n-max", "auto" if self.auto else str(self.n_max)]
        if self.size_m is not None:
            for t in self.types:
                if t in SIZE_M_TYPES:
                    flags += [SIZE_M_TYPES[t], str(self.size_m)]
        return flags


PLAIN = BenchConfig((), 0)
CONTROL = BenchConfig((), 0, control=True)


def parse_n_max_list(value: str, *, what: str = "--spec-draft-n-max") -> list[int | None]:
    """ "3", "2,3,auto", "1..8" -> [3], [2, 3, None], [1, ..., 8] (None: auto)."""
    out: list[int | None] = []
    for raw in value.split(","):
        item = raw.strip().lower()
        if not item:
            continue
        if item == "auto":
            out.append(None)
            continue
        try:
            if ".." in item:
                a, b = (int(x) for x in item.split("..", 1))
                if a > b:
                    raise ValueError
                out.extend(range(a, b + 1))
            else:
                out.append(int(item))
        except ValueError:
            raise UsageError(
                f"invalid value for {what}: {raw.strip()!r} (expected N, A..B or auto)"
            ) from None
    for n in out:
        if n is not None and not in_range(n):
            raise UsageError(f"invalid value for {what}: {n} (must be 0..{N_MAX_LIMIT})")
    if not out:
        raise UsageError(f"invalid value for {what}: {value!r} (empty)")
    return list(dict.fromkeys(out))


def parse_configs(
    values: Sequence[str] | None,
    n_max_values: Sequence[int | None],
    *,
    have_draft_model: bool,
    size_m_values: Sequence[int] = (),
) -> list[BenchConfig]:
    """Configurations to compare, plain decoding first.

    Each value (from repeated --spec-type) holds configurations separated by ';'; each is a
    comma list of types as `run --spec-type` takes it, optionally followed by ':N', ':auto'
    or ':A..B' (its draft lengths). Without ':', a configuration that uses draft-simple runs
    once per value of `n_max_values` (--spec-draft-n-max / --sweep-n-max); n-gram-only ones
    run once. `none` (plain decoding) is always included, as the reference. `default` is what
    `run` does with neither --spec-type nor --spec-draft-n-max (the free n-gram drafters, and
    draft-simple with a draft model, under auto). With `size_m_values` (--sweep-size-m), each
    configuration with ngram-simple/map-k/map-k4v runs once per size_m.
    With no --spec-type: ngram-simple and ngram-map-k as llama.cpp runs them, draft-simple
    with a fixed length when a draft model is there, and the default.
    """
    if not values:
        values = (
            ["draft-simple;ngram-simple;ngram-map-k;default"]
            if have_draft_model
            else ["ngram-simple;ngram-map-k;default"]
        )
    configs: list[BenchConfig] = [PLAIN]

    def add(cfg: BenchConfig) -> None:
        sweep = not cfg.default and any(t in SIZE_M_TYPES for t in cfg.types)
        sizes = list(size_m_values) if sweep else []
        for m in sizes or [None]:
            c = replace(cfg, size_m=m)
            if c not in configs:
                configs.append(c)

    for value in values:
        for item in value.split(";"):
            item = item.strip()
            if not item:
                continue
            if item.lower() == "default":
                types = default_spec_types(have_draft_model=have_draft_model, auto=True)
                add(BenchConfig(tuple(types), None, default=True))
                continue
            spec, _, lengths = item.partition(":")
            types = tuple(parse_spec_types(spec, have_draft_model=have_draft_model))
            if not types:
                # a lone `none` asks for the control row; plain itself is always there
                if spec.strip().lower() == "none" and CONTROL not in configs:
                    configs.append(CONTROL)
                continue
            if lengths:
                ns = parse_n_max_list(lengths, what=f"--spec-type {item}")
            elif "draft-simple" in types:
                ns = list(n_max_values)
            else:
                ns = [3]  # n-gram only: --spec-draft-n-max does not apply
            for n in ns:
                cfg = BenchConfig(types, n)
                if not cfg.uses_n_max:
                    cfg = BenchConfig(types, 3)
                add(cfg)
    return configs


# -- prompts -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchPrompt:
    cls: str
    text: str


def parse_prompt_lines(data: str, where: str) -> list[BenchPrompt] | None:
    """JSON Lines of {"prompt": ..., "class": ...}; None if `data` is not such a file."""
    prompts: list[BenchPrompt] = []
    for n, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if n == 1 or not prompts:
                return None  # not JSON Lines: the whole file is one prompt
            raise PromptError(f"{where}:{n}: not a JSON object") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
            if not prompts and not isinstance(obj, dict):
                return None
            raise PromptError(f'{where}:{n}: expected {{"class": ..., "prompt": "..."}}')
        cls = obj.get("class", "custom")
        prompts.append(BenchPrompt(str(cls), obj["prompt"]))
    return prompts or None


def load_prompts(
    text: str | None = None,
    file: Path | None = None,
    classes: Sequence[str] | None = None,
    per_class: int = 0,
) -> list[BenchPrompt]:
    """-p TEXT, else -f FILE (JSON Lines, or plain text = one prompt), else the built-in set;
    then keep the classes asked for (--prompt-class) and at most `per_class` of each."""
    if text is not None:
        prompts = [BenchPrompt("custom", text)]
    else:
        path = Path(file) if file is not None else BUILTIN_PROMPTS
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            if file is None:
                raise UsageError(
                    f"the built-in prompt set {path} is missing: pass -p TEXT or -f FILE"
                ) from None
            raise UsageError(f"-f {file}: no such file") from None
        except OSError as e:
            raise UsageError(f"-f {file}: {e.strerror}") from None
        try:
            decoded = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise PromptError(f"{path}: not valid UTF-8 (byte {e.start})") from None
        parsed = parse_prompt_lines(decoded, str(path))
        prompts = parsed if parsed is not None else [BenchPrompt("custom", decoded)]
    if classes:
        wanted = [c.strip() for c in classes if c.strip()]
        known = sorted({p.cls for p in prompts})
        unknown = [c for c in wanted if c not in known]
        if unknown:
            raise UsageError(
                f"--prompt-class {unknown[0]!r}: no such class in the prompts "
                f"(have: {', '.join(known)})"
            )
        prompts = [p for p in prompts if p.cls in wanted]
    if per_class > 0:
        seen: dict[str, int] = {}
        kept = []
        for p in prompts:
            seen[p.cls] = seen.get(p.cls, 0) + 1
            if seen[p.cls] <= per_class:
                kept.append(p)
        prompts = kept
    if not prompts:
        raise PromptError("no prompts to benchmark")
    return prompts


# -- measuring ---------------------------------------------------------------------------------


@dataclass
class CostCurve:
    """This machine's costs, relative to one plain target step (a 1-token pass)."""

    target_ms: dict[int, float]  # median ms of a target pass over n tokens (n = 1..)
    draft_ms: float | None  # median ms of one draft-model step (1 token), None: no draft
    samples: int = 0  # timings behind each median

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

    def to_profile(self, draft_name: str = "draft-simple") -> CostProfile:
        """These medians as a machine profile (specgguf.auto.profile) that seeds `auto`."""
        w = float(max(1, self.samples))
        verify = {
            n - 1: Estimate(ms / self.step_ms, w) for n, ms in self.target_ms.items() if n > 1
        }
        draft = {draft_name: Estimate(self.draft_rel, w)} if self.draft_rel is not None else {}
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
) -> CostCurve:
    """Time target passes over 1..max_k+1 tokens (all logits, as a verify pass) after the
    prompt, and one draft step, each `reps` times interleaved, and return the medians. KV
    caches are rolled back after every pass. With `pool`, the samples are added to it and the
    medians are over everything pooled (run_bench samples between prompts, so one busy moment
    on a shared machine cannot skew the whole curve). `source`: a Generator or a Session (its
    `timing_contexts`)."""
    pool = pool if pool is not None else CostSamples()
    target, dctx, draft_tokens = source.timing_contexts(tokens)
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
    widths = [n for n in PASS_GRID if n < widest] + [widest]
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

    def curve(self) -> CostCurve:
        return CostCurve(
            target_ms={n: statistics.median(v) for n, v in sorted(self.target.items())},
            draft_ms=statistics.median(self.draft) if self.draft else None,
            samples=min((len(v) for v in self.target.values()), default=0),
        )


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


def with_size_m(ngram: Any, size_m: int | None) -> Any:
    """The n-gram options with every size_m set to `size_m` (None: unchanged)."""
    if size_m is None:
        return ngram
    from specgguf.drafters.ngram_options import NgramOptions

    opts = ngram if ngram is not None else NgramOptions()
    for spec_type in SIZE_M_TYPES:
        opts = opts.with_params(spec_type, size_m=size_m)
    return opts


def gen_params(
    cfg: BenchConfig,
    base_spec: Any,
    *,
    n_predict: int,
    sampler: Any,
    seed: int,
    ignore_eos: bool,
    profile: CostProfile | None = None,
) -> GenParams:
    """The Generator call that runs `cfg` as `specgguf run` with cfg.run_flags() would: its
    spec options in full (not a per-request n_max cap: an n-gram drafter keeps its size_m),
    n-gram drafters of its own (their options and caches never shared with another
    configuration), and under auto a fresh policy seeded from `profile`, as a new `run`."""
    from specgguf.generator import GenParams

    return GenParams(
        sampler=sampler,
        n_predict=n_predict,
        seed=seed,
        ignore_eos=ignore_eos,
        spec_base=replace(
            base_spec,
            types=list(cfg.types),
            n_max=cfg.n_max if cfg.n_max is not None else AUTO_CAP,
            adaptive=cfg.auto,
            ngram=with_size_m(base_spec.ngram, cfg.size_m),
        ),
        fresh_auto=True,
        auto_profile=profile,
        ngram_cache=cfg,
    )


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
        max_k = max([AUTO_CAP] + [c.n_max or 0 for c in configs if c.uses_n_max])
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


def machine_profile(load: Any) -> tuple[Path, CostProfile | None]:
    """Where this machine's cost profile for these load options lives, and what it holds."""
    from specgguf.auto.profile import load_profile, profile_path

    path = profile_path(load)
    return path, load_profile(path)


def save_costs(path: Path, costs: CostCurve) -> None:
    """Merge what bench measured into the machine profile: `run`'s auto starts from it."""
    from specgguf.auto.profile import save_profile

    save_profile(path, costs.to_profile())


def total_steps(n_configs: int, n_prompts: int, options: BenchOptions) -> int:
    """How many progress ticks run_bench makes."""
    return (n_configs if options.warmup else 0) + 1 + n_configs * n_prompts * options.repeat


# -- summaries ---------------------------------------------------------------------------------


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
        passes = drafting_rounds + sum(r.timings.get("plain_steps", 0) for r in runs)
        emitted = sum(r.timings.get("predicted_n", len(r.tokens)) for r in runs)
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


# -- recommendation ----------------------------------------------------------------------------


def conditional_acceptance(per_position: Sequence[float]) -> list[float]:
    """vLLM's per-position acceptance (fraction of drafting rounds whose i-th proposal was
    accepted) -> P(i accepted | i-1 accepted), what the cost model wants."""
    out, prev = [], 1.0
    for a in per_position:
        out.append(min(1.0, a / prev) if prev > 0 else 0.0)
        prev = a
    return out


@dataclass
class Recommendation:
    speculate: bool
    config: BenchConfig
    expected_speedup: float  # the measured median ratio to plain decoding
    command: str
    reason: str
    model_view: list[str] = field(default_factory=list)  # what the cost model predicts

    def as_dict(self) -> dict[str, Any]:
        return {
            "speculate": self.speculate,
            "config": self.config.label,
            "run_flags": self.config.run_flags(),
            "expected_speedup": round(self.expected_speedup, 4),
            "command": self.command,
            "reason": self.reason,
            "cost_model": self.model_view,
        }


def command_line(cfg: BenchConfig, model_args: Sequence[str] = (), ngram: Any = None) -> str:
    """The `specgguf run` command for `cfg`, carrying the n-gram options the bench ran with
    (`ngram`: NgramOptions) where they differ from the defaults."""
    import shlex

    extra = ngram.flags_for(cfg.types) if ngram is not None else []
    return shlex.join(["specgguf", "run", *model_args, *cfg.run_flags(), *extra])


def model_view(rows: Sequence[ConfigSummary], costs: CostCurve) -> list[str]:
    """The cost model's reading of the measurements: for each drafting configuration with
    fixed n_max, the best draft length given this machine's curve and its acceptance."""
    lines = []
    verify = costs.verify()
    for row in rows:
        cfg = row.config
        if cfg.plain or cfg.auto or not row.per_position_acceptance:
            continue
        draft = costs.draft_rel if "draft-simple" in cfg.types and costs.draft_rel else 0.0
        acc = conditional_acceptance(row.per_position_acceptance)
        n = len(verify) - 1
        k, s = best_k(Costs(verify=verify, draft=draft), acc, n)
        what = f"n_max {k} (x{s:.2f} predicted)" if k else "no drafting (nothing beats x1.00)"
        lines.append(
            f"{cfg.label}: draft step {draft:.2f}, acceptance "
            + " ".join(f"{a:.2f}" for a in acc[:4])
            + f" -> best {what}"
        )
    return lines


def recommend(
    rows: Sequence[ConfigSummary],
    costs: CostCurve | None = None,
    *,
    model_args: Sequence[str] = (),
    margin: float = MARGIN,
    ngram: Any = None,
) -> Recommendation:
    """The configuration with the best median ratio to plain decoding, if it beats plain by
    more than `margin`; otherwise plain decoding ("do not speculate here"). With a control row
    (plain measured again), the bar is at least twice the control's distance from x1.00: a
    gain this machine's noise alone produces is not a reason to speculate."""
    control = next((r for r in rows if r.config.control and r.ratio is not None), None)
    if control is not None and control.ratio is not None:
        margin = max(margin, 2 * abs(control.ratio.median - 1.0))
    candidates = [r for r in rows if r.config.types and r.ratio is not None]
    # an auto row that (almost) never drafted IS plain decoding: its ratio is noise, and the
    # right advice is what it did by itself
    idle = [r for r in candidates if r.config.auto and r.auto and r.auto["mean_k"] < IDLE_MEAN_K]
    candidates = [r for r in candidates if r not in idle]
    view = model_view(rows, costs) if costs is not None else []
    best = max(candidates, key=lambda r: r.ratio.median, default=None)  # type: ignore[union-attr]
    if best is not None and best.ratio is not None and best.ratio.median > 1.0 + margin:
        r = best.ratio
        return Recommendation(
            True,
            best.config,
            r.median,
            command_line(best.config, model_args, ngram),
            f"{best.config.label} decoded at x{r.median:.2f} the speed of plain decoding "
            f"(median of pairwise ratios, range x{r.lo:.2f}..x{r.hi:.2f})",
            view,
        )
    if best is None or best.ratio is None:
        reason = "no speculative configuration was measured"
    else:
        reason = (
            f"no configuration beats plain decoding by more than {margin:.0%}: the best, "
            f"{best.config.label}, ran at x{best.ratio.median:.2f}"
        )
    for r in idle:
        reason += (
            f"; {r.config.label} drafted in {r.auto['rounds'] - r.auto['chosen_k'].get('0', 0)}"
            f" of {r.auto['rounds']} rounds: it already decodes plainly here by itself"
        )
    return Recommendation(False, PLAIN, 1.0, command_line(PLAIN, model_args), reason, view)


def to_json(
    result: BenchResult, rec: Recommendation, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        **(extra or {}),
        "n_predict": result.options.n_predict,
        "repeat": result.options.repeat,
        "seed": result.options.seed,
        "greedy": result.greedy,
        "interrupted": result.interrupted,
        "load_average": list(result.load) if result.load else None,
        "prompts": [{"class": p.cls, "chars": len(p.text)} for p in result.prompts],
        "cost_curve": result.costs.as_dict(),
        "configs": [
            {
                **row.as_dict(),
                "runs": [
                    {
                        "prompt": r.prompt,
                        "class": result.prompts[r.prompt].cls,
                        "rep": r.rep,
                        "tokens_per_second": round(r.tps, 3),
                        "tokens": len(r.tokens),
                        "cpu_share": round(r.cpu_share, 3),
                    }
                    for r in result.runs[row.config]
                ],
            }
            for row in result.rows
        ],
        "recommendation": rec.as_dict(),
    }

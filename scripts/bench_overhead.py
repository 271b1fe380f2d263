#!/usr/bin/env python3
"""Python's share of a speculative round: the time a round spends OUTSIDE llama.cpp's decode.

On a GPU a 7B target step takes a few milliseconds, so what specgguf does in Python each round
(turning logits rows of a 150k-token vocabulary into distributions, acceptance, n-gram
lookups, the auto policy, bookkeeping) has to stay small against it. The budget: at most
0.3 ms per round plus 0.1 ms per draft token at --temp 0, twice that when sampling.

How it measures: for this process only, llama_decode, llama_process (an EAGLE-3 head's and an
MTP layer's passes) and llama_get_logits (which waits for a GPU's results) are wrapped with a
timer; nothing in specgguf is instrumented, so nothing costs
anything when this script is not running. A round's overhead is the wall time between two
rounds handed out by the decoder minus the time spent inside those calls (the target's verify
pass and the draft model's steps alike). The first round, which includes the prompt, is left
out. Both the target's and the draft's decodes count as llama.cpp's time.

    python scripts/bench_overhead.py                          # the pulled pair, temp 0 and 0.8
    python scripts/bench_overhead.py -m t.gguf -md d.gguf -ngl all -ngld all --json
    python scripts/bench_overhead.py --profile                # + where the Python time goes
    python scripts/bench_overhead.py -m llama.gguf -md eagle3-head.gguf --mode in-place \
        --configs "draft-eagle3:4;none"                      # a head (draft-mtp: no -md)

On a small CPU, llama.cpp's worker threads keep spinning for a while after a decode returns
and compete with Python for the cores: `-t` below the core count gives a cleaner figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # runnable from a checkout without installing specgguf
    sys.path.insert(0, str(ROOT))

#: the --spec-type names that draft with a model (one of them is loaded per run of this script)
MODEL_TYPES = ("draft-simple", "draft-eagle3", "draft-mtp")
BUDGET_ROUND_MS = 0.3
BUDGET_TOKEN_MS = 0.1
DEFAULT_PROMPT = (
    "<|im_start|>user\nWrite a Python function that parses a CSV file of orders and returns "
    "the total per customer, with type hints and a docstring.<|im_end|>\n<|im_start|>assistant\n"
)


class DecodeTimer:
    """Seconds spent inside llama.cpp's decode calls, by wrapping the bindings' functions.

    Wall time with perf_counter (0.1 us a call). With `cpu`, llama_decode's CPU time on this
    thread too, with thread_time: a system call (about 4 us on a VM), so it is taken only
    around llama_decode, where the CPU work is; llama_get_logits, which on a GPU waits for
    the results, costs the CPU nothing to speak of and is timed on the wall clock only."""

    NAMES = ("llama_decode", "llama_process", "llama_get_logits", "llama_get_logits_ith")
    #: the calls that compute (an EAGLE-3 head's and an MTP layer's passes are llama_process)
    COMPUTE = ("llama_decode", "llama_process")

    def __init__(self, cpu: bool = True) -> None:
        self.total = 0.0  # wall seconds
        self.cpu = 0.0  # this thread's CPU seconds (llama_decode only)
        self.with_cpu = cpu
        self.originals: dict[str, object] = {}

    def install(self, ll) -> None:
        self.ll = ll
        for name in self.NAMES:
            orig = getattr(ll, name, None)
            if orig is None or name in self.originals:
                continue
            self.originals[name] = orig
            if name in self.COMPUTE and self.with_cpu:

                def timed(*args, _orig=orig):
                    t0, c0 = time.perf_counter(), time.thread_time()
                    try:
                        return _orig(*args)
                    finally:
                        self.cpu += time.thread_time() - c0
                        self.total += time.perf_counter() - t0
            else:

                def timed(*args, _orig=orig):
                    t0 = time.perf_counter()
                    try:
                        return _orig(*args)
                    finally:
                        self.total += time.perf_counter() - t0

            setattr(ll, name, timed)

    def unwrapped(self) -> dict[str, object]:
        """The bindings' own functions (warm mode runs without the timers)."""
        return dict(self.originals)


@dataclass
class Measure:
    """One configuration at one temperature."""

    config: str
    temp: float
    clock: str = "cpu"  # which overhead the budget is checked on
    k: list[int] = field(default_factory=list)  # proposals per round
    wall_ms: list[float] = field(default_factory=list)  # wall time outside decode
    cpu_ms: list[float] = field(default_factory=list)  # this thread's CPU time outside decode
    decode_ms: list[float] = field(default_factory=list)

    @property
    def overhead_ms(self) -> list[float]:
        return self.cpu_ms if self.clock == "cpu" else self.wall_ms

    @property
    def rounds(self) -> int:
        return len(self.k)

    @property
    def mean_k(self) -> float:
        return statistics.fmean(self.k) if self.k else 0.0

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(self.overhead_ms) if self.overhead_ms else 0.0

    @property
    def budget_ms(self) -> float:
        scale = 1.0 if self.temp <= 0 else 2.0
        return scale * (BUDGET_ROUND_MS + BUDGET_TOKEN_MS * self.mean_k)

    def fit(self) -> tuple[float, float] | None:
        """Least squares overhead = a + b * K over the rounds (None when K never varied)."""
        if len(set(self.k)) < 2:
            return None
        import numpy as np

        b, a = np.polyfit(np.array(self.k, float), np.array(self.overhead_ms), 1)
        return float(a), float(b)

    def as_dict(self) -> dict:
        fit = self.fit()
        drafted = sum(self.k)
        return {
            "config": self.config,
            "temp": self.temp,
            "clock": self.clock,
            "wall_ms_per_round": round(statistics.fmean(self.wall_ms), 4) if self.k else None,
            "cpu_ms_per_round": round(statistics.fmean(self.cpu_ms), 4) if self.k else None,
            "rounds": self.rounds,
            "mean_k": round(self.mean_k, 3),
            "overhead_ms_per_round": round(self.mean_ms, 4),
            "overhead_ms_median": round(statistics.median(self.overhead_ms), 4)
            if self.overhead_ms
            else None,
            "overhead_ms_per_draft_token": round(sum(self.overhead_ms) / drafted, 4)
            if drafted
            else None,
            "fit_ms_per_round": round(fit[0], 4) if fit else None,
            "fit_ms_per_draft_token": round(fit[1], 4) if fit else None,
            "decode_ms_per_round": round(statistics.fmean(self.decode_ms), 3)
            if self.decode_ms
            else None,
            "budget_ms_per_round": round(self.budget_ms, 4),
            "within_budget": self.mean_ms <= self.budget_ms,
        }


def parse_config(text: str) -> tuple[list[str], int | None]:
    """"draft-simple:4" -> (["draft-simple"], 4); ":auto" -> None; "none" -> ([], 0)."""
    name, _, n = text.partition(":")
    types = [] if name == "none" else name.split(",")
    if n == "auto":
        return types, None
    return types, int(n) if n else 4


def _decoder(session, cfg: str, temp: float, n_predict: int, seed: int, *, ignore_eos=False):
    """A decoder for one configuration ("draft-simple:4", "ngram-simple", ":auto", "none")."""
    from specgguf.auto.policy import AdaptivePolicy
    from specgguf.core.sampling import SamplerParams
    from specgguf.drafters.draft_lengths import AUTO_N_MAX_CAP

    types, n_max = parse_config(cfg)
    session.spec = replace(
        session.spec,
        types=types,
        n_max=n_max if n_max is not None else AUTO_N_MAX_CAP,
        adaptive=n_max is None,
    )
    policy = AdaptivePolicy(n_max_cap=AUTO_N_MAX_CAP) if n_max is None and types else None
    if policy is not None:
        policy.seed(None)  # cold: it measures this machine itself, as `--no-auto-profile`
    dec = session.decoder(
        SamplerParams(temp=temp), n_predict, seed, ignore_eos=ignore_eos, budget_policy=policy
    )
    if policy is not None:
        policy.attach(dec.drafters)
    return dec, policy


def measure(
    session, cfg: str, tokens, temp: float, n_predict: int, seed: int, timer, clock: str = "cpu"
) -> Measure:
    """In place: real rounds, the time outside llama.cpp's calls."""
    dec, policy = _decoder(session, cfg, temp, n_predict, seed)
    m = Measure(cfg, temp, clock)
    first = True
    t_prev = c_prev = d_prev = dc_prev = 0.0
    for rnd in dec.generate(tokens):
        now, cpu, dec_s, dec_c = time.perf_counter(), time.thread_time(), timer.total, timer.cpu
        if not first:
            inside = (dec_s - d_prev) * 1e3
            m.k.append(len(rnd.proposed))
            m.wall_ms.append((now - t_prev) * 1e3 - inside)
            m.cpu_ms.append((cpu - c_prev - (dec_c - dc_prev)) * 1e3)
            m.decode_ms.append(inside)
        first = False
        t_prev, c_prev, d_prev, dc_prev = (
            time.perf_counter(), time.thread_time(), timer.total, timer.cpu
        )
    if policy is not None:
        policy.detach()
    return m


def warm_width(n_max: int, policy, drafters) -> int:
    """The widest pass a warm round can ask rows of, so the rows buffer it fills: an n-gram
    drafter proposes up to its own length, past n_max, under a fixed length and under auto
    alike (a buffer only n_max + 1 rows long was read past its end: a segfault for suffix and
    the n-gram map types on a 150k-token vocabulary)."""
    longest = max((d.max_draft for d in drafters), default=0)
    return max(n_max, policy.width if policy is not None else 0, longest) + 1


def measure_warm(
    session, cfg: str, tokens, temp: float, seed: int, rounds: int = 150, timer=None
) -> Measure:
    """The same Python work with llama.cpp taken out: after a few real rounds, llama_decode
    becomes a no-op and every target row in the output buffer is set to the draft's last row
    (n-gram configurations: to the target's first row), so every proposal is accepted and a
    round does the most Python work its draft length allows. Nothing else differs: this is
    the per-round cost where a decode does not flush the CPU's caches (a GPU), measured over
    many rounds in a fraction of a second, which a shared CPU's noise hardly reaches."""
    import numpy as np

    from specgguf.binding import engine
    dec, policy = _decoder(session, cfg, temp, 1 << 30, seed, ignore_eos=True)
    gen = dec.generate(tokens)
    for _ in range(3):
        next(gen)
    target, dctx = session.target, session.draft_ctx
    width = warm_width(session.spec.n_max, policy, dec.drafters)
    n_past = target.n_past
    target.decode([tokens[-1]] * width, n_past, outputs="all")  # a buffer of `width` rows
    target.truncate(n_past)
    n_vocab = target.n_vocab
    rows = np.ctypeslib.as_array(engine.ll.llama_get_logits(target.ptr), shape=(width, n_vocab))
    if "draft-simple" in session.spec.types and dctx is not None and dctx.n_vocab == n_vocab:
        k = dctx.n_past
        row = dctx.decode([tokens[-1]], k, outputs="last")[0]
        dctx.truncate(k)
        rows[:] = row
    else:
        rows[:] = rows[0].copy()
    saved = {name: getattr(engine.ll, name) for name in DecodeTimer.NAMES}
    if timer is not None:  # no timers in the way: nothing is subtracted here
        for name, fn in timer.unwrapped().items():
            setattr(engine.ll, name, fn)
    engine.ll.llama_decode = lambda *_args: 0
    m = Measure(cfg, temp, "cpu")
    try:
        for _ in range(rounds):
            c0, t0 = time.thread_time(), time.perf_counter()
            try:
                rnd = next(gen)
            except StopIteration:  # the context is full
                break
            m.cpu_ms.append((time.thread_time() - c0) * 1e3)
            m.wall_ms.append((time.perf_counter() - t0) * 1e3)
            m.k.append(len(rnd.proposed))
            m.decode_ms.append(0.0)
    finally:
        for name, fn in saved.items():
            setattr(engine.ll, name, fn)
        gen.close()
        if policy is not None:
            policy.detach()
    return m


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", type=Path, help="target GGUF (default: the pulled target)")
    ap.add_argument("-md", "--model-draft", type=Path, help="draft GGUF (default: pulled draft)")
    ap.add_argument("--temp", default="0,0.8", help="comma list of temperatures")
    ap.add_argument(
        "--configs",
        default="draft-simple:4;draft-simple:auto;ngram-simple;none",
        help="';' list of spec types with :N or :auto (none: plain decoding)",
    )
    ap.add_argument("-n", "--n-predict", type=int, default=64)
    ap.add_argument("-p", "--prompt", default=DEFAULT_PROMPT)
    ap.add_argument("-s", "--seed", type=int, default=1)
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("-c", "--ctx-size", type=int, default=2048)
    ap.add_argument("-ngl", "--n-gpu-layers", default="auto")
    ap.add_argument("-ngld", "--n-gpu-layers-draft", default="auto")
    ap.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="check the budget on this thread's CPU time outside decode (default: immune to "
        "other processes on a shared machine) or on wall time (an otherwise idle machine)",
    )
    ap.add_argument(
        "--mode",
        choices=("both", "in-place", "warm"),
        default="both",
        help="in-place: real rounds; warm: llama_decode replaced by a no-op (see measure_warm)",
    )
    ap.add_argument("--rounds", type=int, default=150, help="rounds per warm measurement")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--profile", action="store_true", help="cProfile the measured rounds")
    args = ap.parse_args(argv)

    from specgguf.binding import engine
    from specgguf.errors import SpecggufError
    from specgguf.loading.session import LoadOptions, Session, SpecOptions

    try:
        if args.model is None:
            from specgguf.modelfiles.models import require_default_pair

            args.model, default_draft = require_default_pair()
            args.model_draft = args.model_draft or default_draft
        timer = DecodeTimer(cpu=args.clock == "cpu")
        timer.install(engine.ll)
        load = LoadOptions(
            args.model,
            args.model_draft,
            n_gpu_layers=args.n_gpu_layers,
            n_gpu_layers_draft=args.n_gpu_layers_draft,
            n_ctx=args.ctx_size,
            threads=args.threads,
        )
        configs = [c.strip() for c in args.configs.split(";") if c.strip()]
        # the model drafter the session loads: the one the configurations name (one of
        # draft-simple, draft-eagle3 with a head as -md, draft-mtp over the target's layers)
        model_types = sorted({c.split(":")[0] for c in configs} & set(MODEL_TYPES))
        types = model_types[:1] or (["draft-simple"] if args.model_draft else [])
        session = Session(load, SpecOptions(types=types))
    except SpecggufError as err:
        print(f"error: {err}", file=sys.stderr)
        return int(err.code)
    loaded = set(types) if session.draft_model is not None or "draft-mtp" in types else set()
    configs = [c for c in configs if c.split(":")[0] not in set(MODEL_TYPES) - loaded]
    temps = [float(t) for t in args.temp.split(",")]
    tokens = session.tokenize(args.prompt)
    in_place: list[Measure] = []
    warm: list[Measure] = []
    prof = None
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
    try:
        for temp in temps:
            for cfg in configs:
                if args.mode in ("both", "in-place"):
                    measure(session, cfg, tokens, temp, 8, args.seed, timer)  # warm-up
                    in_place.append(
                        measure(session, cfg, tokens, temp, args.n_predict, args.seed, timer,
                                args.clock)  # fmt: skip
                    )
                if args.mode in ("both", "warm"):
                    warm.append(
                        measure_warm(session, cfg, tokens, temp, args.seed, args.rounds, timer)
                    )
                if prof is not None:  # a separate run: the profiler's own cost is not measured
                    prof.enable()
                    measure_warm(session, cfg, tokens, temp, args.seed, args.rounds, timer)
                    prof.disable()
        offload = session.offload() if hasattr(session, "offload") else "?"
    finally:
        session.close()

    tables = {"in_place": [r.as_dict() for r in in_place], "warm": [r.as_dict() for r in warm]}
    if args.json:
        budget = {"round_ms": BUDGET_ROUND_MS, "draft_token_ms": BUDGET_TOKEN_MS, "sampling": 2}
        print(json.dumps({"offload": offload, "clock": args.clock, "budget": budget,
                          "tokens": len(tokens), **tables}))  # fmt: skip
    else:
        print(f"offload: {offload}")
        titles = {
            "in_place": f"in place: real rounds, time outside llama.cpp's calls; budget on "
            f"{args.clock} time",
            "warm": "warm: llama_decode a no-op, every proposal accepted; budget on CPU time",
        }
        for name, rows in tables.items():
            if rows:
                print(f"\n{titles[name]} (ms)")
                print_table(rows)
    if prof is not None:
        import pstats

        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(18)
    checked = tables["warm"] or tables["in_place"]
    return 0 if all(r["within_budget"] for r in checked) else 1


def print_table(rows: list[dict]) -> None:
    print(
        f"{'config':<20} {'temp':>4} {'rounds':>6} {'mean K':>6} {'wall':>7} {'cpu':>7} "
        f"{'/token':>7} {'fit a+bK':>16} {'decode':>8} {'budget':>7}  ok"
    )
    for r in rows:
        fit = (
            f"{r['fit_ms_per_round']:.3f}+{r['fit_ms_per_draft_token']:.3f}K"
            if r["fit_ms_per_round"] is not None
            else "-"
        )
        per_tok = r["overhead_ms_per_draft_token"]
        print(
            f"{r['config']:<20} {r['temp']:>4} {r['rounds']:>6} {r['mean_k']:>6.2f} "
            f"{r['wall_ms_per_round']:>7.3f} {r['cpu_ms_per_round']:>7.3f} "
            f"{per_tok if per_tok is not None else float('nan'):>7.3f} {fit:>16} "
            f"{r['decode_ms_per_round'] or 0:>8.1f} {r['budget_ms_per_round']:>7.3f}  "
            f"{'yes' if r['within_budget'] else 'NO'}"
        )


if __name__ == "__main__":
    sys.exit(main())

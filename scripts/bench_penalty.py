#!/usr/bin/env python3
"""What a history-reading sampler costs speculation: the default's speedup over plain decoding
with `--repeat-penalty 1.1` (or the --flags given) beside the same speedup without it, in one
run, interleaved.

    .venv/bin/python scripts/bench_penalty.py [--rounds 3] [-n 128] [--targets q4]
        [--classes code] [--flags "--repeat-penalty 1.1"]

Four configurations of this tree per target and class, each one `specgguf run --json`
process (greedy, `-n N --ignore-eos`, the class's first prompt of scripts/bench_prompts.jsonl,
the pulled draft model): the default (auto, keeping a machine profile of its own through the
rounds; its first run fills it and is reported apart) and plain decoding (`--spec-type
none`), each without and with the flags. The order rotates from round to round.

Printed: each configuration's median decode t/s and the two speedups (default over plain,
medians, and per round), then their quotient: with the flags over without. Issue #49's
target is a quotient of at least 0.95 (the chain's per-row work under speculation costs no
more than 5% of the speedup).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_auto_runs import prompt_of  # noqa: E402
from scripts.bench_default import TARGETS, Cell, Config, Tree, pair_args, run_once  # noqa: E402

PLAIN = ["--spec-type", "none"]


def configs(tree: Tree, flags: list[str]) -> list[Config]:
    return [
        Config("default", tree, [], auto=True),
        Config("plain", tree, PLAIN),
        Config("default +flags", tree, flags, auto=True),
        Config("plain +flags", tree, [*PLAIN, *flags]),
    ]


def bench(args: argparse.Namespace, tree: Tree) -> dict[tuple[str, str], dict[str, Cell]]:
    cfgs = configs(tree, args.flags)
    results: dict[tuple[str, str], dict[str, Cell]] = {}

    def profile(c: Config, tname: str, cls: str) -> Path | None:
        if not c.auto:
            return None
        path = tree.profiles / f"{tname}-{cls}-{c.label.replace(' ', '_')}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    for tname in args.targets:
        for cls in args.classes:
            cells = results[(tname, cls)] = {c.label: Cell() for c in cfgs}
            for c in cfgs:  # each default fills its own profile first
                if c.auto:
                    prof = profile(c, tname, cls)
                    cells[c.label].first = run_once(c, TARGETS[tname], prompt_of(cls), args.n, prof)
    for r in range(args.rounds):
        for tname in args.targets:
            for cls in args.classes:
                order = cfgs[r % len(cfgs) :] + cfgs[: r % len(cfgs)]
                for c in order:
                    prof = profile(c, tname, cls)
                    tps = run_once(c, TARGETS[tname], prompt_of(cls), args.n, prof)
                    results[(tname, cls)][c.label].tps.append(tps)
                    print(f"round {r + 1} {tname:3s} {cls:5s} {c.label:15s} {tps:6.2f} t/s",
                          flush=True)  # fmt: skip
    return results


def speedups(cells: dict[str, Cell], suffix: str) -> tuple[float, list[float]]:
    """Default over plain (medians), and per round."""
    default, plain = cells["default" + suffix].tps, cells["plain" + suffix].tps
    per_round = [d / p for d, p in zip(default, plain, strict=True)]
    return statistics.median(default) / statistics.median(plain), per_round


def print_table(results: dict[tuple[str, str], dict[str, Cell]], flags: list[str]) -> None:
    print(f"\nflags: {shlex.join(flags)}")
    print("\n| target | class | config | median t/s | first run |")
    print("|---|---|---|---|---|")
    for (tname, cls), cells in results.items():
        for label, cell in cells.items():
            first = f"{cell.first:.2f}" if cell.first is not None else ""
            print(f"| {tname} | {cls} | {label} | {statistics.median(cell.tps):.2f} | {first} |")
    print("\n| target | class | default / plain | per round | +flags: default / plain | per round "
          "| with / without |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for (tname, cls), cells in results.items():
        without, rounds_without = speedups(cells, "")
        with_flags, rounds_with = speedups(cells, " +flags")
        spread = lambda xs: f"{min(xs):.2f}-{max(xs):.2f}"  # noqa: E731
        print(f"| {tname} | {cls} | x{without:.2f} | {spread(rounds_without)} | "
              f"x{with_flags:.2f} | {spread(rounds_with)} | {with_flags / without:.3f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--targets", default="q4")
    ap.add_argument("--classes", default="code")
    ap.add_argument("--flags", default="--repeat-penalty 1.1",
                    help="the sampler flags compared with their absence")  # fmt: skip
    args = ap.parse_args(argv)
    args.flags = shlex.split(args.flags)
    pair_args(ap, args, "bench_penalty")
    with tempfile.TemporaryDirectory(prefix="specgguf-bench-penalty-") as tmp:
        tree = Tree("current", ROOT, Path(tmp))
        t0 = time.perf_counter()
        print_table(bench(args, tree), args.flags)
        print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

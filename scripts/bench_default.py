#!/usr/bin/env python3
"""The hot path's regression gate: the default of BASE_REV against the default of this tree,
beside fixed draft lengths and plain decoding, interleaved in one process tree.

Run it before landing any change to core/, auto/, drafters/ or the loop, on a quiet machine,
and put its table in the closing note:

    .venv/bin/python scripts/bench_default.py main [--rounds 3] [-n 128]
        [--targets f16,q4] [--classes code,chat,edit] [--fixed 3,4,6] [--no-agent]
        [--agent-rounds R]

BASE_REV is checked out into a git worktree (detached, kept under the system temp folder and
reused) and runs against the same environment (this venv, the same llama-cpp-python). Every
measurement is one `specgguf run --json` process, as a user types them: greedy,
`-n N --ignore-eos`, the first prompt of each class in scripts/bench_prompts.jsonl. The
defaults (no speculation flag: auto with the draft model) of each tree keep one machine
profile per target and class through all rounds (what a user's later runs see); their first
run fills it and is reported apart ("first"), the rounds after it are the comparison. Fixed
`--spec-draft-n-max K` and plain decoding run from this tree with no profile.

Targets: `f16` is the pulled target's F16 copy (`specgguf pull target-f16`), the memory-bound
regime (weights dominate every step, as for a 7B+ model or a GPU), `q4` the pulled Q4 target
(compute-bound on small CPUs); the draft is the pulled 0.5B. Each round runs every
configuration once per target and class, the order rotated from round to round.

Last, unless --no-agent: the write_file tool call (scripts/bench_agent.py's "write" turn) as
the FIRST request of a freshly started `specgguf serve` on the Q4 pair, for each tree, with
speculation on, then the same request with `"speculative": false` on that server;
`--agent-rounds R` repeats that R times per tree, the trees interleaved (the turn's spread
from one fresh server to the next is as large as most differences between trees).

Printed: per target and class, each configuration's median decode t/s, its ratio to plain
decoding's median and the spread of the per-round ratios (each round's run over that round's
plain run), and the current default over the base default, round by round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_auto_runs import prompt_of  # noqa: E402

MODELS = Path(os.environ.get("SPECGGUF_MODELS", Path.home() / ".cache" / "specgguf" / "models"))
TARGETS = {
    "f16": MODELS / "qwen2.5-coder-1.5b-instruct-f16.gguf",
    "q4": MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
}
DRAFT = MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


@dataclass
class Tree:
    """A source tree whose `specgguf` runs: this checkout or BASE_REV's worktree."""

    name: str
    path: Path
    profiles: Path  # one machine-profile folder per target and class lives below it

    def env(self, profile: Path | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
        env["PYTHONPATH"] = str(self.path)
        env["SPECGGUF_PROFILES"] = str(profile) if profile else tempfile.mkdtemp()
        return env


@dataclass
class Config:
    label: str
    tree: Tree
    flags: list[str]
    auto: bool = False  # the default: keeps its profile between rounds


@dataclass
class Cell:
    """The runs of one configuration on one target and class."""

    first: float | None = None
    tps: list[float] = field(default_factory=list)


def worktree(rev: str) -> Path:
    """BASE_REV checked out (detached) beside nothing of ours, reused while it is there. The
    command-line package is `cli/` installed as `specgguf_cli`: a link of that name makes the
    tree importable from PYTHONPATH alone."""
    sha = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT,
                         capture_output=True, text=True)  # fmt: skip
    if sha.returncode != 0:
        raise SystemExit(f"bench_default: {rev!r} is not a commit of this repository")
    path = Path(tempfile.gettempdir()) / f"specgguf-base-{sha.stdout.strip()[:12]}"
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(path), sha.stdout.strip()],
                       cwd=ROOT, check=True)  # fmt: skip
    link = path / "specgguf_cli"
    if not link.exists():
        link.symlink_to(path / "cli")
    return path


def run_once(cfg: Config, target: Path, prompt: str, n: int, profile: Path | None) -> float:
    """One `specgguf run --json` process of `cfg`'s tree; its decode tokens/s."""
    cmd = [sys.executable, "-m", "specgguf_cli.app", "run", "-m", str(target),
           "-md", str(DRAFT), "-p", prompt, "-n", str(n), "--temp", "0", "--ignore-eos",
           "--json", *cfg.flags]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=cfg.tree.path,
                         env=cfg.tree.env(profile), timeout=1800)  # fmt: skip
    if res.returncode != 0:
        raise SystemExit(f"bench_default: {cfg.label} failed ({res.returncode}): "
                         f"{res.stderr[-1500:]}")  # fmt: skip
    return float(json.loads(res.stdout)["timings"]["predicted_per_second"])


def configs(base: Tree, cur: Tree, fixed: list[int]) -> list[Config]:
    out = [Config("base default", base, [], auto=True), Config("default", cur, [], auto=True)]
    out += [Config(f"fixed K={k}", cur, ["--spec-type", "draft-simple", "--spec-draft-n-max",
                                          str(k)]) for k in fixed]  # fmt: skip
    out.append(Config("plain", cur, ["--spec-type", "none"]))
    return out


def bench_runs(args: argparse.Namespace, base: Tree, cur: Tree) -> dict[tuple[str, str], Any]:
    cfgs = configs(base, cur, args.fixed)
    results: dict[tuple[str, str], dict[str, Cell]] = {}
    for tname in args.targets:
        for cls in args.classes:
            cells = results[(tname, cls)] = {c.label: Cell() for c in cfgs}
            for c in cfgs:  # each default fills its own profile first
                if c.auto:
                    prof = c.tree.profiles / f"{tname}-{cls}"
                    prof.mkdir(parents=True, exist_ok=True)
                    cells[c.label].first = run_once(c, TARGETS[tname], prompt_of(cls), args.n, prof)
    for r in range(args.rounds):
        for tname in args.targets:
            for cls in args.classes:
                cells = results[(tname, cls)]
                order = cfgs[r % len(cfgs):] + cfgs[: r % len(cfgs)]
                for c in order:
                    prof = c.tree.profiles / f"{tname}-{cls}" if c.auto else None
                    tps = run_once(c, TARGETS[tname], prompt_of(cls), args.n, prof)
                    cells[c.label].tps.append(tps)
                    print(f"round {r + 1} {tname:3s} {cls:5s} {c.label:13s} {tps:6.2f} t/s",
                          flush=True)  # fmt: skip
    return results


def print_table(results: dict[tuple[str, str], dict[str, Cell]]) -> None:
    print("\n| target | class | config | median t/s | x plain | per-round x plain | first run |")
    print("|---|---|---|---|---|---|---|")
    for (tname, cls), cells in results.items():
        plain = cells["plain"].tps
        pm = statistics.median(plain)
        for label, cell in cells.items():
            ratios = [t / p for t, p in zip(cell.tps, plain, strict=True)]
            first = f"{cell.first:.2f}" if cell.first is not None else ""
            print(f"| {tname} | {cls} | {label} | {statistics.median(cell.tps):.2f} | "
                  f"x{statistics.median(cell.tps) / pm:.2f} | "
                  f"{min(ratios):.2f}-{max(ratios):.2f} | {first} |")  # fmt: skip
        cur, base = cells["default"].tps, cells["base default"].tps
        fixed = [c for label, c in cells.items() if label.startswith("fixed")]
        line = ", ".join(f"{a / b:.2f}" for a, b in zip(cur, base, strict=True))
        print(f"|  |  | default / base default, per round | {line} |  |  |  |")
        if fixed:
            best = max(fixed, key=lambda c: statistics.median(c.tps))
            worst = min(a / b for a, b in zip(cur, best.tps, strict=True))
            print(f"|  |  | worst round: default / best fixed K | x{worst:.2f} |  |  |  |")


def agent_turn(tree: Tree, target: Path) -> tuple[float, float]:
    """The write_file call as a fresh server's first request, speculation on then off:
    (on t/s, off t/s)."""
    from scripts.bench_agent import Side, Task, ask, write_messages
    from tests.serve_helpers import Server

    saved = dict(os.environ)
    os.environ.update(tree.env(tree.profiles / "agent"))
    (tree.profiles / "agent").mkdir(parents=True, exist_ok=True)
    try:
        server = Server(["-m", str(target), "-md", str(DRAFT), "-c", "8192", "-np", "1"],
                        timeout=3600, cwd=tree.path)  # fmt: skip
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        side = Side(tree.name, server, {"speculative": False})
        messages = write_messages(Task.load())
        on = ask(side, "write", messages, "write_file", 700, {})
        off = ask(side, "write", messages, "write_file", 700, side.off)
        return on.tps, off.tps
    finally:
        server.stop()


def pair_args(ap: argparse.ArgumentParser, args: argparse.Namespace, who: str) -> None:
    """--targets and --classes as lists, the targets known and the model files there."""
    args.targets = [t for t in args.targets.split(",") if t]
    args.classes = [c for c in args.classes.split(",") if c]
    bad = [t for t in args.targets if t not in TARGETS]
    if bad:
        ap.error(f"--targets: unknown {bad} (choose from {', '.join(TARGETS)})")
    missing = [str(p) for p in [DRAFT, *(TARGETS[t] for t in args.targets)] if not p.exists()]
    if missing:
        raise SystemExit(f"{who}: missing {missing}: run `specgguf pull` and "
                         "`specgguf pull target-f16`")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", help="the revision to compare with (e.g. main, HEAD~3, a sha)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--targets", default="f16,q4")
    ap.add_argument("--classes", default="code,chat,edit")
    ap.add_argument("--fixed", default="3,4,6", help="fixed --spec-draft-n-max values ('' none)")
    ap.add_argument("--no-agent", action="store_true", help="skip the write_file server turn")
    ap.add_argument("--agent-rounds", type=int, default=1,
                    help="write_file turns per tree, interleaved (each on a fresh server)")
    args = ap.parse_args(argv)
    args.fixed = [int(k) for k in args.fixed.split(",") if k]
    pair_args(ap, args, "bench_default")
    with tempfile.TemporaryDirectory(prefix="specgguf-bench-default-") as tmp:
        base = Tree("base", worktree(args.base), Path(tmp) / "base")
        cur = Tree("current", ROOT, Path(tmp) / "current")
        t0 = time.perf_counter()
        print_table(bench_runs(args, base, cur))
        if not args.no_agent:
            print("\n| write_file turn, fresh Q4 server | round | on t/s | off t/s | on / off |")
            print("|---|---|---|---|---|")
            ratios: dict[str, list[float]] = {base.name: [], cur.name: []}
            for r in range(args.agent_rounds):  # interleaved, the first tree alternating
                for tree in (base, cur) if r % 2 == 0 else (cur, base):
                    on, off = agent_turn(tree, TARGETS["q4"])
                    ratios[tree.name].append(on / off)
                    print(f"| {tree.name} | {r + 1} | {on:.2f} | {off:.2f} | x{on / off:.2f} |",
                          flush=True)  # fmt: skip
            for name, xs in ratios.items():
                print(f"| {name}: median of {len(xs)} |  |  |  | x{statistics.median(xs):.2f} "
                      f"({min(xs):.2f}-{max(xs):.2f}) |")  # fmt: skip
        print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

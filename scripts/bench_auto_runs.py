#!/usr/bin/env python3
"""Does the default keep winning, run after run? `specgguf run` with no speculation flags (auto
with the draft model), several times in a row through ONE fresh machine profile, interleaved
with plain decoding and fixed draft lengths on the same prompt, each as its own process (as a
user types them one after another).

The question this answers is the one a per-run benchmark cannot: what the profile remembers
between runs (costs, the pair's acceptance, "this draft cannot pay here") must make every later
run at least as good as the first, never switch speculation off where it pays. The default pair
is compute-bound on a 2-core CPU (a draft step costs most of a target step); `specgguf pull
target-f16` makes the regime where it pays (a target that reads its weights every step):

    PYTHONPATH=. python scripts/bench_auto_runs.py \\
        -m ~/.cache/specgguf/models/qwen2.5-coder-1.5b-instruct-f16.gguf \\
        --runs 5 --classes code,chat [-n 128] [--fixed 3,4,6]

Prints one line per run (t/s, tokens drafted, auto's line for the draft model) and a table of
each configuration's median t/s relative to plain decoding. CPU-heavy: on a quiet machine.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("SPECGGUF_MODELS", Path.home() / ".cache" / "specgguf" / "models"))
DRAFT = MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def prompt_of(cls: str) -> str:
    """The first prompt of class `cls` in scripts/bench_prompts.jsonl."""
    for line in (ROOT / "scripts" / "bench_prompts.jsonl").read_text().splitlines():
        obj = json.loads(line)
        if obj["class"] == cls:
            return obj["prompt"]
    raise SystemExit(f"no prompt of class {cls!r}")


def run_once(args, prompt: str, extra: list[str], profiles: Path) -> dict:
    """One `specgguf run --json` process; its JSON object plus auto's stderr lines."""
    cmd = [sys.executable, "-m", "specgguf_cli.app", "run", "-m", str(args.model),
           "-md", str(args.draft), "-p", prompt, "-n", str(args.n), "--temp", "0",
           "--ignore-eos", "--json", *extra]  # fmt: skip
    env = {**os.environ, "SPECGGUF_PROFILES": str(profiles), "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"run failed ({res.returncode}): {res.stderr[-2000:]}")
    obj = json.loads(res.stdout)
    obj["_auto_lines"] = [x for x in res.stderr.splitlines() if x.startswith(("auto:", "note:"))]
    obj["_wall_s"] = wall
    return obj


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", type=Path, required=True)
    ap.add_argument("-md", "--draft", type=Path, default=DRAFT)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--classes", default="code,chat")
    ap.add_argument(
        "--fixed", default="3,4,6", help="fixed --spec-draft-n-max values to compare ('' none)"
    )
    args = ap.parse_args()
    fixed = [int(x) for x in args.fixed.split(",") if x]
    for cls in args.classes.split(","):
        prompt = prompt_of(cls)
        speeds: dict[str, list[float]] = {}
        walls: dict[str, list[float]] = {}
        with tempfile.TemporaryDirectory(prefix="specgguf-profiles-") as tmp:
            profiles = Path(tmp)
            others = [("plain", ["--spec-type", "none"])]
            others += [(f"n_max {k}", ["--spec-type", "draft-simple", "--spec-draft-n-max",
                                       str(k)]) for k in fixed]  # fmt: skip
            for i in range(args.runs):
                obj = run_once(args, prompt, [], profiles)
                tps = obj["timings"]["predicted_per_second"]
                speeds.setdefault("default", []).append(tps)
                walls.setdefault("default", []).append(obj["_wall_s"])
                draft_lines = [x for x in obj["_auto_lines"] if "draft" in x]
                print(f"[{cls}] default run {i + 1}: {tps:6.2f} t/s, {obj['_wall_s']:5.1f} s "
                      f"whole process, drafted {obj['timings']['draft_n']:4d}, "
                      + " | ".join(draft_lines[-1:]), flush=True)  # fmt: skip
                # interleave the others (a fresh profile each: they do not use auto)
                label, extra = others[i % len(others)]
                with tempfile.TemporaryDirectory() as scratch:
                    o = run_once(args, prompt, extra, Path(scratch))
                speeds.setdefault(label, []).append(o["timings"]["predicted_per_second"])
                walls.setdefault(label, []).append(o["_wall_s"])
                print(f"[{cls}] {label}: {o['timings']['predicted_per_second']:6.2f} t/s, "
                      f"{o['_wall_s']:5.1f} s whole process", flush=True)  # fmt: skip
            for label, extra in others[args.runs % len(others):]:  # each at least once
                with tempfile.TemporaryDirectory() as scratch:
                    o = run_once(args, prompt, extra, Path(scratch))
                speeds.setdefault(label, []).append(o["timings"]["predicted_per_second"])
                walls.setdefault(label, []).append(o["_wall_s"])
        plain = statistics.median(speeds["plain"])
        plain_wall = statistics.median(walls["plain"])
        print(f"\n[{cls}] median t/s, x plain decoding ({plain:.2f} t/s), whole-process wall:")
        for label, v in speeds.items():
            med, wall = statistics.median(v), statistics.median(walls[label])
            print(f"  {label:10s} {med:6.2f}  x{med / plain:.2f}  wall x{wall / plain_wall:.2f}"
                  f"  ({', '.join(f'{x:.1f}' for x in v)})")  # fmt: skip
        worst = min(speeds["default"])
        if fixed:
            best = max(statistics.median(speeds[f"n_max {k}"]) for k in fixed)
            print(f"  the worst default run vs the best fixed length: x{worst / best:.2f}\n")
        else:
            print(f"  the worst default run vs plain decoding: x{worst / plain:.2f}\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Code completion as an editor asks for it: a replayed editing session over a source file,
answered by `specgguf serve` with its default speculation, with speculation off, and by
llama-server (given `--llama-server PATH`) with its FIM preset's settings.

The session: a stretch of the file (`--start`..`--start + --holes` lines from the middle by
default) is typed again line by line. Before each line the editor asks for a completion at
the cursor, as llama.vim sends it (its request body and defaults): `input_prefix` the lines
above the cursor (at most `--n-prefix`, so the window moves as the prefix grows),
`input_suffix` the code below the typed stretch (at most `--n-suffix` lines), `prompt` the new
line's indentation (typed before the pause), `input_extra` the file's first lines (the ring
chunk of the imports), `n_indent` that indentation, `samplers` [top_k, top_p, temperature,
infill] at temperature 0 (greedy: the sides write the same text), `cache_prompt`,
`t_max_predict_ms`, `response_fields`. Each server answers the same requests in order, one
at a time (a person waits for the suggestion); the latency of each is measured at the client.

Reported per side: completions, p50 and p95 latency, tokens predicted, tokens/s over the
whole session (predicted tokens / summed latency), mean tokens_cached, total time; and the
ratio of each side's total time to speculation off. One JSON object per side goes to
`--json FILE` as well. CPU-heavy: run it on a quiet machine.

    PYTHONPATH=. python scripts/bench_fim.py [--file F] [-m T.gguf -md D.gguf] [--holes 24]
        [--llama-server PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_serve import LlamaServer  # noqa: E402
from tests.serve_helpers import Server  # noqa: E402

#: llama-server's FIM preset settings (also what specgguf's --fim-qwen-* presets set), with
#: the context given by -c
EDITOR_FLAGS = ["-b", "1024", "--cache-reuse", "256"]
LLAMA_ONLY_FLAGS = ["-ub", "1024"]
RESPONSE_FIELDS = ["content", "timings/prompt_n", "timings/prompt_ms", "timings/predicted_n",
                   "timings/predicted_ms", "timings/predicted_per_second", "truncated",
                   "tokens_cached"]  # fmt: skip


def indentation(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def session_requests(text: str, args) -> list[dict]:
    """The editor's /infill bodies, in typing order."""
    lines = text.splitlines(keepends=True)
    start = args.start if args.start is not None else max(0, len(lines) // 2 - args.holes // 2)
    end = min(len(lines), start + args.holes)
    suffix = "".join(lines[end : end + args.n_suffix])
    extra = [{"filename": "head", "text": "".join(lines[: args.n_extra])}] if args.n_extra else []
    out = []
    for i in range(start, end):
        indent = indentation(lines[i])
        out.append({
            "id_slot": 0,
            "input_prefix": "".join(lines[max(0, i - args.n_prefix) : i]),
            "input_suffix": suffix,
            "input_extra": extra,
            "prompt": indent,
            "n_predict": args.n,
            "n_indent": len(indent),
            "top_k": 40,
            "top_p": 0.90,
            "temperature": 0,
            # llama.vim's chain with the temperature stage in it: greedy, so that every
            # side writes the same text (llama.vim itself leaves it out and samples)
            "samplers": ["top_k", "top_p", "temperature", "infill"],
            "stream": False,
            "cache_prompt": True,
            "t_max_prompt_ms": 500,
            "t_max_predict_ms": args.t_max_predict_ms,
            "response_fields": RESPONSE_FIELDS,
        })  # fmt: skip
    return out


def replay(server, requests: list[dict]) -> list[dict]:
    """Each request in turn: its latency at the client and the answer's figures."""
    out = []
    for body in requests:
        t0 = time.perf_counter()
        status, _, r = server.request("POST", "/infill", body)
        latency = time.perf_counter() - t0
        if status != 200:
            raise SystemExit(f"/infill answered {status}: {r}")
        out.append({
            "latency_s": latency,
            "predicted_n": r.get("timings/predicted_n", 0),
            "cached": r.get("tokens_cached", 0),
            "content": r.get("content", ""),
        })  # fmt: skip
    return out


def summary(name: str, done: list[dict]) -> dict:
    lat = sorted(d["latency_s"] for d in done)
    total = sum(lat)
    tokens = sum(d["predicted_n"] for d in done)
    p95 = lat[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))]
    return {
        "side": name,
        "completions": len(done),
        "p50_s": round(statistics.median(lat), 4),
        "p95_s": round(p95, 4),
        "tokens": tokens,
        "tokens_per_s": round(tokens / total, 2) if total else 0.0,
        "mean_cached": round(statistics.mean(d["cached"] for d in done), 1),
        "total_s": round(total, 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default=str(ROOT / "specgguf" / "generator.py"),
                    help="the source file the session types again")  # fmt: skip
    ap.add_argument("-m", "--model", help="target GGUF with FIM tokens (default: the pulled one)")
    ap.add_argument("-md", "--model-draft", help="draft GGUF (default: the pulled draft)")
    ap.add_argument("-c", "--ctx", type=int, default=8192)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("-n", type=int, default=64, help="n_predict of each completion")
    ap.add_argument("--holes", type=int, default=24, help="lines typed (a completion each)")
    ap.add_argument("--start", type=int, help="first line typed (default: mid-file)")
    ap.add_argument("--n-prefix", type=int, default=256, help="lines above the cursor sent")
    ap.add_argument("--n-suffix", type=int, default=64, help="lines below sent")
    ap.add_argument("--n-extra", type=int, default=32, help="first lines sent as input_extra")
    ap.add_argument("--t-max-predict-ms", type=int, default=1000)
    ap.add_argument("--llama-server", help="a llama-server binary to compare")
    ap.add_argument("--sides", default="default,off", help="specgguf sides: default,off")
    ap.add_argument("--json", help="write the summaries (and each completion) here")
    args = ap.parse_args(argv)

    if args.model:
        target, draft = args.model, args.model_draft
    else:
        from specgguf.modelfiles.models import require_default_pair

        target, draft = (str(p) for p in require_default_pair())
    pair = ["-m", target, *(["-md", draft] if draft else [])]
    common = [*pair, "-t", str(args.threads), "-c", str(args.ctx), *EDITOR_FLAGS]
    requests = session_requests(Path(args.file).read_text(encoding="utf-8"), args)
    sides: list[tuple[str, list[str], bool]] = []
    for side in args.sides.split(","):
        spec = {"default": [], "off": ["--spec-type", "none"]}[side]
        sides.append((side, [*common, *spec], False))
    if args.llama_server:
        sides.append(("llama-server", [*common, *LLAMA_ONLY_FLAGS], True))

    results = []
    print(f"{len(requests)} completions over {args.file}")
    print("side          n   p50 s   p95 s  tokens   tok/s  cached   total s")
    for name, flags, is_llama in sides:
        server = (LlamaServer(args.llama_server, flags) if is_llama
                  else Server(flags, timeout=3600))  # fmt: skip
        try:
            # warm up (one-time costs) on a request of the session's start, not its first
            replay(server, [{**requests[0], "input_prefix": requests[0]["input_prefix"][:-1]}])
            done = replay(server, requests)
        finally:
            server.stop()
        s = summary(name, done)
        results.append({**s, "completions_detail": done})
        print(f"{name:12s} {s['completions']:3d} {s['p50_s']:7.3f} {s['p95_s']:7.3f} "
              f"{s['tokens']:7d} {s['tokens_per_s']:7.2f} {s['mean_cached']:7.1f} "
              f"{s['total_s']:9.2f}")  # fmt: skip
    off = next((r for r in results if r["side"] == "off"), None)
    if off and off["total_s"]:
        for r in results:
            print(f"{r['side']}: total time {r['total_s'] / off['total_s']:.3f} of off")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

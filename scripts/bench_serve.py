#!/usr/bin/env python3
"""What serving costs: tokens/s streamed through `specgguf serve` against `specgguf run` on the
same prompts, and the time to first token of a conversation's second turn with and without
KV prefix reuse.

1. `specgguf run --jsonl` answers scripts/bench_prompts.jsonl (models loaded once); the server
   answers the same prompts through /completion with `stream: true`, one at a time. Both are
   greedy with the same -n and the same speculation flags, so they do the same work: the
   ratio of decode speeds (each side's own `timings`; run is measured before and after the
   server and averaged) is the server's overhead, and the
   client-side rate (tokens / time from the first streamed token to the last) adds what the
   HTTP stream costs on top.
2. A ~1,500-token conversation (a source file of this repository pasted into the first user
   turn): turn 1 is answered, then turn 2 is sent twice, once with `cache_prompt: false`
   (the whole conversation evaluated) and once as a client normally sends it (only the new
   tokens evaluated); the time to the first streamed token of each is measured at the client.

CPU-heavy: run it once, on a quiet machine.

    PYTHONPATH=. python scripts/bench_serve.py [-m T.gguf -md D.gguf] [-n 64] [-t THREADS]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.serve_helpers import Server, env, sse_events  # noqa: E402


def model_args(args) -> list[str]:
    out: list[str] = []
    if args.model:
        out += ["-m", args.model]
    if args.model_draft:
        out += ["-md", args.model_draft]
    return out + ["-t", str(args.threads), "-c", str(args.ctx), "--temp", "0", *args.extra]


def run_side(args, prompts: list[str]) -> list[dict]:
    lines = "".join(json.dumps({"prompt": p, "n_predict": args.n}) + "\n" for p in prompts)
    r = subprocess.run(
        [sys.executable, "-m", "specgguf_cli.app", "run", "--jsonl", "-q", *model_args(args)],
        input=lines, capture_output=True, text=True, cwd=ROOT, env=env(), timeout=3600,
    )  # fmt: skip
    if r.returncode != 0:
        raise SystemExit(f"run failed: {r.stderr}")
    return [json.loads(line) for line in r.stdout.splitlines()]


def stream(server: Server, path: str, body: dict) -> tuple[str, dict, float, float, float]:
    """(text, final timings, seconds to the first token, seconds first->last token, total)."""
    t0 = time.perf_counter()
    conn, resp = server.stream(path, {**body, "stream": True})
    first = last = None
    text: list[str] = []
    timings: dict = {}
    for e in sse_events(resp):
        if e == "[DONE]":
            break
        piece = e.get("content") if "content" in e else None
        if piece is None and e.get("choices"):
            piece = e["choices"][0].get("delta", {}).get("content")
        if piece:
            now = time.perf_counter()
            first = first if first is not None else now
            last = now
            text.append(piece)
        if "timings" in e:
            timings = e["timings"]
    conn.close()
    end = time.perf_counter()
    first = first if first is not None else end
    return "".join(text), timings, first - t0, (last or end) - first, end - t0


def conversation_file(n_chars: int) -> str:
    src = (ROOT / "specgguf" / "speculative.py").read_text(encoding="utf-8")
    return src[:n_chars]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model")
    ap.add_argument("-md", "--model-draft")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("--conv-chars", type=int, default=5200, help="~1,500 tokens of code")
    ap.add_argument("extra", nargs="*", help="more flags for both run and serve (after --)")
    args = ap.parse_args()

    prompts = [
        json.loads(line)["prompt"]
        for line in (ROOT / "scripts" / "bench_prompts.jsonl").read_text().splitlines()
        if line.strip()
    ]
    print(f"run --jsonl: {len(prompts)} prompts, -n {args.n} ...", file=sys.stderr)
    ran = run_side(args, prompts)

    server = Server(model_args(args), timeout=3600)
    try:
        rows = []
        for p, r in zip(prompts, ran, strict=True):
            body = {"prompt": p, "n_predict": args.n, "cache_prompt": False}
            text, t, ttft, span, _ = stream(server, "/completion", body)
            n = t.get("predicted_n", 0)
            rows.append(
                {
                    "same_text": text == r["text"],
                    "run_tps": r["timings"]["predicted_per_second"],
                    "serve_tps": t.get("predicted_per_second", 0.0),
                    "client_tps": (n - 1) / span if span > 0 and n > 1 else 0.0,
                    "ttft_s": ttft,
                }
            )
        # the conversation
        doc = conversation_file(args.conv_chars)
        turn1 = [{"role": "user", "content": "Here is a file:\n\n" + doc + "\n\nSummarise it."}]
        body = {"messages": turn1, "max_tokens": 48}
        answer1, _, *_ = stream(server, "/v1/chat/completions", body)
        question = "Which function rolls the KV cache back?"
        turn2 = [*turn1, {"role": "assistant", "content": answer1},
                 {"role": "user", "content": question}]  # fmt: skip
        body2 = {"messages": turn2, "max_tokens": 8}
        # as a client sends it (the slot holds turn 1), then the same with the cache off
        _, t_warm, ttft_warm, *_ = stream(server, "/v1/chat/completions", body2)
        _, t_cold, ttft_cold, *_ = stream(server, "/v1/chat/completions",
                                          {**body2, "cache_prompt": False})  # fmt: skip
    finally:
        code, err = server.stop()
    # run again after the server: a machine whose load drifts biases neither side
    print("run --jsonl again ...", file=sys.stderr)
    for r, again in zip(ran, run_side(args, prompts), strict=True):
        r["timings"]["predicted_per_second"] = statistics.mean(
            [r["timings"]["predicted_per_second"], again["timings"]["predicted_per_second"]]
        )
    for row, r in zip(rows, ran, strict=True):
        row["run_tps"] = r["timings"]["predicted_per_second"]
    ratio = [r["serve_tps"] / r["run_tps"] for r in rows if r["run_tps"]]
    client = [r["client_tps"] / r["run_tps"] for r in rows if r["run_tps"]]
    print("prompt  same  run t/s  serve t/s  client t/s  ttft s")
    for i, r in enumerate(rows):
        print(
            f"{i:6d}  {'yes' if r['same_text'] else 'NO':4s}  {r['run_tps']:7.2f}  "
            f"{r['serve_tps']:9.2f}  {r['client_tps']:10.2f}  {r['ttft_s']:6.3f}"
        )
    print(
        f"serve/run decode speed: median x{statistics.median(ratio):.3f} "
        f"(min x{min(ratio):.3f}); client-side stream/run: median "
        f"x{statistics.median(client):.3f}"
    )
    print(
        f"conversation turn 2 ({t_cold.get('prompt_n', 0)} prompt tokens): TTFT without "
        f"reuse {ttft_cold:.3f} s (prompt_n {t_cold.get('prompt_n')}), "
        f"with reuse {ttft_warm:.3f} s (prompt_n {t_warm.get('prompt_n')}, cache_n "
        f"{t_warm.get('cache_n')})"
    )
    print("llama-server: not compared (no llama-server binary is built here)")
    if code != 0:
        print(f"server exit status {code}: {err[-500:]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

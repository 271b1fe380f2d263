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

With `--clients 1,2,4,8` it measures concurrency instead (the slots decoding in shared
passes): for speculation off (`--spec-type none`) and on (the default), one server with
`-np` = the most clients, then 1, 2, 4, 8 clients at once, each streaming one of the prompts
(`cache_prompt: false`, so every run evaluates its prompts): aggregate tokens/s (all tokens /
wall time), per-client tokens/s (first to last streamed token) and time to first token. Then
the time to first token of a short request sent while a ~2,000-token prompt is being
evaluated, against the same request on the idle server. With `--llama-server PATH` (a binary
built from the vendored llama.cpp) the same is measured on llama-server started with the
same flags, each specgguf row followed at once by its llama-server row; `--repeat R` runs
every client count R times per server, alternating which goes first, and prints the median
aggregate of each, with their ratio and the ratio of each pair (on a machine whose speed
drifts, as this 2-core one does by 10-25% within minutes, use R >= 6 to tell a few percent
apart); `--spec off` or `--spec on` measures one of the two settings only.

CPU-heavy: run it once, on a quiet machine.

    PYTHONPATH=. python scripts/bench_serve.py [-m T.gguf -md D.gguf] [-n 64] [-t THREADS]
    PYTHONPATH=. python scripts/bench_serve.py --clients 1,2,4,8 [--llama-server PATH] ...
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
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
    src = (ROOT / "specgguf" / "core" / "loop.py").read_text(encoding="utf-8")
    return src[:n_chars]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model")
    ap.add_argument("-md", "--model-draft")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("--conv-chars", type=int, default=5200, help="~1,500 tokens of code")
    ap.add_argument("--clients", help="measure concurrency instead: client counts, e.g. 1,2,4,8")
    ap.add_argument("--llama-server", help="with --clients: a llama-server binary to compare")
    ap.add_argument(
        "--repeat", type=int, default=1,
        help="with --clients: each client count this many times per server, alternating which "
        "server goes first, with the median aggregate (the first run of a count also warms "
        "slots not used before)",
    )  # fmt: skip
    ap.add_argument(
        "--spec", default="off,on", choices=["off", "on", "off,on"],
        help="with --clients: speculation off (--spec-type none), on (the default flags), or both",
    )  # fmt: skip
    ap.add_argument("--long-chars", type=int, default=7000, help="~2,000 tokens of code")
    ap.add_argument("extra", nargs="*", help="more flags for both run and serve (after --)")
    args = ap.parse_args()
    if args.clients:
        return concurrency(args, [int(x) for x in args.clients.split(",")])

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


# -- concurrency ---------------------------------------------------------------------------------

#: speculation off and on, as flags given to both servers
SPEC_MODES = (("off", ["--spec-type", "none"]), ("on", []))


class LlamaServer:
    """llama-server on a free port, loaded (its /health answers 200); same interface as the
    Server of tests.serve_helpers for what this script and bench_agent.py use."""

    def __init__(self, binary: str, args: list[str]) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.timeout = 3600
        self.proc = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--port", str(self.port), *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 600
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"llama-server exited with status {self.proc.returncode}")
            try:
                c = self.conn()
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.proc.kill()
                raise SystemExit("llama-server did not come up in 10 minutes")
            time.sleep(0.5)

    def conn(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)

    stream = Server.stream
    request = Server.request

    def stop(self) -> tuple[int, str]:
        self.proc.terminate()
        try:
            return self.proc.wait(60), ""
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(), "killed"


def clients_at_once(server, prompts: list[str], n_clients: int, n: int) -> dict[str, float]:
    """n_clients streams at once (prompt i of the list each): aggregate t/s over the wall
    time, mean per-client t/s and mean, max time to first token."""
    results: list[tuple[int, float, float] | None] = [None] * n_clients
    go = threading.Barrier(n_clients + 1)

    def client(i: int) -> None:
        body = {"prompt": prompts[i % len(prompts)], "n_predict": n, "cache_prompt": False}
        go.wait()
        _, t, ttft, span, _ = stream(server, "/completion", body)
        got = int(t.get("predicted_n", 0))
        results[i] = (got, (got - 1) / span if span > 0 and got > 1 else 0.0, ttft)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    go.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    done = [r for r in results if r is not None]
    return {
        "aggregate": sum(r[0] for r in done) / wall,
        "per_client": statistics.mean(r[1] for r in done),
        "ttft": statistics.mean(r[2] for r in done),
        "ttft_max": max(r[2] for r in done),
    }


def ttft_behind_long_prompt(server, long_prompt: str, short: str) -> tuple[float, float]:
    """(idle, busy): time to the first token of `short` on the idle server, and while a long
    prompt is being evaluated (sent 0.2 s after it)."""
    body = {"prompt": short, "n_predict": 4, "cache_prompt": False}
    idle = stream(server, "/completion", body)[2]
    long_body = {"prompt": long_prompt, "n_predict": 4, "cache_prompt": False}
    t = threading.Thread(target=stream, args=(server, "/completion", long_body))
    t.start()
    time.sleep(0.2)
    busy = stream(server, "/completion", body)[2]
    t.join()
    return idle, busy


def concurrency(args, counts: list[int]) -> int:
    prompts = [
        json.loads(line)["prompt"]
        for line in (ROOT / "scripts" / "bench_prompts.jsonl").read_text().splitlines()
        if line.strip()
    ]
    np_ = max(counts)
    flags = [*model_args(args), "-np", str(np_)]
    flags[flags.index("-c") + 1] = str(args.ctx * np_)  # -c is per slot here
    long_prompt = conversation_file(args.long_chars)
    print("spec  clients  server        aggregate t/s  per-client t/s  ttft s  ttft max s")
    behind: list[str] = []
    modes = args.spec.split(",")
    for mode, spec_flags in SPEC_MODES:
        if mode not in modes:
            continue
        sides = [("specgguf", Server([*flags, *spec_flags], timeout=3600))]
        if args.llama_server:
            sides.append(("llama-server", LlamaServer(args.llama_server, [*flags, *spec_flags])))
        try:
            for _, server in sides:  # warm up: the first request pays one-time costs
                stream(server, "/completion", {"prompt": prompts[0], "n_predict": 4})
            for n_clients in counts:
                seen: dict[str, list[float]] = {name: [] for name, _ in sides}
                for rep in range(args.repeat):  # each pair back to back, in turn first
                    for name, server in sides if rep % 2 == 0 else sides[::-1]:
                        r = clients_at_once(server, prompts, n_clients, args.n)
                        seen[name].append(r["aggregate"])
                        print(
                            f"{mode:4s}  {n_clients:7d}  {name:12s}  {r['aggregate']:13.2f}  "
                            f"{r['per_client']:14.2f}  {r['ttft']:6.3f}  {r['ttft_max']:10.3f}",
                            flush=True,
                        )
                if args.repeat > 1:
                    medians = "  ".join(
                        f"{name} {statistics.median(v):.2f}" for name, v in seen.items()
                    )
                    if "llama-server" in seen:  # the ratio of medians, and run by run
                        ours, theirs = seen["specgguf"], seen["llama-server"]
                        pairs = " ".join(f"{a / b:.2f}" for a, b in zip(ours, theirs, strict=True))
                        ratio = statistics.median(ours) / statistics.median(theirs)
                        medians += f"  ratio {ratio:.3f} (pairs {pairs})"
                    print(f"{mode:4s}  {n_clients:7d}  median aggregate: {medians}", flush=True)
            for name, server in sides:
                idle, busy = ttft_behind_long_prompt(server, long_prompt, prompts[0])
                behind.append(
                    f"spec {mode}, {name}: short request TTFT idle {idle:.3f} s, behind a "
                    f"{args.long_chars}-character prompt {busy:.3f} s (x{busy / idle:.2f})"
                )
        finally:
            for _, server in sides:
                server.stop()
    print("\n".join(behind))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Plain vs speculative decoding with the target on two ggml RPC workers, with and without a
network delay.

Why: over a network every target step pays round trips, and verifying K drafted tokens pays
about the same round trips as one token. This script shows that regime on one machine:
two `specgguf rpc-server` workers on 127.0.0.1, the target's layers all on them (-ngl 99),
the draft local (-devd none), and `specgguf bench` run twice: straight to the workers, then
through a small TCP proxy that holds every chunk it forwards for --delay-ms in each direction
(a delay line: throughput is kept, latency is added; tc netem needs privileges we do not
assume). It prints plain and speculative tokens/s, the ratio, and what `auto` chose.

    .venv/bin/python scripts/bench_rpc.py [-m TARGET -md DRAFT] [--delay-ms 1] [-n 48]

Without -m it uses the pulled default pair. Workers and proxies are stopped on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = (
    "Write a Python function `merge_sorted(a, b)` that merges two sorted lists into one "
    "sorted list in linear time, with a docstring and three doctest examples."
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DelayProxy:
    """127.0.0.1:port -> upstream, every chunk delivered `delay_s` after it arrived."""

    def __init__(self, upstream: tuple[str, int], delay_s: float) -> None:
        self.upstream, self.delay_s = upstream, delay_s
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            up.settimeout(None)
            for s in (client, up):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._pipe(client, up)
            self._pipe(up, client)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        q: queue.Queue = queue.Queue()

        def read() -> None:
            while True:
                try:
                    data = src.recv(1 << 16)
                except OSError:
                    data = b""
                q.put((time.monotonic() + self.delay_s, data))
                if not data:
                    return

        def write() -> None:
            while True:
                due, data = q.get()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if not data:
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    return
                try:
                    dst.sendall(data)
                except OSError:
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()

    def close(self) -> None:
        self.sock.close()


def start_worker(threads: int) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "specgguf_cli.app", "rpc-server", "--port", str(port),
         "-t", str(threads)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT,
    )  # fmt: skip
    from specgguf.binding.devices import RpcError, probe

    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            sys.exit(f"rpc-server failed: {proc.stderr.read().decode()}")
        try:
            probe(f"127.0.0.1:{port}", timeout=2)
            return proc, port
        except RpcError:
            if time.monotonic() > deadline:
                sys.exit("rpc-server did not start")
            time.sleep(0.2)


def bench(args: argparse.Namespace, endpoints: list[str]) -> dict:
    models = []
    if args.model:
        models = ["-m", args.model, "-md", args.model_draft]
    cmd = [
        sys.executable, "-m", "specgguf_cli.app", "bench", *models,
        "--rpc", ",".join(endpoints), "-ngl", "99", "-devd", "none",
        "--spec-type", f"draft-simple:{args.n_max};draft-simple:auto",
        "-p", PROMPT, "-n", str(args.n_predict), "--repeat", str(args.repeat),
        "-t", str(args.threads), "--no-auto-profile", "--json", "-q",
    ]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=args.timeout)
    if r.returncode != 0:
        sys.exit(f"bench failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout)


def summarise(label: str, res: dict) -> list[str]:
    rows = {(tuple(c["spec_type"]), str(c["n_max"])): c for c in res["configs"]}
    plain = next(c for k, c in rows.items() if k[0] == ("none",))
    out = []
    for c in res["configs"]:
        tps = (c["tokens_per_second"] or {}).get("median")
        base = (plain["tokens_per_second"] or {}).get("median")
        ratio = (c["ratio_to_plain"] or {}).get("median") or (tps / base if tps and base else None)
        name = ",".join(c["spec_type"]) + (f":{c['n_max']}" if c["spec_type"] != ["none"] else "")
        extra = ""
        if c.get("auto"):
            a = c["auto"]
            keys = ("mean_k", "mean_sent", "chosen_k", "target_step_ms")
            picked = {k: a[k] for k in keys if k in a}
            for name, d in (a.get("drafters") or {}).items():
                picked[name] = {"best_k": d.get("best_k"), "expected": d.get("expected_speedup")}
            extra = " auto chose " + json.dumps(picked, separators=(",", ":"))[:300]
        ratio_s = f"x{ratio:.2f}" if ratio is not None else "-"
        tps_s = f"{tps:7.2f}" if tps is not None else "      -"
        out.append(
            f"{label:<14} {name:<20} {tps_s} tok/s  {ratio_s:>6}  "
            f"accept {c['accept_rate']:.2f}{extra}"
        )
    step = res["cost_curve"]["target_step_ms"]
    out.append(f"{label:<14} target step {step:.1f} ms, plain {plain['label']}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model")
    ap.add_argument("-md", "--model-draft")
    ap.add_argument("--delay-ms", type=float, default=1.0, help="per chunk, each direction")
    ap.add_argument("-n", "--n-predict", type=int, default=48)
    ap.add_argument("--n-max", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("-t", "--threads", type=int, default=1, help="client threads")
    ap.add_argument("--worker-threads", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    if bool(args.model) != bool(args.model_draft):
        ap.error("give both -m and -md, or neither (the pulled pair)")

    workers = [start_worker(args.worker_threads) for _ in range(2)]
    proxies: list[DelayProxy] = []
    try:
        direct = [f"127.0.0.1:{p}" for _, p in workers]
        proxies = [DelayProxy(("127.0.0.1", p), args.delay_ms / 1e3) for _, p in workers]
        delayed = [f"127.0.0.1:{px.port}" for px in proxies]
        load0 = os.getloadavg()
        res0 = bench(args, direct)
        res1 = bench(args, delayed)
        load1 = os.getloadavg()
    finally:
        for px in proxies:
            px.close()
        for proc, _ in workers:
            proc.kill()
            proc.wait()
    print(
        f"target on 2 RPC workers (127.0.0.1), draft local; -n {args.n_predict}, repeat "
        f"{args.repeat}; load average before {load0[0]:.2f}, after {load1[0]:.2f}"
    )
    for line in summarise("no delay", res0) + summarise(f"+{args.delay_ms:g} ms/msg", res1):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

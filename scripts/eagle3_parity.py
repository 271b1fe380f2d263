#!/usr/bin/env python3
"""Show that specgguf's draft-eagle3 drafts what llama.cpp's does, round by round (not in CI).

A random head's drafts are nearly never accepted, so acceptance says nothing about whether
the head is fed right; its draft tokens do: they are a function of every boundary row, every
rollback and every pre-norm state fed back, so equal drafts in every round is the plumbing
proof. Both tools run greedy on the same synthetic EAGLE-3 head (random weights over the
target's layers 2, 15 and 27, borrowing its token embeddings and lm_head), target and prompt:

* llama.cpp's llama-speculative-simple --spec-type draft-eagle3 -v, whose debug log prints
  each draft step's best candidate ("draft candidate 0, pos i: ID") and each round's end
  ("accepted n/m");
* `specgguf run --spec-type draft-eagle3 --trace FILE`, whose records carry each round's
  `proposed` tokens.

Usage: scripts/eagle3_parity.py [--target GGUF] [--bin DIR] [-n 48] [--k 4]
Exit 0 when every round both made drafts the same tokens (rounds paired and compared as
scripts/draft_rounds.py says).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.draft_rounds import llama_drafts, report  # noqa: E402
from tests.tiny_eagle3 import build_eagle3_head  # noqa: E402

MODELS = Path(os.environ.get("SPECGGUF_MODELS", Path.home() / ".cache/specgguf/models"))
DEFAULT_TARGET = MODELS / "smollm2-135m-instruct-q4_1.gguf"
DEFAULT_BIN = Path("/work/ref/build/bin")
PROMPT = "The quick brown fox jumps over the lazy dog. Then the dog"


def make_head(target: Path, out: Path, d2t: list[int] | None = None) -> Path:
    """A random head over the target: its width and heads, its tokenizer, its lm_head; with
    `d2t`, its own small lm_head over those target tokens instead."""
    from specgguf.modelfiles.gguf_info import read_gguf_info

    info = read_gguf_info(target)
    n_embd, n_layer = info.embedding_length, info.block_count
    assert n_embd and n_layer and info.head_count
    layers = (2, n_layer // 2, n_layer - 3)
    return build_eagle3_head(
        out, target_layers=layers, target_hidden_size=n_embd, n_embd=n_embd,
        n_head=info.head_count, n_head_kv=info.head_count_kv or info.head_count,
        n_ff=int(info.metadata.get(f"{info.architecture}.feed_forward_length", 4 * n_embd)),
        own_output=d2t is not None, d2t=d2t, tokenizer_from=target, gain=2.0,
    )  # fmt: skip


def common_flags(
    target: Path, head: Path, n: int, k: int, spec_type: str = "draft-eagle3"
) -> list[str]:
    """The flags both tools run with (scripts/dflash_parity.py passes its own type)."""
    return [
        "-m", str(target), "-md", str(head), "--spec-type", spec_type, "-p", PROMPT,
        "-n", str(n), "--temp", "0", "-c", "512", "-t", "2", "-fa", "off",
        "--spec-draft-n-max", str(k), "--spec-draft-n-min", "0", "--spec-draft-p-min", "0",
    ]  # fmt: skip


def llama_cpp_drafts(bin_dir: Path, flags: list[str]) -> dict[int, list[int]]:
    """Each round's draft tokens from llama-speculative-simple's debug log."""
    res = subprocess.run(
        [str(bin_dir / "llama-speculative-simple"), *flags, "-v"],
        capture_output=True, timeout=600, check=False,
    )  # fmt: skip
    if res.returncode != 0:
        sys.exit(f"llama-speculative-simple failed ({res.returncode})")
    return llama_drafts(res.stderr.decode("utf-8", "replace"))


def specgguf_rounds(flags: list[str], trace: Path) -> list[dict]:
    """Each round's --trace record of `specgguf run` (its `proposed`, `n_accepted`...)."""
    exe = Path(sys.executable).with_name("specgguf")
    res = subprocess.run(
        [str(exe), "run", *flags, "--trace", str(trace), "-q"],
        capture_output=True, timeout=600, check=False,
    )  # fmt: skip
    if res.returncode != 0:
        sys.exit(f"specgguf run failed ({res.returncode}): {res.stderr.decode()[-400:]}")
    with open(trace, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def frequent_tokens(target: Path, n: int, trace: Path, count: int = 6) -> list[int]:
    """The target's most frequent tokens in its own greedy answer to the prompt: a d2t head
    over them agrees with it now and then, so accepted rounds are compared too."""
    flags = ["-m", str(target), "--spec-type", "none", "-p", PROMPT, "-n", str(n),
             "--temp", "0", "-c", "512", "-t", "2", "-fa", "off"]  # fmt: skip
    emitted = [t for r in specgguf_rounds(flags, trace) for t in r["emitted"]]
    return [t for t, _ in Counter(emitted).most_common(count)]


def parity_parser(description: str, accepting: str) -> argparse.ArgumentParser:
    """The options every parity script takes (the target, llama.cpp's build, -n, K, and a
    drafter that agrees at times: `accepting` says which)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--target", type=Path, default=DEFAULT_TARGET)
    ap.add_argument("--bin", type=Path, default=DEFAULT_BIN)
    ap.add_argument("-n", type=int, default=48)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--accepting", action="store_true", help=accepting)
    return ap


def parity_args(ap: argparse.ArgumentParser) -> argparse.Namespace:
    """The parsed options, the target checked (a missing one ends in one line)."""
    args = ap.parse_args()
    if not args.target.is_file():
        sys.exit(f"no target at {args.target} (--target)")
    return args


def main() -> int:
    ap = parity_parser(
        __doc__.splitlines()[0],
        "a d2t head over the target's most frequent answer tokens: some rounds accepted",
    )
    args = parity_args(ap)
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "plain.jsonl"
        d2t = frequent_tokens(args.target, args.n, plain) if args.accepting else None
        head = make_head(args.target, Path(tmp) / "eagle3-head.gguf", d2t)
        flags = common_flags(args.target, head, args.n, args.k)
        records = specgguf_rounds(flags, Path(tmp) / "trace.jsonl")
        theirs = llama_cpp_drafts(args.bin, flags)
    return report(f"target {args.target.name}, K={args.k}, n={args.n}", theirs, records)


if __name__ == "__main__":
    sys.exit(main())

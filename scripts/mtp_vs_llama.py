#!/usr/bin/env python3
"""draft-mtp's plumbing, checked against llama.cpp's own driver: on a tiny target with NextN
layers of random weights (qwen35 with one, tests.tiny_hybrid; mimo2 with two, chained,
tests.tiny_mimo2), or a tiny gemma4 target with a separate assistant file as -md
(tests.tiny_gemma4, an "echo" assistant that is accepted now and then), the tokens specgguf's
MTP head proposes in each round equal those llama.cpp's `llama-speculative-simple --spec-type
draft-mtp` proposes for the same prompt, greedy.

A random head is almost never accepted, so matching output text says nothing about the head;
matching drafts round after round does (paired as scripts/draft_rounds.py says): every round's
draft depends on what the head was fed (the pairing of tokens with the target's hidden states
one position later, the state carried across passes, the KV cache cut back after each
rejection). Not part of the test suite: it
needs a llama-speculative-simple built from the vendored llama.cpp (its path as --llama-bin).

    PYTHONPATH=. python scripts/mtp_vs_llama.py --llama-bin PATH [--arch ARCH] [-n 64] [--n-max 4]

ARCH: qwen35 (the default), mimo2, gemma4, gemma4-shared-kv (a target whose last layers reuse
earlier layers' caches, as Gemma-4's small models do).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.draft_rounds import compare, llama_drafts, trace_drafts  # noqa: E402
from tests.tiny_gemma4 import build_tiny_assistant, build_tiny_gemma4  # noqa: E402
from tests.tiny_hybrid import build_tiny_qwen35  # noqa: E402
from tests.tiny_mimo2 import build_tiny_mimo2  # noqa: E402
from tests.tiny_models import DRAFT_SEED, TARGET_SEED  # noqa: E402


def _with_assistant(tmp: Path, shared_kv: int = 0) -> tuple[Path, Path]:
    target = build_tiny_gemma4(tmp / "gemma4.gguf", seed=TARGET_SEED, shared_kv=shared_kv)
    return target, build_tiny_assistant(tmp / "assistant.gguf", seed=DRAFT_SEED, echo=target)


#: the tiny pairs, by architecture: each builds (the target, its -md drafter file or None)
TARGETS = {
    "qwen35": lambda tmp: (build_tiny_qwen35(tmp / "q.gguf", seed=TARGET_SEED, nextn=1), None),
    "mimo2": lambda tmp: (build_tiny_mimo2(tmp / "m.gguf", seed=TARGET_SEED, nextn=2), None),
    "gemma4": _with_assistant,
    "gemma4-shared-kv": lambda tmp: _with_assistant(tmp, shared_kv=2),
}

PROMPT = "the cat sat on the mat and"


def _md(draft: Path | None) -> list[str]:
    return ["-md", str(draft)] if draft is not None else []


def llama_rounds(
    binary: str, model: Path, draft: Path | None, n: int, n_max: int
) -> dict[int, list[int]]:
    """Each round's draft, from llama-speculative-simple's debug log."""
    argv = [binary, "-m", str(model), *_md(draft), "--spec-type", "draft-mtp", "-p", PROMPT,
            "-n", str(n), "--temp", "0", "-c", "512", "-t", "1", "--spec-draft-n-max",
            str(n_max), "-lv", "5"]  # fmt: skip
    log = subprocess.run(argv, capture_output=True, check=True).stderr
    return llama_drafts(log.decode("utf-8", "replace"))


def specgguf_rounds(
    model: Path, draft: Path | None, n: int, n_max: int, trace: Path
) -> dict[int, list[int]]:
    """Each drafting round's draft, from `specgguf run --trace`."""
    argv = [sys.executable, "-m", "specgguf_cli.app", "run", "-m", str(model), *_md(draft),
            "--spec-type", "draft-mtp", "-p", PROMPT, "-n", str(n), "--temp", "0", "-c", "512",
            "-t", "1", "--spec-draft-n-max", str(n_max), "--trace", str(trace), "-q"]  # fmt: skip
    subprocess.run(argv, capture_output=True, check=True)
    return trace_drafts([json.loads(line) for line in trace.read_text().splitlines()])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-bin", required=True, help="llama-speculative-simple")
    ap.add_argument("--arch", choices=sorted(TARGETS), default="qwen35")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--n-max", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model, draft = TARGETS[args.arch](Path(tmp))
        theirs = llama_rounds(args.llama_bin, model, draft, args.n, args.n_max)
        ours = specgguf_rounds(model, draft, args.n, args.n_max, Path(tmp) / "trace.jsonl")
    p = compare(theirs, ours)
    drafted = sum(map(len, ours.values()))
    print(f"{len(p.paired)} rounds compared: {p.identical} identical drafts, "
          f"{len(p.differ)} that differ; {drafted} tokens drafted")  # fmt: skip
    for i in p.differ[:5]:
        print(f"  after {i} tokens: llama.cpp {theirs[i]}, specgguf {ours[i]}")
    return 1 if p.differ or not p.paired else 0

if __name__ == "__main__":
    sys.exit(main())

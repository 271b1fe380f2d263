#!/usr/bin/env python3
"""Show that specgguf's draft-dflash (or draft-dspark) drafts what llama.cpp's does, round by
round (not in CI).

As for EAGLE-3 (scripts/eagle3_parity.py), a random drafter's drafts are nearly never
accepted, so acceptance says nothing; its draft tokens do: each is a function of every row
injected into the drafter's cache, every cut back after a rejection, the block's length and
its mask token, so equal drafts in every round is the plumbing proof. Both tools run greedy
on the same synthetic drafter (random weights over the target's layers 2, n/2 and n-3,
borrowing its token embeddings; its own lm_head, or with --accepting a d2t lm_head over the
target's most frequent answer tokens, which agrees with it now and then), target and prompt:

* llama.cpp's llama-speculative-simple --spec-type draft-dflash -v, whose debug log prints
  each draft row's best candidate ("draft candidate 0, pos i: ID") and each round's end;
* `specgguf run --spec-type draft-dflash --trace FILE`, whose records carry each round's
  `proposed` tokens.

Usage: scripts/dflash_parity.py [--target GGUF] [--bin DIR] [-n 48] [--k 4] [--accepting]
       [--dspark]
Exit 0 when every paired round drafted the same tokens (scripts/draft_rounds.py).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.draft_rounds import report  # noqa: E402
from scripts.eagle3_parity import (  # noqa: E402
    common_flags,
    frequent_tokens,
    llama_cpp_drafts,
    parity_args,
    parity_parser,
    specgguf_rounds,
)
from tests.tiny_dflash import build_dflash_head  # noqa: E402

#: a token the prompt's answer does not hold, as the drafter's mask
MASK_TOKEN = 17


def make_head(target: Path, out: Path, d2t: list[int] | None = None, dspark: bool = False) -> Path:
    """A random DFlash (or DSpark) drafter over the target: its width and heads, its
    tokenizer; with `d2t`, a small lm_head of its own over those target tokens."""
    from specgguf.modelfiles.gguf_info import read_gguf_info

    info = read_gguf_info(target)
    n_embd, n_layer = info.embedding_length, info.block_count
    assert n_embd and n_layer and info.head_count
    return build_dflash_head(
        out, target_layers=(2, n_layer // 2, n_layer - 3), n_embd=n_embd, n_layer=2,
        n_head=info.head_count, n_head_kv=info.head_count_kv or info.head_count,
        n_ff=int(info.metadata.get(f"{info.architecture}.feed_forward_length", 4 * n_embd)),
        block_size=8, mask_token=MASK_TOKEN, own_output=True, d2t=d2t,
        markov_rank=16 if dspark else 0, confidence=dspark, tokenizer_from=target, gain=2.0,
    )  # fmt: skip


def main() -> int:
    ap = parity_parser(__doc__.splitlines()[0], "a d2t drafter that agrees at times")
    ap.add_argument("--dspark", action="store_true", help="a DSpark drafter (a Markov head)")
    args = parity_args(ap)
    spec_type = "draft-dspark" if args.dspark else "draft-dflash"
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "plain.jsonl"
        d2t = frequent_tokens(args.target, args.n, plain, 2) if args.accepting else None
        head = make_head(args.target, Path(tmp) / "dflash.gguf", d2t, args.dspark)
        flags = common_flags(args.target, head, args.n, args.k, spec_type)
        records = specgguf_rounds(flags, Path(tmp) / "trace.jsonl")
        theirs = llama_cpp_drafts(args.bin, flags)
    return report(f"{spec_type} over {args.target.name}, K={args.k}, n={args.n}", theirs, records)


if __name__ == "__main__":
    sys.exit(main())

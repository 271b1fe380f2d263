#!/usr/bin/env python3
"""What one EAGLE-3 head step costs next to one target step and one draft-model step.

An EAGLE-3 head is one decoder layer plus an lm_head; sized for the default 1.5B target
(hidden 1536, 12 heads, FFN 8960, a 32k-token draft vocabulary through d2t, F16 weights as a
converted head has) its step reads about 0.2 GB of weights against the target's ~1 GB (Q4)
or ~3.4 GB (F16). This script builds such a head with random weights (its step costs the
same whatever it holds), times single-token steps of it, of the target and of the default
draft model, interleaved, and prints medians and ratios from this one run. The head is timed
through the same context specgguf drafts with (backend.eagle3_head), made over a target
context for the embeddings it borrows; the qwen2 target cannot feed it hidden states in this
libllama, which a step's cost does not depend on. `--head` times a given head for the
target too (the GPU check's designed one, whose lm_head is the target's whole vocabulary).

    python scripts/bench_head_step.py                      # the pulled Q4 pair
    python scripts/bench_head_step.py -m target-f16.gguf   # the F16 target
    python scripts/bench_head_step.py -m T -md D --head H  # and the head H for T
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


#: the name of the head given with --head in the report
GIVEN_HEAD = "EAGLE-3 head (-md)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", type=Path, help="target GGUF (default: the pulled target)")
    ap.add_argument("-md", "--model-draft", type=Path, help="draft GGUF (default: pulled draft)")
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--draft-vocab", type=int, default=32000)
    ap.add_argument("-ngl", "--n-gpu-layers", default="0", help="for all three models")
    ap.add_argument("--head", type=Path, help="an EAGLE-3 head for the target, timed too")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args(argv)

    from specgguf.binding import engine
    from specgguf.heads.eagle3_head import Eagle3Context
    from specgguf.heads.eagle3_info import read_eagle3_head
    from specgguf.modelfiles.gguf_info import read_gguf_info
    from specgguf.modelfiles.models import require_default_pair
    from tests.tiny_eagle3 import build_eagle3_head

    # the pulled pair only for what was not named (a GPU machine has no pulled pair)
    target_path, draft_path = args.model, args.model_draft
    if target_path is None or draft_path is None:
        pulled_target, pulled_draft = require_default_pair()
        target_path = target_path or pulled_target
        draft_path = draft_path or pulled_draft
    info = read_gguf_info(target_path)
    n_embd, n_layer = info.embedding_length, info.block_count
    arch = info.architecture
    with tempfile.TemporaryDirectory() as tmp:
        head_path = build_eagle3_head(
            Path(tmp) / "head.gguf", target_layers=(2, n_layer // 2, n_layer - 3),
            target_hidden_size=n_embd, n_embd=n_embd, n_head=info.head_count,
            n_head_kv=info.head_count_kv or info.head_count,
            n_ff=int(info.metadata.get(f"{arch}.feed_forward_length", 4 * n_embd)),
            own_output=True, d2t=list(range(min(args.draft_vocab, info.vocab.n_vocab))),
            tokenizer_from=target_path,
            f16=True,
        )  # fmt: skip
        params = engine.ContextParams(n_ctx=512, n_threads=args.threads)
        ngl = engine.parse_gpu_layers(args.n_gpu_layers)
        target_m = engine.Model(target_path, n_gpu_layers=ngl)
        draft_m = engine.Model(draft_path, n_gpu_layers=ngl)
        head_m = engine.Model(head_path, n_gpu_layers=ngl)
        target, draft = engine.Context(target_m, params), engine.Context(draft_m, params)
        head = Eagle3Context(head_m, target, params, read_eagle3_head(read_gguf_info(head_path)))
        heads = [(head_m, head)]
        if args.head:
            given_m = engine.Model(args.head, n_gpu_layers=ngl)
            given = read_eagle3_head(read_gguf_info(args.head))
            heads.append((given_m, Eagle3Context(given_m, target, params, given)))
        prompt = list(range(100, 164))
        target.decode(prompt, 0, outputs="none")
        draft.decode(prompt, 0, outputs="none")
        for _, h in heads:
            h.decode(prompt, 0, outputs="none")
        n0 = len(prompt)
        steps: dict[str, tuple[object, list[float]]] = {
            "target": (target, []), "draft model": (draft, []), "EAGLE-3 head": (head, []),
        }  # fmt: skip
        if args.head:
            steps[GIVEN_HEAD] = (heads[1][1], [])
        for _ in range(args.reps):
            for ctx, times in steps.values():
                t0 = time.perf_counter()
                ctx.decode([7], n0, outputs="last")
                times.append((time.perf_counter() - t0) * 1e3)
                ctx.truncate(n0)
        med = {name: statistics.median(times) for name, (_, times) in steps.items()}
        for ctx, _ in steps.values():
            ctx.close()
        for m in (*(m for m, _ in reversed(heads)), draft_m, target_m):
            m.close()
    if args.json:
        rel = {name: round(ms / med["target"], 4) for name, ms in med.items()}
        print(json.dumps({"step_ms": {k: round(v, 3) for k, v in med.items()}, "rel": rel}))
        return 0
    print(
        f"target {target_path.name}, draft {draft_path.name}, head {n_embd} wide, "
        f"{args.draft_vocab}-token draft vocabulary, F16; {args.reps} steps each, interleaved"
    )
    for name, ms in med.items():
        print(f"{name:14s} {ms:8.2f} ms   x{ms / med['target']:.3f} of a target step")
    return 0


if __name__ == "__main__":
    sys.exit(main())

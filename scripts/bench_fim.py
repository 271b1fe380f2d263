#!/usr/bin/env python3
"""Code completion as an editor asks for it: a replayed editing session over a source file,
answered by `specgguf serve` with its default speculation, with speculation off, and by
llama-server (given `--llama-server PATH`) with its FIM preset's settings.

The session: a stretch of the file (`--holes` lines from `--start`, mid-file by default) is
typed again line by line, in the order and the shape llama.vim sends its requests (the
newest llama.vim; llama.vscode's differ in sampling defaults only):

1. when the file is opened, a ring chunk of it (its first `--n-extra` lines) is queued and
   sent as the plugin warms the server's cache: `input_extra` alone, `n_predict` 0,
   `t_max_prompt_ms`/`t_max_predict_ms` 1, no samplers, nothing read back;
2. a first completion on the line before the stretch (the one shown as the file opens);
3. then on each new line of the stretch, where the editor's autoindent left only blanks
   (llama.vim then sends an empty `prompt` and `n_indent` 0): `input_prefix` the lines above
   (at most `--n-prefix`: the window moves as the prefix grows), `input_suffix` a line break
   and the lines below the stretch (at most `--n-suffix`), the ring chunk, `n_predict`,
   `top_k` 40, `top_p` 0.90, the chain [top_k, top_p, temperature, infill] at temperature
   0 (greedy, so that every side writes the same text; llama.vim leaves temperature out and
   samples: `--sampled SEED` sends its chain [top_k, top_p, infill] at the server's default
   temperature, a seed per completion, and compares tokens/s, the texts being samples),
   `cache_prompt`, `t_max_prompt_ms` 500, `t_max_predict_ms`, `response_fields`.

Steps 1 and 2 are not timed (the file being opened); each request of step 3 is sent after
the previous answer (a person waits for the suggestion) and timed at the client.

`--t-max-predict-ms` is 0 (no time stop) by default: llama.vim sends 250 for a first request
(and 1000 for its follow-up), which ends every side's completion at the first line break
after that time, so a faster side writes more text in the same time and the total time
measures the plugin's stop, not the speed. With 0 each completion ends at its end token or
`-n`, every side writes the same greedy text, and the total time compares the sides.

Reported per side: completions, p50 and p95 latency, tokens predicted, tokens/s over the
whole session (predicted tokens / summed latency), mean prompt tokens evaluated
(`timings.prompt_n`: what the cache did not hold) and mean prompt step (`timings.prompt_ms`),
total time, and how many completions wrote the same text as speculation off; and the ratio
of each side's total time to speculation off. One JSON object per side (each completion's
figures too) goes to `--json FILE`. CPU-heavy: run it on a quiet machine.

Greedy texts may part where the target's two best logits nearly tie (passes of other widths
round differently: tests/near_tie.py). So for each completion whose tokens part from
speculation off's, once every server has stopped (the timings are not disturbed), the target
is loaded in this process and evaluates alone, from an empty cache, the same context: the
FIM prompt as the server laid it out (specgguf.io.fim, the presets' batch) and the tokens
both wrote before the part. It prints the two tokens, the target's best two there and the
gap between their logits, and whether the part is a near tie (the two are the best two and
the gap is under tests/near_tie.REAL_NEAR_TIE); `--no-judge` skips it. The requests ask for
the answer's `tokens` (`return_tokens`) for this; the plugins do not, which changes nothing
else in the answer. Each part's gap is also printed after the cache the server had: the
session's prompts replayed with the presets' `--cache-reuse` (moved chunks were computed
after other text, the approximation that option accepts), since a part may come from there.

    PYTHONPATH=. python scripts/bench_fim.py [--file F] [-m T.gguf -md D.gguf] [--holes 24]
        [--llama-server PATH] [--json FILE] [--no-judge | --judge FILE]
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
from specgguf.flag_table.table import EDITOR_SETTINGS  # noqa: E402
from tests.near_tie import REAL_NEAR_TIE, first_difference  # noqa: E402
from tests.serve_helpers import Server  # noqa: E402

#: the FIM presets' settings (the flag table's), but the port: each server takes a free one
EDITOR_FLAGS = [
    a for i, a in enumerate(EDITOR_SETTINGS)
    if a != "--port" and (i == 0 or EDITOR_SETTINGS[i - 1] != "--port")
]  # fmt: skip
#: llama-server's own presets keep chunks of 256 tokens and more (--llama-server-cache-reuse)
LLAMA_SERVER_REUSE = 256
RESPONSE_FIELDS = ["content", "timings/prompt_n", "timings/prompt_ms", "timings/predicted_n",
                   "timings/predicted_ms", "timings/predicted_per_second", "truncated",
                   "tokens_cached", "tokens_evaluated", "tokens", "stop_type"]  # fmt: skip
#: the presets' batch (-b), which bounds the FIM prompt's prefix and suffix, and their
#: --cache-reuse
EDITOR_BATCH = int(EDITOR_SETTINGS[EDITOR_SETTINGS.index("-b") + 1])
EDITOR_REUSE = int(EDITOR_SETTINGS[EDITOR_SETTINGS.index("--cache-reuse") + 1])
#: the judging context: a FIM prompt of the presets' batch and its completion fit, and the
#: extra chunks' budget (the context less a batch) holds the ring chunk as the server's does
JUDGE_CTX = 8192


def ring_warmup(extra: list[dict]) -> dict:
    """The plugins' cache warm-up as a ring chunk is added: the extra context alone."""
    return {
        "input_prefix": "", "input_suffix": "", "input_extra": extra, "prompt": "",
        "n_predict": 0, "temperature": 0.0, "stream": False, "samplers": [],
        "cache_prompt": True, "t_max_prompt_ms": 1, "t_max_predict_ms": 1,
        "response_fields": [""],
    }  # fmt: skip


#: the chain the requests ask for: greedy (every side writes the same text), or as llama.vim
#: sends it (no temperature: the server's default, 0.8, then infill; a seed per completion)
GREEDY_CHAIN = {"temperature": 0, "samplers": ["top_k", "top_p", "temperature", "infill"]}


def sampled_chain(seed: int) -> dict:
    return {"samplers": ["top_k", "top_p", "infill"], "seed": seed}


def session_requests(text: str, args, name: str = "file") -> tuple[list[dict], list[dict]]:
    """(the untimed requests of opening the file, the timed completions in typing order)."""
    lines = text.splitlines(keepends=True)
    start = args.start if args.start is not None else max(1, len(lines) // 2 - args.holes // 2)
    start = max(1, start)
    end = min(len(lines), start + args.holes)
    suffix = "\n" + "".join(lines[end : end + args.n_suffix])
    extra = [{"filename": name, "text": "".join(lines[: args.n_extra])}] if args.n_extra else []
    completions = []
    for i in range(start - 1, end):
        completions.append({
            "input_prefix": "".join(lines[max(0, i - args.n_prefix) : i]),
            "input_suffix": suffix,
            "input_extra": extra,
            "prompt": "",
            "n_predict": args.n,
            "stop": [],
            "n_indent": 0,
            "top_k": 40,
            "top_p": 0.90,
            **(sampled_chain(args.sampled + i) if args.sampled is not None else GREEDY_CHAIN),
            "stream": False,
            "cache_prompt": True,
            "t_max_prompt_ms": 500,
            "t_max_predict_ms": args.t_max_predict_ms,
            "response_fields": RESPONSE_FIELDS,
            "return_tokens": True,
        })  # fmt: skip
    opening = ([ring_warmup(extra)] if extra else []) + completions[:1]
    return opening, completions[1:]


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
            "evaluated": r.get("timings/prompt_n", 0),
            "prompt_ms": r.get("timings/prompt_ms", 0.0),
            "content": r.get("content", ""),
            "tokens": r.get("tokens", []),
            "prompt_tokens": r.get("tokens_evaluated", 0),
            "stop_type": r.get("stop_type", ""),
        })  # fmt: skip
    return out


def summary(name: str, done: list[dict]) -> dict:
    lat = sorted(d["latency_s"] for d in done)
    total = sum(lat)
    tokens = sum(d["predicted_n"] for d in done)
    p95 = lat[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))]
    decode = total - sum(d["prompt_ms"] for d in done) / 1e3
    return {
        "side": name,
        "completions": len(done),
        "p50_s": round(statistics.median(lat), 4),
        "p95_s": round(p95, 4),
        "tokens": tokens,
        "tokens_per_s": round(tokens / total, 2) if total else 0.0,
        # after the prompt step: what compares sides whose texts differ in length (sampled)
        "decode_tokens_per_s": round(tokens / decode, 2) if decode > 0 else 0.0,
        "mean_evaluated": round(statistics.mean(d["evaluated"] for d in done), 1),
        "mean_prompt_ms": round(statistics.mean(d["prompt_ms"] for d in done), 1),
        "total_s": round(total, 3),
    }


def same_texts(done: list[dict], off: list[dict]) -> int:
    """How many completions wrote what speculation off wrote."""
    return sum(a["content"] == b["content"] for a, b in zip(done, off, strict=True))


def parts(done: list[dict], off: list[dict]) -> list[tuple[int, int]]:
    """(completion, token) where each completion's tokens first part from off's."""
    out = []
    for i, (a, b) in enumerate(zip(done, off, strict=True)):
        if a["content"] == b["content"]:  # llama-server lists the end token too: not a part
            continue
        k = first_difference(b["tokens"], a["tokens"])
        if k is not None:
            out.append((i, k))
    return out


def judge_part(
    off: list[int], got: list[int], k: int, top: tuple[int, int, float], is_eog
) -> dict:
    """One part judged from the target's best two tokens after the shared context `top`
    (best, second, logit gap): a near tie when the two sides took exactly those two tokens
    and the gap is under REAL_NEAR_TIE. A side that ended there (its tokens stop at k)
    took an end-of-generation token: any one of the model's counts."""
    best, second, gap = top
    taken = [t[k] if k < len(t) else None for t in (off, got)]
    pair = {best, second}

    def among(t: int | None, others: set[int]) -> bool:
        return t in others if t is not None else any(is_eog(o) for o in others)

    between = among(taken[0], pair) and among(taken[1], pair) and taken[0] != taken[1]
    return {
        "token": k, "off": taken[0], "side": taken[1], "best": best, "second": second,
        "gap": round(gap, 4), "near_tie": between and gap < REAL_NEAR_TIE,
    }  # fmt: skip


def judge(
    results: list[dict], opening: list[dict], requests: list[dict], target: str, reuse: int
) -> None:
    """Each side's parts from off's, judged in the target's own fresh evaluation of the
    shared context (tests/near_tie.top_two_after); printed and kept as each side's `parts`.
    Each part's gap is also given in the context the server computed: the session's prompts
    replayed with the servers' --cache-reuse `reuse` (off's tokens after each), its chunks
    always shifted, the parting context evaluated after the same reuse."""
    off = next(r for r in results if r["side"] == "off")["completions_detail"]
    found = {r["side"]: parts(r["completions_detail"], off) for r in results if r["side"] != "off"}
    if not any(found.values()):
        return
    from specgguf.generator import Generator
    from specgguf.io.fim import ExtraChunk
    from specgguf.loading.session import LoadOptions, Session, SpecOptions
    from tests.near_tie import top_two, top_two_after

    load = LoadOptions(model=Path(target), n_ctx=JUDGE_CTX, n_batch=EDITOR_BATCH,
                       n_ubatch=EDITOR_BATCH, warmup=False, cache_reuse=reuse)  # fmt: skip
    session = Session(load, SpecOptions(types=[]))
    try:
        gen = Generator(session)
        prompts = []
        for body in opening + requests:
            extra = [ExtraChunk(c["filename"], c["text"]) for c in body["input_extra"]]
            prompts.append(gen.infill_tokens(body["input_prefix"], body["input_suffix"], extra))
        ctx = session.target
        ctx.shift_break_even = 0  # (as the server before the break-even rule: always shift)

        def reused(tokens: list[int]):
            keep = ctx.keep_prefix(tokens[:-1])
            ctx.truncate(keep)
            return top_two(ctx.decode(tokens[keep:], keep, outputs="last")[0])

        at = {k for side in found.values() for k in side}
        in_server: dict[tuple[int, int], tuple[int, int, float]] = {}
        for j, prompt in enumerate(prompts):
            i = j - len(opening)
            for k in sorted(kk for ii, kk in at if ii == i):
                in_server[i, k] = reused([*prompt, *off[i]["tokens"][:k]])
            reused([*prompt, *(off[i]["tokens"] if i >= 0 else [])])

        def shown(t: int | None) -> str:
            return repr(gen.piece(t).decode("utf-8", "replace")) if t is not None else "<end>"

        for r in results:
            for i, k in found.get(r["side"], []):
                mine, theirs = r["completions_detail"][i], off[i]
                prompt = prompts[len(opening) + i]
                if len(prompt) != theirs["prompt_tokens"]:
                    print(f"  (completion {i}: the prompt here is {len(prompt)} tokens, the "
                          f"server's {theirs['prompt_tokens']}: not the same context)")  # fmt: skip
                top = top_two_after(session, [*prompt, *theirs["tokens"][:k]])
                v = judge_part(theirs["tokens"], mine["tokens"], k, top,
                               session.target_model.is_eog)  # fmt: skip
                b2, s2, gap2 = in_server[i, k]
                v.update(completion=i, reused_best=b2, reused_second=s2,
                         reused_gap=round(gap2, 4))  # fmt: skip
                r.setdefault("parts", []).append(v)
                verdict = "a near tie" if v["near_tie"] else "NOT a near tie"
                print(f"{r['side']}: completion {i} parts from off's at token {k}: off "
                      f"{shown(v['off'])}, {r['side']} {shown(v['side'])}; the target's best "
                      f"two {shown(v['best'])}, {shown(v['second'])}, logit gap "
                      f"{v['gap']:.3f}: {verdict} (after the reused cache: {shown(b2)}, "
                      f"{shown(s2)}, gap {gap2:.3f})")  # fmt: skip
    finally:
        session.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default=str(ROOT / "specgguf" / "generator.py"),
                    help="the source file the session types again")  # fmt: skip
    ap.add_argument("-m", "--model", help="target GGUF with FIM tokens (default: the pulled one)")
    ap.add_argument("-md", "--model-draft", help="draft GGUF (default: the pulled draft)")
    ap.add_argument("-c", "--ctx", type=int, help="context (default: the presets' -c 0)")
    ap.add_argument("--cache-reuse", type=int, default=EDITOR_REUSE,
                    help="serve's --cache-reuse (default: the presets'; 0: prefix reuse only)")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("-n", type=int, default=128, help="n_predict (llama.vim's default: 128)")
    ap.add_argument("--holes", type=int, default=24, help="lines typed (a completion each)")
    ap.add_argument("--start", type=int, help="first line typed (default: mid-file)")
    ap.add_argument("--n-prefix", type=int, default=256, help="lines above the cursor sent")
    ap.add_argument("--n-suffix", type=int, default=64, help="lines below sent")
    ap.add_argument("--n-extra", type=int, default=32, help="first lines sent as input_extra")
    ap.add_argument("--t-max-predict-ms", type=int, default=0,
                    help="each completion's time stop (0: none; see above)")  # fmt: skip
    ap.add_argument("--llama-server", help="a llama-server binary to compare")
    ap.add_argument("--llama-server-cache-reuse", type=int, default=LLAMA_SERVER_REUSE,
                    help="llama-server's --cache-reuse (default: its FIM presets' 256)")
    ap.add_argument("--sides", default="default,off", help="specgguf sides: default,off")
    ap.add_argument("--json", help="write the summaries (and each completion) here")
    ap.add_argument("--sampled", type=int, metavar="SEED",
                    help="sample as llama.vim asks (no temperature field: the server's 0.8, "
                         "then the infill stage), completion i with seed SEED+i; the sides' "
                         "texts then differ, so tok/s is what compares them (nothing judged)")
    ap.add_argument("--no-judge", action="store_true",
                    help="skip judging where texts part from off's (loads the target)")
    ap.add_argument("--judge", metavar="JSON",
                    help="only judge the parts of an earlier run's --json (same session flags)")
    args = ap.parse_args(argv)

    if args.model:
        target, draft = args.model, args.model_draft
    else:
        from specgguf.modelfiles.models import require_default_pair

        target, draft = (str(p) for p in require_default_pair())
    pair = ["-m", target, *(["-md", draft] if draft else [])]
    ctx = ["-c", str(args.ctx)] if args.ctx is not None else []
    common = [*pair, "-t", str(args.threads), *EDITOR_FLAGS, *ctx]
    if args.cache_reuse != EDITOR_REUSE:  # (the last of a flag given twice is the one kept)
        common += ["--cache-reuse", str(args.cache_reuse)]
    path = Path(args.file)
    opening, requests = session_requests(path.read_text(encoding="utf-8"), args, path.name)
    sides: list[tuple[str, list[str], bool]] = []
    for side in args.sides.split(","):
        spec = {"default": [], "off": ["--spec-type", "none"]}[side]
        sides.append((side, [*common, *spec], False))
    if args.llama_server:
        reuse = ["--cache-reuse", str(args.llama_server_cache_reuse)]
        sides.append(("llama-server", [*common, *reuse], True))

    if args.judge:  # the parts of a finished run's --json, with the same session flags
        saved = json.loads(Path(args.judge).read_text(encoding="utf-8"))
        judge(saved, opening, requests, target, args.cache_reuse)
        return 0
    results = []
    print(f"{len(requests)} completions over {args.file}")
    print("side          n   p50 s   p95 s  tokens   tok/s    eval  prompt ms   total s")
    for name, flags, is_llama in sides:
        server = (LlamaServer(args.llama_server, flags) if is_llama
                  else Server(flags, timeout=3600))  # fmt: skip
        try:
            replay(server, opening)
            done = replay(server, requests)
        finally:
            server.stop()
        s = summary(name, done)
        results.append({**s, "completions_detail": done})
        print(f"{name:12s} {s['completions']:3d} {s['p50_s']:7.3f} {s['p95_s']:7.3f} "
              f"{s['tokens']:7d} {s['tokens_per_s']:7.2f} {s['mean_evaluated']:7.1f} "
              f"{s['mean_prompt_ms']:10.1f} {s['total_s']:9.2f}")  # fmt: skip
    off = next((r for r in results if r["side"] == "off"), None)
    for r in results:
        if off and off["total_s"]:
            r["same_as_off"] = same_texts(r["completions_detail"], off["completions_detail"])
            print(
                f"{r['side']}: total time {r['total_s'] / off['total_s']:.3f} of off; "
                f"tok/s x{r['tokens_per_s'] / max(off['tokens_per_s'], 1e-9):.3f} of off's "
                f"(after the prompt step x"
                f"{r['decode_tokens_per_s'] / max(off['decode_tokens_per_s'], 1e-9):.3f}); "
                f"{r['same_as_off']} of {r['completions']} texts as off's"
            )
    if off and not args.no_judge and args.sampled is None:
        judge(results, opening, requests, target, args.cache_reuse)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

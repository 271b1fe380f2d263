"""Replay a greedy generation through the real loop, drafters and auto policy on virtual time.

Why: on a small shared CPU a benchmark of two configurations that differ by 10% needs several
quiet runs to tell them apart, while under greedy decoding everything but the time is
deterministic: what the target emits is the plain greedy text, what an n-gram drafter proposes
follows from the text so far, what is accepted follows from both. So this script generates the
greedy continuation ONCE with the real target, then replays it through the real
SpeculativeDecoder, real drafters and the real AdaptivePolicy, with a target whose "logits"
pick the known next token and whose passes take the time a measured cost curve says they take
(a virtual clock). Each configuration's speedup over plain decoding is then exact under that
curve: a policy change is judged in seconds, without noise, and confirmed by `specgguf bench`.

    python scripts/replay_auto.py -m TARGET.gguf -f scripts/bench_prompts.jsonl --class edit \\
        --curve bench.json [-n 256] [--types ngram-map-k] [--fixed ngram-simple,ngram-map-k]

--curve: a `specgguf bench --json` output (its cost_curve.pass_cost_rel) measured on the
machine in question. The policy starts as `run` would with that curve in its profile (seeded),
or cold with --cold. Not a test: timings are modelled, only the decisions are real.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specgguf.auto.policy import AdaptivePolicy  # noqa: E402
from specgguf.auto.profile import CostProfile, Estimate  # noqa: E402
from specgguf.bench import CostCurve  # noqa: E402
from specgguf.core import loop  # noqa: E402
from specgguf.core.loop import SpeculativeDecoder  # noqa: E402
from specgguf.core.rounds import GenerationConfig  # noqa: E402
from specgguf.core.sampling import PositionRandom, SamplerParams  # noqa: E402
from specgguf.drafters.registry import ngram_drafter  # noqa: E402

STEP_MS = 70.0  # the virtual plain step (only ratios matter)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ReplayTarget:
    """A KVContext whose next-token choice is the known greedy text and whose passes advance
    a virtual clock by the measured cost of a pass that wide (`curve[k]`: a pass verifying k
    proposals, relative to a plain step, as CostCurve.verify gives it)."""

    def __init__(self, text: Sequence[int], curve: Sequence[float], clock: Clock) -> None:
        self.text = list(text)
        self.curve = curve
        self.clock = clock
        self.n_ctx = len(text) + 1
        self.tokens: list[int] = []
        self.vocab = max(text) + 2

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def decode(self, tokens: Sequence[int], pos0: int, *, outputs: str = "last"):
        self.tokens[pos0:] = list(tokens)
        if outputs == "none":
            return None
        if outputs == "last":  # the prompt's pass (a verify asks for "all"): off the clock
            return self._rows(pos0, len(tokens))[-1:]
        width = len(tokens)  # verifies width - 1 proposals: the curve's index
        self.clock.now += STEP_MS * self.curve[min(width - 1, len(self.curve) - 1)] / 1e3
        return self._rows(pos0, width)

    def _rows(self, pos0: int, width: int) -> np.ndarray:
        """Logit rows that make the text's next token the greedy one at each position."""
        rows = np.full((width, self.vocab), -1e9, dtype=np.float32)
        for i in range(width):
            nxt = pos0 + i + 1
            rows[i, self.text[nxt] if nxt < len(self.text) else 0] = 0.0
        return rows

    def truncate(self, n_keep: int) -> None:
        del self.tokens[n_keep:]

    def keep_prefix(self, tokens: Sequence[int]) -> int:
        return 0


def replay(text: list[int], n_prompt: int, curve: list[float], types: list[str], *,
           auto: bool, n_max: int, seed_profile: CostProfile | None) -> dict:
    clock = Clock()
    target = ReplayTarget(text, curve, clock)
    drafters = [ngram_drafter(t) for t in types]
    policy = None
    if auto:
        policy = AdaptivePolicy(n_max_cap=8)
        policy.seed(seed_profile)
    n_out = len(text) - n_prompt
    cfg = GenerationConfig(n_predict=n_out, n_max=n_max, sampler=SamplerParams(temp=0.0))
    dec = SpeculativeDecoder(target, drafters, cfg, PositionRandom(0), is_eog=lambda t: False,
                             budget_policy=policy)  # fmt: skip
    if policy is not None:
        policy.attach(dec.drafters)
    with mock.patch.object(loop.time, "perf_counter", clock):
        out = [t for r in dec.generate(text[:n_prompt]) for t in r.emitted]
    assert out == text[n_prompt:], "the replay must emit the greedy text"
    # the first token comes from the prompt's pass, off the clock, in plain decoding too
    plain_s = (n_out - 1) * STEP_MS * curve[0] / 1e3
    gen_s = clock.now
    passes = dec.stats.rounds + dec.stats.plain_steps + 1  # + the prompt's, which made one
    res = {"speedup": plain_s / gen_s, "passes": passes}
    res["tokens_per_pass"] = n_out / res["passes"]
    if policy is not None:
        s = policy.summary()
        res["auto"] = {k: s[k] for k in ("mean_sent", "probes", "probe_cost_steps", "chosen_k")}
        res["sent"] = policy.sent
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-f", "--file", required=True, help="prompts JSONL (class, prompt)")
    ap.add_argument("--class", dest="cls", default="edit")
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--curve", required=True, help="specgguf bench --json output")
    ap.add_argument("--types", default="ngram-map-k", help="the default's n-gram types")
    ap.add_argument("--fixed", default="ngram-simple,ngram-map-k")
    ap.add_argument("--cold", action="store_true", help="auto without the curve as profile")
    ap.add_argument("--cache", default="/tmp/replay_texts.json")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()

    rel = json.loads(Path(a.curve).read_text())["cost_curve"]["pass_cost_rel"]
    curve = CostCurve({int(n): r * STEP_MS for n, r in rel.items()}, None).verify()
    profile = CostProfile({k: Estimate(c, 10.0) for k, c in enumerate(curve) if k > 0})
    prompts = [json.loads(x) for x in Path(a.file).read_text().splitlines() if x.strip()]
    prompts = [p["prompt"] for p in prompts if p.get("class") == a.cls]
    cache_path = Path(a.cache)
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    todo = [p for p in prompts if f"{a.n}:{p}" not in cache]
    if todo:
        from specgguf.loading.session import LoadOptions, Session, SpecOptions

        s = Session(LoadOptions(model=Path(a.model), n_ctx=4096), SpecOptions(types=[]))
        try:
            for p in todo:
                toks = s.tokenize(p)
                dec = s.decoder(SamplerParams(temp=0.0), a.n, 0)
                out = [t for r in dec.generate(toks) for t in r.emitted]
                cache[f"{a.n}:{p}"] = [toks, out]
        finally:
            s.close()
        cache_path.write_text(json.dumps(cache))
    for i, p in enumerate(prompts):
        toks, out = cache[f"{a.n}:{p}"]
        text = toks + out
        rows = {}
        for t in a.fixed.split(","):
            rows[f"{t} (fixed, own size)"] = replay(text, len(toks), curve, [t], auto=False,
                                                    n_max=1 << 20, seed_profile=None)
        rows["default (auto)"] = replay(text, len(toks), curve, a.types.split(","), auto=True,
                                        n_max=8, seed_profile=None if a.cold else profile)
        best = max(v["speedup"] for k, v in rows.items() if "fixed" in k)
        print(f"prompt {i}: {len(out)} tokens")
        for k, v in rows.items():
            extra = f"  auto {v['auto']}" if "auto" in v else ""
            print(f"  {k:28s} x{v['speedup']:.2f} ({v['speedup'] / best:.2f} of best fixed), "
                  f"{v['tokens_per_pass']:.2f} tokens/pass{extra}")
            if a.verbose and "sent" in v:
                print("   sent:", v["sent"])


if __name__ == "__main__":
    main()

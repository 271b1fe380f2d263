#!/usr/bin/env python3
"""Per-round cost of each n-gram drafter at 1k and 16k tokens of context.

A round is what the speculative loop does per target step: propose(n_max), then observe the
emitted token. The drafters keep incremental indexes, so the cost must not grow with the
context; the 16k/1k ratio shows whether it does (~1 is good, ~16 would mean a rescan).

The stream is a random 400-token "document" repeated with edits (substitutions, insertions,
deletions), so every drafter finds matches the way it would on code or templated text. Both
context lengths replay the same rounds (the tokens after position 16k; the prompt is the 1k or
16k tokens before them), so they draft about as often (the drafted % columns) and only the
context differs: a round that drafts costs more than one that does not.

    PYTHONPATH=. python scripts/bench_ngram_lookup.py [--rounds N] [--n-max N]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from specgguf.core.draft import Drafter
from specgguf.drafters.registry import ngram_drafter

TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
LENGTHS = (1024, 16384)


def stream(length: int, seed: int = 0, doc_len: int = 400, vocab: int = 32000) -> list[int]:
    """A document repeated with ~2% edits, long enough for `length` tokens plus the rounds."""
    rng = random.Random(seed)
    doc = [rng.randrange(vocab) for _ in range(doc_len)]
    out: list[int] = []
    while len(out) < length:
        for tok in doc:
            r = rng.random()
            if r < 0.01:
                out.append(rng.randrange(vocab))  # substitution
            elif r < 0.015:
                out += [tok, rng.randrange(vocab)]  # insertion
            elif r < 0.02:
                continue  # deletion
            else:
                out.append(tok)
    return out


def time_rounds(
    make: Callable[[], Drafter], tokens: list[int], start: int, ctx: int, rounds: int, n_max: int
) -> tuple[float, int]:
    """Microseconds per propose+observe round over tokens[start:start+rounds], after a prompt
    of the `ctx` tokens before `start`; and how many rounds drafted. Every context length
    replays the same rounds, so only the context differs between them."""
    d = make()
    d.begin(tokens[start - ctx : start])
    drafted = 0
    # CPU time of this process: other work on a shared machine does not count against us.
    t0 = time.process_time()
    for i in range(start, start + rounds):
        drafted += bool(d.propose(n_max).tokens)
        d.observe(tokens[i : i + 1])
    elapsed = time.process_time() - t0
    d.close()
    return elapsed / rounds * 1e6, drafted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--n-max", type=int, default=16, help="the loop's draft budget")
    ap.add_argument("--repeat", type=int, default=5, help="best of this many runs")
    args = ap.parse_args()

    tokens = stream(max(LENGTHS) + args.rounds)
    head = f"{'type':<15}" + "".join(f"{f'us/round @{n}':>16}" for n in LENGTHS)
    print(head + f"{'16k/1k':>9}" + "".join(f"{f'drafted @{n}':>15}" for n in LENGTHS))
    for spec_type in TYPES:
        best = {ctx: float("inf") for ctx in LENGTHS}
        hits = {}
        for _ in range(args.repeat):  # interleaved, so drift hits both lengths alike
            for ctx in LENGTHS:
                us, drafted = time_rounds(
                    lambda t=spec_type: ngram_drafter(t),
                    tokens,
                    max(LENGTHS),
                    ctx,
                    args.rounds,
                    args.n_max,
                )
                best[ctx] = min(best[ctx], us)
                hits[ctx] = 100 * drafted / args.rounds
        ratio = best[LENGTHS[-1]] / best[LENGTHS[0]]
        print(
            f"{spec_type:<15}"
            + "".join(f"{best[c]:>16.2f}" for c in LENGTHS)
            + f"{ratio:>9.2f}"
            + "".join(f"{hits[c]:>14.0f}%" for c in LENGTHS)
        )


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Structured output on a real model: does every answer match its schema, and does the grammar
drafter pay? Ten varied extraction prompts, each with its own JSON schema, answered through
`specgguf run --jsonl --chat` (models loaded once per configuration), greedy:

- `default`: no --spec-type (under a schema the grammar drafter joins the default types);
- `no grammar drafter`: the same default types without it (`--spec-type ngram-map-k`, plus
  draft-simple with -md);
- `plain`: `--spec-type none`, constrained plain decoding.

For each it prints how many answers parse and match their schema, total decode tokens/s, and
the ratio to plain decoding; and whether the greedy texts are the same across configurations
(they may part at near-ties of the target's top two logits, as any passes of different widths
can on a CPU). CPU-heavy: on a quiet machine.

    PYTHONPATH=. python scripts/bench_structured.py [-m T.gguf] [-md D.gguf] [-n 96]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STRING = {"type": "string"}
INTEGER = {"type": "integer"}


def object_of(**properties: object) -> dict:
    """An object schema that requires each of `properties`, in their order."""
    return {"type": "object", "properties": properties, "required": list(properties)}


FILM = object_of(title=STRING, year=INTEGER)
PERSON = object_of(name=STRING, age=INTEGER, city=STRING)
ORDER = object_of(item=STRING, quantity=INTEGER, priority={"enum": ["low", "normal", "high"]})
FUNC = object_of(name=STRING, params={"type": "array", "items": STRING}, returns=STRING)
EVENT = object_of(event=STRING, date=STRING, attendees=INTEGER, online={"type": "boolean"})
PROMPTS = [
    ("Give the title and release year of the film Casablanca as JSON.", FILM),
    ("Which film won the Academy Award for Best Picture for 1994? Answer as JSON.", FILM),
    ("Extract the person: 'Maria Lopez, 34, moved to Lisbon last spring.' Answer as JSON.", PERSON),
    ("Extract the person: 'Kenji (age 51) lives in Osaka.' Answer as JSON.", PERSON),
    ("Turn this into an order: 'we urgently need 12 replacement keyboards'. JSON only.", ORDER),
    ("Turn this into an order: 'when you can, 3 boxes of paper'. JSON only.", ORDER),
    ("Describe the Python function `def merge(a: list, b: list) -> list` as JSON.", FUNC),
    ("Describe the C function `int strcmp(const char *s1, const char *s2)` as JSON.", FUNC),
    ("Extract the event: 'PyCon sprint on 2025-05-19, about 40 people, in person.' JSON.", EVENT),
    ("Extract the event: 'Team retro, online, 8 attendees, June 3rd 2026.' JSON.", EVENT),
]
CONFIGS = [("default", []), ("no grammar drafter", None), ("plain", ["--spec-type", "none"])]


def matches(value, schema) -> bool:
    """The subset of JSON Schema the prompts use: type, properties, required, items, enum."""
    if "enum" in schema:
        return value in schema["enum"]
    t = schema.get("type")
    if t == "object":
        if not isinstance(value, dict) or any(k not in value for k in schema.get("required", [])):
            return False
        props = schema.get("properties", {})
        return all(matches(value[k], s) for k, s in props.items() if k in value)
    if t == "array":
        items = schema.get("items", {})
        return isinstance(value, list) and all(matches(v, items) for v in value)
    kinds = {"string": str, "integer": int, "number": (int, float), "boolean": bool}
    if t == "integer" and isinstance(value, bool):
        return False
    return isinstance(value, kinds[t]) if t in kinds else True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    models = Path.home() / ".cache" / "specgguf" / "models"
    ap.add_argument("-m", type=Path, default=models / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    ap.add_argument("-md", type=Path, default=None)
    ap.add_argument("-n", type=int, default=96)
    args = ap.parse_args()
    lines = [
        json.dumps({"id": i, "messages": [{"role": "user", "content": p}], "json_schema": s})
        for i, (p, s) in enumerate(PROMPTS)
    ]
    texts: dict[str, list[str]] = {}
    speeds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        batch = Path(tmp) / "prompts.jsonl"
        batch.write_text("\n".join(lines) + "\n")
        for label, extra in CONFIGS:
            if extra is None:  # the default types, minus the grammar drafter
                extra = ["--spec-type", "ngram-map-k" + (",draft-simple" if args.md else "")]
            cmd = [sys.executable, "-m", "specgguf_cli.app", "run", "-m", str(args.m),
                   "--jsonl", "-f", str(batch), "--temp", "0", "-n", str(args.n), "-q", *extra]
            if args.md:
                cmd += ["-md", str(args.md)]  # fmt: skip
            env = {**os.environ, "PYTHONPATH": str(ROOT), "SPECGGUF_PROFILES": tmp}
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
            if res.returncode != 0:
                raise SystemExit(f"{label}: exit {res.returncode}: {res.stderr[-2000:]}")
            out = [json.loads(x) for x in res.stdout.splitlines() if x.strip()]
            ok = 0
            n_tok = ms = 0.0
            for obj, (_, schema) in zip(out, PROMPTS, strict=True):
                with contextlib.suppress(ValueError, KeyError):
                    ok += matches(json.loads(obj["text"]), schema)
                n_tok += obj["timings"]["predicted_n"]
                ms += obj["timings"]["predicted_ms"]
            texts[label] = [o.get("text", "") for o in out]
            speeds[label] = n_tok / ms * 1e3
            drafted = sum(o["timings"]["draft_n"] for o in out)
            accepted = sum(o["timings"]["draft_n_accepted"] for o in out)
            print(f"{label:20s} valid {ok}/{len(PROMPTS)}  {speeds[label]:6.2f} t/s  "
                  f"drafted {int(drafted)} accepted {int(accepted)}", flush=True)  # fmt: skip
    plain = speeds["plain"]
    for label, v in speeds.items():
        same = sum(a == b for a, b in zip(texts[label], texts["plain"], strict=True))
        print(f"  {label:20s} x{v / plain:.2f} of plain decoding; same text as plain {same}/10")
    print("  example:", texts["default"][0])


if __name__ == "__main__":
    main()

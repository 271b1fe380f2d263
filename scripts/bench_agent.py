#!/usr/bin/env python3
"""An agent benchmark: a scripted coding-agent session over OpenAI's chat API with tools,
replayed against `specgguf serve` with speculation on (the server's default) and off (the
request field `"speculative": false`, same server, back to back), and optionally against a
llama-server binary.

The task (scripts/agent_task/): stats.py, ~50 lines whose `mean` divides by zero on an empty
list, and its test output before and after the fix. Tools: read_file(path),
write_file(path, content), run_tests(). The turns (--turns selects among them):

- read:    the user pastes the failing tests and asks for a fix; tool_choice names read_file.
- write:   the read_file result (the file, as plain text) is given; tool_choice names
           write_file, so the model writes the whole fixed file as a JSON string (the forward
           case: raw text in the prompt, escaped text in the output).
- answer:  write_file's result, a run_tests call and its passing output are given; the model
           answers in text (tool_choice auto, so the tools stay in the prompt as they were).
- reverse: a second conversation: the file is given as a JSON-escaped read_file result and the
           model must answer with the fixed file in a ```python block (tool_choice none: the
           escaped text in the prompt, raw text in the output).

The history of a later turn holds the model's own tool call where it wrote one that parsed,
else the script's (the correct call); call ids are renumbered call_1.. so the prompts are the
same on every run. Requests are greedy (temperature 0), not streamed, with a fixed max_tokens
per turn (-n caps them) and no `cache_prompt` field (the server's default, as a normal client
sends them: the KV prefix of the earlier turns is reused).

Measured per turn and per session: completion tokens, wall seconds at the client, decode
tokens/s (the server's `timings`: predicted_n / predicted_ms; completion tokens / wall where a
server reports no timings), tokens drafted / accepted (draft_n, draft_n_accepted), the draft's
ms (draft_ms: with a draft model this includes its catch-up on the turn's new prompt tokens,
read at the first draft, so it is part of the decode time), and the grammar's ms per
generated token over the forced turns (timings.grammar_ms / predicted_n; "n/a" where the
server does not report it, as llama-server does not). `--repeat R` runs the session R times per
setting, alternating which goes first; printed: the median total t/s of each, the ratio
on / off of the medians (total and per turn) and of each pair. Greedy speculation is
lossless: each turn's output (the tool call's arguments text, else the content) is compared
between on and off, run by run, and the first place where two part is printed (they may part
where the target's two best logits nearly tie: passes of other widths round differently;
the server has no logprobs to tell such a place from a bug, see tests/near_tie.py). The first
session of a setting pays one-time costs: use an even --repeat of 2 or more.

With `--llama-server PATH` the same sessions run on llama-server started with the same
-m/-md/-c/-t, -np 1, --jinja and the flags of `--spec-extra` (on), and with
`"speculative.n_max": 0` per request (off); llama-server reads only a string tool_choice, so
it gets "required" where specgguf gets the named function.

CPU-heavy: run it on a quiet machine.

    PYTHONPATH=. .venv/bin/python scripts/bench_agent.py [-m T.gguf -md D.gguf] [-c 8192]
        [-t THREADS] [--repeat 3] [--turns read,write,answer,reverse] [-n CAP] [--json]
        [--llama-server PATH --spec-extra='--spec-type ngram-map-k --draft-max 16']
        [-- more flags for both servers]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_serve import LlamaServer, model_args  # noqa: E402
from tests.serve_helpers import Server  # noqa: E402

TASK_DIR = ROOT / "scripts" / "agent_task"
FILE = "stats.py"
BUG = "    return sum(xs) / len(xs)\n"
FIX = "    if not xs:\n        return 0.0\n" + BUG

TURNS = ("read", "write", "answer", "reverse")
#: each turn's max_tokens (-n caps them)
MAX_TOKENS = {"read": 48, "write": 700, "answer": 200, "reverse": 700}
MODES = ("on", "off")


def _tool(name: str, description: str, props: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": props,
                "required": list(props),
                "additionalProperties": False,
            },
        },
    }


TOOLS = [
    _tool("read_file", "Read a file of the project", {"path": {"type": "string"}}),
    _tool(
        "write_file",
        "Replace a file of the project with new content (the whole file)",
        {"path": {"type": "string"}, "content": {"type": "string"}},
    ),
    _tool("run_tests", "Run the project's tests and return their output", {}),
]
SYSTEM = (
    "You are a coding agent working in a small Python project (stats.py, test_stats.py). "
    "Use the tools to read files, write whole files and run the tests."
)


@dataclass(frozen=True)
class Task:
    source: str  # stats.py with the bug
    fixed: str  # the script's fix (the history when the model wrote no call that parsed)
    failing: str  # the test output before the fix
    passing: str  # and after

    @classmethod
    def load(cls, folder: Path = TASK_DIR) -> Task:
        source = (folder / FILE).read_text(encoding="utf-8")
        assert source.count(BUG) == 1, "the bug's line must appear once"
        return cls(
            source,
            source.replace(BUG, FIX),
            (folder / "tests_failing.txt").read_text(encoding="utf-8"),
            (folder / "tests_passing.txt").read_text(encoding="utf-8"),
        )


@dataclass
class Turn:
    """One request's figures (None where the server reports nothing)."""

    name: str
    completion_tokens: int
    wall_s: float
    predicted_n: int | None
    predicted_ms: float | None
    tps: float
    draft_n: int | None
    draft_n_accepted: int | None
    grammar_ms: float | None
    draft_ms: float | None  # the draft's time, its catch-up on the new prompt tokens included
    prompt_n: int | None
    cache_n: int | None
    finish_reason: str
    tool: str | None  # the function called, if the answer is a call that parsed
    output: str  # the call's arguments text, else the content

    @property
    def grammar_ms_per_token(self) -> float | None:
        if self.grammar_ms is None or not self.predicted_n:
            return None
        return self.grammar_ms / self.predicted_n


def totals(turns: list[Turn]) -> dict[str, Any]:
    """A session's sums; t/s over all its turns."""
    tokens = sum(t.completion_tokens for t in turns)
    wall = sum(t.wall_s for t in turns)
    if turns and all(t.predicted_ms for t in turns):
        n = sum(t.predicted_n or 0 for t in turns)
        tps = 1e3 * n / sum(t.predicted_ms or 0.0 for t in turns)
    else:
        tps = tokens / wall if wall > 0 else 0.0

    def add(field: str) -> float | None:
        vals = [getattr(t, field) for t in turns]
        return None if any(v is None for v in vals) else sum(vals)

    # the grammar's cost per token over the turns it constrained (a forced call)
    forced = [t for t in turns if t.grammar_ms]
    grammar: float | None = None
    if all(t.grammar_ms is not None for t in turns):
        n = sum(t.predicted_n or 0 for t in forced)
        grammar = sum(t.grammar_ms or 0.0 for t in forced) / n if n else 0.0
    return {
        "completion_tokens": tokens,
        "wall_s": wall,
        "tps": tps,
        "draft_n": add("draft_n"),
        "draft_n_accepted": add("draft_n_accepted"),
        "draft_ms": add("draft_ms"),
        "grammar_ms_per_token": grammar,
    }


# -- the session ---------------------------------------------------------------------------------


def call_message(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": arguments}}
        ],
    }  # fmt: skip


def tool_message(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


@dataclass
class Side:
    """A server to run the session on and how it is told what to do."""

    name: str
    server: Any  # tests.serve_helpers.Server or scripts.bench_serve.LlamaServer
    off: dict[str, Any]  # the request fields that turn speculation off
    named_choice: bool = True  # tool_choice names the function (else "required")


def ask(side: Side, name: str, messages: list[dict], choice: str, max_tokens: int,
        fields: dict[str, Any]) -> Turn:  # fmt: skip
    """One turn's request and its figures."""
    if choice in ("auto", "none"):
        tool_choice: Any = choice
    elif side.named_choice:
        tool_choice = {"type": "function", "function": {"name": choice}}
    else:
        tool_choice = "required"
    body = {
        "model": "m", "messages": messages, "tools": TOOLS, "tool_choice": tool_choice,
        "parallel_tool_calls": False, "max_tokens": max_tokens, "temperature": 0, **fields,
    }  # fmt: skip
    t0 = time.perf_counter()
    status, _, obj = side.server.request("POST", "/v1/chat/completions", body)
    wall = time.perf_counter() - t0
    if status != 200:
        raise SystemExit(f"{side.name}, turn {name}: HTTP {status}: {obj}")
    choice0 = obj["choices"][0]
    msg = choice0["message"]
    calls = msg.get("tool_calls") or []
    fn = calls[0]["function"] if calls else None
    t = obj.get("timings") or {}
    tokens = int(obj.get("usage", {}).get("completion_tokens", 0))
    pn, pms = t.get("predicted_n"), t.get("predicted_ms")
    return Turn(
        name=name,
        completion_tokens=tokens,
        wall_s=wall,
        predicted_n=pn,
        predicted_ms=pms,
        tps=1e3 * pn / pms if pn and pms else (tokens / wall if wall > 0 else 0.0),
        draft_n=t.get("draft_n", 0 if t else None),  # llama-server omits it when not drafting
        draft_n_accepted=t.get("draft_n_accepted", 0 if t else None),
        grammar_ms=t.get("grammar_ms"),
        draft_ms=t.get("draft_ms"),
        prompt_n=t.get("prompt_n"),
        cache_n=t.get("cache_n"),
        finish_reason=choice0.get("finish_reason") or "",
        tool=fn["name"] if fn else None,
        output=fn["arguments"] if fn else (msg.get("content") or ""),
    )


def own_call(turn: Turn | None, name: str, fallback: str) -> str:
    """The arguments text for the history: the model's call to `name` when it wrote one whose
    arguments parse as an object, else `fallback` (the script's)."""
    if turn is None or turn.tool != name:
        return fallback
    try:
        ok = isinstance(json.loads(turn.output), dict)
    except ValueError:
        ok = False
    return turn.output if ok else fallback


def first_messages(task: Task) -> list[dict[str, Any]]:
    """The read turn's conversation: the failing tests and the request for a fix."""
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "The tests fail:\n\n" + task.failing
         + "\nFix the bug in stats.py."},
    ]  # fmt: skip


def write_messages(task: Task, read_args: str | None = None) -> list[dict[str, Any]]:
    """The write turn's conversation: the read turn's, its read_file call (`read_args`: the
    model's, else the script's) and the file as the tool's result."""
    args = read_args if read_args is not None else json.dumps({"path": FILE})
    return [
        *first_messages(task),
        call_message("call_1", "read_file", args),
        tool_message("call_1", task.source),
    ]


def run_session(side: Side, task: Task, turns: list[str], mode: str,
                cap: int | None = None) -> list[Turn]:  # fmt: skip
    """The selected turns of the session, in order, with speculation `mode` ("on"/"off")."""
    fields = side.off if mode == "off" else {}

    def limit(name: str) -> int:
        return min(MAX_TOKENS[name], cap) if cap else MAX_TOKENS[name]

    out: list[Turn] = []
    messages = first_messages(task)
    got: Turn | None = None
    if "read" in turns:
        got = ask(side, "read", messages, "read_file", limit("read"), fields)
        out.append(got)
    args = own_call(got, "read_file", json.dumps({"path": FILE}))
    messages = write_messages(task, args)
    got = None
    if "write" in turns:
        got = ask(side, "write", messages, "write_file", limit("write"), fields)
        out.append(got)
    args = own_call(got, "write_file", json.dumps({"path": FILE, "content": task.fixed}))
    written = len(json.loads(args).get("content", "") or "")
    messages += [
        call_message("call_2", "write_file", args),
        tool_message("call_2", f"wrote {written} characters to {FILE}"),
        call_message("call_3", "run_tests", "{}"),
        tool_message("call_3", task.passing),
    ]
    if "answer" in turns:
        out.append(ask(side, "answer", messages, "auto", limit("answer"), fields))
    if "reverse" in turns:
        escaped = json.dumps({"path": FILE, "content": task.source})
        reverse = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "mean() in stats.py fails on an empty list. Show me "
             "the whole fixed file in one ```python code block."},
            call_message("call_1", "read_file", json.dumps({"path": FILE})),
            tool_message("call_1", escaped),
        ]  # fmt: skip
        out.append(ask(side, "reverse", reverse, "none", limit("reverse"), fields))
    return out


# -- comparing and summing up --------------------------------------------------------------------


def where_they_part(a: str, b: str, context: int = 40) -> dict[str, Any] | None:
    """None when equal, else the first differing character and the text around it in each."""
    if a == b:
        return None
    i = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    lo = max(0, i - context)
    return {"at": i, "len_a": len(a), "len_b": len(b),
            "a": a[lo:i + context], "b": b[lo:i + context]}  # fmt: skip


def median_or_none(vals: list[float | None]) -> float | None:
    got = [v for v in vals if v is not None]
    return statistics.median(got) if got else None


def summarize(runs: list[dict[str, Any]], sides: list[str], turns: list[str]) -> dict[str, Any]:
    """Medians per side and mode, ratios on/off (of the medians and of each pair), the
    lossless check per side, and specgguf against llama-server."""
    out: dict[str, Any] = {}
    for side in sides:
        by_mode = {m: [r for r in runs if r["side"] == side and r["mode"] == m] for m in MODES}
        s: dict[str, Any] = {}
        for m, rs in by_mode.items():
            s[m] = {
                "tps": median_or_none([r["total"]["tps"] for r in rs]),
                "wall_s": median_or_none([r["total"]["wall_s"] for r in rs]),
                "draft_n": median_or_none([r["total"]["draft_n"] for r in rs]),
                "draft_n_accepted": median_or_none([r["total"]["draft_n_accepted"] for r in rs]),
                "grammar_ms_per_token": median_or_none(
                    [r["total"]["grammar_ms_per_token"] for r in rs]
                ),
                "turns": {
                    name: median_or_none(
                        [t["tps"] for r in rs for t in r["turns"] if t["name"] == name]
                    )
                    for name in turns
                },
            }
        on, off = s["on"], s["off"]
        s["ratio"] = on["tps"] / off["tps"] if on["tps"] and off["tps"] else None
        s["pairs"] = [
            a["total"]["tps"] / b["total"]["tps"] if b["total"]["tps"] else None
            for a, b in zip(by_mode["on"], by_mode["off"], strict=True)
        ]
        s["turn_ratios"] = {
            n: on["turns"][n] / off["turns"][n] if on["turns"][n] and off["turns"][n] else None
            for n in turns
        }
        parts = []
        for rep, (a, b) in enumerate(zip(by_mode["on"], by_mode["off"], strict=True)):
            for ta, tb in zip(a["turns"], b["turns"], strict=True):
                d = where_they_part(ta["output"], tb["output"])
                if d:
                    parts.append({"rep": rep, "turn": ta["name"], **d})
        s["lossless"] = {
            "compared": sum(len(r["turns"]) for r in by_mode["on"]),
            "identical": not parts,
            "parted": parts,
        }
        out[side] = s
    if len(sides) > 1:  # the same greedy text on both servers? (not promised: other kernels)
        first = {r["side"]: r for r in runs if r["mode"] == "off" and r["rep"] == 0}
        a, b = first[sides[0]], first[sides[1]]
        out["across"] = {
            "ratio_on": _ratio(out[sides[0]]["on"]["tps"], out[sides[1]]["on"]["tps"]),
            "ratio_off": _ratio(out[sides[0]]["off"]["tps"], out[sides[1]]["off"]["tps"]),
            "same_output": {
                ta["name"]: ta["output"] == tb["output"]
                for ta, tb in zip(a["turns"], b["turns"], strict=True)
            },
        }
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def fmt(x: float | None, spec: str = ".2f") -> str:
    return "n/a" if x is None else format(x, spec)


HEADER = (
    f"{'side':12s}  {'spec':4s}  {'rep':>3s}  {'turn':7s}  {'tokens':>6s}  {'wall s':>7s}  "
    f"{'t/s':>8s}  {'drafted':>7s}  {'accepted':>8s}  {'draft ms':>8s}  {'grammar ms/tok':>14s}  "
    "finish"
)


def print_run(r: dict[str, Any]) -> None:
    for t in [*r["turns"], {"name": "total", **r["total"]}]:
        print(
            f"{r['side']:12s}  {r['mode']:4s}  {r['rep']:3d}  {t['name']:7s}  "
            f"{t['completion_tokens']:6d}  {t['wall_s']:7.2f}  {t['tps']:8.2f}  "
            f"{fmt(t['draft_n'], 'd'):>7s}  {fmt(t['draft_n_accepted'], 'd'):>8s}  "
            f"{fmt(t['draft_ms'], '.0f'):>8s}  "
            f"{fmt(t['grammar_ms_per_token'], '.3f'):>14s}  {t.get('finish_reason', '')}",
            flush=True,
        )


def print_summary(summary: dict[str, Any], sides: list[str], turns: list[str]) -> None:
    for side in sides:
        s = summary[side]
        print(
            f"{side}: median total t/s on {fmt(s['on']['tps'])}, off {fmt(s['off']['tps'])}, "
            f"ratio {fmt(s['ratio'], '.3f')} (pairs "
            + " ".join(fmt(p) for p in s["pairs"])
            + "); per turn "
            + ", ".join(f"{n} x{fmt(s['turn_ratios'][n], '.3f')}" for n in turns)
            + f"; grammar ms/token on {fmt(s['on']['grammar_ms_per_token'], '.3f')}, "
            f"off {fmt(s['off']['grammar_ms_per_token'], '.3f')}"
        )
        ll = s["lossless"]
        if ll["identical"]:
            print(f"{side}: lossless: all {ll['compared']} outputs identical with speculation "
                  "on and off")  # fmt: skip
        for d in ll["parted"]:
            print(
                f"{side}: on and off PART: rep {d['rep']}, turn {d['turn']}, at character "
                f"{d['at']} (lengths {d['len_a']} on, {d['len_b']} off; greedy speculation "
                "may part only at a near-tie of the target's two best logits, which the server "
                "cannot show: it has no logprobs)\n"
                f"  on:  {d['a']!r}\n  off: {d['b']!r}"
            )
        if s["off"]["draft_n"]:
            print(f"{side}: warning: speculation off still drafted {s['off']['draft_n']} tokens")
    if "across" in summary:
        a = summary["across"]
        same = ", ".join(f"{n} {'same' if v else 'differs'}" for n, v in a["same_output"].items())
        print(
            f"{sides[0]} / {sides[1]}: on x{fmt(a['ratio_on'], '.3f')}, "
            f"off x{fmt(a['ratio_off'], '.3f')}; greedy output {same}"
        )


# -- main ----------------------------------------------------------------------------------------


def bench(sides: list[Side], task: Task, turns: list[str], repeat: int,
          cap: int | None = None, show: bool = True) -> dict[str, Any]:  # fmt: skip
    """Every side's session with speculation on and off, `repeat` times, alternating the
    order; the runs and their summary."""
    for side in sides:  # warm up: the first request pays one-time costs
        ask(side, "warmup", [{"role": "user", "content": "Hi"}], "none", 4, {})
    order = [(side, mode) for side in sides for mode in MODES]
    runs: list[dict[str, Any]] = []
    if show:
        print(HEADER, flush=True)
    for rep in range(repeat):
        for side, mode in order if rep % 2 == 0 else order[::-1]:
            got = run_session(side, task, turns, mode, cap)
            run = {
                "side": side.name, "mode": mode, "rep": rep,
                "turns": [{**asdict(t), "grammar_ms_per_token": t.grammar_ms_per_token}
                          for t in got],
                "total": totals(got),
            }  # fmt: skip
            runs.append(run)
            if show:
                print_run(run)
    runs.sort(key=lambda r: (r["side"], r["mode"], r["rep"]))
    names = [s.name for s in sides]
    return {"turns": turns, "runs": runs, "summary": summarize(runs, names, turns)}


def default_pair() -> tuple[str, str]:
    from specgguf.modelfiles.models import require_default_pair

    return tuple(str(p) for p in require_default_pair())  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", help="target GGUF (default: the pulled default pair)")
    ap.add_argument("-md", "--model-draft", help="draft GGUF (default: the pulled draft)")
    ap.add_argument("-c", "--ctx", type=int, default=8192)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("-n", type=int, help="cap on every turn's max_tokens (a smoke test)")
    ap.add_argument("--repeat", type=int, default=1, help="sessions per setting, alternating")
    ap.add_argument("--port", type=int, help="specgguf serve's port (default: a free one)")
    ap.add_argument("--turns", default=",".join(TURNS), help="comma list of " + ", ".join(TURNS))
    ap.add_argument("--json", action="store_true", help="print the runs and summary as JSON")
    ap.add_argument("--llama-server", help="a llama-server binary to run the same sessions on")
    ap.add_argument("--spec-extra", default="",
                    help="llama-server's speculation flags, e.g. "
                    "--spec-extra='--spec-type ngram-map-k --draft-max 16'")  # fmt: skip
    ap.add_argument("extra", nargs="*", help="more flags for both servers (after --)")
    args = ap.parse_args(argv)
    turns = [t.strip() for t in args.turns.split(",") if t.strip()]
    bad = sorted(set(turns) - set(TURNS))
    if bad or not turns:
        ap.error(f"--turns: unknown {bad} (choose from {', '.join(TURNS)})")
    turns = [t for t in TURNS if t in turns]
    if args.model is None:
        args.model, draft = default_pair()
        args.model_draft = args.model_draft or draft
    flags = [*model_args(args), "-np", "1"]
    task = Task.load()
    port = ["--port", str(args.port)] if args.port else []
    servers: list[Side] = []
    try:
        servers.append(Side("specgguf", Server([*flags, *port], timeout=3600),
                            {"speculative": False}))  # fmt: skip
        if args.llama_server:
            ls = LlamaServer(args.llama_server,
                             [*flags, "--jinja", *shlex.split(args.spec_extra)])  # fmt: skip
            servers.append(Side("llama-server", ls, {"speculative.n_max": 0}, named_choice=False))
        report = bench(servers, task, turns, args.repeat, args.n, show=not args.json)
    finally:
        for side in servers:
            side.server.stop()
    if args.json:  # the outputs themselves stay out (where they part is in the summary)
        for r in report["runs"]:
            for t in r["turns"]:
                t["output_chars"] = len(t.pop("output"))
        print(json.dumps(report, indent=1))
    else:
        print_summary(report["summary"], [s.name for s in servers], turns)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""scripts/bench_agent.py on the tiny models: the whole script (its CLI, one server, every
turn with speculation on and off, --json) with a small -n, and where two texts part. A tiny
random model writes garbage, but a forced call's JSON shape comes from the grammar."""

from __future__ import annotations

import json

from scripts.bench_agent import (
    MODES,
    TURNS,
    Task,
    main,
    own_call,
    print_summary,
    summarize,
    where_they_part,
)
from tests.serve_helpers import QWEN_TEMPLATE


def test_the_script_measures_every_turn_on_and_off(tiny_target, tiny_draft, capsys):
    code = main(
        ["-m", str(tiny_target), "-md", str(tiny_draft), "-t", "1", "-c", "16384", "-n", "24",
         "--json", "--", "-fa", "off", "--spec-draft-n-max", "4",
         "--chat-template-file", str(QWEN_TEMPLATE)]
    )  # fmt: skip
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["turns"] == list(TURNS)
    runs = report["runs"]
    assert [(r["side"], r["mode"]) for r in runs] == [("specgguf", m) for m in sorted(MODES)]
    for r in runs:
        assert [t["name"] for t in r["turns"]] == list(TURNS)
        for t in r["turns"]:
            assert 0 < t["completion_tokens"] <= 24 and t["wall_s"] > 0 and t["tps"] > 0
            assert t["predicted_n"] == t["completion_tokens"]  # the server's own timings
            assert t["grammar_ms"] is not None and t["prompt_n"] is not None
        forced = {t["name"]: t for t in r["turns"]}
        assert forced["write"]["grammar_ms"] > 0 and forced["write"]["output_chars"] > 0
        total = r["total"]
        assert total["completion_tokens"] == sum(t["completion_tokens"] for t in r["turns"])
    on, off = (next(r for r in runs if r["mode"] == m) for m in ("on", "off"))
    assert on["total"]["draft_n"] > 0 and off["total"]["draft_n"] == 0
    assert on["total"]["draft_ms"] > off["total"]["draft_ms"]
    s = report["summary"]["specgguf"]
    assert s["ratio"] and s["ratio"] > 0 and set(s["turn_ratios"]) == set(TURNS)
    assert s["on"]["grammar_ms_per_token"] is not None
    # greedy speculation is lossless: every turn's output compared, all the same
    assert s["lossless"] == {"compared": len(TURNS), "identical": True, "parted": []}


def test_where_they_part_and_the_history_call():
    assert where_they_part("same", "same") is None
    d = where_they_part("x" * 50 + "abc", "x" * 50 + "abd", context=5)
    assert d == {"at": 52, "len_a": 53, "len_b": 53, "a": "xxxabc", "b": "xxxabd"}
    assert where_they_part("ab", "abc")["at"] == 2  # one is a prefix of the other
    task = Task.load()
    assert "if not xs" in task.fixed and task.fixed != task.source
    assert own_call(None, "read_file", "{}") == "{}"  # the turn was not run: the script's


def _run(side: str, mode: str, rep: int, tps: float, output: str) -> dict:
    turn = {"name": "write", "tps": tps, "output": output}
    total = {"tps": tps, "wall_s": 1.0, "draft_n": 0, "draft_n_accepted": 0, "draft_ms": 0.0,
             "grammar_ms_per_token": None}  # fmt: skip
    return {"side": side, "mode": mode, "rep": rep, "turns": [turn], "total": total}


def test_summary_ratios_a_parted_output_and_llama_server_side_by_side(capsys):
    runs = [
        _run("specgguf", "on", 0, 30.0, '{"content": "abc"}'),
        _run("specgguf", "off", 0, 20.0, '{"content": "abd"}'),  # not lossless
        _run("llama-server", "on", 0, 15.0, '{"content": "abc"}'),
        _run("llama-server", "off", 0, 10.0, '{"content": "abc"}'),
    ]
    s = summarize(runs, ["specgguf", "llama-server"], ["write"])
    ours = s["specgguf"]
    assert ours["ratio"] == 1.5 and ours["pairs"] == [1.5] and ours["turn_ratios"] == {"write": 1.5}
    assert not ours["lossless"]["identical"]
    assert ours["lossless"]["parted"][0]["turn"] == "write"
    assert ours["lossless"]["parted"][0]["at"] == 15
    assert s["llama-server"]["lossless"]["identical"]
    assert s["across"]["ratio_on"] == 2.0 and s["across"]["same_output"] == {"write": False}
    print_summary(s, ["specgguf", "llama-server"], ["write"])
    out = capsys.readouterr().out
    assert "specgguf: on and off PART: rep 0, turn write, at character 15" in out
    assert "llama-server: lossless: all 1 outputs identical" in out
    assert "specgguf / llama-server: on x2.000, off x2.000; greedy output write differs" in out

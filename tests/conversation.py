"""A two-turn `run -cnv` conversation checked against its replay as one prompt: the check the
tests of each drafter over a conversation share (the second turn reuses the first's cache, and
prints what a fresh run of the whole conversation prints)."""

from __future__ import annotations

import io
import json
import re

from specgguf_cli.app import run_cli


def check_two_turns(models: list[str], monkeypatch, capsys, replay: list[str] | None = None):
    """`run *models -cnv` with two user turns (12 greedy tokens each), then turn 2 replayed
    as one ChatML prompt with `replay` (default: the same flags), whose text must be turn 2's
    answer."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"hi\nwhat next\n")))
    assert run_cli(["run", *models, "-cnv", "-sys", "S", "-n", "12", "--temp", "0"]) == 0
    out, err = capsys.readouterr()
    answers = [a for a in out.split("\n") if a][:2]
    assert len(answers) == 2
    turns = [(int(a), int(b)) for a, b in re.findall(r"prompt (\d+) tokens \((\d+) reused\)", err)]
    assert turns[1][1] > 0  # turn 2 reused turn 1's cache
    convo = (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
        f"<|im_start|>assistant\n{answers[0]}<|im_end|>\n<|im_start|>user\nwhat next<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    argv = ["run", *(replay or models), "-p", convo, "-n", "12", "--temp", "0", "--json", "-q"]
    assert run_cli(argv) == 0
    assert json.loads(capsys.readouterr().out)["text"] == answers[1]

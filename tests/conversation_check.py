"""The -cnv check several drafters share: two turns read from stdin, the second reusing the
first's cache, and the second answer equal to what one -p run of the whole conversation
prints (the tiny models' ChatML template)."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence

from specgguf_cli.app import run_cli


def check_conversation_turns(
    args: Sequence[str], monkeypatch, capsys, *, replay: Sequence[str] = ()
) -> None:
    """`args`: the run flags (models, threads, spec types) of both runs; `replay`: flags the
    one-shot replay adds (e.g. `--spec-type none`, to compare with plain decoding)."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"hi\nwhat next\n")))
    assert run_cli(["run", *args, "-cnv", "-sys", "S", "-n", "12", "--temp", "0"]) == 0
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
    argv = ["run", *args, *replay, "-p", convo, "-n", "12", "--temp", "0", "--json", "-q"]
    assert run_cli(argv) == 0
    assert json.loads(capsys.readouterr().out)["text"] == answers[1]

"""run -o/--output FILE: llama-cli's transcript of a conversation (User:/Assistant: turns, the
thinking apart), written as it goes; refused in one line where there is no conversation."""

from __future__ import annotations

import io
import json

import pytest
from specgguf_cli.app import run_cli

from specgguf.errors import ExitCode

FAST = ["-t", "1", "-c", "512", "-fa", "off", "--temp", "0", "-q"]
#: an answer that thinks first, held to that shape by a grammar (the tiny model never would)
THINKS = 'root ::= "<think>" [a-z ]{1,12} "</think>" [a-z]{1,8}'


@pytest.fixture
def run(tiny_target, capsys, monkeypatch):
    """run(stdin, *args) -> (exit code, stdout, stderr) of `specgguf run -m T`."""

    def _run(stdin: bytes, *args):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        code = run_cli(["run", "-m", str(tiny_target), *FAST, *map(str, args)])
        out = capsys.readouterr()
        return code, out.out, out.err

    return _run


def test_conversation_transcript(run, tmp_path) -> None:
    path = tmp_path / "chat.txt"
    code, out, err = run(b"hi\nwhat next\n", "-cnv", "-n", "6", "-o", path)
    assert code == 0, err
    answers = out.splitlines()
    assert len(answers) == 2
    assert path.read_text() == (f"User:\nhi\n\nAssistant:\n{answers[0]}\n\n"
                                f"User:\nwhat next\n\nAssistant:\n{answers[1]}\n\n")  # fmt: skip


def test_thinking_is_written_apart(run, tmp_path) -> None:
    path = tmp_path / "think.txt"
    code, _, err = run(b"hi\n", "-cnv", "-n", "40", "--grammar", THINKS, "--output-file", path)
    assert code == 0, err
    written = path.read_text()
    assert written.startswith("User:\nhi\n\nAssistant:\n[Start thinking]\n\n")
    thinking, _, answer = written.split("[Start thinking]\n\n")[1].partition("[End thinking]\n\n")
    assert thinking.strip() and answer.strip().isalpha() and "<think>" not in written


def test_one_chat_prompt(run, tmp_path) -> None:
    path = tmp_path / "one.txt"
    code, out, err = run(b"", "--chat", "-p", "hi", "-n", "4", "--json", "--output", path)
    assert code == 0, err
    assert path.read_text() == f"User:\nhi\n\nAssistant:\n{json.loads(out)['text']}\n\n"


@pytest.mark.parametrize("args", [["-p", "plain text", "--no-chat"], ["-i", "-p", "x"]])
def test_without_a_conversation_it_is_one_line(run, tmp_path, args) -> None:
    code, _, err = run(b"", *args, "-o", tmp_path / "x.txt")
    assert code == ExitCode.USAGE and "transcript" in err and err.count("\n") == 1
    assert not (tmp_path / "x.txt").exists()


def test_an_unwritable_file_is_one_line(run, tmp_path) -> None:
    code, _, err = run(b"hi\n", "-cnv", "-o", tmp_path / "no" / "such" / "dir.txt")
    assert code == ExitCode.OUTPUT and "-o/--output: cannot write" in err and err.count("\n") == 1

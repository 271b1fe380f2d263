"""`specgguf run -i/-if`: llama-completion's interactive mode on plain text, with speculation
underneath (the tiny pair, draft-simple): the input read as llama.cpp reads it, wrapped in
--in-prefix/--in-suffix/--in-prefix-bos, and each turn's generation continuing the sequence
(its prefix kept in the KV cache)."""

from __future__ import annotations

import io

import pytest
from specgguf_cli.app import run_cli
from specgguf_cli.interactive import read_input

FAST = ["-t", "1", "-c", "512", "-fa", "off", "--temp", "0", "--spec-type", "draft-simple",
        "--spec-draft-n-max", "4", "-n", "6"]  # fmt: skip


@pytest.mark.parametrize(("typed", "multiline", "expected"), [
    ("one\ntwo\n", False, ["one", "two", None]),
    ("a\\\nb\nc\\\nd\n", False, ["a\nb\nc", "d", None]),  # \\ flips: Enter goes on, then not
    ("a\nb/\nc\n", True, ["a\nb", "c", None]),  # multiline: / hands control back
    ("\n", False, ["", None]),  # an empty input hands control back
    ("", False, [None]),
])  # fmt: skip
def test_input_is_read_as_llama_cpp_reads_it(typed, multiline, expected) -> None:
    stream = io.StringIO(typed)
    assert [read_input(stream, multiline) for _ in expected] == expected


@pytest.fixture
def calls(monkeypatch):
    """The token sequence of every generation the run asks for."""
    from specgguf.generator import Generator

    seen: list[list[int]] = []
    real = Generator.generate

    def generate(self, tokens, *a, **k):
        seen.append(list(tokens))
        return real(self, tokens, *a, **k)

    monkeypatch.setattr(Generator, "generate", generate)
    return seen


@pytest.fixture
def run(tiny_target, tiny_draft, capsys, monkeypatch, calls):
    pytest.importorskip("llama_cpp")

    def _run(stdin: str, *args):
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        argv = ["run", "-m", str(tiny_target), "-md", str(tiny_draft), *FAST, *args]
        code = run_cli(argv)
        out = capsys.readouterr()
        return code, out.out, out.err

    return _run


def _encode(tiny_target, text: str, special: bool) -> list[int]:
    from specgguf.binding import engine

    m = engine.Model(tiny_target)
    try:
        return m.tokenize(text, add_special=False, parse_special=special)
    finally:
        m.close()


def test_each_input_continues_the_sequence(run, calls, tiny_target) -> None:
    code, out, err = run("world\n", "-i", "-p", "Hello", "--in-prefix", "<<", "--in-suffix", ">>")
    assert code == 0
    assert len(calls) == 2 and out.startswith("Hello")
    assert "<<>>" in out and "world" not in out.split("<<>>", 1)[1][:5]  # typed, not echoed
    first, second = calls
    assert second[: len(first)] == first  # the prompt, then what was generated, then the input
    tail = (_encode(tiny_target, "<<", True) + _encode(tiny_target, "world", False)
            + _encode(tiny_target, ">>", True))  # fmt: skip
    assert second[-len(tail):] == tail
    turns = [line for line in err.splitlines() if line.startswith("[")]
    assert len(turns) == 2 and "limit]" in turns[0]
    assert "(0 reused)" not in turns[1]  # the second turn kept the first in the KV cache


def test_interactive_first_and_prefix_bos(run, calls, tiny_target) -> None:
    from specgguf.binding import engine

    code, _, _ = run("hi\n", "-if", "--in-prefix-bos")
    assert code == 0 and len(calls) == 1
    m = engine.Model(tiny_target)
    bos = m.bos
    m.close()
    assert calls[0][-1 - len(_encode(tiny_target, "hi", False))] == bos


def test_empty_input_hands_control_back(run, calls) -> None:
    code, _, _ = run("\n", "-i", "-p", "Hello")
    assert code == 0 and len(calls) == 2 and calls[1][: len(calls[0])] == calls[0]


def test_a_reverse_prompt_returns_control_and_stays(run, calls, capsys) -> None:
    _, out, _ = run("", "-i", "-p", "Hello")
    generated = out.removeprefix("Hello").strip()
    if len(generated) < 3:
        pytest.skip("the tiny model said too little to pick a reverse prompt from")
    word = generated[1:3]
    calls.clear()
    code, out, err = run("", "-i", "-p", "Hello", "-r", word)
    assert code == 0 and len(calls) == 1
    assert out.endswith(word)  # the reverse prompt is shown, as llama.cpp shows it
    assert "stop]" in err


@pytest.mark.parametrize(("args", "says"), [
    (["--in-prefix", "x"], "add -i or -if"),
    (["-mli"], "add -i, -if or -cnv"),
    (["-i", "-cnv"], "cannot be combined"),
    (["-i", "--json"], "cannot be combined"),
])  # fmt: skip
def test_interactive_flags_out_of_place_are_one_line(args, says, capsys) -> None:
    assert run_cli(["run", "-p", "x", *args]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and says in err

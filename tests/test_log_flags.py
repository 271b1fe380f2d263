"""-lv, --log-file, --log-disable, --log-colors, --log-prefix, --log-timestamps: llama.cpp's log
lines written as llama.cpp's programs write them (specgguf.io.log_sink), and the log file
getting them and specgguf's own stderr lines."""

from __future__ import annotations

import io
import re

import pytest
from specgguf_cli.app import run_cli

from specgguf.io import log_sink as ls

FAST = ["-t", "1", "-c", "256", "-fa", "off", "--spec-type", "none", "-n", "4", "-p", "hi"]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _sink(**kw) -> tuple[ls.LogSink, io.StringIO, io.StringIO]:
    err, file = io.StringIO(), io.StringIO()
    return ls.LogSink(ls.LogSettings(**kw), err, file, start=0.0), err, file


def test_library_lines_show_at_verbosity_3_and_debug_at_5() -> None:
    for threshold, shown in ((None, ""), (2, ""), (3, "info\nwarn\n"), (5, "info\ndebug\nwarn\n")):
        sink, err, file = _sink(verbosity=threshold)
        for level, text in ((ls.INFO, b"info\n"), (ls.DEBUG, b"debug\n"), (ls.WARN, b"warn\n")):
            sink(level, text)
        assert err.getvalue() == shown, threshold
    assert file.getvalue().startswith("info\n")  # the file: at -lv, else llama.cpp's default 3


def test_a_continued_piece_follows_its_line() -> None:
    sink, err, _ = _sink(verbosity=3)
    sink(ls.DEBUG, b"hidden ")
    sink(ls.CONT, b"this too\n")
    sink(ls.INFO, b"shown ")
    sink(ls.CONT, b"and this\n")
    assert err.getvalue() == "shown and this\n"


def test_prefix_timestamps_and_colours_as_llama_cpp_writes_them(monkeypatch) -> None:
    monkeypatch.setattr(ls.time, "monotonic", lambda: 61.002003)
    sink, err, file = _sink(verbosity=3, prefix=True, timestamps=True, colors="off")
    sink(ls.WARN, b"careful\n")
    sink(ls.CONT, b"more\n")
    assert err.getvalue() == "1.01.002.003 W careful\nmore\n"
    assert file.getvalue() == err.getvalue()
    tty = _Tty()
    coloured = ls.LogSink(ls.LogSettings(verbosity=3, prefix=True), tty, None)
    coloured(ls.ERROR, b"bad\n")
    coloured(ls.INFO, b"fine\n")
    assert tty.getvalue() == "\x1b[31mE bad\n\x1b[0m\x1b[32mI \x1b[0mfine\n"  # auto: a terminal
    piped = ls.LogSink(ls.LogSettings(verbosity=3, colors="auto"), io.StringIO(), None)
    assert not piped.colour


def test_disabled_goes_nowhere() -> None:
    sink, err, file = _sink(verbosity=ls.EVERYTHING, disabled=True)
    sink(ls.ERROR, b"x\n")
    assert err.getvalue() == file.getvalue() == ""


@pytest.fixture
def run(tiny_target, capsys):
    def _run(*args):
        code = run_cli(["run", "-m", str(tiny_target), *FAST, *map(str, args)])
        out = capsys.readouterr()
        return code, out.out, out.err

    pytest.importorskip("llama_cpp")
    return _run


def test_log_file_gets_llama_cpps_log_and_specggufs_lines(run, tmp_path) -> None:
    log = tmp_path / "run.log"
    code, _, err = run("--log-file", log, "--log-prefix")
    assert code == 0
    text = log.read_text()
    assert re.search(r"^I llama_model_loader: ", text, re.M)  # llama.cpp's, prefixed
    assert "llama_model_loader" not in err  # not on stderr without -v/-lv
    own = [line for line in err.splitlines() if line.strip()]
    assert own and all(line in text for line in own)  # specgguf's stderr, teed
    assert ls.current is None  # the sink is gone with the command


def test_verbosity_shows_llama_cpps_log_and_log_disable_hides_it(run) -> None:
    _, _, err = run("-lv", "3")
    assert "llama_model_loader" in err
    _, _, err = run("-v", "--log-disable")
    assert "llama_model_loader" not in err


def test_an_unwritable_log_file_is_one_line(run, tmp_path) -> None:
    code, _, err = run("--log-file", tmp_path / "no" / "such" / "dir.log")
    assert code == 1 and err.strip().count("\n") == 0 and "--log-file" in err

"""Thread counts and the context size: LLAMA_ARG_THREADS refused beyond ggml's thread limit
before any model is read (the flags -t/-td are in test_cli_errors' table of values refused
before loading), the default context (4096, capped at the model's training context), `-c 0`,
and the warning when -c passes the training context; `run`, `bench` and `check` agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from specgguf_cli.app import run_cli

from specgguf.errors import ExitCode
from specgguf.loading.preflight import DEFAULT_N_CTX, resolve_n_ctx
from tests.gguf_factory import write_gguf

SPECGGUF = str(Path(sys.executable).with_name("specgguf"))
CTX_WARNING = "larger than the model's training context"


def one_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


# -- threads ----------------------------------------------------------------------------------


def test_llama_arg_threads_env_is_validated_in_a_subprocess(tiny_target):
    """The issue's case: LLAMA_ARG_THREADS=100000 crashed inside ggml with no message."""
    env = {**os.environ, "LLAMA_ARG_THREADS": "100000"}
    t0 = time.monotonic()
    proc = subprocess.run(
        [SPECGGUF, "run", "-m", str(tiny_target), "-p", "x", "-n", "1", "-fa", "off"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    assert "-t/--threads: 100000" in one_line(proc.stderr)
    assert time.monotonic() - t0 < 30


@pytest.mark.parametrize("value", ["-1", "0", "1", "512"])
def test_thread_counts_within_limits_are_accepted(value, capsys, tiny_target, monkeypatch):
    """-1 and 0 mean all cores (llama.cpp's reading of any value <= 0). 512 only passes
    validation here: a missing prompt file stops the run before any thread is started."""
    if value in ("-1", "1"):
        code = run_cli(["run", "-m", str(tiny_target), "-t", value, "-td", value, "-c", "256",
                        "-fa", "off", "-p", "the cat", "-n", "4", "--temp", "0", "-q"])  # fmt: skip
        assert code == 0, capsys.readouterr().err
    else:
        code = run_cli(["run", "-m", str(tiny_target), "-t", value, "-f", "/nonexistent/p"])
        assert code == ExitCode.USAGE
        assert "-f /nonexistent/p" in one_line(capsys.readouterr().err)


# -- context size -----------------------------------------------------------------------------


def test_resolve_n_ctx():
    assert DEFAULT_N_CTX == 4096
    assert resolve_n_ctx(None, 32768) == (4096, None)  # the default, not the 32k of -c 0
    assert resolve_n_ctx(None, 2048) == (2048, None)  # capped at training, silently
    assert resolve_n_ctx(None, None) == (4096, None)  # training context unknown
    assert resolve_n_ctx(0, 32768) == (32768, None)
    assert resolve_n_ctx(0, None) == (0, None)  # llama.cpp decides
    assert resolve_n_ctx(1024, 2048) == (1024, None)
    assert resolve_n_ctx(2048, 2048) == (2048, None)
    n, warning = resolve_n_ctx(8192, 2048)
    assert n == 8192 and CTX_WARNING in warning and "2048" in warning and "-c 8192" in warning


def _context_of(code: int, err: str) -> int:
    """The context size llama.cpp created, read from the prompt-too-long line."""
    assert code == ExitCode.PROMPT, err
    line = one_line(err)
    return int(line.split("the context is ")[1].split()[0])


def test_run_default_context_is_capped_at_training_context(capsys, tiny_target):
    """The tiny model is trained on 2048 tokens: without -c, a 2100-token prompt meets a
    2048-token context (not 4096, and not silently more than the model knows)."""
    long_prompt = "the " * 2100
    code = run_cli(["run", "-m", str(tiny_target), "-t", "1", "-fa", "off", "-p", long_prompt])
    assert _context_of(code, capsys.readouterr().err) == 2048


def test_run_c_beyond_training_context_warns_once(capsys, tiny_target):
    code = run_cli(["run", "-m", str(tiny_target), "-t", "1", "-fa", "off", "-c", "2304",
                    "-p", "the " * 2400])  # fmt: skip
    err = capsys.readouterr().err
    assert code == ExitCode.PROMPT
    warnings = [ln for ln in err.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and CTX_WARNING in warnings[0] and "2048" in warnings[0]
    assert "the context is 2304" in err
    # negative control: within the training context, no warning; -q silences it
    code = run_cli(["run", "-m", str(tiny_target), "-t", "1", "-fa", "off", "-c", "256",
                    "-p", "the cat", "-n", "2", "--temp", "0"])  # fmt: skip
    assert code == 0 and CTX_WARNING not in capsys.readouterr().err
    code = run_cli(["run", "-m", str(tiny_target), "-t", "1", "-fa", "off", "-c", "2304",
                    "-p", "the cat", "-n", "2", "--temp", "0", "-q"])  # fmt: skip
    assert code == 0 and CTX_WARNING not in capsys.readouterr().err


def test_c_zero_is_the_training_context(capsys, tiny_target):
    code = run_cli(["run", "-m", str(tiny_target), "-t", "1", "-fa", "off", "-c", "0",
                    "-p", "the " * 2100])  # fmt: skip
    assert _context_of(code, capsys.readouterr().err) == 2048


@pytest.mark.parametrize(
    "train, args, expected",
    [(32768, [], 4096), (2048, [], 2048), (32768, ["-c", "0"], 32768), (2048, ["-c", "512"], 512)],
)
def test_check_uses_runs_default_context(tmp_path, capsys, train, args, expected):
    model = write_gguf(tmp_path / "m.gguf", context_length=train)
    assert run_cli(["check", "-m", str(model), "--json", *args]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n_ctx"] == expected and report["memory"]["n_ctx"] == expected

"""Output that cannot be written (a full disk: /dev/full) ends in one line and exit 9.

Real processes, because what matters is what the interpreter does with a stdout it cannot
flush (at exit too): no traceback, no "Exception ignored". A closed pipe is not an error of
this kind (exit 141, quietly): tests/test_interrupt.py covers it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specgguf.errors import ExitCode

ROOT = Path(__file__).resolve().parent.parent
FULL = Path("/dev/full")
FAST = ["-t", "1", "-c", "512", "-fa", "off", "--temp", "0"]

pytestmark = pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full")


def cli(argv: list, *, stdout=None, stdin: bytes | None = None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    with open(stdout or os.devnull, "wb") as out:
        res = subprocess.run(
            [sys.executable, "-m", "specgguf_cli.app", *map(str, argv)],
            input=stdin,
            stdout=out,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=env,
            timeout=120,
        )
    return res.returncode, res.stderr.decode("utf-8", "replace")


def assert_one_line(err: str, expected: str) -> None:
    assert "Traceback" not in err and "Exception ignored" not in err, err
    errors = [x for x in err.splitlines() if x.startswith("error")]
    assert errors == [expected], err


@pytest.fixture
def run_args(tiny_target, tiny_draft):
    return ["run", "-m", tiny_target, "-md", tiny_draft, *FAST, "-p", "Once upon", "-n", "24"]


def test_trace_on_a_full_disk(run_args, tmp_path):
    code, err = cli([*run_args, "--trace", FULL], stdout=tmp_path / "out.txt")
    assert code == ExitCode.OUTPUT == 9, err
    assert_one_line(err, "error: cannot write --trace /dev/full: No space left on device")
    # control: the same run with a writable trace succeeds
    code, err = cli([*run_args, "--trace", tmp_path / "t.jsonl"], stdout=tmp_path / "out.txt")
    assert code == 0, err
    assert (tmp_path / "t.jsonl").read_text() and (tmp_path / "out.txt").read_text()


@pytest.mark.parametrize("extra", [[], ["--json"], ["-q"]])
def test_stdout_on_a_full_disk(run_args, extra):
    code, err = cli([*run_args, *extra], stdout=FULL)
    assert code == ExitCode.OUTPUT, err
    assert_one_line(err, "error: cannot write stdout: No space left on device")


def test_jsonl_stdout_on_a_full_disk(tiny_target, tiny_draft):
    lines = b'{"prompt": "a", "n_predict": 4}\n{"prompt": "b", "n_predict": 4}\n'
    argv = ["run", "-m", tiny_target, "-md", tiny_draft, *FAST, "--jsonl"]
    code, err = cli(argv, stdout=FULL, stdin=lines)
    assert code == ExitCode.OUTPUT, err
    assert_one_line(err, "error: cannot write stdout: No space left on device")


def test_buffered_stdout_of_other_commands(tmp_path):
    """`migrate` prints little: it sits in stdout's buffer until the interpreter's last
    flush, which is where the full disk is found."""
    argv = ["migrate", "--", "llama-speculative", "-m", "t.gguf", "--draft", "5"]
    code, err = cli(argv, stdout=FULL)
    assert code == ExitCode.OUTPUT, err
    assert_one_line(err, "error: cannot write stdout: No space left on device")
    code, err = cli(argv, stdout=tmp_path / "out.txt")
    assert code == 0, err
    assert "--spec-draft-n-max 5" in (tmp_path / "out.txt").read_text()


def test_json_object_written_in_full_when_stdout_is_fine(run_args, tmp_path):
    code, err = cli([*run_args, "--json"], stdout=tmp_path / "out.json")
    assert code == 0, err
    assert json.loads((tmp_path / "out.json").read_text())["tokens_predicted"] > 0

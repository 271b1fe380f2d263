"""The llama.cpp flags that change how the real target loads or runs (`-m real`; needs
`specgguf pull`): --no-mmap, -lm, --mlock and -ub reach llama.cpp (its own log, with -v, says
so), -ot loads, and the greedy text stays the plain run's. --embeddings is refused in one
line (embeddings are not served: tests/test_flag_table.py checks the refusal)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specgguf.modelfiles.models import DRAFT, TARGET, is_present

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(
        not (is_present(TARGET) and is_present(DRAFT)), reason="run `specgguf pull` first"
    ),
]

ARGS = ["-p", "def fib(n):", "-n", "16", "--temp", "0", "--spec-type", "none", "-c", "512",
        "--json", "-v", "--no-chat"]  # fmt: skip


def _run(*flags: str) -> tuple[dict, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "specgguf_cli.app", "run", *ARGS, *flags],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout), proc.stderr


@pytest.fixture(scope="module")
def plain() -> tuple[dict, str]:
    return _run()


@pytest.mark.parametrize(("flags", "log_says"), [
    (("--no-mmap",), "load_mode = none"),
    (("-lm", "none"), "load_mode = none"),
    (("--mlock",), "load_mode = mmap+mlock"),
    (("-ub", "64"), "n_ubatch              = 64"),
])  # fmt: skip
def test_flag_reaches_llama_cpp_and_keeps_the_text(plain, flags, log_says) -> None:
    got, log = _run(*flags)
    assert log_says in log
    assert got["text"] == plain[0]["text"]


def test_override_tensor_loads_and_keeps_the_text(plain) -> None:
    """-ot reaches llama.cpp's loader (an unknown buffer type would stop it: the tiny-model
    test checks that) and the text stays the plain run's. Not asserted: that llama.cpp's
    buffer report changes; on this CPU build it listed CPU_Mapped and CPU_REPACK either way
    (open: whether a CPU override keeps tensors out of the repacked buffer here)."""
    got, _ = _run("-ot", r"blk\.=CPU")
    assert got["text"] == plain[0]["text"]

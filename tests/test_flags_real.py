"""The llama.cpp flags that change how the real target loads or runs (`-m real`; needs
`specgguf pull`): --no-mmap, -lm, --mlock and -ub reach llama.cpp (its own log, with -v, says
so), -ot loads, and the greedy text stays the plain run's; --embeddings serves the target's
vectors, in which related texts lie closer than unrelated ones."""

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


def test_embeddings_of_the_target(tmp_path) -> None:
    """`serve --embeddings --pooling mean` on the real pair: OpenAI's client reads the vectors
    (the target's width, unit length), and two texts about one thing are closer than a text
    about another."""
    import numpy as np

    from tests.serve_helpers import Server, openai_client

    server = Server(["-c", "512", "--spec-type", "none", "--embeddings", "--pooling", "mean"],
                    timeout=300)
    try:
        client = openai_client(server)
        texts = ["def add(a, b): return a + b", "def sum_two(x, y):\n    return x + y",
                 "The weather in Paris is mild in spring."]  # fmt: skip
        got = client.embeddings.create(model="target", input=texts)
        v = [np.array(d.embedding) for d in got.data]
        assert all(x.shape == (1536,) for x in v)  # Qwen2.5-Coder 1.5B's width
        assert all(abs(np.linalg.norm(x) - 1) < 1e-3 for x in v)
        assert float(v[0] @ v[1]) > float(v[0] @ v[2])
    finally:
        server.stop_cleanly()

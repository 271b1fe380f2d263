"""A light install (no llama-cpp-python): migrate and check work, run and bench say in one
line how to add the runtime. Simulated in a child process where `import llama_cpp` fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import sys
sys.modules["llama_cpp"] = None  # any `import llama_cpp` now raises ImportError
from specgguf_cli.app import run_cli
code = run_cli(sys.argv[1:])
assert "llama_cpp" not in sys.modules or sys.modules["llama_cpp"] is None
sys.exit(code)
"""


def without_runtime(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CHILD, *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_migrate_check_needs_no_runtime(tmp_path):
    old = tmp_path / "serve.sh"
    old.write_text("llama-server -m t.gguf --spec-type draft-simple --draft-max 16\n")
    r = without_runtime("migrate", "--check", str(old))
    assert r.returncode == 1 and "--draft-max" in r.stdout + r.stderr  # it found the flag
    new = tmp_path / "new.sh"
    new.write_text("llama-server -m t.gguf --spec-type draft-simple --spec-draft-n-max 16\n")
    assert without_runtime("migrate", "--check", str(new)).returncode == 0


def test_check_needs_no_runtime(tiny_target):
    r = without_runtime("check", "-m", str(tiny_target))
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr


def test_run_says_how_to_add_the_runtime(tiny_target):
    r = without_runtime("run", "-m", str(tiny_target), "-p", "hi", "-n", "2")
    assert r.returncode == 10
    assert r.stderr.strip().splitlines() == [
        "error: llama-cpp-python, the runtime of run and bench, is not installed: "
        "pip install 'specgguf[llama]' (or scripts/setup.sh, which builds it for this CPU)"
    ]

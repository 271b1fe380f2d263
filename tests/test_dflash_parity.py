"""draft-dflash and draft-dspark draft what llama.cpp's llama-speculative-simple drafts, round by
round, on synthetic drafters over SmolLM2 (scripts/dflash_parity.py).

CI does not build llama.cpp: the test runs only where SPECGGUF_LLAMA_BIN names the folder
holding a llama-speculative-simple built from the vendored source of the pinned
llama-cpp-python, and skips otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gguf_factory import SMOLLM, need_models

ROOT = Path(__file__).resolve().parent.parent
BIN = os.environ.get("SPECGGUF_LLAMA_BIN")


@pytest.mark.skipif(not BIN, reason="SPECGGUF_LLAMA_BIN (llama.cpp's tools) is not set")
@pytest.mark.parametrize(
    "flags", [[], ["--accepting"], ["--dspark"], ["--dspark", "--accepting", "--k", "7"]]
)
def test_every_round_drafts_what_llama_cpp_drafts(flags):
    need_models(SMOLLM)
    assert BIN is not None and (Path(BIN) / "llama-speculative-simple").is_file()
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts/dflash_parity.py"), "--target", str(SMOLLM),
         "--bin", BIN, "-n", "32", *flags],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "DIFFERENT" not in res.stdout and " rounds drafted the same tokens" in res.stdout

"""Fuzz the GGUF header reader: whatever the bytes, `read_gguf_info` returns a GGUFInfo or
raises a SpecggufError, quickly. Any other exception, or a slow case, is a bug.

Deterministic (derandomize, no example database) so CI sees the same 300 cases every run.
"""

from __future__ import annotations

import os
import struct
import tempfile
import time
from pathlib import Path

from gguf_factory import write_gguf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgguf.errors import ModelFileError, SpecggufError
from specgguf.modelfiles.gguf_info import GGUFInfo, read_gguf_info

TIME_LIMIT_S = 2.0
MAX_EXAMPLES = 300

_DIR = Path(tempfile.mkdtemp(prefix="specgguf-fuzz-"))
_BASE_PATH = write_gguf(
    _DIR / "base.gguf",
    chat_template="{% for m in messages %}{{ m.content }}{% endfor %}",
    tokenizer_model="gpt2",
    pre="qwen2",
    file_type=15,
)
BASE = _BASE_PATH.read_bytes()
HEADER_END = read_gguf_info(_BASE_PATH).data_offset

# values that stress length and count fields when they land on one
EXTREMES = [
    b"\xff" * 8,
    b"\x00" * 8,
    struct.pack("<Q", 1 << 63),
    struct.pack("<Q", 1 << 32),
    struct.pack("<Q", 1 << 62),
    struct.pack("<q", -1),
    struct.pack("<I", 9),  # ARRAY
    struct.pack("<I", 8),  # STRING
    struct.pack("<I", 13),  # one past the last value type
    struct.pack("<I", 99),
    struct.pack("<I", 5),  # n_dims > 4
    b"GGUF",
]


@st.composite
def mutated_files(draw) -> bytes:
    data = bytearray(BASE)
    for _ in range(draw(st.integers(0, 4))):
        # most mutations hit the metadata after the magic, where the parser makes decisions
        pos = draw(st.one_of(st.integers(4, HEADER_END - 1), st.integers(0, len(data) - 1)))
        patch = draw(st.one_of(st.sampled_from(EXTREMES), st.binary(min_size=1, max_size=8)))
        data[pos : pos + len(patch)] = patch
    if draw(st.booleans()):
        del data[draw(st.integers(0, len(data))) :]
    return bytes(data)


def _read_timed(path: Path) -> tuple[object, float]:
    start = time.monotonic()
    try:
        result: object = read_gguf_info(path)
    except SpecggufError as err:  # anything else propagates and fails the test
        result = err
    return result, time.monotonic() - start


def test_fuzz_mutated_and_truncated_files():
    stats = {"cases": 0, "ok": 0, "errors": 0, "max_s": 0.0}

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(mutated_files())
    def one_case(data: bytes) -> None:
        # a fresh file per case: truncating one file in place is slow on some filesystems
        path = _DIR / f"case{stats['cases']}.gguf"
        path.write_bytes(data)
        result, elapsed = _read_timed(path)
        stats["cases"] += 1
        stats["max_s"] = max(stats["max_s"], elapsed)
        assert elapsed < TIME_LIMIT_S, f"{elapsed:.2f} s on a {len(data)}-byte file"
        if isinstance(result, GGUFInfo):
            stats["ok"] += 1
        else:
            assert isinstance(result, ModelFileError)
            assert str(result).isprintable() and str(result).startswith(f"{path}: ")
            stats["errors"] += 1

    one_case()
    print(
        f"\ngguf fuzz: {stats['cases']} cases, {stats['ok']} read, {stats['errors']} rejected, "
        f"slowest {stats['max_s'] * 1000:.1f} ms"
    )
    assert stats["cases"] >= MAX_EXAMPLES * 0.9


def test_every_truncation_point():
    """Exhaustive over the prefix lengths of the base file: a cut before the end of the
    tensor data is always a ModelFileError; a cut in the trailing padding still reads."""
    info = read_gguf_info(_BASE_PATH)
    data_end = info.data_offset + info.tensor_bytes  # the tensors are packed: F32, aligned
    for cut in range(len(BASE)):
        path = _DIR / f"cut{cut}.gguf"
        path.write_bytes(BASE[:cut])
        result, elapsed = _read_timed(path)
        assert elapsed < TIME_LIMIT_S
        if cut < data_end:
            assert isinstance(result, ModelFileError), cut
        else:
            assert isinstance(result, GGUFInfo | ModelFileError), cut


def teardown_module() -> None:
    for p in _DIR.iterdir():
        p.unlink()
    os.rmdir(_DIR)

"""scripts/bench_overhead.py: the warm measurement's buffer holds every row a round can ask."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench_overhead  # noqa: E402


def test_the_warm_rows_buffer_is_as_wide_as_the_longest_draft():
    """An n-gram drafter's own length, not n_max, bounds what it proposes (a fixed length's
    rounds and auto's alike): the buffer must hold that many rows plus the round's own."""
    suffix, draft = SimpleNamespace(max_draft=32), SimpleNamespace(max_draft=4)
    assert bench_overhead.warm_width(4, None, [draft, suffix]) == 33
    assert bench_overhead.warm_width(4, None, [draft]) == 5
    assert bench_overhead.warm_width(8, SimpleNamespace(width=64), [suffix]) == 65
    assert bench_overhead.warm_width(0, None, []) == 1

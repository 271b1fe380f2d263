"""specgguf.binding.exact_rows: which verify widths give a 1-token pass's rows. The decision
on made-up rows, and the measurement on a tiny model (F32 weights: every width agrees)."""

from __future__ import annotations

import numpy as np
import pytest

from specgguf.binding import engine, exact_rows

RNG = np.random.default_rng(3)
SINGLE = [RNG.normal(size=64).astype(np.float32) for _ in range(8)]


def passes(bad_from: int, shift: float) -> dict[int, np.ndarray]:
    """Wide passes whose rows equal the single ones up to width bad_from - 1, then moved."""
    out = {}
    for w in exact_rows.PROBE_WIDTHS:
        rows = np.stack(SINGLE[:w]).copy()
        if w >= bad_from:
            rows[w - 1, int(np.argmax(rows[w - 1]))] += shift
        out[w] = rows
    return out


@pytest.mark.parametrize(
    ("bad_from", "shift", "expected"),
    [
        (4, 0.2, 3),  # a blocked kernel from four rows on (the Q4 target on AVX2)
        (2, 0.2, 1),  # no width agrees: no speculation while figures are reported
        (99, 0.0, None),  # every width agrees: no cap
        (4, 0.002, None),  # an F16-like rounding is within the tolerance
    ],
)
def test_widest_agreeing_width(bad_from, shift, expected):
    got = exact_rows.widest_agreeing(SINGLE, passes(bad_from, shift), exact_rows.PROBE_WIDTHS)
    assert got == expected


def test_rows_agree_reads_the_top_tokens_log_probabilities():
    row = SINGLE[0]
    assert exact_rows.rows_agree(row, row)
    assert exact_rows.rows_agree(row + 5.0, row)  # a constant shift: same probabilities
    moved = row.copy()
    moved[int(np.argmax(row))] += 0.05
    assert not exact_rows.rows_agree(moved, row)


def test_measured_once_per_model_and_settings(tiny_target):
    model = engine.Model(tiny_target)
    try:
        params = engine.ContextParams(n_ctx=128, n_threads=1)
        assert exact_rows.max_rows(model, params) is None  # F32 rows agree at every width
        assert exact_rows._measured[model]  # remembered: the next generation asks for free
    finally:
        model.close()

"""How many rows a verify pass may hold while each row stays what a 1-token pass computes:
what exact log-probabilities under speculation need (logprobs, n_probs).

Plain decoding evaluates one token per pass. A verify pass evaluates several, and a llama.cpp
build may pick another kernel for a wider pass: on CPUs with repacked K-quant weights, passes
of four rows or more run a blocked matrix product whose float accumulation differs from the
one-row kernel's, and a token's log-probability then moves by up to ~0.15 (measured on the
pulled Q4 target), while passes of two or three rows give bit-identical rows. An F16 target
differs by ~0.002 at every width. So a generation that must report its figures is verified in
passes no wider than this measurement allows: it still speculates, and every figure it reports
is the one a plain step at that position computes.

Measured once per model and context settings, on a small side context (the slots' caches are
not touched), the first time a generation asks for figures: eight 1-token passes, then one
pass per probed width up to the first whose rows differ (about a second for the Q4 target on
two CPU cores, two for the F16 one).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from specgguf.binding import engine

#: the pass widths probed, narrowest first (the draft model's cap is 8: wider passes are
#: n-gram drafts, whose kernels past 8 rows are the blocked ones already seen at 8)
PROBE_WIDTHS = (2, 3, 4, 6, 8)
#: a row agrees with the 1-token pass's when every log-probability among its top tokens is
#: within this many nats (bit-identical rows give 0; an F16 target's rounding ~0.002)
TOLERANCE = 0.01
TOP_TOKENS = 20
#: tokens decoded before the probed ones (attention over a prefix, as in any verify pass)
PREFIX = 2
_PROBE_TEXT = "The quick brown fox jumps over the lazy dog, and then it runs back home again. "

_measured: weakref.WeakKeyDictionary[engine.Model, dict[tuple, int | None]] = (
    weakref.WeakKeyDictionary()
)


def log_softmax(row: np.ndarray) -> np.ndarray:
    x = row.astype(np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def rows_agree(wide: np.ndarray, single: np.ndarray, tolerance: float = TOLERANCE) -> bool:
    """Whether a row of a wide pass gives the 1-token pass's log-probabilities on the latter's
    top tokens (the ones any report lists) within `tolerance`."""
    if np.array_equal(wide, single):
        return True
    ref = log_softmax(single)
    top = np.argpartition(-ref, min(TOP_TOKENS, ref.shape[0] - 1))[:TOP_TOKENS]
    return bool(np.max(np.abs(log_softmax(wide)[top] - ref[top])) <= tolerance)


def pass_agrees(rows: np.ndarray, single: Sequence[np.ndarray]) -> bool:
    """Whether every row of one wide pass agrees with the 1-token row at its position."""
    return all(rows_agree(row, single[i]) for i, row in enumerate(rows))


def widest_agreeing(
    single: Sequence[np.ndarray], wide: dict[int, np.ndarray], widths: Sequence[int]
) -> int | None:
    """The widest of `widths` (ascending) up to which every probed width's rows agree with
    the 1-token rows (`wide[w]`: the w rows of a pass of width w); None: all agree, no cap;
    1 when even the narrowest disagrees."""
    ok = 1
    for w in widths:
        rows = wide.get(w)
        if rows is None or not pass_agrees(rows, single):
            return ok
        ok = w
    return None


def max_rows(model: engine.Model, params: engine.ContextParams) -> int | None:
    """The widest verify pass whose rows are the 1-token passes' on `model` under `params`
    (threads, flash attention, KV types), measured once and remembered for the model; None:
    every probed width agrees (no cap)."""
    overrides = repr(params.overrides)
    key = (params.n_threads, params.flash_attn, params.type_k, params.type_v, overrides)
    known = _measured.setdefault(model, {})
    if key not in known:
        known[key] = _measure(model, params)
    return known[key]


def _measure(model: engine.Model, params: engine.ContextParams) -> int | None:
    widest = PROBE_WIDTHS[-1]
    tokens = model.tokenize(_PROBE_TEXT * 4, add_special=False, parse_special=False)
    tokens = [t for t in tokens if 0 <= t < model.n_vocab][: PREFIX + widest]
    if len(tokens) < PREFIX + widest:
        return None  # a vocabulary that cannot spell the probe: nothing measured, no cap
    side_params = replace(params, n_ctx=64, n_batch=64, n_ubatch=64, n_seq_max=1)
    ctx = engine.Context(model, side_params)
    try:
        ctx.decode(tokens[:PREFIX], 0, outputs="none")
        single: list[np.ndarray] = []
        for pos in range(PREFIX, PREFIX + widest):  # plain decoding's rows
            row = ctx.decode([tokens[pos]], pos, outputs="last")
            assert row is not None
            single.append(row[0].copy())
        wide: dict[int, np.ndarray] = {}
        for w in PROBE_WIDTHS:  # each pass evaluated after the same prefix
            if not ctx.remove_from(PREFIX):  # a recurrent memory: from the start again
                ctx.clear()
                ctx.decode(tokens[:PREFIX], 0, outputs="none")
            rows = ctx.decode(tokens[PREFIX : PREFIX + w], PREFIX, outputs="all")
            assert rows is not None
            wide[w] = rows.copy()
            if not pass_agrees(wide[w], single):
                break  # wider passes are not probed past the first that disagrees
        return widest_agreeing(single, wide, PROBE_WIDTHS)
    finally:
        ctx.close()

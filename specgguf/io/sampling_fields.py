"""The sampling, length and seed settings a user can give, and the values each accepts.

One table for the three ways in: a flag of `run`/`bench`/`serve` (--temp, -s, ...), a field of
a `--jsonl` line, a field of a server request. They must agree: a seed the server refuses must
not run, silently wrapped, from the command line (the sampler's seed is llama.cpp's uint32, and
-1 means a random one), and a temperature of inf or nan is not a temperature anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SEED_LIMIT = 1 << 32  # llama.cpp's seed is a uint32; -1 means random
N_PREDICT_LIMIT = 2**31 - 1  # llama.cpp's n_predict is an int32; -1: until EOS or context end


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    """A finite int or float (JSON's NaN and Infinity extensions, and --temp inf, are not),
    and an int only as large as a float holds: JSON integers have no size limit, and one
    past 1.8e308 (`1e400` written out) would overflow where it is turned into a float."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an int too large for a float
        return False


def _probability(v: Any) -> bool:
    return is_number(v) and 0 <= v <= 1


@dataclass(frozen=True)
class Field:
    key: str  # the name in a request and a --jsonl line
    flag: str  # the command-line flag
    ok: Callable[[Any], bool]
    what: str  # what `ok` accepts, for messages: "a number >= 0"


FIELDS: dict[str, Field] = {
    f.key: f
    for f in (
        Field(
            "n_predict",
            "-n/--n-predict",
            lambda v: is_int(v) and -1 <= v <= N_PREDICT_LIMIT,
            f"an integer in -1..{N_PREDICT_LIMIT}",
        ),
        Field("temperature", "--temp", lambda v: is_number(v) and v >= 0, "a number >= 0"),
        Field("top_k", "--top-k", is_int, "an integer"),
        Field("top_p", "--top-p", _probability, "a number in [0, 1]"),
        Field("min_p", "--min-p", _probability, "a number in [0, 1]"),
        Field(
            "seed",
            "-s/--seed",
            lambda v: is_int(v) and -1 <= v < SEED_LIMIT,
            f"an integer in -1..{SEED_LIMIT - 1}",
        ),
    )
}


def flag_error(key: str, value: Any) -> str | None:
    """The rest of "invalid value for ..." when the flag of `key` got a value it does not
    accept ("--temp: inf (must be a number >= 0)"), else None."""
    f = FIELDS[key]
    return None if f.ok(value) else f"{f.flag}: {value} (must be {f.what})"

"""GBNF for the JSON numbers between two bounds: a schema's minimum, maximum, exclusiveMinimum
and exclusiveMaximum, enforced by the grammar rather than hoped for.

Pure: strings in, GBNF text out (an expression, to be put inside a rule).

Integers. The decimal numerals of the naturals in [lo, hi] are split by length (a numeral has
no leading zero, so every length is a contiguous block of values), and the numerals of one
length between two numerals x <= y are described digit by digit: where x and y share their
first digit, that digit is fixed and the rest of the two are described the same way; where
they differ (a < b), the block is

- a, then any tail from x's own tail up to 99...9,
- a digit strictly between a and b, then any tail,
- b, then any tail from 00...0 up to y's own tail,

the first or the last part folding into the middle one when x's tail is all zeros (or y's all
nines). Only the two edges recurse, so a bound of n digits gives O(n) alternatives of O(n)
items each. A negative integer is "-" and the numeral of its magnitude; "-0" is not written.

Numbers (type number) with bounds that are whole numbers: an integer part I as above and a
fraction F, no exponent. For magnitudes m = I.F, m >= a holds exactly when I >= a; m > a when
I > a, or I = a and F has a non-zero digit; m <= b when I < b, or I = b and F is all zeros
(or absent); m < b when I < b. Negative numbers are "-" with a magnitude in the mirrored
range. Fractional bounds are the caller's to refuse.
"""

from __future__ import annotations

from dataclasses import dataclass

#: how many digits an integer has at most where no bound limits it (llama.cpp's converter
#: writes up to 16)
FREE_DIGITS = 16
#: the most digits a bound may have (larger ones are refused by the caller, or dropped where
#: they limit nothing the grammar could write)
MAX_BOUND_DIGITS = 40
#: a fraction's digits at most (as the converter's decimal part)
FRACTION_DIGITS = 16


class EmptyRange(ValueError):
    """No number lies between the bounds."""


def _digits(lo: int, hi: int) -> str:
    if lo == hi:
        return f'"{lo}"'
    if lo == 0 and hi == 9:
        return "[0-9]"
    return f"[{lo}-{hi}]"


def _any(n: int) -> list[str]:
    """n digits, any."""
    return [] if n == 0 else ["[0-9]"] if n == 1 else [f"[0-9]{{{n}}}"]


def _between(x: str, y: str) -> list[list[str]]:
    """The alternatives (each a sequence of GBNF items) for the digit strings of len(x) from
    x to y, x <= y, both of the same length."""
    if x == y:
        return [[f'"{x}"']] if x else [[]]
    a, b = int(x[0]), int(y[0])
    tx, ty = x[1:], y[1:]
    if a == b:
        return [[f'"{x[0]}"', *alt] for alt in _between(tx, ty)]
    n = len(tx)
    low_whole = tx == "0" * n  # a takes every tail
    high_whole = ty == "9" * n  # b takes every tail
    out: list[list[str]] = []
    if not low_whole:
        out += [[f'"{a}"', *alt] for alt in _between(tx, "9" * n)]
    first, last = (a if low_whole else a + 1), (b if high_whole else b - 1)
    if first <= last:
        out.append([_digits(first, last), *_any(n)])
    if not high_whole:
        out += [[f'"{b}"', *alt] for alt in _between("0" * n, ty)]
    return out


def naturals(lo: int, hi: int | None) -> list[str]:
    """GBNF alternatives for the numerals (no leading zero) of the integers in [lo, hi],
    0 <= lo; hi None: no upper bound (up to FREE_DIGITS digits, or lo's length)."""
    if lo < 0 or (hi is not None and hi < lo):
        raise EmptyRange(f"no integer is in [{lo}, {hi}]")
    short = len(str(lo))
    top = len(str(hi)) if hi is not None else max(FREE_DIGITS, short)
    alts: list[list[str]] = []
    for length in range(short, top + 1):
        start = max(lo, 10 ** (length - 1) if length > 1 else 0)
        if hi is None and length > short:
            # every longer length is whole: one alternative for all of them
            alts.append(["[1-9]", f"[0-9]{{{length - 1},{top - 1}}}"])
            break
        end = 10**length - 1 if hi is None else min(hi, 10**length - 1)
        if start <= end:
            alts += _between(str(start), str(end))
    return [" ".join(alt) for alt in alts]


def _group(alts: list[str]) -> str:
    return alts[0] if len(alts) == 1 and " " not in alts[0] else "(" + " | ".join(alts) + ")"


def integer_range(lo: int | None, hi: int | None) -> str:
    """A GBNF expression for the JSON integers in [lo, hi] (None: unbounded on that side).
    EmptyRange when there is none."""
    alts = []
    if lo is None or lo < 0:  # the negatives: "-" and a magnitude in [max(1, -hi), -lo]
        kmin = 1 if hi is None or hi >= 0 else -hi
        kmax = None if lo is None else -lo
        if kmax is None or kmin <= kmax:
            alts.append('"-" ' + _group(naturals(kmin, kmax)))
    if hi is None or hi >= 0:
        nmin = 0 if lo is None or lo < 0 else lo
        if hi is None or nmin <= hi:
            alts.append(_group(naturals(nmin, hi)))
    if not alts:
        raise EmptyRange(f"no integer is in [{lo}, {hi}]")
    return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"


@dataclass(frozen=True)
class Bound:
    """One side of a number range: a whole value, and whether the value itself is excluded."""

    value: int
    exclusive: bool = False


_ANY_FRACTION = f'("." [0-9]{{1,{FRACTION_DIGITS}}})?'
_ZERO_FRACTION = f'("." "0"{{1,{FRACTION_DIGITS}}})?'
_NONZERO_FRACTION = f'"." "0"{{0,{FRACTION_DIGITS - 1}}} [1-9] [0-9]{{0,{FRACTION_DIGITS - 1}}}'


def _magnitudes(a: int, a_excl: bool, b: int | None, b_excl: bool) -> list[str]:
    """Alternatives for the unsigned decimals m = I.F with a <= m (a < m when a_excl) and
    m <= b (m < b when b_excl; b None: no upper bound), 0 <= a."""
    alts = []
    lo_any = a + 1 if a_excl else a  # I from here ...
    hi_any = None if b is None else b - 1  # ... to here takes any fraction
    if hi_any is None or lo_any <= hi_any:
        alts.append(_group(naturals(lo_any, hi_any)) + " " + _ANY_FRACTION)
    if a_excl and (b is None or a < b):
        alts.append(f'"{a}" {_NONZERO_FRACTION}')
    if b is not None and not b_excl and (b > a or (b == a and not a_excl)):
        alts.append(f'"{b}" {_ZERO_FRACTION}')
    return alts


def number_range(lo: Bound | None, hi: Bound | None) -> str:
    """A GBNF expression for the JSON numbers (no exponent) between `lo` and `hi` (None:
    unbounded on that side). EmptyRange when there is none."""
    alts = []
    if hi is None or hi.value > 0 or (hi.value == 0 and not hi.exclusive):  # 0 <= x
        a, a_excl = (0, False) if lo is None or lo.value < 0 else (lo.value, lo.exclusive)
        b, b_excl = (None, False) if hi is None else (hi.value, hi.exclusive)
        alts += _magnitudes(a, a_excl, b, b_excl)
    if lo is None or lo.value < 0:  # x < 0: "-" and a magnitude > 0
        b, b_excl = (None, False) if lo is None else (-lo.value, lo.exclusive)
        a, a_excl = (0, True) if hi is None or hi.value >= 0 else (-hi.value, hi.exclusive)
        mags = _magnitudes(a, a_excl, b, b_excl)
        if mags:
            alts.append('"-" ' + ("(" + " | ".join(mags) + ")" if len(mags) > 1 else mags[0]))
    if not alts:
        raise EmptyRange("no number is between the bounds")
    return "(" + " | ".join(alts) + ")"

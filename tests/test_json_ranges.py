"""specgguf.grammars.json_ranges: the GBNF of a schema's numeric bounds accepts exactly the
numbers within them. Property tests twice over: on a small pure reading of the GBNF it writes
(literals, classes, groups, alternatives, repetitions, as a Python regex), for many ranges and
values; and on libllama's own grammar engine (the Constraint every generation uses), fed
character by character, for fewer."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgguf.grammars.json_ranges import (
    FREE_DIGITS,
    Bound,
    EmptyRange,
    integer_range,
    naturals,
    number_range,
)

_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"|(\[[^\]]*\])|(\{\d*(?:,\d*)?\})|([()|?*+])|(\s+)')


def as_regex(gbnf: str) -> re.Pattern:
    """The GBNF subset json_ranges writes, read as a Python regex (fails on anything else)."""
    out, i = [], 0
    while i < len(gbnf):
        m = _TOKEN.match(gbnf, i)
        assert m, f"not in the subset: {gbnf[i:]!r}"
        literal, cls, rep, op, _ = m.groups()
        if literal is not None:
            assert "\\" not in literal
            out.append("(?:" + re.escape(literal) + ")")
        elif cls:
            out.append(cls)
        elif rep:
            out.append(rep)
        elif op:
            out.append("(?:" if op == "(" else op)
        i = m.end()
    return re.compile("".join(out))


bounds = st.one_of(st.none(), st.integers(-(10**20), 10**20), st.integers(-300, 300))


def near(lo, hi):
    """Values around both bounds and zero, and some anywhere."""
    marks = [b for b in (lo, hi) if b is not None] + [0, 10**FREE_DIGITS - 1]
    return sorted({m + d for m in marks for d in (-11, -10, -2, -1, 0, 1, 2, 9, 10, 11)})


def _unwritten(v: int, lo: int | None, hi: int | None) -> bool:
    """Whether `v` is longer than the unbounded side it is on writes, by design: at most
    FREE_DIGITS digits, or as many as the bound on the other side of it."""
    far, other = (hi, lo) if v >= 0 else (lo, hi)
    if far is not None:
        return False
    own = abs(other) if other is not None and (other > 0) == (v >= 0) else 0
    return len(str(abs(v))) > max(FREE_DIGITS, len(str(own)))


@settings(max_examples=400, deadline=None)
@given(bounds, bounds, st.lists(st.integers(-(10**21), 10**21), max_size=20))
def test_integer_range_accepts_exactly_the_integers_within(lo, hi, extra):
    if lo is not None and hi is not None and lo > hi:
        with pytest.raises(EmptyRange):
            integer_range(lo, hi)
        return
    r = as_regex(integer_range(lo, hi))
    for v in near(lo, hi) + extra:
        if _unwritten(v, lo, hi):
            continue
        inside = (lo is None or v >= lo) and (hi is None or v <= hi)
        assert bool(r.fullmatch(str(v))) == inside, (lo, hi, v)
    for junk in ("-0", "00", "01", "-01", "+1", "", "-", "1.0", "1e2"):
        assert not r.fullmatch(junk), (lo, hi, junk)


def test_every_small_range_exhaustively():
    for lo in range(-120, 121, 3):
        for hi in range(lo, 1100, 37):
            r = as_regex(integer_range(lo, hi))
            got = {v for v in range(-1500, 1500) if r.fullmatch(str(v))}
            assert got == set(range(lo, hi + 1)), (lo, hi)


def test_the_size_grows_with_the_digits_not_the_range():
    wide = integer_range(-(10**39) + 7, 10**39 - 3)
    assert len(wide) < 20_000
    assert len(naturals(123456789, 987654321)) <= 2 * 9 * 2


whole = st.one_of(st.none(), st.builds(Bound, st.integers(-40, 40), st.booleans()))
decimals = st.builds(
    lambda sign, i, f: f"{sign}{i}" + (f".{f}" if f else ""),
    st.sampled_from(["", "-"]),
    st.integers(0, 60),
    st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=6)),
)


def _inside(v: Fraction, lo: Bound | None, hi: Bound | None) -> bool:
    return (lo is None or (v > lo.value if lo.exclusive else v >= lo.value)) and (
        hi is None or (v < hi.value if hi.exclusive else v <= hi.value)
    )


@settings(max_examples=400, deadline=None)
@given(whole, whole, st.lists(decimals, min_size=20, max_size=40))
def test_number_range_accepts_exactly_the_decimals_within(lo, hi, values):
    try:
        r = as_regex(number_range(lo, hi))
    except EmptyRange:
        # empty only when no decimal fits
        assert lo is not None and hi is not None
        mid = Fraction(lo.value + hi.value, 2)
        assert not _inside(mid, lo, hi) and lo.value >= hi.value
        return
    marks = [b.value for b in (lo, hi) if b is not None]
    values += [f"{m}{f}" for m in marks for f in ("", ".0", ".00", ".5", ".001")]
    values += [f"{m + d}" for m in marks for d in (-1, 1)]
    for s in values:
        if s.startswith("-0") and Fraction(s) == 0 or re.match(r"-?0\d", s):
            continue  # "-0" and leading zeros are not JSON the grammar writes
        assert bool(r.fullmatch(s)) == _inside(Fraction(s), lo, hi), (lo, hi, s)


# -- the same, through libllama's grammar engine ----------------------------------------------


@pytest.fixture(scope="module")
def model(tiny_target):
    from specgguf.binding import engine

    return engine.Model(tiny_target)


def engine_accepts(model, gbnf: str, text: str) -> bool:
    """Whether libllama's grammar takes `text` whole (character by character, each one's
    tokens) and then allows the end of generation."""
    import numpy as np

    from specgguf.binding.grammar import compile_grammar

    c = compile_grammar(model, gbnf, "test")
    for ch in text:  # a character outside the vocabulary's single tokens: its byte tokens
        for tok in model.tokenize(ch, add_special=False, parse_special=False):
            if not c.allowed(np.array([tok]))[0]:
                return False
            c.accept(tok)
    return bool(c.allowed(np.array([model.eos]))[0])


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.integers(-1000, 1000), st.integers(0, 2000), st.lists(st.integers(-3000, 3000), max_size=6)
)
def test_libllama_accepts_exactly_the_integers_within(model, lo, width, extra):
    hi = lo + width
    gbnf = f"root ::= {integer_range(lo, hi)}"
    for v in {lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, *extra}:
        assert engine_accepts(model, gbnf, str(v)) == (lo <= v <= hi), (lo, hi, v)
    assert not engine_accepts(model, gbnf, "-0" if lo <= 0 <= hi else "00")


def test_libllama_accepts_exactly_the_decimals_within(model):
    gbnf = f"root ::= {number_range(Bound(0, exclusive=True), Bound(5))}"
    for s, ok in (
        ("0", False),
        ("0.0", False),
        ("0.01", True),
        ("3", True),
        ("4.999", True),
        ("5", True),
        ("5.000", True),
        ("5.001", False),
        ("-1", False),
        ("12", False),
    ):
        assert engine_accepts(model, gbnf, s) == ok, s

"""A drafter type is one row of specgguf.drafters.registry: the n-gram options, the params
union, bench's size_m axis and each drafter's name and free-ness all derive from the rows."""

from __future__ import annotations

import typing
from dataclasses import fields

import pytest

from specgguf.bench import with_size_m
from specgguf.drafters.ngram_options import SIZE_M_TYPES, NgramOptions, options_field
from specgguf.drafters.registry import REGISTRY, SPEC_TYPES, NgramParams, ngram_drafter

NGRAM_ROWS = [row for row in REGISTRY if row.params is not None]


def test_ngram_options_has_one_field_per_ngram_row() -> None:
    got = {f.name: f.type for f in fields(NgramOptions)}
    assert got == {options_field(row.name): row.params for row in NGRAM_ROWS}
    opts = NgramOptions()
    for row in NGRAM_ROWS:
        assert opts.for_type(row.name) == row.params()


def test_params_union_is_the_rows_classes() -> None:
    assert set(typing.get_args(NgramParams)) == {row.params for row in NGRAM_ROWS}


@pytest.mark.parametrize("row", NGRAM_ROWS, ids=lambda r: r.name)
def test_drafter_takes_name_and_freeness_from_its_row(row) -> None:
    d = ngram_drafter(row.name)
    assert (d.name, d.free) == (row.name, row.free)
    # the class does not restate them: the row is the one place
    assert "name" not in type(d).__dict__ and "free" not in type(d).__dict__


def test_size_m_sweep_reaches_every_size_m_type() -> None:
    swept = with_size_m(None, 7)
    for spec_type in SPEC_TYPES:
        if SPEC_TYPES[spec_type].params is None:
            continue
        params = swept.for_type(spec_type)
        if spec_type in SIZE_M_TYPES:
            assert params.size_m == 7
        else:
            assert params == SPEC_TYPES[spec_type].params()
    assert set(SIZE_M_TYPES) == {"ngram-simple", "ngram-map-k", "ngram-map-k4v"}

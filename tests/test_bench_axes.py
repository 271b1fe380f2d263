"""Bench's configuration axes are rows (specgguf.bench.axes): each one's flag is a bench
option, and a configuration's label, `run` flags and spec options all come from the rows."""

from __future__ import annotations

import pytest
import typer.main
from specgguf_cli.app import _register, app

from specgguf.backend.session import SpecOptions
from specgguf.bench import AXES, BenchConfig, gen_params, parse_size_m_list
from specgguf.errors import UsageError


def test_every_axis_flag_is_a_bench_option() -> None:
    _register()
    bench = typer.main.get_command(app).commands["bench"]
    names = {opt for p in bench.params for opt in p.opts}
    assert {axis.flag for axis in AXES} <= names


def test_a_config_on_two_axes_shows_both_in_label_flags_and_spec() -> None:
    cfg = BenchConfig(("ngram-simple", "draft-simple"), 4, size_m=16)
    assert cfg.label == "ngram-simple,draft-simple m=16 n_max=4"
    assert cfg.run_flags() == [
        "--spec-type", "ngram-simple,draft-simple",
        "--spec-ngram-simple-size-m", "16", "--spec-draft-n-max", "4",
    ]  # fmt: skip
    spec = gen_params(
        cfg, SpecOptions(), n_predict=8, sampler=None, seed=1, ignore_eos=False
    ).plan.spec
    assert (spec.n_max, spec.adaptive, spec.ngram.simple.size_m) == (4, False, 16)
    auto = gen_params(
        BenchConfig(("ngram-simple",), None), SpecOptions(), n_predict=8, sampler=None, seed=1,
        ignore_eos=False,
    ).plan.spec  # fmt: skip
    assert auto.adaptive and auto.ngram is None


def test_size_m_values_are_checked_against_the_flag_range() -> None:
    assert parse_size_m_list("8, 16") == [8, 16]
    with pytest.raises(UsageError, match=r"--sweep-size-m: 'zero' \(expected 1..1024\)"):
        parse_size_m_list("8,zero")

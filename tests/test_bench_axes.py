"""Bench's configuration axes are rows (specgguf.bench.axes): each one's flag is a bench
option, and a configuration's label, `run` flags and spec options all come from the rows."""

from __future__ import annotations

import pytest
import typer.main
from specgguf_cli.app import _register, app

from specgguf.bench import (
    AXES,
    BenchConfig,
    gen_params,
    parse_configs,
    parse_size_m_list,
    parse_tree_list,
    tree_room,
)
from specgguf.core.tree import AUTO_TREE, CHAIN, UNSET, TreeShape
from specgguf.errors import UsageError
from specgguf.loading.session import SpecOptions


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


def test_tree_shapes_sweep_the_draft_model_rows_only() -> None:
    assert parse_tree_list("1,2,3x10,3x10") == [(1, 0), (2, 0), (3, 10)]
    for bad in ("0", "11", "2x65", "x", "2xq", ""):
        with pytest.raises(UsageError, match="--sweep-tree"):
            parse_tree_list(bad)
    configs = parse_configs(
        ["draft-simple;ngram-simple;default"], [4], have_draft_model=True,
        tree_values=[(1, 0), (3, 10)],
    )  # fmt: skip
    labels = [c.label for c in configs]
    assert "draft-simple n_max=4 chain" in labels and "draft-simple n_max=4 tree=3x10" in labels
    assert "ngram-simple" in labels  # n-gram rows and the default run once
    tree_cfg = next(c for c in configs if c.tree == (3, 10))
    assert tree_cfg.run_flags()[-4:] == ["--spec-tree-topk", "3", "--spec-tree-nodes", "10"]
    spec = gen_params(
        tree_cfg, SpecOptions(), n_predict=8, sampler=None, seed=1, ignore_eos=False
    ).plan.spec
    assert spec.tree_shape == TreeShape(3, 10, CHAIN.p_split)


def test_the_session_holds_the_widest_tree_of_every_row() -> None:
    configs = parse_configs(["draft-simple;default"], [4], have_draft_model=True,
                            tree_values=[(2, 0), (4, 12)])  # fmt: skip
    room = tree_room(configs, UNSET)
    # (4, 12) at depth 4 is 12 nodes; the default row (auto) may try AUTO_TREE at depth 8
    assert room == TreeShape(4, max(12, AUTO_TREE.node_cap(8)))
    chains = parse_configs(["draft-simple"], [4], have_draft_model=True)
    assert tree_room(chains, CHAIN) is None

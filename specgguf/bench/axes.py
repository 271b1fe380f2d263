"""Bench's configuration axes, one row each: the BenchConfig field it varies, bench's flag
that sweeps it, how a row's label and its `specgguf run` flags show a value, and where the
value goes in the run's spec options (the plan field). A new sweep is one row here, its
field on BenchConfig (specgguf.bench.configs) and its flag in cli/bench_cmd.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from specgguf.core.tree import NODES_MAX, TOPK_MAX, TreeShape
from specgguf.drafters.draft_lengths import AUTO_N_MAX_CAP, N_MAX_LIMIT, in_range
from specgguf.drafters.ngram_options import NGRAM_FLAGS, SIZE_M_TYPES
from specgguf.errors import UsageError


@dataclass(frozen=True)
class Axis:
    """One way configurations differ besides their spec types."""

    #: the BenchConfig field holding this axis' value
    field: str
    #: bench's flag that lists the values to sweep
    flag: str
    #: (a configuration) -> whether its label and run flags show this axis
    shown: Callable[[Any], bool]
    #: (a value) -> its part of the row's label
    label: Callable[[Any], str]
    #: (a configuration, its value) -> the `specgguf run` flags that set it
    run_flags: Callable[[Any, Any], list[str]]
    #: (the run's SpecOptions, the value) -> the SpecOptions that run with it
    into_spec: Callable[[Any, Any], Any]
    #: (the flag's text, the flag's name for errors) -> the values
    parse: Callable[[str, str], list[Any]]


def parse_n_max_list(value: str, what: str = "--spec-draft-n-max") -> list[int | None]:
    """ "3", "2,3,auto", "1..8" -> [3], [2, 3, None], [1, ..., 8] (None: auto)."""
    out: list[int | None] = []
    for raw in value.split(","):
        item = raw.strip().lower()
        if not item:
            continue
        if item == "auto":
            out.append(None)
            continue
        try:
            if ".." in item:
                a, b = (int(x) for x in item.split("..", 1))
                if a > b:
                    raise ValueError
                out.extend(range(a, b + 1))
            else:
                out.append(int(item))
        except ValueError:
            raise UsageError(
                f"invalid value for {what}: {raw.strip()!r} (expected N, A..B or auto)"
            ) from None
    for n in out:
        if n is not None and not in_range(n):
            raise UsageError(f"invalid value for {what}: {n} (must be 0..{N_MAX_LIMIT})")
    if not out:
        raise UsageError(f"invalid value for {what}: {value!r} (empty)")
    return list(dict.fromkeys(out))


def parse_size_m_list(value: str, what: str = "--sweep-size-m") -> list[int]:
    """ "8,16,32" -> [8, 16, 32], each within the range of the n-gram types' size_m flags."""
    info = next(row.info for row in NGRAM_FLAGS if row.field == "size_m")
    out = []
    for raw in value.split(","):
        try:
            m = int(raw.strip())
        except ValueError:
            m = 0
        if not info.min <= m <= info.max:
            raise UsageError(
                f"invalid value for {what}: {raw.strip()!r} (expected {info.min}..{info.max})"
            )
        out.append(m)
    return out


def parse_tree_list(value: str, what: str = "--sweep-tree") -> list[tuple[int, int]]:
    """ "1,2,3x10" -> [(1, 0), (2, 0), (3, 10)]: tree shapes as (topk, nodes), nodes 0 for
    depth x topk, each within --spec-tree-topk's and --spec-tree-nodes' ranges."""
    out: list[tuple[int, int]] = []
    for raw in value.split(","):
        item = raw.strip().lower()
        if not item:
            continue
        k_text, _, n_text = item.partition("x")
        try:
            k, n = int(k_text), int(n_text) if n_text else 0
        except ValueError:
            k = n = -1
        if not (1 <= k <= TOPK_MAX and 0 <= n <= NODES_MAX):
            raise UsageError(
                f"invalid value for {what}: {raw.strip()!r} (expected K or KxN, K 1..{TOPK_MAX}"
                f", N 0..{NODES_MAX})"
            )
        out.append((k, n))
    if not out:
        raise UsageError(f"invalid value for {what}: {value!r} (empty)")
    return list(dict.fromkeys(out))


def _tree_label(shape: tuple[int, int]) -> str:
    k, n = shape
    return "chain" if k == 1 else f"tree={k}x{n}" if n else f"tree={k}"


def _tree_flags(_cfg: Any, shape: tuple[int, int]) -> list[str]:
    k, n = shape
    return ["--spec-tree-topk", str(k), *(["--spec-tree-nodes", str(n)] if n else [])]


def _tree_spec(spec: Any, shape: tuple[int, int] | None) -> Any:
    if shape is None:  # not swept: the shape the flags give (resolved per mode)
        return spec
    return replace(spec, tree=TreeShape(shape[0], shape[1], spec.tree.p_split))


def with_size_m(ngram: Any, size_m: int | None) -> Any:
    """The n-gram options with every size_m set to `size_m` (None: unchanged)."""
    if size_m is None:
        return ngram
    from specgguf.drafters.ngram_options import NgramOptions

    opts = ngram if ngram is not None else NgramOptions()
    for spec_type in SIZE_M_TYPES:
        opts = opts.with_params(spec_type, size_m=size_m)
    return opts


def _size_m_flags(cfg: Any, m: int) -> list[str]:
    return [x for t in cfg.types if t in SIZE_M_TYPES for x in (SIZE_M_TYPES[t], str(m))]


def _n_max_spec(spec: Any, n: int | None) -> Any:
    # None: auto, whose cap bounds every drafter (SpecOptions.n_max is then that cap)
    return replace(spec, n_max=n if n is not None else AUTO_N_MAX_CAP, adaptive=n is None)


#: the axes, in the order a label shows them
AXES: tuple[Axis, ...] = (
    Axis(
        "size_m",
        "--sweep-size-m",
        shown=lambda cfg: cfg.size_m is not None,
        label=lambda m: f"m={m}",
        run_flags=_size_m_flags,
        into_spec=lambda spec, m: replace(spec, ngram=with_size_m(spec.ngram, m)),
        parse=parse_size_m_list,
    ),
    Axis(
        "n_max",
        "--sweep-n-max",
        shown=lambda cfg: cfg.uses_n_max,
        label=lambda n: "auto" if n is None else f"n_max={n}",
        run_flags=lambda cfg, n: ["--spec-draft-n-max", "auto" if n is None else str(n)],
        into_spec=_n_max_spec,
        parse=parse_n_max_list,
    ),
    Axis(
        "tree",
        "--sweep-tree",
        shown=lambda cfg: cfg.tree is not None,
        label=_tree_label,
        run_flags=_tree_flags,
        into_spec=_tree_spec,
        parse=parse_tree_list,
    ),
)

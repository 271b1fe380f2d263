"""What bench compares: a configuration (spec types plus a value on each axis of
specgguf.bench.axes), its label, the `specgguf run` flags that select it, and the parsing of
bench's --spec-type list into configurations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from specgguf.bench.axes import AXES, parse_n_max_list
from specgguf.core.tree import TreeShape
from specgguf.drafters.draft_lengths import AUTO_N_MAX_CAP
from specgguf.drafters.ngram_options import SIZE_M_TYPES
from specgguf.drafters.registry import REGISTRY, bounded_by_n_max
from specgguf.drafters.spec_types import default_spec_types, parse_spec_types


@dataclass(frozen=True)
class BenchConfig:
    """One way of decoding: spec types (empty: plain) and draft length (None: auto).

    `control`: plain decoding measured again as if it were a configuration (`--spec-type
    none`), so the report shows what a ratio of identical work looks like on this machine:
    the noise floor every other ratio has to clear."""

    types: tuple[str, ...] = ()
    n_max: int | None = 3
    control: bool = False
    #: `run` with no --spec-type and no --spec-draft-n-max: what a user gets by default
    default: bool = False
    size_m: int | None = None  # --sweep-size-m: the n-gram types' size_m for this row
    #: --sweep-tree: (topk, nodes) of this row's tree shape; None: the flags' shape
    tree: tuple[int, int] | None = None

    @property
    def plain(self) -> bool:
        """The reference every ratio is taken against (not the control)."""
        return not self.types and not self.control

    @property
    def auto(self) -> bool:
        return bool(self.types) and self.n_max is None

    @property
    def uses_n_max(self) -> bool:
        """--spec-draft-n-max only bounds the model drafters (draft-simple, draft-mtp; n-gram
        types have their own size_m), except in auto mode, where the policy's cap bounds every
        drafter."""
        return self.auto or bounded_by_n_max(self.types)

    @property
    def label(self) -> str:
        if self.plain:
            return "none"
        if self.control:
            return "none (control)"
        name = ",".join(self.types)
        if self.default:
            return f"default ({name} auto)"
        shown = [axis.label(getattr(self, axis.field)) for axis in AXES if axis.shown(self)]
        return " ".join([name, *shown])

    def run_flags(self) -> list[str]:
        """The `specgguf run` flags that select this configuration."""
        if not self.types:
            return ["--spec-type", "none"]
        if self.default:
            return []
        flags = ["--spec-type", ",".join(self.types)]
        for axis in AXES:
            if axis.shown(self):
                flags += axis.run_flags(self, getattr(self, axis.field))
        return flags

#: the types whose drafter grows trees (--sweep-tree varies their rows)
TREE_TYPES = frozenset(t.name for t in REGISTRY if t.grows_trees)

PLAIN = BenchConfig((), 0)

CONTROL = BenchConfig((), 0, control=True)

def parse_configs(
    values: Sequence[str] | None,
    n_max_values: Sequence[int | None],
    *,
    have_draft_model: bool,
    size_m_values: Sequence[int] = (),
    draft_type: str = "draft-simple",
    tree_values: Sequence[tuple[int, int]] = (),
) -> list[BenchConfig]:
    """Configurations to compare, plain decoding first.

    Each value (from repeated --spec-type) holds configurations separated by ';'; each is a
    comma list of types as `run --spec-type` takes it, optionally followed by ':N', ':auto'
    or ':A..B' (its draft lengths). Without ':', a configuration that uses draft-simple runs
    once per value of `n_max_values` (--spec-draft-n-max / --sweep-n-max); n-gram-only ones
    run once. `none` (plain decoding) is always included, as the reference. `default` is what
    `run` does with neither --spec-type nor --spec-draft-n-max (the free n-gram drafters, and
    draft-simple with a draft model, under auto). With `size_m_values` (--sweep-size-m), each
    configuration with ngram-simple/map-k/map-k4v runs once per size_m. With `tree_values`
    (--sweep-tree), each configuration with a type that grows trees (its registry row's
    grows_trees) runs once per tree shape.
    With no --spec-type: ngram-simple and ngram-map-k as llama.cpp runs them, the draft
    model's type (`draft_type`: draft-simple, draft-eagle3 for an EAGLE-3 head, draft-mtp for
    a separate MTP drafter) with a fixed length when a draft model is there, and the default.
    """
    if not values:
        values = (
            [f"{draft_type};ngram-simple;ngram-map-k;default"]
            if have_draft_model
            else ["ngram-simple;ngram-map-k;default"]
        )
    configs: list[BenchConfig] = [PLAIN]

    def add(cfg: BenchConfig) -> None:
        sweep = not cfg.default and any(t in SIZE_M_TYPES for t in cfg.types)
        sizes = list(size_m_values) if sweep else []
        branches = not cfg.default and any(t in TREE_TYPES for t in cfg.types)
        shapes = list(tree_values) if branches else []
        for m in sizes or [None]:
            for shape in shapes or [None]:
                c = replace(cfg, size_m=m, tree=shape)
                if c not in configs:
                    configs.append(c)

    for value in values:
        for item in value.split(";"):
            item = item.strip()
            if not item:
                continue
            if item.lower() == "default":
                types = default_spec_types(
                    have_draft_model=have_draft_model, auto=True, draft_type=draft_type
                )
                add(BenchConfig(tuple(types), None, default=True))
                continue
            spec, _, lengths = item.partition(":")
            types = tuple(parse_spec_types(spec, have_draft_model=have_draft_model))
            if not types:
                # a lone `none` asks for the control row; plain itself is always there
                if spec.strip().lower() == "none" and CONTROL not in configs:
                    configs.append(CONTROL)
                continue
            if lengths:
                ns = parse_n_max_list(lengths, what=f"--spec-type {item}")
            elif bounded_by_n_max(types):
                ns = list(n_max_values)
            else:
                ns = [3]  # n-gram only: --spec-draft-n-max does not apply
            for n in ns:
                cfg = BenchConfig(types, n)
                if not cfg.uses_n_max:
                    cfg = BenchConfig(types, 3)
                add(cfg)
    return configs


def tree_room(configs: Sequence[BenchConfig], flags_shape: TreeShape) -> TreeShape | None:
    """The widest tree any of `configs` may draft (its swept shape, else the flags' shape as
    its mode resolves it), as (the most branches at once, the most nodes verified): what the
    one session bench loads must hold for all of them. None: chains only."""
    topk, nodes = 1, 0
    for cfg in configs:
        if not any(t in TREE_TYPES for t in cfg.types):
            continue
        shape = (
            TreeShape(cfg.tree[0], cfg.tree[1], flags_shape.p_split)
            if cfg.tree is not None
            else flags_shape.resolved(adaptive=cfg.auto)
        )
        if shape.branches:
            topk = max(topk, shape.topk)
            nodes = max(nodes, shape.node_cap(cfg.n_max or AUTO_N_MAX_CAP))
    return TreeShape(topk, nodes) if topk > 1 else None

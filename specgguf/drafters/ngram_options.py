"""The options of every n-gram type at once, and the table of their command-line flags.

Both are derived from the registry's rows (each n-gram type's params dataclass) and the
dataclasses' field metadata, so the CLI loops over `NGRAM_FLAGS` instead of restating a name,
a default or a range.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from typing import Any

from specgguf.drafters.ngram_params import FlagInfo
from specgguf.drafters.registry import REGISTRY, SPEC_TYPES, NgramParams


@dataclass(frozen=True)
class NgramFlag:
    """One row of the flag table, flattened for a CLI that just loops over options."""

    spec_type: str
    field: str
    info: FlagInfo
    default: Any
    type: type


#: Every n-gram option, one row per flag, in the types' priority order (the CLI's single
#: source for names and defaults).
NGRAM_FLAGS: tuple[NgramFlag, ...] = tuple(
    NgramFlag(
        row.name,
        f.name,
        f.metadata["flag"],
        None if f.default is MISSING else f.default,
        str if f.metadata["flag"].metavar == "FNAME" else int,
    )
    for row in REGISTRY
    if row.params is not None
    for f in fields(row.params)
)


#: the n-gram types whose draft length is their size_m, with that flag (bench's --sweep-size-m)
SIZE_M_TYPES: dict[str, str] = {
    f.spec_type: f.info.flag for f in NGRAM_FLAGS if f.field == "size_m"
}


def options_field(spec_type: str) -> str:
    """The NgramOptions field of an n-gram type: its name without `ngram-`, as an identifier
    (ngram-map-k4v -> map_k4v)."""
    return spec_type.removeprefix("ngram-").replace("-", "_")


class _ByType:
    """What NgramOptions does with its fields (one per n-gram row of the registry)."""

    def for_type(self, spec_type: str) -> NgramParams:
        return getattr(self, options_field(spec_type))

    def flags_for(self, spec_types: Sequence[str]) -> list[str]:
        """The command-line flags that reproduce these options for `spec_types` (only values
        that differ from the defaults), e.g. for a command line bench recommends."""
        out: list[str] = []
        for row in NGRAM_FLAGS:
            if row.spec_type not in spec_types:
                continue
            value = getattr(self.for_type(row.spec_type), row.field)
            if value != row.default:
                out += [row.info.flag, str(value)]
        return out

    def with_params(self, spec_type: str, **changes: Any) -> Any:
        """A copy with some fields of one type's params changed (e.g. size_m=16)."""
        from dataclasses import replace

        field_name = options_field(spec_type)
        return replace(self, **{field_name: replace(getattr(self, field_name), **changes)})

    @classmethod
    def from_flags(cls, values: Mapping[str, Any]) -> Any:
        """Build from {flag or alias: value} (e.g. {"--spec-ngram-mod-n-min": 8}); absent or
        None values keep their defaults. Raises UsageError for a bad value, KeyError for a name
        that is not in NGRAM_FLAGS."""
        by_flag = {name: row for row in NGRAM_FLAGS for name in (row.info.flag, *row.info.aliases)}
        per_type: dict[str, dict[str, Any]] = {row.spec_type: {} for row in NGRAM_FLAGS}
        for flag, value in values.items():
            row = by_flag[flag]
            if value is not None:
                per_type[row.spec_type][row.field] = value
        return cls(
            **{options_field(t): SPEC_TYPES[t].params_from(kw) for t, kw in per_type.items()}
        )


NgramOptions = make_dataclass(
    "NgramOptions",
    [
        (options_field(row.name), row.params, field(default_factory=row.params))
        for row in REGISTRY
        if row.params is not None
    ],
    bases=(_ByType,),
    frozen=True,
    namespace={
        "__module__": __name__,
        "__doc__": "The options of every n-gram type at once, as the command line gives them: "
        "a field per n-gram row of the registry (simple, map_k, ...: see options_field), each "
        "holding that type's params, so a new n-gram type needs no edit here.",
    },
)

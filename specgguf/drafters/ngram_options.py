"""The options of every n-gram type at once, and the table of their command-line flags.

Both are derived from the registry's rows (each n-gram type's params dataclass) and the
dataclasses' field metadata, so the CLI loops over `NGRAM_FLAGS` instead of restating a name,
a default or a range.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from specgguf.drafters.ngram_params import (
    FlagInfo,
    NgramCacheParams,
    NgramMapK4VParams,
    NgramMapKParams,
    NgramModParams,
    NgramParams,
    NgramSimpleParams,
)
from specgguf.drafters.registry import REGISTRY, SPEC_TYPES


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


@dataclass(frozen=True)
class NgramOptions:
    """The options of every n-gram type at once, as the command line gives them. Each field
    holds one type's params; which type is the registry's (the row whose params class is the
    field's)."""

    simple: NgramSimpleParams = field(default_factory=NgramSimpleParams)
    map_k: NgramMapKParams = field(default_factory=NgramMapKParams)
    map_k4v: NgramMapK4VParams = field(default_factory=NgramMapK4VParams)
    mod: NgramModParams = field(default_factory=NgramModParams)
    cache: NgramCacheParams = field(default_factory=NgramCacheParams)

    def for_type(self, spec_type: str) -> NgramParams:
        return getattr(self, _FIELD_OF[SPEC_TYPES[spec_type].params])

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

    @classmethod
    def from_flags(cls, values: Mapping[str, Any]) -> NgramOptions:
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
            **{
                _FIELD_OF[SPEC_TYPES[t].params]: SPEC_TYPES[t].params_from(kw)
                for t, kw in per_type.items()
            }
        )


#: params dataclass -> the NgramOptions field holding it
_FIELD_OF: dict[Any, str] = {f.default_factory: f.name for f in fields(NgramOptions)}

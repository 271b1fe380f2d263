"""The one table of n-gram drafter options: flag names, defaults and llama.cpp's valid ranges.

The CLI builds its options from `NGRAM_FLAGS` (or the dataclasses' field metadata) instead of
restating them, so a default or a range can only ever be wrong in one place. Ranges mirror the
checks in llama.cpp's common/arg.cpp; a value outside them is a UsageError (exit status 1, as
llama.cpp), raised as soon as a params object is built.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from specgguf.errors import UsageError

if TYPE_CHECKING:
    from specgguf.core.draft import Drafter

#: llama.cpp bounds every n-gram size flag to 1..1024 (arg.cpp); we mirror the same numbers.
_SIZE_MAX = 1024


@dataclass(frozen=True)
class FlagInfo:
    """How one params field is spelled on the command line and which values it accepts."""

    flag: str
    help: str
    aliases: tuple[str, ...] = ()
    min: int | None = None
    max: int | None = None
    metavar: str = "N"


def _opt(default: Any, info: FlagInfo) -> Any:
    return field(default=default, metadata={"flag": info})


def _check_int(info: FlagInfo, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"invalid value for {info.flag}: {value!r} (must be an integer)")
    if info.min is not None and value < info.min:
        raise UsageError(f"invalid value for {info.flag}: {value} (must be >= {info.min})")
    if info.max is not None and value > info.max:
        raise UsageError(f"invalid value for {info.flag}: {value} (must be <= {info.max})")


def check_flag_value(info: FlagInfo, value: object) -> None:
    """Validate one value against its flag's range; the CLI may call this at parse time."""
    if info.metavar == "FNAME":
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise UsageError(f"invalid value for {info.flag}: {value!r} (must be a file name)")
        return
    _check_int(info, value)


class _Validated:
    """Mixin: validate every flagged field when the object is built."""

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            check_flag_value(f.metadata["flag"], getattr(self, f.name))


def _size_n(prefix: str, what: str) -> Any:
    return _opt(
        12,
        FlagInfo(
            f"--spec-ngram-{prefix}-size-n",
            f"ngram size N for {what} speculative decoding, length of lookup n-gram",
            min=1,
            max=_SIZE_MAX,
        ),
    )


def _size_m(prefix: str, what: str) -> Any:
    return _opt(
        48,
        FlagInfo(
            f"--spec-ngram-{prefix}-size-m",
            f"ngram size M for {what} speculative decoding, length of draft m-gram",
            min=1,
            max=_SIZE_MAX,
        ),
    )


def _min_hits(prefix: str, what: str) -> Any:
    # llama.cpp only checks the lower bound here (min hits must be at least 1).
    return _opt(
        1,
        FlagInfo(
            f"--spec-ngram-{prefix}-min-hits",
            f"minimum hits for {what} speculative decoding",
            min=1,
        ),
    )


@dataclass(frozen=True)
class NgramSimpleParams(_Validated):
    size_n: int = _size_n("simple", "ngram-simple")
    size_m: int = _size_m("simple", "ngram-simple")
    min_hits: int = _min_hits("simple", "ngram-simple")


@dataclass(frozen=True)
class NgramMapKParams(_Validated):
    size_n: int = _size_n("map-k", "ngram-map-k")
    size_m: int = _size_m("map-k", "ngram-map-k")
    min_hits: int = _min_hits("map-k", "ngram-map-k")


@dataclass(frozen=True)
class NgramMapK4VParams(_Validated):
    size_n: int = _size_n("map-k4v", "ngram-map-k4v")
    size_m: int = _size_m("map-k4v", "ngram-map-k4v")
    min_hits: int = _min_hits("map-k4v", "ngram-map-k4v")


@dataclass(frozen=True)
class NgramModParams(_Validated):
    # n_min/n_max may be 0 in llama.cpp (0..1024); n_min > n_max is not rejected there either.
    n_match: int = _opt(
        24, FlagInfo("--spec-ngram-mod-n-match", "ngram-mod lookup length", min=1, max=_SIZE_MAX)
    )
    n_min: int = _opt(
        48,
        FlagInfo(
            "--spec-ngram-mod-n-min",
            "minimum number of ngram tokens to use for ngram-based speculative decoding",
            min=0,
            max=_SIZE_MAX,
        ),
    )
    n_max: int = _opt(
        64,
        FlagInfo(
            "--spec-ngram-mod-n-max",
            "maximum number of ngram tokens to use for ngram-based speculative decoding",
            min=0,
            max=_SIZE_MAX,
        ),
    )


@dataclass(frozen=True)
class NgramCacheParams(_Validated):
    lookup_cache_static: str | None = _opt(
        None,
        FlagInfo(
            "--lookup-cache-static",
            "path to static lookup cache to use for lookup decoding (not updated by generation)",
            aliases=("-lcs",),
            metavar="FNAME",
        ),
    )
    lookup_cache_dynamic: str | None = _opt(
        None,
        FlagInfo(
            "--lookup-cache-dynamic",
            "path to dynamic lookup cache to use for lookup decoding (updated by generation)",
            aliases=("-lcd",),
            metavar="FNAME",
        ),
    )


NgramParams = (
    NgramSimpleParams | NgramMapKParams | NgramMapK4VParams | NgramModParams | NgramCacheParams
)

#: --spec-type name -> its params dataclass, in llama.cpp's fixed trial order.
NGRAM_PARAM_TYPES: dict[str, type] = {
    "ngram-simple": NgramSimpleParams,
    "ngram-map-k": NgramMapKParams,
    "ngram-map-k4v": NgramMapK4VParams,
    "ngram-mod": NgramModParams,
    "ngram-cache": NgramCacheParams,
}


#: NgramOptions field holding each type's params.
_OPTION_FIELDS = {
    "ngram-simple": "simple",
    "ngram-map-k": "map_k",
    "ngram-map-k4v": "map_k4v",
    "ngram-mod": "mod",
    "ngram-cache": "cache",
}


@dataclass(frozen=True)
class NgramOptions:
    """The options of every n-gram type at once, as the command line gives them."""

    simple: NgramSimpleParams = field(default_factory=NgramSimpleParams)
    map_k: NgramMapKParams = field(default_factory=NgramMapKParams)
    map_k4v: NgramMapK4VParams = field(default_factory=NgramMapK4VParams)
    mod: NgramModParams = field(default_factory=NgramModParams)
    cache: NgramCacheParams = field(default_factory=NgramCacheParams)

    def for_type(self, spec_type: str) -> NgramParams:
        return getattr(self, _OPTION_FIELDS[spec_type])

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
        per_type: dict[str, dict[str, Any]] = {t: {} for t in NGRAM_PARAM_TYPES}
        for flag, value in values.items():
            row = by_flag[flag]
            if value is not None:
                per_type[row.spec_type][row.field] = value
        return cls(**{_OPTION_FIELDS[t]: NGRAM_PARAM_TYPES[t](**kw) for t, kw in per_type.items()})


@dataclass(frozen=True)
class NgramFlag:
    """One row of the flag table, flattened for a CLI that just loops over options."""

    spec_type: str
    field: str
    info: FlagInfo
    default: Any
    type: type


def _build_table() -> tuple[NgramFlag, ...]:
    rows = []
    for spec_type, cls in NGRAM_PARAM_TYPES.items():
        for f in fields(cls):
            info: FlagInfo = f.metadata["flag"]
            default = None if f.default is MISSING else f.default
            rows.append(
                NgramFlag(spec_type, f.name, info, default, str if info.metavar == "FNAME" else int)
            )
    return tuple(rows)


#: Every n-gram option, one row per flag (the CLI's single source for names and defaults).
NGRAM_FLAGS: tuple[NgramFlag, ...] = _build_table()


ParamsArg = NgramParams | NgramOptions | Mapping[str, Any] | None


def params_for(spec_type: str, params: ParamsArg = None) -> Any:
    """Coerce None / NgramOptions / a mapping of field names / a params object into the
    validated dataclass for spec_type."""
    cls = NGRAM_PARAM_TYPES.get(spec_type)
    if cls is None:
        known = ", ".join(NGRAM_PARAM_TYPES)
        raise UsageError(f"unknown n-gram speculative type {spec_type!r} (expected: {known})")
    if params is None:
        return cls()
    if isinstance(params, NgramOptions):
        return params.for_type(spec_type)
    if isinstance(params, cls):
        return params
    if isinstance(params, Mapping):
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(params) - names)
        if unknown:
            raise TypeError(f"{cls.__name__} has no field(s) {', '.join(unknown)}")
        return cls(**params)
    raise TypeError(f"{spec_type} needs {cls.__name__}, got {type(params).__name__}")


def make_ngram_drafter(spec_type: str, params: ParamsArg = None) -> Drafter:
    """Build the drafter for one --spec-type name from its params (defaults when None)."""
    p = params_for(spec_type, params)
    # Imported here: the drafter modules import this one for validation.
    if spec_type == "ngram-simple":
        from specgguf.drafters.ngram_simple import NgramSimple

        return NgramSimple(p.size_n, p.size_m, p.min_hits)
    if spec_type == "ngram-map-k":
        from specgguf.drafters.ngram_map import NgramMapK

        return NgramMapK(p.size_n, p.size_m, p.min_hits)
    if spec_type == "ngram-map-k4v":
        from specgguf.drafters.ngram_map import NgramMapK4V

        return NgramMapK4V(p.size_n, p.size_m, p.min_hits)
    if spec_type == "ngram-mod":
        from specgguf.drafters.ngram_mod import NgramMod

        return NgramMod(p.n_match, p.n_min, p.n_max)
    from specgguf.drafters.ngram_cache import NgramCache

    return NgramCache(p.lookup_cache_static, p.lookup_cache_dynamic)

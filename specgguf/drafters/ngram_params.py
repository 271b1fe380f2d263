"""Each n-gram type's options: flag names, defaults and llama.cpp's valid ranges.

One frozen dataclass per type; every field's metadata (a `FlagInfo`) says how it is spelled on
the command line, so the CLI builds its options from these (specgguf.drafters.ngram_options)
instead of restating them, and a default or a range can only ever be wrong in one place.
Ranges mirror the checks in llama.cpp's common/arg.cpp; a value outside them is a UsageError
(exit status 1, as llama.cpp), raised as soon as a params object is built.

Pure data: the drafters import these classes to validate their arguments, and the registry
(specgguf.drafters.registry) says which class belongs to which --spec-type (the union of
them all, NgramParams, is derived there from its rows), so nothing here imports a drafter.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any

from specgguf.errors import UsageError

#: llama.cpp bounds every n-gram size flag to 1..1024 (arg.cpp); we mirror the same numbers.
NGRAM_SIZE_MAX = 1024


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


def _int_opt(
    default: int, flag: str, help: str, *, min: int, max: int | None = NGRAM_SIZE_MAX
) -> Any:
    """An integer field's default, its flag and help, and the bounds its value is checked
    against (n-gram lengths are at most NGRAM_SIZE_MAX unless `max` says otherwise)."""
    return _opt(default, FlagInfo(flag, help, min=min, max=max))


#: the lengths every key-value n-gram drafter takes: field -> (default, help, min, max)
_NGRAM_LENGTHS: dict[str, tuple[int, str, int, int | None]] = {
    "size_n": (
        12, "ngram size N for {what} speculative decoding, length of lookup n-gram", 1,
        NGRAM_SIZE_MAX,
    ),
    "size_m": (
        48, "ngram size M for {what} speculative decoding, length of draft m-gram", 1,
        NGRAM_SIZE_MAX,
    ),
    # llama.cpp only checks the lower bound here (min hits must be at least 1).
    "min_hits": (1, "minimum hits for {what} speculative decoding", 1, None),
}  # fmt: skip


def _ngram_length(kind: str, name: str) -> Any:
    """The field `name` of _NGRAM_LENGTHS for `--spec-type ngram-{kind}`."""
    default, help, lo, hi = _NGRAM_LENGTHS[name]
    flag = f"--spec-ngram-{kind}-{name.replace('_', '-')}"
    return _int_opt(default, flag, help.format(what=f"ngram-{kind}"), min=lo, max=hi)


def _lengths_params(name: str, kind: str) -> type:
    """The params class of a key-value n-gram type: a frozen dataclass of the _NGRAM_LENGTHS
    fields, in their order, spelled for `--spec-type ngram-{kind}`."""
    fields_ = [(f, int, _ngram_length(kind, f)) for f in _NGRAM_LENGTHS]
    cls = make_dataclass(name, fields_, bases=(_Validated,), frozen=True)
    cls.__module__ = __name__
    return cls


NgramSimpleParams = _lengths_params("NgramSimpleParams", "simple")
NgramMapKParams = _lengths_params("NgramMapKParams", "map-k")
NgramMapK4VParams = _lengths_params("NgramMapK4VParams", "map-k4v")


@dataclass(frozen=True)
class NgramModParams(_Validated):
    # n_min/n_max may be 0 in llama.cpp (0..1024); n_min > n_max is not rejected there either.
    n_match: int = _int_opt(24, "--spec-ngram-mod-n-match", "ngram-mod lookup length", min=1)
    n_min: int = _int_opt(
        48,
        "--spec-ngram-mod-n-min",
        "minimum number of ngram tokens to use for ngram-based speculative decoding",
        min=0,
    )
    n_max: int = _int_opt(
        64,
        "--spec-ngram-mod-n-max",
        "maximum number of ngram tokens to use for ngram-based speculative decoding",
        min=0,
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



@dataclass(frozen=True)
class SuffixParams(_Validated):
    """`--spec-type suffix` (specgguf.drafters.suffix): vLLM's suffix decoding, named in
    llama.cpp's style."""

    max_depth: int = _int_opt(
        24,
        "--spec-suffix-max-depth",
        "suffix: the longest context match looked for, and the longest draft",
        min=1,
    )
    cache_tokens: int = _int_opt(
        131072,
        "--spec-suffix-cache-tokens",
        "suffix: tokens of earlier outputs kept per model and API key (oldest dropped "
        "first; 0: the current request only)",
        min=0,
        max=1 << 24,
    )

"""The sampler flags of `run` and `serve`, made from specgguf.io.sampler_table.SETTINGS: one
Typer option per row (llama.cpp's spellings, LLAMA_ARG_* variable, default, help)."""

from __future__ import annotations

from typing import Any

import typer

from specgguf.io.sampler_table import SETTINGS, Setting, flag_param

#: the Python type Typer reads for each kind of row
_TYPES: dict[type, Any] = {float: float, int: int, str: str | None, list: list[str] | None}


def _default(row: Setting) -> Any:
    """What the option holds when not given: the setting's default, except for the rows
    whose absence means "the default chain" or "none" (None)."""
    if row.kind in (str, list):
        return None
    return row.value_default


def typer_rows() -> list[tuple[str, Any, Any]]:
    """(parameter name, Typer option, type) per row, in the table's order."""
    return [
        (
            flag_param(row),
            typer.Option(_default(row), *row.flags, envvar=row.env, help=row.help),
            _TYPES[row.kind],
        )
        for row in SETTINGS
        if row.flags
    ]


#: the parameter names of the sampler flags
PARAMS: tuple[str, ...] = tuple(p for row in SETTINGS if (p := flag_param(row)) is not None)


def option(param: str) -> Any:
    """The Typer option of one sampler flag by parameter name (bench takes a few alone)."""
    return next(opt for p, opt, _ in typer_rows() if p == param)

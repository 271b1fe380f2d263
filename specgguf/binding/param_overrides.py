"""Write (field, value) pairs over a llama.cpp parameter struct (llama_model_params,
llama_context_params): what specgguf.loading.tuning.LlamaTuning carries from the command line.

A field that is a C array pointer (tensor_split) gets a ctypes array built from the tuple of
values, or the ctypes array given (tensor_buft_overrides: loading builds it with
tensor_placement.override_array); the arrays are returned so that the caller keeps them alive
as long as the struct."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any


def apply(params: Any, overrides: Sequence[tuple[str, Any]]) -> list[Any]:
    """Set each field of `params`; returns the ctypes arrays the struct now points to."""
    kept: list[Any] = []
    fields = dict(params._fields_)
    for name, value in overrides:
        if name not in fields:
            raise KeyError(f"{type(params).__name__} has no field {name!r}")
        if isinstance(value, ctypes.Array):  # built by the caller (tensor_placement)
            kept.append(value)
            value = ctypes.cast(value, fields[name])
        elif isinstance(value, tuple):
            pointee = getattr(fields[name], "_type_", ctypes.c_float)
            array = (pointee * len(value))(*value)
            kept.append(array)
            value = ctypes.cast(array, fields[name])
        setattr(params, name, value)
    return kept

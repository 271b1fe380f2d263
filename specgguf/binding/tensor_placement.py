"""-ot/--override-tensor, -cmoe/--cpu-moe, -ncmoe/--n-cpu-moe, -ncffn (and their draft forms):
tensors whose names match a pattern go to a named buffer type ("CPU", "CUDA0", ...), as
llama_model_params.tensor_buft_overrides, a NULL-terminated array of {pattern, buffer type}."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from specgguf.errors import UsageError


class BuftOverride(ctypes.Structure):
    """llama.h's llama_model_tensor_buft_override."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def buffer_types() -> dict[str, int]:
    """Every device's buffer type by its name (llama.cpp's list for -ot)."""
    from specgguf.binding import devices

    lib = devices.ggml()
    vp = ctypes.c_void_p
    lib.ggml_backend_dev_buffer_type.argtypes, lib.ggml_backend_dev_buffer_type.restype = [vp], vp
    lib.ggml_backend_buft_name.argtypes, lib.ggml_backend_buft_name.restype = [vp], ctypes.c_char_p
    out: dict[str, int] = {}
    for i in range(lib.ggml_backend_dev_count()):
        buft = lib.ggml_backend_dev_buffer_type(lib.ggml_backend_dev_get(i))
        if buft:
            out[(lib.ggml_backend_buft_name(buft) or b"?").decode()] = buft
    return out


def override_array(pairs: Sequence[tuple[str, str]]) -> ctypes.Array:
    """The NULL-terminated array for (pattern, buffer type name) pairs (one line, exit 1, for a
    buffer type no device has). The array owns its pattern bytes: keep it alive while the
    model loads."""
    known = buffer_types()
    array = (BuftOverride * (len(pairs) + 1))()
    for i, (pattern, name) in enumerate(pairs):
        if name not in known:
            raise UsageError(f"-ot/--override-tensor: unknown buffer type {name!r} "
                             f"(available: {', '.join(sorted(known))})")  # fmt: skip
        array[i].pattern = pattern.encode()
        array[i].buft = known[name]
    return array

"""--override-kv: metadata values llama.cpp reads in place of the GGUF's own while it loads a
model, as llama_model_params.kv_overrides, an array of {type tag, key, value} ended by an entry
whose key is empty."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

#: llama.h's bound on a key and a string value, with the final NUL
_TEXT = 128


class _Value(ctypes.Union):
    _fields_ = [("val_i64", ctypes.c_int64), ("val_f64", ctypes.c_double),
                ("val_bool", ctypes.c_bool), ("val_str", ctypes.c_char * _TEXT)]  # fmt: skip


class KvOverride(ctypes.Structure):
    """llama.h's llama_model_kv_override."""

    _fields_ = [("tag", ctypes.c_int), ("key", ctypes.c_char * _TEXT), ("value", _Value)]


#: which member of the value each type tag (llama_model_kv_override_type) fills
_MEMBERS = ("val_i64", "val_f64", "val_bool", "val_str")


def override_array(triples: Sequence[tuple[str, int, object]]) -> ctypes.Array:
    """The array for (key, type tag, value) triples (specgguf.flag_table.values.kv_overrides
    checked their sizes and types), with its empty-key end; keep it alive while the model
    loads."""
    array = (KvOverride * (len(triples) + 1))()
    for item, (key, tag, value) in zip(array, triples, strict=False):
        item.tag = tag
        item.key = key.encode()
        setattr(item.value, _MEMBERS[tag], value.encode() if isinstance(value, str) else value)
    return array


#: the type tag whose values a GGUF value of each Python type (as the header reader gives
#: them) takes
_TAG_NAMES = ("int", "float", "bool", "str")


def _tag_of(value: object) -> int | None:
    if isinstance(value, bool):
        return 2
    if isinstance(value, int):
        return 0
    if isinstance(value, float):
        return 1
    return 3 if isinstance(value, str) else None


def check(triples: Sequence[tuple[str, int, object]], metadata: dict[str, object],
          name: str) -> list[str]:  # fmt: skip
    """Refuse, in one line, an override whose type is not the type of the key in the file
    (llama.cpp would warn in its log and load the file's value: a setting silently lost);
    returns a note for each key the file does not have (llama.cpp takes such an override
    only where it reads that key)."""
    from specgguf.errors import UsageError

    notes = []
    for key, tag, _ in triples:
        if key not in metadata:
            notes.append(f"--override-kv: {key} is not in {name}: it is used only if llama.cpp "
                         "reads that key for this model")  # fmt: skip
            continue
        found = _tag_of(metadata[key])
        if found is not None and found != tag:
            raise UsageError(f"--override-kv: {key} is a {_TAG_NAMES[found]} in {name}, not a "
                             f"{_TAG_NAMES[tag]}")  # fmt: skip
    return notes

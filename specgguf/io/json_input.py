"""JSON from a client (a server request body, a `--jsonl` line), parsed within bounds.

Python's json module has two gaps for input nobody vetted. It recurses once per nesting level,
so `[[[[...` a hundred thousand deep raises RecursionError (a crash, not a parse error); the
nesting is therefore measured on the raw bytes first and refused past MAX_DEPTH. And it
accepts `"\\ud800"`, a lone UTF-16 surrogate, as a Python string no UTF-8 encoder takes: it
would fail later, deep inside tokenization, as an internal error. Every string (keys too) is
checked here, and the first bad one is named by its path in the document (`messages[0].content`).
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

#: deepest nesting of arrays and objects accepted; real requests stay under 10 (a JSON schema
#: for constrained output may nest a few dozen levels)
MAX_DEPTH = 128

# a JSON string, escapes included, written so that matching it never backtracks
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPEN = np.zeros(256, np.int8)
_OPEN[list(b"[{")] = 1
_OPEN[list(b"]}")] = -1


class JsonInputError(ValueError):
    """Input that is not acceptable JSON; `code` is "invalid_json" (not JSON, nested too
    deep) or "invalid_value" (JSON holding a lone surrogate: `value` is then the parsed
    document, so that a caller can still echo its other fields, a --jsonl line's id)."""

    def __init__(self, message: str, code: str, value: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.value = value


def nesting_depth(data: bytes) -> int:
    """The deepest nesting of `[` and `{` in `data`, brackets inside strings not counted.
    Exact for valid JSON; for invalid JSON only a number that the parser's own error follows."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    if len(brackets) <= 1:
        return len(brackets)
    steps = _OPEN[np.frombuffer(brackets, np.uint8)].astype(np.int32)
    return int(np.cumsum(steps).max())


def lone_surrogate_path(value: Any) -> str | None:
    """Where the first string in `value` holding a lone surrogate is, for a message ("'stop[1]'",
    "a key of 'messages[0]'"), else None. Iterative: the depth is bounded before this runs, but
    a walk needs no recursion anyway."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, str):
            if _bad(v):
                return f"'{path}'" if path else "the document"
        elif isinstance(v, dict):
            items = []
            for k, item in v.items():
                sub = f"{path}.{k}" if path else k
                if _bad(k):
                    return f"a key of '{path}'" if path else "a key"
                items.append((sub, item))
            stack.extend(reversed(items))
        elif isinstance(v, list):
            stack.extend((f"{path}[{i}]", item) for i, item in reversed(list(enumerate(v))))
    return None


def _bad(s: str) -> bool:
    if s.isascii():
        return False
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def loads(data: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """Parse `data` as JSON: JsonInputError when it is not JSON, nests deeper than
    `max_depth`, or holds a lone surrogate anywhere."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    depth = nesting_depth(raw)
    if depth > max_depth:
        raise JsonInputError(
            f"nested {depth} levels deep (at most {max_depth} arrays and objects)", "invalid_json"
        )
    try:
        value = json.loads(data)
    except json.JSONDecodeError as e:
        where = f"line {e.lineno}, column {e.colno}" if e.lineno > 1 else f"column {e.colno}"
        raise JsonInputError(f"{e.msg} ({where})", "invalid_json") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise JsonInputError(str(e), "invalid_json") from None
    path = lone_surrogate_path(value)
    if path is not None:
        raise JsonInputError(
            f"{path} holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text",
            "invalid_value",
            value,
        )
    return value

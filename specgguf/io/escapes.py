"""The escape sequences llama.cpp processes in what a user types on its command line (a
prompt with -e, DRY's sequence breakers): one reading for every flag that takes them."""

from __future__ import annotations

import re

_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "'": "'", '"': '"', "\\": "\\", "a": "\a",
           "b": "\b", "f": "\f", "v": "\v", "?": "?"}  # fmt: skip


def unescape(text: str) -> str:
    """\\n, \\t, \\r, \\', \\", \\\\, \\xHH (and \\a \\b \\f \\v \\?) as the characters they
    name; any other backslash is kept as written."""

    def one(m: re.Match[str]) -> str:
        body = m.group(1)
        if body.startswith("x"):
            return chr(int(body[1:], 16))
        return _SIMPLE.get(body, m.group(0))

    return re.sub(r"\\(x[0-9a-fA-F]{2}|.)", one, text, flags=re.DOTALL)

"""The list lexer: a JSON array of strings (a Dockerfile exec form) or a YAML flow sequence
as located words, and the JSON / YAML quoted scalars they (and YAML block items) are made of.
"""

from __future__ import annotations

import re

from specgguf.migrate.word import Word, link_words

_JSON_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
                 "t": "\t"}


def quoted_string(text: str, i: int, end: int, yaml_single: bool = False
                   ) -> tuple[Word, int] | None:
    """A JSON / YAML double-quoted or YAML single-quoted scalar starting at text[i]."""
    q = text[i]
    chars: list[str] = []
    pos: list[int] = []
    j = i + 1
    while j < end:
        c = text[j]
        if c == q:
            if yaml_single and text.startswith("''", j):
                chars.append("'")
                pos.append(j)
                j += 2
                continue
            word = Word("".join(chars), i, j + 1, tuple(pos), quote=q)
            return word, j + 1
        if c == "\\" and not yaml_single and j + 1 < end:
            if text[j + 1] == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[j + 2:j + 6]):
                chars.append(chr(int(text[j + 2:j + 6], 16)))
                pos.append(j)
                j += 6
                continue
            chars.append(_JSON_ESCAPES.get(text[j + 1], text[j + 1]))
            pos.append(j)
            j += 2
            continue
        chars.append(c)
        pos.append(j)
        j += 1
    return None


def _skip_flow_space(text: str, i: int, end: int) -> int:
    while i < end:
        if text[i] in " \t\r\n":
            i += 1
        elif text.startswith("\\\n", i) or text.startswith("\\\r\n", i):
            i += 2 if text[i + 1] == "\n" else 3  # Dockerfile continuation inside exec form
        elif text[i] == "#" and (i == 0 or text[i - 1] in " \t\n"):
            nl = text.find("\n", i, end)
            i = end if nl < 0 else nl
        else:
            break
    return i


def lex_list(text: str, start: int, end: int, *, yaml: bool = False
             ) -> tuple[list[Word], int] | None:
    """A JSON array of strings (Dockerfile exec form) or a YAML flow sequence: words, end."""
    i = _skip_flow_space(text, start, end)
    if i >= end or text[i] != "[":
        return None
    words: list[Word] = []
    i += 1
    while True:
        i = _skip_flow_space(text, i, end)
        if i >= end:
            return None
        c = text[i]
        if c == "]":
            link_words(words)
            return words, i + 1
        if c in "\"'" and (c == '"' or yaml):
            parsed = quoted_string(text, i, end, yaml_single=c == "'")
            if parsed is None:
                return None
            word, i = parsed
        elif yaml and c != ",":
            m = re.compile(r"[^,\]\n]*").match(text, i, end)
            raw = m.group(0).rstrip() if m else ""
            word = Word(raw, i, i + len(raw), tuple(range(i, i + len(raw))))
            i += len(raw)
        else:
            return None
        word.dynamic = yaml and compose_dynamic(word.value)
        words.append(word)
        i = _skip_flow_space(text, i, end)
        if i < end and text[i] == ",":
            i += 1
        elif i < end and text[i] != "]":
            return None


def compose_dynamic(value: str) -> bool:
    """Compose interpolates $VAR and ${VAR} in every string ($$ is a literal $)."""
    return bool(re.search(r"(?<!\$)\$(?!\$)", value.replace("$$", "")))

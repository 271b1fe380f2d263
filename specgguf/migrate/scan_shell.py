"""Finding commands in shell text, in a list of words, and inside a quoted word (sh -c "...").

Every other kind of file reaches its commands through these: a Dockerfile's RUN, a YAML
`command:` string or list, a Markdown code block.
"""

from __future__ import annotations

import re

from specgguf.migrate.argv import find_anchor
from specgguf.migrate.edit import ShellStyle
from specgguf.migrate.scan import Scan
from specgguf.migrate.shell_lexer import lex_shell
from specgguf.migrate.word import Word

#: NAME="..." or NAME='...' as one shell word: the string's words are scanned too
_ASSIGNED_STRING = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=([\"'])((?:(?!\1)[^\\]|\\.)*)\1",
                              re.S)
_TOOL_HINT = re.compile(r"llama-(?:server|cli|speculative|lookup)|specgguf|vllm|llama[._-]?cpp")


def scan_shell(scan: Scan, start: int, end: int, style: ShellStyle, *,
                newline_is_space: bool = False, implicit: str | None = None) -> str | None:
    """Commands in a shell region; returns the tool of the first invocation found.

    A JSON or YAML string holding escapes (`\\"`, `''`) is not read: the lexer reads the text
    as written, and there an escaped quote would be taken for a shell one. The token scan
    still reports what it holds.
    """
    if _escaped(scan.text[start:end], style.outer):
        return None
    first_tool = None
    for n, cmd in enumerate(lex_shell(scan.text, start, end,
                                      newline_is_space=newline_is_space, bat=scan.bat,
                                      ps=scan.ps, placeholders=scan.docs)):
        seq = [w for w in cmd if not w.redirect]
        anchor = find_anchor([w.value for w in seq])
        rest = seq
        if anchor:
            k, tool, width = anchor
            scan.command(seq[k:], tool, width, style)
            first_tool, rest = first_tool or tool, seq[:k]
        elif implicit and n == 0 and seq:
            scan.command(seq, implicit, 0, style)
            rest = []
        elif scan.fragment(_make_value(seq) if style.make else seq, style):
            rest = []
        for word in rest:
            _scan_nested(scan, word, style)
    return first_tool


def _scan_nested(scan: Scan, word: Word, style: ShellStyle) -> None:
    """A command inside a quoted word: sh -c "llama-server ...", ["sh", "-c", "..."], or the
    words of a string kept in a variable (FLAGS="--draft-max 16 ...")."""
    if word.dynamic and not style.list_like:
        for a, b in _substitutions(scan.text, word.start, word.end):
            scan_shell(scan, a, b, style)  # $(...) is a command line of its own
    m = _ASSIGNED_STRING.fullmatch(scan.text, word.start, word.end)
    if m and not style.list_like:
        inner = style.nested(m.group(1))
        if inner is not None:
            scan_shell(scan, m.start(2), m.end(2), inner)
        return
    if not word.quote or not _TOOL_HINT.search(word.value) or len(word.value.split()) < 2:
        return
    inner = style.nested(word.quote)
    if inner is not None:
        scan_shell(scan, word.start + 1, word.end - 1, inner)


def _escaped(raw: str, outer: str) -> bool:
    if outer in ("json", "yaml-dq", "src-sq"):
        return "\\" in raw
    return outer == "yaml-sq" and "''" in raw


_MAKE_ASSIGN = ("=", ":=", "::=", "?=", "+=", "!=")


def _make_value(seq: list[Word]) -> list[Word]:
    """The value of a make variable (`FLAGS ?= -md $(D) --draft-max 16`, a target's own
    `serve: ARGS += --draft-max 16`, `export`/`override FLAGS = ...`), else the words."""
    lead = 1 if seq and (seq[0].value.endswith(":") or seq[0].value in ("export", "override")) \
        else 0
    if len(seq) > lead + 2 and seq[lead + 1].value in _MAKE_ASSIGN:
        return seq[lead + 2:]
    return seq


def _substitutions(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The insides of the $(...) command substitutions in text[start:end] (not $((...)))."""
    out: list[tuple[int, int]] = []
    i = text.find("$(", start, end)
    while i >= 0:
        if text.startswith("$((", i):
            i = text.find("$(", i + 3, end)
            continue
        depth, j = 0, i + 1
        while j < end:
            depth += (text[j] == "(") - (text[j] == ")")
            if depth == 0:
                break
            j += 1
        if j < end:
            out.append((i + 2, j))
        i = text.find("$(", j, end)
    return out


def scan_words(scan: Scan, words: list[Word], style: ShellStyle,
                implicit: str | None) -> str | None:
    """An argv already split into words (exec form, YAML lists)."""
    anchor = find_anchor([w.value for w in words])
    if anchor:
        k, tool, width = anchor
        scan.command(words[k:], tool, width, style)
        rest = words[:k]
    elif implicit and words:
        scan.command(words, implicit, 0, style)
        return None
    elif scan.fragment(words, style):
        return None
    else:
        rest = words
    for word in rest:
        _scan_nested(scan, word, style)
    return anchor[1] if anchor else None

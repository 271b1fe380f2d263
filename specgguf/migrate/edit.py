"""Applying edits to a file's text: how a new word is written where the old one stood.

A style knows the syntax around a word (plain shell, a shell string inside a shell, JSON or
YAML string, a JSON / YAML flow list, a YAML block list, a Makefile's `$$`) and quotes new
words for it; `text_edits` turns a command's `ops` into character edits that touch only what
changed, and `apply_edits` writes them.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from specgguf.migrate.plan import Op
from specgguf.migrate.word import Word


@dataclass(frozen=True)
class Edit:
    """Replace text[start:end] with `text` (an insertion when start == end)."""

    start: int
    end: int
    text: str


class CannotQuote(ValueError):
    """A word that cannot be written into this place of the file without restructuring it."""


_SAFE_SHELL = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def shell_word(word: str, prefer_double: bool = False) -> str:
    """shlex.quote, or double quotes where the surrounding text is single-quoted."""
    if _SAFE_SHELL.fullmatch(word):
        return word
    if prefer_double:
        return '"' + re.sub(r'([\\"$`])', r"\\\1", word) + '"'
    return shlex.quote(word)


def _compact_json(word: str) -> str:
    """`{"a": 1}` -> `{"a":1}`: a plain YAML scalar cannot contain ": ". A word that is not
    JSON, or nests deeper than json's recursion allows, stays as it is."""
    try:
        return json.dumps(json.loads(word), separators=(",", ":"))
    except (ValueError, RecursionError):
        return word


class ShellStyle:
    """Shell words, possibly inside a string of an outer language.

    outer: "" (plain shell), "dq"/"sq" (inside a shell "..." / '...' string), "json" (inside a
    JSON string, or a "..." string of program source), "src-sq" (a '...' string of Python or
    JavaScript), "yaml-dq", "yaml-sq", "yaml-plain" (inside a YAML scalar), "yaml-plain+dq" /
    "yaml-plain+sq" (a shell string inside a plain YAML scalar). `make` doubles
    `$` for Makefiles.
    """

    list_like = False

    def __init__(self, outer: str = "", make: bool = False, renames_only: bool = False
                 ) -> None:
        self.outer, self.make = outer, make
        # prose (inline code naming a flag): a new name, never a word added or taken away
        self.renames_only = renames_only

    def quote(self, word: str) -> str:
        plain = self.outer.startswith("yaml-plain")
        if plain and word.startswith("{"):
            word = _compact_json(word)
        inner = shell_word(word, prefer_double=self.outer in ("sq", "yaml-sq", "yaml-plain+sq"))
        out = self._escape(inner)
        if plain and (": " in out or " #" in out):
            raise CannotQuote(f"{out} cannot go into a plain YAML string; quote the string "
                              "first")
        return out.replace("$", "$$") if self.make else out

    def _escape(self, s: str) -> str:
        if self.outer in ("dq", "yaml-plain+dq"):
            return re.sub(r'([\\"$`])', r"\\\1", s)
        if self.outer in ("json", "yaml-dq"):
            return json.dumps(s, ensure_ascii=False)[1:-1]
        if self.outer in ("sq", "yaml-plain+sq"):
            return s.replace("'", "'\\''")
        if self.outer == "yaml-sq":
            return s.replace("'", "''")
        if self.outer == "src-sq":  # a '...' string of Python or JavaScript
            return s.replace("\\", "\\\\").replace("'", "\\'")
        return s

    def safe(self, s: str) -> bool:
        return not s or bool(_SAFE_SHELL.fullmatch(s))

    def insert(self, text: str, word: Word, new: Sequence[str]) -> Edit:
        return Edit(word.end, word.end, "".join(" " + self.quote(w) for w in new))

    def delete(self, text: str, first: Word, last: Word) -> Edit:
        if first.prev_end is not None:
            return Edit(first.prev_end, last.end, "")
        return Edit(first.start, last.next_start if last.next_start is not None else last.end,
                    "")

    def nested(self, quote: str) -> ShellStyle | None:
        """The style for a command inside one of our quoted words (sh -c "...")."""
        inner = "sq" if quote == "'" else "dq"
        if self.outer == "yaml-plain":  # command: sh -c "vllm serve ..." (a plain YAML scalar)
            return ShellStyle(f"yaml-plain+{inner}", self.make)
        if self.outer:
            return None
        return ShellStyle(inner, self.make)


class FlowListStyle(ShellStyle):
    """Items of a JSON array (Dockerfile exec form) or a YAML flow sequence [a, "b"]."""

    list_like = True

    def __init__(self, yaml: bool = False) -> None:
        super().__init__()
        self.yaml = yaml

    def quote(self, word: str) -> str:
        return json.dumps(word, ensure_ascii=False)

    def safe(self, s: str) -> bool:
        return not s or bool(re.fullmatch(r"[A-Za-z0-9_@%+=:./-]+", s))

    def insert(self, text: str, word: Word, new: Sequence[str]) -> Edit:
        return Edit(word.end, word.end, "".join(", " + self.quote(w) for w in new))

    def nested(self, quote: str) -> ShellStyle | None:
        if quote == "'":
            return ShellStyle("yaml-sq")
        return ShellStyle("yaml-dq" if self.yaml else "json") if quote == '"' else None


_YAML_PLAIN_OK = re.compile(r"[A-Za-z0-9_./@%+=-][A-Za-z0-9_./@%+=:,-]*")
_YAML_NON_STRING = re.compile(
    r"[-+]?(\d[\d_]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?|0x[0-9a-fA-F]+|0o[0-7]+|\.inf|\.nan"
    r"|true|false|yes|no|on|off|y|n|null|~", re.I)


class BlockListStyle(ShellStyle):
    """Items of a YAML block sequence, one `- item` per line."""

    list_like = True

    def quote(self, word: str) -> str:
        if (_YAML_PLAIN_OK.fullmatch(word) and not _YAML_NON_STRING.fullmatch(word)
                and ": " not in word):
            return word
        if '"' in word and "'" not in word:
            return f"'{word}'"
        return json.dumps(word, ensure_ascii=False)

    def safe(self, s: str) -> bool:
        return not s or bool(re.fullmatch(r"[A-Za-z0-9_./@%+=-]+", s))

    def item_end(self, text: str, word: Word) -> tuple[int, str, str]:
        """Where a new item goes after `word`'s: the end of its line, the line break the
        file uses there, and the item's lead (its indentation and `- `)."""
        line_start = text.rfind("\n", 0, word.start) + 1
        m = re.compile(r"[ \t]*-[ \t]+").match(text, line_start)
        lead = m.group(0) if m else "- "
        eol = text.find("\n", word.end)
        eol = len(text) if eol < 0 else eol
        newline = "\n"
        if eol > 0 and text[eol - 1] == "\r":
            eol, newline = eol - 1, "\r\n"
        return eol, newline, lead

    def insert(self, text: str, word: Word, new: Sequence[str]) -> Edit:
        """New items after `word`'s line, quoted as it is (`- "--draft-max"` items get
        `- "--spec-type"`), else plain where YAML reads them as the same string."""
        eol, newline, lead = self.item_end(text, word)
        return Edit(eol, eol, "".join(f"{newline}{lead}{self._like(w, word.quote)}"
                                      for w in new))

    def _like(self, word: str, quote: str) -> str:
        if quote == '"':
            return json.dumps(word, ensure_ascii=False)
        if quote == "'" and "'" not in word:
            return f"'{word}'"
        return self.quote(word)

    def delete(self, text: str, first: Word, last: Word) -> Edit:
        start = text.rfind("\n", 0, first.start) + 1
        eol = text.find("\n", last.end)
        return Edit(start, len(text) if eol < 0 else eol + 1, "")

    def nested(self, quote: str) -> ShellStyle | None:
        return ShellStyle({"'": "yaml-sq", '"': "yaml-dq"}.get(quote, "yaml-plain"))


class BlockMapListStyle(BlockListStyle):
    """Items of a YAML block sequence of one-key mappings, `- --flag: value` per line: a flag
    and its value are added as one more such item."""

    def insert(self, text: str, word: Word, new: Sequence[str]) -> Edit:
        eol, newline, lead = self.item_end(text, word)
        items = [new[k:k + 2] for k in range(0, len(new), 2)]
        return Edit(eol, eol, "".join(
            f"{newline}{lead}{self.quote(pair[0])}" + (f": {self._value(pair[1])}"
                                                       if len(pair) > 1 else "")
            for pair in items))

    def _value(self, word: str) -> str:
        """A mapping's value: a number stays a number, as the file's own values are."""
        return word if _YAML_PLAIN_OK.fullmatch(word) and ": " not in word else self.quote(word)


def _set_edit(text: str, word: Word, new: str, style: ShellStyle) -> Edit:
    """Replace only the characters that changed, when they sit in one plain run of the text."""
    old = word.value
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    s = 0
    while s < min(len(old), len(new)) - p and old[-1 - s] == new[-1 - s]:
        s += 1
    mid_old, mid_new = old[p:len(old) - s], new[p:len(new) - s]
    if style.safe(mid_new) and old:
        span = _raw_span(text, word, p, len(old) - s, mid_old)
        if span is not None:
            return Edit(span[0], span[1], mid_new)
    return Edit(word.start, word.end, style.quote(new))


def _raw_span(text: str, word: Word, a: int, b: int, mid_old: str) -> tuple[int, int] | None:
    pos = word.pos
    if a < b:
        lo, hi = pos[a], pos[b - 1] + 1
        return (lo, hi) if text[lo:hi] == mid_old else None
    if a == 0:
        return pos[0], pos[0]
    at = pos[a - 1] + 1
    if a < len(pos) and pos[a] != at:
        return None
    return at, at


def text_edits(text: str, words: Sequence[Word], ops: Iterable[Op],
               style: ShellStyle) -> list[Edit]:
    """The text edits that carry out `ops` on `words` (which are argv, index for index)."""
    edits: list[Edit] = []
    deleted = sorted(op.index for op in ops if op.kind == "delete")
    for op in ops:
        if op.kind == "set":
            edits.append(_set_edit(text, words[op.index], op.words[0], style))
        elif op.kind == "insert":
            edits.append(style.insert(text, words[op.index], op.words))
    for run in _runs(deleted):
        edits.append(style.delete(text, words[run[0]], words[run[-1]]))
    return edits


def _runs(indices: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """Apply non-overlapping edits; at one offset a deletion goes before an insertion."""
    for e in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        text = text[:e.start] + e.text + text[e.end:]
    return text

"""Argument lists in program source: `subprocess.run(["llama-server", "-m", m, "--draft-max",
"16"])` in Python, the same list in JavaScript or TypeScript, an argv array in a JSON or TOML
file; and whole command lines in a string (`os.system("llama-server ...")`, a notebook's
`"!llama-server ...\\n"`).

Only a list literal whose first item is a string naming the tool is read: then every item is
an argument of that command, so renaming a flag or adding one is what the list means. An item
that is not a string literal (a variable, a call, an f-string) is a value decided when the
program runs, like a shell's `$VAR`. A list that starts with anything else (a table of flag
names, options kept for some command elsewhere) and a list holding `*rest` are left to the
token scan, which reports what they hold as inside program source.
"""

from __future__ import annotations

import re

from specgguf.migrate.argv import find_anchor
from specgguf.migrate.edit import FlowListStyle, ShellStyle
from specgguf.migrate.list_lexer import quoted_string
from specgguf.migrate.scan import Scan
from specgguf.migrate.scan_shell import scan_shell, scan_words
from specgguf.migrate.word import Word, link_words

_OPEN, _CLOSE = "([{", ")]}"
#: a string literal on one line, without escapes, in either quotes (linear: no nested repeats)
#: (a notebook's source line may end in an escaped newline)
_STRINGS = (re.compile(r'"([^"\n\\]*(?:\\n)?)"'), re.compile(r"'([^'\n\\]*(?:\\n)?)'"))
_TOOL_MENTION = re.compile(r"llama-|vllm")
#: a string literal's prefix in Python (r"", b"", f"" ...): such an item is an expression
_PREFIXED = re.compile(r"[rRbBfFuU]{1,2}[\"']")


class SourceListStyle(FlowListStyle):
    """Items of a list literal in program source, written in the quotes its items use."""

    def __init__(self, quote: str) -> None:
        super().__init__()
        self.quote_char = quote

    def quote(self, word: str) -> str:
        if self.quote_char == "'" and self.safe(word):
            return f"'{word}'"
        return super().quote(word)


def scan_source(scan: Scan, comments: str, start: int = 0, end: int | None = None) -> None:
    """Every argument list in text[start:end] (a source file, or a Markdown code block in that
    language); `comments`: its comment syntax ("python", "json", "ini" for TOML, "source")."""
    text = scan.text
    end = len(text) if end is None else end
    line_comment = {"python": "#", "json": None, "ini": "#"}.get(comments, "//")
    i = text.find("[", start, end)
    while i >= 0:
        parsed = _list(text, i, end, line_comment)
        if parsed is None:
            i = text.find("[", i + 1, end)
            continue
        words, _ = parsed
        anchor = find_anchor([w.value for w in words])
        if words and anchor is not None and anchor[0] == 0 and not words[0].dynamic:
            literal = [w.quote for w in words if not w.dynamic]
            scan_words(scan, words, SourceListStyle("'" if "'" in literal else '"'), None)
        i = text.find("[", i + 1, end)
    _command_strings(scan, start, end)


def _command_strings(scan: Scan, start: int, end: int) -> None:
    """A string literal that is a whole command line starting with its tool
    (`os.system("llama-server -m t.gguf --draft-max 16")`, `shell=True`): its words are a
    shell command, written back in the string's own escapes. A string with a backslash in it,
    or a prefix (r"", f"": other escapes, or text decided when the program runs), is left to
    the token scan."""
    found = sorted((m for pattern in _STRINGS for m in pattern.finditer(scan.text, start, end)
                    if _TOOL_MENTION.search(m.group(1))), key=lambda m: m.start())
    taken = start
    for m in found:
        if m.start() < taken:
            continue  # inside a string found before (a ' in a "..." string)
        taken = m.end()
        a, b = m.start(1), m.end(1)
        if scan.text.startswith("!", a):  # a notebook cell's shell escape: `!llama-server ...`
            a += 1
        if scan.text.endswith("\\n", a, b):  # a notebook's source line ends in its newline
            b -= 2
        inner = scan.text[a:b]
        before = scan.text[m.start() - 1] if m.start() > 0 else ""
        if "\\" in inner or before.isalnum() or before == "\\":  # r"", f"", or an escaped quote
            continue
        words = inner.split()
        anchor = find_anchor(words)
        if len(words) < 2 or anchor is None or anchor[0] != 0:
            continue
        outer = "json" if scan.text[m.start()] == '"' else "src-sq"
        scan_shell(scan, a, b, ShellStyle(outer))


def _list(text: str, start: int, end: int, line_comment: str | None
          ) -> tuple[list[Word], int] | None:
    """The items of the list literal at text[start] ("["), or None when it is not a flat list
    (a nested list, a splat, two strings side by side)."""
    words: list[Word] = []
    i = start + 1
    while True:
        i = _skip(text, i, end, line_comment)
        if i >= end:
            return None
        if text[i] == "]":
            link_words(words)
            return words, i + 1
        if text[i] in "\"'":
            parsed = quoted_string(text, i, end)
            if parsed is None:
                return None
            word, i = parsed
        elif text[i] in "*[" or text.startswith("...", i):
            return None  # a splat or a nested list: not one argument per item
        else:
            j = _expression_end(text, i, end, line_comment)
            if j is None or j == i:
                return None
            raw = text[i:j].rstrip()
            word = Word(raw, i, i + len(raw), tuple(range(i, i + len(raw))), dynamic=True)
            i = j
        words.append(word)
        i = _skip(text, i, end, line_comment)
        if i < end and text[i] == ",":
            i += 1
        elif i >= end or text[i] != "]":
            return None


def _skip(text: str, i: int, end: int, line_comment: str | None) -> int:
    while i < end:
        if text[i] in " \t\r\n":
            i += 1
        elif line_comment and text.startswith(line_comment, i):
            nl = text.find("\n", i, end)
            i = end if nl < 0 else nl
        else:
            break
    return i


def _expression_end(text: str, i: int, end: int, line_comment: str | None) -> int | None:
    """Where the expression at text[i] ends: the next `,` or `]` outside brackets and strings."""
    depth = 0
    while i < end:
        c = text[i]
        m = _PREFIXED.match(text, i)
        if m or c in "\"'":
            q = i + (len(m.group(0)) - 1 if m else 0)
            parsed = quoted_string(text, q, end)
            if parsed is None:
                return None
            i = parsed[1]
            continue
        if line_comment and text.startswith(line_comment, i):
            return None
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            if depth == 0:
                return i if c == "]" else None
            depth -= 1
        elif c == "," and depth == 0:
            return i
        i += 1
    return None

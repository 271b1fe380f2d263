"""Lines of a text as offsets, for the line-oriented scanners (Dockerfile, YAML, Markdown)."""

from __future__ import annotations

from dataclasses import dataclass


def line_end(text: str, i: int, end: int) -> int:
    """The offset of the newline ending the line at `i` (or `end`)."""
    nl = text.find("\n", i, end)
    return end if nl < 0 else nl


@dataclass
class Line:
    """One line of the text: its offsets, without the newline."""

    start: int
    end: int  # before the newline

    def text(self, src: str) -> str:
        return src[self.start:self.end]


def split_lines(text: str, start: int, end: int) -> list[Line]:
    """The lines of text[start:end]."""
    out: list[Line] = []
    i = start
    while i < end:
        eol = line_end(text, i, end)
        out.append(Line(i, eol))
        i = eol + 1
    return out

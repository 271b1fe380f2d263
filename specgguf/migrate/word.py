"""A word of a file's text that remembers where every character came from.

The lexers (shell_lexer, list_lexer) produce them; an edit (specgguf.migrate.edit) uses the
positions to replace just the changed characters, so quoting, continuations and comments
around a word stay byte-for-byte the same.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Word:
    """One word as the shell (or JSON, or YAML) reads it, with the text offsets it came from."""

    value: str
    start: int
    end: int
    pos: tuple[int, ...]  # offset in the text of every character of `value`
    dynamic: bool = False  # the shell (or compose) decides part of it
    quote: str = ""  # the quote character when the word is exactly one quoted string
    redirect: bool = False
    prev_end: int | None = None  # end of the previous word of the same command or list
    next_start: int | None = None


def link_words(words: list[Word]) -> None:
    """Record each word's neighbours: deleting a word also deletes the space before it."""
    for a, b in zip(words, words[1:], strict=False):
        a.next_start, b.prev_end = b.start, a.end

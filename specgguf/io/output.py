"""Streaming generated text to stdout without ever splitting a multi-byte UTF-8 character.

Tokens are byte strings: one emoji can span three tokens. An incremental decoder holds back
incomplete sequences until the next token completes them, so what reaches the terminal (or the
pipe) is always valid text, and it is flushed every round so nothing accepted is held back.
"""

from __future__ import annotations

import codecs
import sys
from typing import TextIO

from specgguf.errors import write_failed

ACCEPTED_STYLE = "\x1b[32m"  # tokens that came from accepted drafts
RESET = "\x1b[0m"
LEGEND = f"colour: {ACCEPTED_STYLE}accepted draft tokens{RESET}, plain: tokens the target produced"


class TextStream:
    def __init__(self, out: TextIO | None, *, color: bool = False) -> None:
        self.out = out  # None: only collect (JSON mode)
        self.color = color
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.parts: list[str] = []

    def write(self, pieces: list[bytes], drafted: int = 0) -> None:
        """Write one round's token pieces; the first `drafted` came from accepted proposals."""
        chunks: list[str] = []
        for i, piece in enumerate(pieces):
            text = self._decoder.decode(piece)
            if not text:
                continue
            self.parts.append(text)
            if self.color and i < drafted:
                text = f"{ACCEPTED_STYLE}{text}{RESET}"
            chunks.append(text)
        if chunks and self.out is not None:
            write_text(self.out, "".join(chunks))

    def write_fragments(self, pieces: list[tuple[str, bool]]) -> None:
        """Write text already decoded (specgguf.generator.Chunk.pieces): (text, came from an
        accepted draft) fragments, one per token unless a stop string split them."""
        chunks: list[str] = []
        for text, drafted in pieces:
            if not text:
                continue
            self.parts.append(text)
            chunks.append(f"{ACCEPTED_STYLE}{text}{RESET}" if self.color and drafted else text)
        if chunks and self.out is not None:
            write_text(self.out, "".join(chunks))

    def finish(self) -> None:
        tail = self._decoder.decode(b"", final=True)
        if tail:
            self.parts.append(tail)
        if self.out is not None:
            write_text(self.out, tail)

    @property
    def text(self) -> str:
        return "".join(self.parts)


def write_text(out: TextIO, text: str) -> None:
    """Write and flush. A reader that went away (BrokenPipeError) is the caller's business (a
    quiet exit 141); any other failure (a full disk) becomes one OutputError line."""
    try:
        if text:
            out.write(text)
        out.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise write_failed("stdout", e, stdout=True) from None


def write_stdout(text: str) -> None:
    """Write `text` to stdout now (flushed), with _write's error handling."""
    write_text(sys.stdout, text)

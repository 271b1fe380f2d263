"""Streaming generated text to stdout without ever splitting a multi-byte UTF-8 character.

Tokens are byte strings: one emoji can span three tokens. An incremental decoder holds back
incomplete sequences until the next token completes them, so what reaches the terminal (or the
pipe) is always valid text, and it is flushed every round so nothing accepted is held back.
"""

from __future__ import annotations

import codecs
from typing import TextIO

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
            self.out.write("".join(chunks))
            self.out.flush()

    def write_text(self, pieces: list[tuple[str, bool]]) -> None:
        """Write text already decoded (specgguf.generator.Chunk.pieces): (text, came from an
        accepted draft) fragments, one per token unless a stop string split them."""
        chunks: list[str] = []
        for text, drafted in pieces:
            if not text:
                continue
            self.parts.append(text)
            chunks.append(f"{ACCEPTED_STYLE}{text}{RESET}" if self.color and drafted else text)
        if chunks and self.out is not None:
            self.out.write("".join(chunks))
            self.out.flush()

    def finish(self) -> None:
        tail = self._decoder.decode(b"", final=True)
        if tail:
            self.parts.append(tail)
            if self.out is not None:
                self.out.write(tail)
        if self.out is not None:
            self.out.flush()

    @property
    def text(self) -> str:
        return "".join(self.parts)

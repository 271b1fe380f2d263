"""run -o/--output FILE (llama-cli's): the conversation written to a file as it goes, each
user turn as "User:" and its text, each answer as "Assistant:", its thinking (where the
model thought) between "[Start thinking]" and "[End thinking]", then its content; a blank
line after each. The file is created (or emptied) before any model is loaded."""

from __future__ import annotations

from pathlib import Path

from specgguf.errors import OutputError


class Transcript:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._file = path.open("w", encoding="utf-8")
        except OSError as e:
            raise OutputError(f"-o/--output: cannot write {path}: {e.strerror or e}") from None

    def _write(self, text: str) -> None:
        try:
            self._file.write(text)
            self._file.flush()  # a transcript is read while the conversation goes on
        except OSError as e:
            raise OutputError(f"-o/--output: writing {self.path}: {e.strerror or e}") from None

    def user(self, text: str) -> None:
        self._write(f"User:\n{text}\n\n")

    def assistant(self, content: str, reasoning: str = "") -> None:
        out = "Assistant:\n"
        if reasoning:
            out += f"[Start thinking]\n\n{reasoning}[End thinking]\n\n"
        out += content
        self._write(out + ("" if out.endswith("\n") else "\n") + "\n")

    def close(self) -> None:
        self._file.close()

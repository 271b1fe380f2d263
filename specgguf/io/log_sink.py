"""Where llama.cpp's log lines go, and the log file: -v/-lv, --log-file, --log-disable,
--log-colors, --log-prefix, --log-timestamps (the flag table's "log" settings).

llama.cpp's own log reaches specgguf through the binding's log callback (one call per piece,
with its ggml level); it is written here as llama.cpp's programs write it: every library line
counts as info verbosity (3), so `-lv N` shows them for N >= 3, their debug lines for N >= 5
(-v: everything); with --log-prefix each line starts with its level letter (I, W, E, D),
after the time since start with --log-timestamps (minutes.seconds.ms.us); colours by level.
By default (no -v, no -lv) specgguf keeps llama.cpp's log off stderr.

--log-file FNAME gets llama.cpp's lines (at -lv, or 3 by default, as llama.cpp's default
verbosity) and everything specgguf writes to stderr (its notes, warnings, report and error
lines): stderr is teed while the command runs. Colours never go to the file. --log-disable
drops llama.cpp's log everywhere; specgguf's own lines stay (-q hides its report)."""

from __future__ import annotations

import contextlib
import io
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TextIO

from specgguf.errors import UsageError

# ggml_log_level
NONE, DEBUG, INFO, WARN, ERROR, CONT = range(6)
#: the verbosity llama.cpp's programs give every library line, and the one debug lines need
LIBRARY_VERBOSITY, DEBUG_VERBOSITY = 3, 5
#: -v: every line
EVERYTHING = 1 << 30

_RESET = "\x1b[0m"
_LETTER = {INFO: ("I ", "\x1b[32m"), WARN: ("W ", "\x1b[35m"), ERROR: ("E ", "\x1b[31m"),
           DEBUG: ("D ", "\x1b[33m")}  # fmt: skip
_BODY_COLOUR = {WARN: "\x1b[35m", ERROR: "\x1b[31m", DEBUG: "\x1b[33m"}
_TIME_COLOUR = "\x1b[34m"



@dataclass(frozen=True)
class LogSettings:
    verbosity: int | None = None  # -lv N; -v: EVERYTHING; None: llama.cpp's log kept off stderr
    file: Path | None = None
    disabled: bool = False
    colors: str = "auto"  # on, off or auto (on when stderr is a terminal)
    prefix: bool = False
    timestamps: bool = False

    @classmethod
    def of(cls, settings: dict[str, Any], verbose: bool) -> LogSettings:
        level = EVERYTHING if verbose else settings.get("verbosity")
        return cls(verbosity=level, file=settings.get("file"),
                   disabled=bool(settings.get("disabled")), colors=settings.get("colors", "auto"),
                   prefix=bool(settings.get("prefix")),
                   timestamps=bool(settings.get("timestamps")))  # fmt: skip


def _shows(level: int, threshold: int | None) -> bool:
    if threshold is None or threshold < LIBRARY_VERBOSITY:
        return False
    return level != DEBUG or threshold >= DEBUG_VERBOSITY


class LogSink:
    """The binding's log callback's destination (specgguf.binding.engine.log_sink)."""

    def __init__(self, settings: LogSettings, stderr: TextIO, file: IO[str] | None,
                 start: float | None = None) -> None:  # fmt: skip
        self.settings = settings
        self.stderr = stderr
        self.file = file
        self.start = time.monotonic() if start is None else start
        self.colour = settings.colors == "on" or (
            settings.colors == "auto" and _is_terminal(stderr))
        self._last = INFO  # what a CONT piece continues

    def __call__(self, level: int, text: bytes) -> None:
        if self.settings.disabled or not text:
            return
        shown_level = self._last if level == CONT else level
        if level != CONT:
            self._last = level
        piece = text.decode("utf-8", "replace")
        threshold = self.settings.verbosity
        if _shows(shown_level, threshold):
            self.stderr.write(self.format(level, piece, self.colour))
            self.stderr.flush()
        in_file = LIBRARY_VERBOSITY if threshold is None else threshold
        if self.file is not None and _shows(shown_level, in_file):
            self.file.write(self.format(level, piece, False))
            self.file.flush()

    def format(self, level: int, piece: str, colour: bool) -> str:
        """One piece as llama.cpp writes it: the prefix (with the time) on a new line's
        level, and the warning, error and debug bodies coloured."""
        out = []
        if self.settings.prefix and level not in (NONE, CONT):
            if self.settings.timestamps:
                us = int((time.monotonic() - self.start) * 1e6)
                stamp = f"{us // 60_000_000}.{us // 1_000_000 % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d}"  # noqa: E501
                out.append(f"{_TIME_COLOUR}{stamp}{_RESET} " if colour else f"{stamp} ")
            if level in _LETTER:
                letter, col = _LETTER[level]
                out.append(f"{col}{letter}" + (_RESET if level == INFO else "") if colour
                           else letter)  # fmt: skip
        body_colour = _BODY_COLOUR.get(self._last if level == CONT else level) if colour else None
        if body_colour and not (self.settings.prefix and level in _LETTER):
            out.append(body_colour)
        out.append(piece)
        if body_colour:
            out.append(_RESET)
        return "".join(out)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class _Tee(io.TextIOBase):
    """stderr, copied to the log file (without colour codes)."""

    def __init__(self, stream: TextIO, file: IO[str]) -> None:
        self.stream, self.file = stream, file

    def write(self, s: str) -> int:
        n = self.stream.write(s)
        with contextlib.suppress(OSError, ValueError):
            self.file.write(_strip_colour(s))
        return n

    def flush(self) -> None:
        self.stream.flush()
        with contextlib.suppress(OSError, ValueError):
            self.file.flush()

    def isatty(self) -> bool:
        return _is_terminal(self.stream)

    def fileno(self) -> int:
        return self.stream.fileno()


def _strip_colour(s: str) -> str:
    if "\x1b[" not in s:
        return s
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", s)


#: the sink llama.cpp's log callback writes to (specgguf.binding.engine), while a command runs
current: LogSink | None = None


@contextlib.contextmanager
def logging_to(settings: LogSettings) -> Iterator[LogSink]:
    """For the length of a command: llama.cpp's log through a LogSink (`current`), and stderr
    teed into the log file. A file that cannot be opened is one line (exit 1) before anything
    runs."""
    global current
    file = None
    if settings.file is not None:
        try:
            file = open(settings.file, "a", encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as e:
            raise UsageError(f"--log-file {settings.file}: {e.strerror}") from None
    sink = LogSink(settings, sys.stderr, file)
    saved = sys.stderr
    if file is not None:
        sys.stderr = _Tee(saved, file)  # type: ignore[assignment]
    saved_sink, current = current, sink
    try:
        yield sink
    finally:
        current = saved_sink
        sys.stderr = saved
        if file is not None:
            file.close()

"""Which files `specgguf migrate` reads, how it reads them, and how it writes them back.

One rule for a named file and for a file found in a directory: every text file is checked
(the token scan sees any kind), and the structured rewrite runs where the kind is known. A
directory scan skips only what cannot hold a command line (binary files, files over the size
limit) and vendored or tool directories (.git, node_modules, virtual environments); `-v` says
what was skipped and why, so nothing is left out in silence.

Bytes are kept: a file that is not UTF-8 is decoded with `surrogateescape`, so every byte
that is not part of a changed word is written back exactly as it was. UTF-16 files (with a
byte-order mark, as Windows editors write .bat/.ps1) are read and written as UTF-16.
"""

from __future__ import annotations

import codecs
import os
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass

#: files larger than this are not read (bounded memory and time); a named one fails the check
MAX_BYTES = 8 * 1024 * 1024
#: directories that hold other people's code or tool state, never the user's own scripts
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv",
                       ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache",
                       "site-packages", "dist-packages", ".eggs"})
#: languages whose files are checked by the token scan only (no structured rewrite): their
#: command lines are string literals the shell lexer does not understand
SOURCE_EXTS = {
    ".py": "python", ".pyi": "python", ".ipynb": "json", ".json": "json", ".jsonc": "json",
    ".js": "source", ".mjs": "source", ".cjs": "source", ".ts": "source", ".tsx": "source",
    ".jsx": "source", ".go": "source", ".rs": "source", ".rb": "python", ".lua": "source",
    ".java": "source", ".kt": "source", ".c": "source", ".cc": "source", ".cpp": "source",
    ".h": "source", ".hpp": "source", ".cs": "source", ".swift": "source", ".php": "source",
    ".toml": "ini", ".ini": "ini", ".cfg": "ini", ".nix": "python", ".tf": "python",
    ".hcl": "python", ".properties": "ini",
}


@dataclass
class Source:
    """One file's text, and how to give it back as the same bytes."""

    text: str
    encoding: str  # "utf-8" (with surrogateescape), "utf-8-sig", "utf-16"
    note: str = ""  # "not UTF-8: bytes kept as they are"

    def encode(self, text: str) -> bytes:
        if self.encoding == "utf-16":
            return codecs.BOM_UTF16_LE + text.encode("utf-16-le") \
                if self._le else codecs.BOM_UTF16_BE + text.encode("utf-16-be")
        if self.encoding == "utf-8-sig":
            return codecs.BOM_UTF8 + text.encode("utf-8", "surrogateescape")
        return text.encode("utf-8", "surrogateescape")

    _le: bool = True


class Unreadable(Exception):
    """A file that cannot be checked: `str(err)` is the reason, for one line on stderr."""


def decode(data: bytes) -> Source:
    """Text for any file that can hold a command line; Unreadable for binary data."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        le = data.startswith(codecs.BOM_UTF16_LE)
        try:
            text = data[2:].decode("utf-16-le" if le else "utf-16-be")
        except UnicodeDecodeError:
            raise Unreadable("binary file (a UTF-16 mark, then invalid text)") from None
        src = Source(text, "utf-16", "UTF-16")
        src._le = le
        return src
    if b"\0" in data[:65536]:
        raise Unreadable("binary file")
    bom = data.startswith(codecs.BOM_UTF8)
    body = data[3:] if bom else data
    try:
        return Source(body.decode("utf-8"), "utf-8-sig" if bom else "utf-8")
    except UnicodeDecodeError:
        text = body.decode("utf-8", "surrogateescape")
        return Source(text, "utf-8-sig" if bom else "utf-8", "not UTF-8: bytes kept as they are")


def read(path: str) -> Source:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as err:
        raise Unreadable(f"cannot read: {err.strerror or err}") from None
    if len(data) > MAX_BYTES:
        raise Unreadable(f"larger than {MAX_BYTES // (1024 * 1024)} MiB, not read")
    return decode(data)


def expand(paths: Iterable[str]) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """(files to read, (path, why skipped) for -v, missing paths).

    A file named explicitly is always read; in a directory every regular file is, except in
    the SKIP_DIRS and files over MAX_BYTES (binary ones are found when read).
    """
    files: list[str] = []
    skipped: list[tuple[str, str]] = []
    missing: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, names in os.walk(path):
                for d in sorted(dirs):
                    if d in SKIP_DIRS:
                        skipped.append((os.path.join(root, d), "vendored or tool directory"))
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
                for name in sorted(names):
                    full = os.path.join(root, name)
                    why = _skip_reason(full)
                    if why:
                        skipped.append((full, why))
                    else:
                        files.append(full)
        elif os.path.isfile(path):
            files.append(path)
        else:
            missing.append(path)
    return files, skipped, missing


def _skip_reason(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError as err:
        return f"cannot read: {err.strerror or err}"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_size > MAX_BYTES:
        return f"larger than {MAX_BYTES // (1024 * 1024)} MiB"
    return ""


def atomic_write(path: str, data: bytes) -> None:
    """Replace the file's content; readers see the old or the new file, whole.

    Written through a temporary file in the same directory, then renamed over the target. A
    symlink is followed (the link stays a link; its target gets the new text). Mode, owner and
    group are those of the file replaced; where the owner cannot be kept (another user's file
    we may write but not chown to), the file is rewritten in place instead, which keeps them.
    """
    real = os.path.realpath(path)
    st = os.stat(real)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(real), prefix=f".{os.path.basename(real)}.",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
        try:
            if (os.stat(tmp).st_uid, os.stat(tmp).st_gid) != (st.st_uid, st.st_gid):
                os.chown(tmp, st.st_uid, st.st_gid)
        except PermissionError:
            os.unlink(tmp)
            _write_in_place(real, data)
            return
        os.replace(tmp, real)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _write_in_place(path: str, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.write(data)
        fh.truncate()
        fh.flush()
        os.fsync(fh.fileno())

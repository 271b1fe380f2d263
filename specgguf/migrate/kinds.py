"""What kind of file a path is: which structured scanner reads it, and which comment syntax
the token scan (guard) skips. One rule for a named file and a file found in a directory.
"""

from __future__ import annotations

import os
import re

from specgguf.migrate.files import SOURCE_EXTS


def file_kind(path: str, text: str = "") -> str | None:
    """What a file is, from its name (or its #! line); None when no structured rewrite applies."""
    name = os.path.basename(path)
    lower = name.lower()
    if lower in ("dockerfile", "containerfile") or lower.startswith(("dockerfile.",
                                                                     "containerfile.")) \
            or lower.endswith((".dockerfile", ".containerfile")):
        return "dockerfile"
    if lower in ("makefile", "gnumakefile") or lower.startswith(("makefile.", "gnumakefile.")) \
            or lower.endswith((".mk", ".make", ".mak")):
        return "make"
    if lower.endswith((".yml", ".yaml")):
        return "yaml"
    if lower.endswith((".md", ".markdown", ".mdx")):
        return "markdown"
    if lower.endswith((".bat", ".cmd")):
        return "bat"
    if lower.endswith((".ps1", ".psm1")):
        return "powershell"
    if lower.endswith((".sh", ".bash", ".zsh", ".ksh", ".fish", ".envrc", ".env")) \
            or lower == ".env" or lower.startswith(".env."):
        return "shell"
    if lower.endswith((".service", ".socket", ".timer", ".container", ".conf", ".txt")):
        return "shell"
    if re.match(r"#!.*\b(sh|bash|zsh|ksh|dash|fish)\b", text):
        return "shell"
    return None


def detect(path: str, text: str) -> tuple[str | None, str]:
    """(kind for the structured rewrite or None, comment syntax for the token scan).

    The same for a named file and a file found in a directory. Unknown text files are read as
    shell (their command lines look like one); source files (.py, .js, .json ...) get the token
    scan only, since their command lines are string literals.
    """
    kind = file_kind(path, text)
    if kind is not None:
        return kind, {"markdown": "markdown", "powershell": "shell"}.get(kind, kind)
    ext = os.path.splitext(path)[1].lower()
    if ext in SOURCE_EXTS:
        return None, SOURCE_EXTS[ext]
    if text.startswith("#!"):
        return None, "python" if "python" in text.split("\n", 1)[0] else "source"
    return "shell", "shell"

"""The Markdown scanner: fenced code blocks, each read as the language its info string names
(shell and its relatives, YAML, Dockerfile, Makefile); prose is left to the token scan.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from specgguf.migrate.edit import ShellStyle
from specgguf.migrate.lines import split_lines
from specgguf.migrate.scan import Scan
from specgguf.migrate.scan_dockerfile import scan_dockerfile
from specgguf.migrate.scan_shell import scan_shell
from specgguf.migrate.scan_yaml import scan_yaml

_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})[ \t]*([^\n`]*)")
_SHELL_LANGS = {"", "sh", "bash", "shell", "console", "zsh", "ksh", "shell-session",
                "shellsession", "text", "txt", "plaintext", "powershell", "ps1", "ps", "pwsh",
                "bat", "cmd", "batch", "nohighlight", "terminal"}


def _markdown_blocks(text: str) -> Iterable[tuple[str, int, int]]:
    """(language, start, end) of each fenced code block's content."""
    lines = split_lines(text, 0, len(text))
    n = 0
    while n < len(lines):
        m = _FENCE.fullmatch(lines[n].text(text))
        if not m:
            n += 1
            continue
        fence = m.group(1)
        lang = (m.group(2).split() or [""])[0].strip("{}.").lower()
        close = re.compile(r"[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*")
        k = n + 1
        while k < len(lines) and not close.fullmatch(lines[k].text(text)):
            k += 1
        start = lines[n + 1].start if n + 1 < len(lines) else len(text)
        end = lines[k].start if k < len(lines) else len(text)
        yield lang, start, end
        n = k + 1


def scan_markdown(scan: Scan) -> list[tuple[int, int]]:
    """Scan the code blocks; returns the regions read, where LLAMA_ARG_* names are looked for."""
    regions = []
    for lang, a, b in _markdown_blocks(scan.text):
        if lang in ("yaml", "yml"):
            scan_yaml(scan, a, b)
        elif lang in ("dockerfile", "docker", "containerfile"):
            scan_dockerfile(scan, a, b)
        elif lang in ("make", "makefile", "mk"):
            scan_shell(scan, a, b, ShellStyle(make=True))
        elif lang in _SHELL_LANGS:
            scan_shell(scan, a, b, ShellStyle())
        else:
            continue
        regions.append((a, b))
    return regions

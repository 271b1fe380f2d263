"""The Dockerfile scanner: RUN, CMD and ENTRYPOINT in shell or exec (JSON) form.

A CMD that holds only arguments runs the ENTRYPOINT's tool, or the tool the FROM image runs
by default (ghcr.io/ggml-org/llama.cpp:server, vllm/vllm-openai).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from specgguf.migrate.argv import image_tool
from specgguf.migrate.edit import FlowListStyle, ShellStyle
from specgguf.migrate.lines import line_end
from specgguf.migrate.list_lexer import lex_list
from specgguf.migrate.scan import Scan
from specgguf.migrate.scan_shell import scan_shell, scan_words


def _dockerfile_instructions(text: str, start: int, end: int
                             ) -> Iterable[tuple[str, int, int]]:
    """(KEYWORD, args start, end) per instruction, continuation lines included."""
    i = start
    while i < end:
        eol = line_end(text, i, end)
        line = text[i:eol]
        if not line.strip() or line.lstrip().startswith("#"):
            i = eol + 1
            continue
        j = eol
        while text[i:j].rstrip().endswith("\\") and j < end:
            j = line_end(text, j + 1, end)
            while j < end and text[text.rfind("\n", 0, j) + 1:j].lstrip().startswith("#"):
                j = line_end(text, j + 1, end)  # comment lines inside a continued instruction
        m = re.compile(r"[ \t]*([A-Za-z]+)[ \t]*").match(text, i, j)
        if m:
            yield m.group(1).upper(), m.end(), j
        i = j + 1


def scan_dockerfile(scan: Scan, start: int = 0, end: int | None = None) -> None:
    """Every RUN, CMD and ENTRYPOINT in text[start:end] (a whole file or a Markdown block)."""
    end = len(scan.text) if end is None else end
    image_default: str | None = None
    entry: str | None = None
    for keyword, a, b in _dockerfile_instructions(scan.text, start, end):
        if keyword == "FROM":
            images = [t for t in scan.text[a:b].split() if not t.startswith("--")]
            image_default = image_tool(images[0]) if images else None
            entry = None
        elif keyword in ("RUN", "CMD", "ENTRYPOINT"):
            implicit = (entry or image_default) if keyword == "CMD" else None
            tool = _scan_instruction(scan, a, b, implicit)
            if keyword == "ENTRYPOINT":
                entry = tool


def _scan_instruction(scan: Scan, a: int, b: int, implicit: str | None) -> str | None:
    parsed = lex_list(scan.text, a, b)
    if parsed is not None:
        return scan_words(scan, parsed[0], FlowListStyle(), implicit)
    return scan_shell(scan, a, b, ShellStyle(), implicit=implicit)

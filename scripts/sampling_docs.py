"""Rewrite docs/sampling.md's "Every setting" table from specgguf.io.sampler_table.

Usage: python scripts/sampling_docs.py   (tests/test_sampler_table.py fails while it is stale)"""

from __future__ import annotations

from pathlib import Path

from specgguf.io.sampler_table import markdown_table

PAGE = Path(__file__).resolve().parent.parent / "docs" / "sampling.md"
HEADER = "| flag | request field |"


def replaced(text: str) -> str:
    """`text` with its settings table (the header line and every table line after it) new."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith(HEADER))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "".join(lines[:start]) + markdown_table() + "".join(lines[end:])


if __name__ == "__main__":
    PAGE.write_text(replaced(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"updated {PAGE}")

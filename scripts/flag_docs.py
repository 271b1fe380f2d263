"""Rewrite docs/running.md's "llama.cpp flags here" table from specgguf.flag_table.

Usage: python scripts/flag_docs.py   (tests/test_flag_table.py fails while the page is stale)"""

from __future__ import annotations

from pathlib import Path

from specgguf.flag_table.docs import replace_in

PAGE = Path(__file__).resolve().parent.parent / "docs" / "running.md"

if __name__ == "__main__":
    PAGE.write_text(replace_in(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"updated {PAGE}")

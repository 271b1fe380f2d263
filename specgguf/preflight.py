"""Refuse what cannot work before any weight is read: unreadable files, incompatible pairs.

Metadata comes from the bounded GGUF reader (specgguf.gguf_info), so a broken or hostile file
costs milliseconds and one clear line instead of a crash inside llama.cpp.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specgguf.compat import require_compatible
from specgguf.gguf_info import GGUFInfo, read_gguf_info


@dataclass(frozen=True)
class Preflight:
    target: GGUFInfo
    draft: GGUFInfo | None


def preflight(target: Path, draft: Path | None) -> Preflight:
    t = read_gguf_info(target)
    d = read_gguf_info(draft) if draft is not None else None
    if d is not None:
        require_compatible(t.vocab, d.vocab)
    return Preflight(t, d)

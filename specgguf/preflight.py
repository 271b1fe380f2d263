"""Refuse what cannot work before any weight is read: unreadable files, incompatible pairs.

Metadata comes from the bounded GGUF reader (specgguf.gguf_info), so a broken or hostile file
costs milliseconds and one clear line instead of a crash inside llama.cpp.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specgguf.compat import check_compatible, require_compatible
from specgguf.gguf_info import GGUFInfo, read_gguf_info


@dataclass(frozen=True)
class Preflight:
    target: GGUFInfo
    draft: GGUFInfo | None
    #: the draft's vocabulary differs from the target's: it drafts through text
    cross_vocab: bool = False


def preflight(
    target: Path, draft: Path | None, n_ctx: int = 0, *, strict_vocab: bool = False
) -> Preflight:
    """Read both headers; an incompatible pair is refused (exit 4) only with `strict_vocab`
    (--spec-vocab-strict, llama.cpp's rule), else it is marked for cross-vocabulary drafting."""
    t = read_gguf_info(target)
    d = read_gguf_info(draft) if draft is not None else None
    cross = False
    if d is not None:
        if strict_vocab:
            require_compatible(t.vocab, d.vocab)
        else:
            cross = not check_compatible(t.vocab, d.vocab).ok
    return Preflight(t, d, cross)

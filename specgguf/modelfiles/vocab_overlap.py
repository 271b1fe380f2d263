"""How much two vocabularies share, from GGUF metadata alone (for `specgguf check`).

The overlap is the share of the draft's tokens whose text is exactly one target token. It
predicts how directly the draft's proposals carry over when drafting through text: a high
overlap means most draft tokens map one for one onto target tokens. Token texts are stored
in each tokenizer's own spelling (GPT-2's byte-to-character table for byte-level BPE,
"▁" for a space and "<0xAB>" byte tokens for SentencePiece), so both are first turned back
into bytes.
"""

from __future__ import annotations

import re
from functools import lru_cache

from specgguf.modelfiles.gguf_info import VocabInfo

_SPM_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def gpt2_byte_to_char() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table (how a BPE vocabulary stores
    bytes as text)."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


@lru_cache(maxsize=1)
def _gpt2_char_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's reversible byte -> printable character table."""
    return {c: b for b, c in gpt2_byte_to_char().items()}


def token_bytes(text: str, vocab_type: str) -> bytes:
    """The bytes a token's stored text stands for."""
    if vocab_type == "BPE":
        table = _gpt2_char_to_byte()
        if all(ch in table for ch in text):
            return bytes(table[ch] for ch in text)
        return text.encode("utf-8", "surrogateescape")
    if vocab_type == "SPM":
        m = _SPM_BYTE.fullmatch(text)
        if m:
            return bytes([int(m.group(1), 16)])
        return text.replace("\u2581", " ").encode("utf-8", "surrogateescape")
    return text.encode("utf-8", "surrogateescape")


def vocab_overlap(target: VocabInfo, draft: VocabInfo) -> float:
    """Share of the draft's non-empty tokens whose bytes are exactly one target token's."""
    t_type, d_type = target.type, draft.type
    known = {token_bytes(t, t_type) for t in target.tokens if t}
    total = hits = 0
    for t in draft.tokens:
        if not t:
            continue
        total += 1
        hits += token_bytes(t, d_type) in known
    return hits / total if total else 0.0

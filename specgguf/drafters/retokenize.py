"""Moving text between two vocabularies: the pure half of cross-vocabulary drafting.

A draft model with another tokenizer cannot hand its token ids to the target. What the two
models share is text, so a draft is carried over as bytes: the draft's tokens become bytes,
the bytes are tokenized by the target's tokenizer, and the target tokens that the draft's text
wholly covers become an ordinary one-hot draft. Correctness never depends on this module (the
target verifies every proposal); what depends on it is how often the target accepts, so the
aim is to produce the tokens a plain run of the target would produce for that text.

Why a window and not just the new text: BPE pre-tokenizers look at the characters before a
split (a space before a word, digit groups, runs of newlines), so the new text is tokenized
together with the text of the last few tokens already in the sequence, and only the tokens
after the point where that window ends are used. When a merge crosses that point (the
tokenizer would have spelled the last committed token differently had it seen the new text),
the committed token stays as it is, exactly as in a plain run, and the new text is tokenized
on its own.

Why bytes: byte-level tokens can end in the middle of a UTF-8 character. Text is handed to a
tokenizer only up to the last complete character; the incomplete tail waits for the bytes
that complete it.

Everything here is llama_cpp-free: a tokenizer is two callables (`tokenize`: str -> ids with
special-token text parsed and no BOS added; `piece`: id -> bytes with special tokens spelled
out), so the boundary cases are tested without a model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Tokenize = Callable[[str], list[int]]
Piece = Callable[[int], bytes]

#: committed target tokens re-tokenized together with new draft text
TARGET_WINDOW = 4
#: trailing draft-side tokens re-tokenized when emitted text is appended
DRAFT_WINDOW = 4
#: at most this many extra tokens are pulled into a window to start it on a character boundary
MAX_WINDOW_EXTEND = 8


def complete_utf8_len(data: bytes) -> int:
    """Length of the longest prefix of `data` that does not end inside a UTF-8 character.

    Only the last (up to 3) bytes are inspected: an incomplete multi-byte sequence at the end
    is cut, anything else (including invalid bytes) is left to the decoder."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        b = data[n - back]
        if b < 0x80:  # ASCII: complete
            return n
        if b >= 0xC0:  # a lead byte `back` bytes from the end
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return n if back >= need else n - back
        # continuation byte: keep looking for its lead
    return n


def starts_on_char(data: bytes) -> bool:
    """True unless `data` starts with a UTF-8 continuation byte."""
    return not data or not 0x80 <= data[0] < 0xC0


def decode_complete(data: bytes) -> str | None:
    """`data` as text up to its last complete character; None if the bytes are not UTF-8."""
    try:
        return data[: complete_utf8_len(data)].decode("utf-8")
    except UnicodeDecodeError:
        return None


def window_start(pieces: Sequence[bytes], want: int, extend: int = MAX_WINDOW_EXTEND) -> int:
    """Index into `pieces` where a re-tokenization window of about `want` tokens starts: the
    latest start at or before len-want whose piece begins on a character boundary (at most
    `extend` tokens further back); -1 when none does (a window cannot start there)."""
    start = max(0, len(pieces) - want)
    lowest = max(0, start - extend)
    while start >= lowest:
        if start == 0 or starts_on_char(pieces[start]):
            return start
        start -= 1
    return -1


def split_after(tokens: Sequence[int], piece: Piece, offset: int) -> int | None:
    """The index i such that the pieces of tokens[:i] are exactly `offset` bytes long, or None
    when a token straddles that offset (a merge crossing the boundary)."""
    pos = 0
    for i, t in enumerate(tokens):
        if pos == offset:
            return i
        if pos > offset:
            return None
        pos += len(piece(t))
    return len(tokens) if pos == offset else None


@dataclass
class Translation:
    """Target tokens for a draft's text. `tokens` are the ones its text wholly covers and that
    no more draft text could re-spell (all but the last, unless the draft ended); `covered`
    is how many bytes of the draft text they account for."""

    tokens: list[int] = field(default_factory=list)
    covered: int = 0
    all_tokens: list[int] = field(default_factory=list)  # including the unstable last one
    crossed: bool = False  # a merge crossed the window boundary: text tokenized on its own
    dead: bool = False  # the text is not UTF-8: no continuation can make it translatable


def translate(
    window: Sequence[bytes],
    text: bytes,
    tokenize: Tokenize,
    piece: Piece,
    *,
    final: bool = False,
) -> Translation:
    """Target tokens for draft `text` following a sequence whose last target tokens have the
    pieces `window` (already cut to start on a character boundary; may be empty).

    `final` says the draft ended (EOS): no later text can extend its last token."""
    head = b"".join(window)
    full = decode_complete(head + text)
    if full is None:
        return Translation(dead=True)
    if len(full.encode("utf-8")) <= len(head):
        return Translation()
    toks = tokenize(full)
    cut = split_after(toks, piece, len(head))
    crossed = cut is None
    if crossed:
        alone = decode_complete(text)
        if not alone or not starts_on_char(text):
            return Translation(crossed=True)
        toks, cut = tokenize(alone), 0
    out = list(toks[cut:])
    # Sanity: the pieces must spell the draft text (special tokens, normalisers that rewrite
    # text); keep only the prefix that does.
    pos = 0
    good = 0
    for t in out:
        p = piece(t)
        if not p or text[pos : pos + len(p)] != p:
            break
        pos += len(p)
        good += 1
    out = out[:good]
    stable = out if final and pos == len(text) else out[:-1]
    covered = sum(len(piece(t)) for t in stable)
    return Translation(stable, covered, out, crossed)


class TextTokens:
    """One model's tokenization of a growing byte text, kept up to date from a boundary.

    `tokens[i]` spells text[ends[i-1]:ends[i]]; the tokens cover text[:covered] and the rest
    (an incomplete UTF-8 character, or text a window could not start on) is `pending`.
    Appending re-tokenizes only the last DRAFT_WINDOW tokens plus the new bytes, so the cost
    of an append does not grow with the length of the text."""

    def __init__(self, tokenize: Tokenize, piece: Piece, window: int = DRAFT_WINDOW) -> None:
        self.tokenize = tokenize
        self.piece = piece
        self.window = window
        self.text = bytearray()
        self.tokens: list[int] = []
        self.ends: list[int] = []
        self.lead = 0  # leading tokens that spell nothing (a BOS): never re-tokenized

    @property
    def covered(self) -> int:
        return self.ends[-1] if self.ends else 0

    @property
    def pending(self) -> bytes:
        return bytes(self.text[self.covered :])

    def reset(self, tokens: Sequence[int], text: bytes, lead: int = 0) -> None:
        """Start from a known tokenization (the prompt's) of `text`. The first `lead` tokens
        (a BOS the tokenizer adds) spell no text and are never re-tokenized."""
        self.text = bytearray(text)
        self.tokens = []
        self.ends = []
        pos = 0
        for i, t in enumerate(tokens):
            pos += len(self.piece(t)) if i >= lead else 0
            self.tokens.append(t)
            self.ends.append(pos)
        if pos > len(self.text):  # pieces that do not spell the text: trust the tokens
            self.text = bytearray(b"".join(self.piece(t) for t in tokens))
        self.lead = min(lead, len(self.tokens))

    def append(self, data: bytes) -> int:
        """Append bytes and re-tokenize the tail; returns the index of the first token that
        changed (everything before it is as it was)."""
        self.text.extend(data)
        n = len(self.tokens)
        first = max(self.lead, n - self.window)
        lowest = max(self.lead, first - MAX_WINDOW_EXTEND)
        while first > lowest and first < n and not starts_on_char(self._piece_at(first)):
            first -= 1
        start = self.ends[first - 1] if first else 0
        tail = decode_complete(bytes(self.text[start:]))
        if tail is None or not tail:
            return n
        new = self.tokenize(tail)
        if not new:
            return n
        del self.tokens[first:]
        del self.ends[first:]
        pos = start
        for t in new:
            p = self.piece(t)
            if not p or self.text[pos : pos + len(p)] != p:
                break  # pieces must spell the text (a tokenizer that adds a space prefix)
            pos += len(p)
            self.tokens.append(t)
            self.ends.append(pos)
        return first

    def _piece_at(self, i: int) -> bytes:
        start = self.ends[i - 1] if i else 0
        return bytes(self.text[start : self.ends[i]])

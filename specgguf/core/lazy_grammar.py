"""A lazy grammar as a constraint: free text until a trigger appears, then a grammar from the
trigger on (`tool_choice: "auto"` with tools: the model may answer in words, but once it opens
a call in its family's syntax, the call is written whole and well-formed).

States, over the tokens the sequence emits (`accept`):
- waiting: every token is allowed; the emitted bytes are searched for the triggers on a tail
  as long as the longest trigger (so a trigger split over several tokens is still seen, and
  the work per token does not grow with the text);
- thinking: between the family's thinking markers nothing is a trigger (a call written inside
  the thinking is not a call); the closing marker returns to waiting;
- active: the grammar decides every token. It is first fed the text from the trigger's first
  byte to the end of the token that completed it (the trigger may start inside an earlier
  token, and the token that completes it may carry more text), spelled in single-byte
  tokens, so the grammar reads exactly the bytes the model wrote.

A trigger marked `at_start` fires only as the first text of the answer (blanks before it, or
a thinking block, allowed): Llama 3 writes a call as a bare JSON object, and the same opening
later in an answer is text.

Why this is exact under speculation: it is a Constraint (specgguf.core.constraint). While
waiting, `allowed` says no to exactly the tokens that would complete a trigger whose text the
grammar refuses (so the grammar is never fed what it cannot read), and yes to every other;
once active, it is the grammar's own answer. The loop verifies each row of a draft against
the state after the same prefix (RoundStates clones this object per proposal), so a draft
that crosses the trigger is verified under the grammar from the token that completed it on,
as plain decoding would choose them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from specgguf.core.constraint import Constraint

#: above this many ids, `allowed` reads a mask of the vocabulary made once, not each piece
_LOOP_IDS = 64


@dataclass(frozen=True)
class Trigger:
    """A text that starts the grammar (matched on the emitted bytes, however tokenized)."""

    text: bytes
    at_start: bool = False  # only as the answer's first text


@dataclass(frozen=True)
class LazyRules:
    """What starts the grammar and what holds it off: the triggers, and the thinking's
    opening and closing (None: the family does not think)."""

    triggers: tuple[Trigger, ...]
    thinking: tuple[bytes, bytes] | None = None
    #: the bytes a trigger ends with: a token without any of them cannot complete one
    last_bytes: frozenset[int] = field(init=False)

    def __post_init__(self) -> None:
        if not self.triggers or any(not t.text for t in self.triggers):
            raise ValueError("a lazy grammar needs at least one non-empty trigger")
        object.__setattr__(self, "last_bytes", frozenset(t.text[-1] for t in self.triggers))

    @property
    def keep(self) -> int:
        """How many bytes of the text so far a later token's match may need."""
        marks = [len(t.text) for t in self.triggers]
        if self.thinking is not None:
            marks += [len(m) for m in self.thinking]
        return max(marks) - 1


class TriggerVocab:
    """What every state of a lazy grammar shares, over one vocabulary: the pieces of tokens,
    the spelling of bytes as tokens, and (made when first needed, then kept: a caller keeps
    one per model and rules) which tokens may complete a trigger."""

    def __init__(
        self,
        rules: LazyRules,
        piece: Callable[[int], bytes],
        spell: Callable[[bytes], Sequence[int] | None],
        n_vocab: int,
    ) -> None:
        """`piece` gives a token's bytes, control tokens spelled out; `spell` the single-byte
        tokens of some bytes (None when the vocabulary has none for one of them)."""
        self.rules, self.piece, self.spell, self.n_vocab = rules, piece, spell, n_vocab
        self._mask: np.ndarray | None = None

    def may_fire(self, token: int) -> bool:
        p = self.piece(token)
        return any(b in p for b in self.rules.last_bytes)

    def mask(self) -> np.ndarray:
        if self._mask is None:
            self._mask = np.fromiter(
                (self.may_fire(t) for t in range(self.n_vocab)), dtype=bool, count=self.n_vocab
            )
        return self._mask


@dataclass
class _Scan:
    """Where the waiting state would be after one more token, and the text that would start
    the grammar (None: no trigger in it)."""

    tail: bytes
    thinking: bool
    head: bytes | None
    fired: bytes | None = None


class LazyGrammar:
    """The lazy grammar's state (a Constraint: allowed / accept / clone) over `grammar` (a
    fresh state of the grammar that starts at a trigger), with `vocab`'s rules."""

    def __init__(self, vocab: TriggerVocab, grammar: Constraint) -> None:
        self.rules = vocab.rules
        self.grammar = grammar
        self.active = False
        self.thinking = False
        self._vocab = vocab
        self._tail = b""  # the last `rules.keep` bytes of the text outside the thinking
        #: the answer's text so far without its leading blanks, while an at_start trigger may
        #: still begin it (None: none can)
        self._head: bytes | None = b"" if any(t.at_start for t in vocab.rules.triggers) else None

    # -- Constraint -------------------------------------------------------------------------

    def allowed(self, ids: np.ndarray) -> np.ndarray:
        if self.active:
            return np.asarray(self.grammar.allowed(ids), dtype=bool)
        ids = np.asarray(ids)
        ok = np.ones(len(ids), dtype=bool)
        if len(ids) > _LOOP_IDS:
            maybe = np.flatnonzero(self._vocab.mask()[ids])
        else:
            maybe = [i for i, t in enumerate(ids) if self._vocab.may_fire(int(t))]
        for i in maybe:
            fired = self._scan(self._vocab.piece(int(ids[i]))).fired
            if fired is not None:
                ok[i] = self._feed(self.grammar.clone(), fired)
        return ok

    def accept(self, token: int) -> None:
        if self.active:
            self.grammar.accept(token)
            return
        scan = self._scan(self._vocab.piece(token))
        self._tail, self.thinking, self._head = scan.tail, scan.thinking, scan.head
        if scan.fired is not None:
            self.grammar = self.grammar.clone()  # shared with the clones until now
            fed = self._feed(self.grammar, scan.fired)
            assert fed, "a token that completes a trigger the grammar refuses was accepted"
            self.active = True

    def clone(self) -> LazyGrammar:
        c = LazyGrammar.__new__(LazyGrammar)
        c.__dict__.update(self.__dict__)
        if self.active:  # waiting, the grammar's fresh state is only read: shared
            c.grammar = self.grammar.clone()
        return c

    def prime(self, prompt_tail: Sequence[int]) -> None:
        """Feed the prompt's last tokens: a prompt that opened the thinking starts in it.
        Nothing in the prompt is a trigger."""
        for t in prompt_tail:
            scan = self._scan(self._vocab.piece(t))
            self._tail, self.thinking = scan.tail, scan.thinking
        self._tail = b""

    # -- the search -------------------------------------------------------------------------

    def _scan(self, piece: bytes) -> _Scan:
        """The waiting state after `piece`, without changing this one."""
        s = _Scan(self._tail, self.thinking, self._head)
        keep = self.rules.keep
        while piece:
            seen = s.tail + piece
            lo = len(s.tail)  # where `piece` starts in `seen`
            if s.thinking:
                end = _ending_in(seen, self.rules.thinking[1], lo)  # type: ignore[index]
                if end < 0:
                    s.tail = seen[-keep:] if keep else b""
                    return s
                s.thinking, s.tail, piece = False, b"", seen[end:]
                continue
            opening = self.rules.thinking[0] if self.rules.thinking is not None else b""
            think_at = _start_in(seen, opening, lo) if opening else -1
            start = self._trigger_in(seen, lo, len(seen) if think_at < 0 else think_at, s)
            if start >= 0:
                s.fired = seen[start:]
                return s
            if think_at >= 0:
                s.thinking, s.tail, piece = True, b"", seen[think_at + len(opening) :]
                continue
            s.tail = seen[-keep:] if keep else b""
            return s
        return s

    def _trigger_in(self, seen: bytes, lo: int, upto: int, s: _Scan) -> int:
        """Where in `seen` the first trigger that ends in its bytes lo..upto starts (-1: none);
        updates the answer's head (for the at_start triggers) over those bytes."""
        found = [
            i for t in self.rules.triggers
            if not t.at_start and (i := _start_in(seen[:upto], t.text, lo)) >= 0
        ]  # fmt: skip
        if s.head is not None:
            head = (s.head + seen[lo:upto]).lstrip()
            s.head = head
            for t in self.rules.triggers:
                if t.at_start and head.startswith(t.text) and len(head) <= upto:
                    # the head is the text from the trigger's start to `upto`
                    found.append(upto - len(head))
            begun = any(t.at_start and t.text.startswith(head[: len(t.text)])
                        for t in self.rules.triggers)  # fmt: skip
            if not begun or upto < len(seen) and head:
                s.head = None  # the answer began with other text, or text before a thinking
        return min(found) if found else -1

    def _feed(self, grammar: Constraint, text: bytes) -> bool:
        """Advance `grammar` over `text` in single-byte tokens; False where it refuses one (or
        the vocabulary cannot spell it), `grammar` then half-fed."""
        tokens = self._vocab.spell(text)
        if tokens is None:
            return False
        for t in tokens:
            if not bool(grammar.allowed(np.array([t], dtype=np.int64))[0]):
                return False
            grammar.accept(t)
        return True


def _start_in(seen: bytes, marker: bytes, lo: int) -> int:
    """Where the first `marker` that ends at or after byte `lo` of `seen` starts (-1: none)."""
    return seen.find(marker, max(0, lo - len(marker) + 1))


def _ending_in(seen: bytes, marker: bytes, lo: int) -> int:
    """Where the first such `marker` ends (-1: none)."""
    i = _start_in(seen, marker, lo)
    return i + len(marker) if i >= 0 else -1

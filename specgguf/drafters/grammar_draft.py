"""Grammar-aware drafting (`--spec-type grammar`): propose the text the grammar forces.

Under a grammar, much of a structured answer is not the model's choice at all: after
`{"name"` a JSON schema allows only `": "`; after a value, `, "year": ` is the one way on; an
enum with one value left is fixed. Where the grammar allows exactly one next character, and
then one more, ..., that text is known before the target sees it. This drafter walks the
grammar's state character by character (asking it about one token per printable ASCII
character, plus end of generation), stops where a second character (or the end) is allowed,
and proposes the tokenization of the forced text. Like every draft it is only a guess (the
model may spell the same text with other tokens); the verifier keeps the output exact.
Proposing costs a few grammar questions, no model pass, so it is a free drafter to auto.

The drafter follows the sequence on a state of its own (a clone of the generation's grammar
advanced over every emitted token), so it reads nothing of the loop's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specgguf.core.constraint import Constraint
from specgguf.core.draft import Draft, Drafter, DraftGate

#: the longest forced text walked per round (characters): a key and its punctuation fit
MAX_CHARS = 48
#: the most tokens proposed in one round
MAX_DRAFT = 16


@dataclass(frozen=True)
class GrammarDraftSource:
    """What the drafter needs of one generation: its grammar's fresh state, the token of each
    single character it may test (`char_ids[i]` spells `chars[i]`), the end-of-generation
    tokens, and the target's tokenizer for the forced text."""

    constraint: Constraint
    char_ids: np.ndarray
    chars: Sequence[str]
    eog_ids: np.ndarray
    tokenize: Callable[[str], list[int]]


class GrammarDrafter(Drafter):
    """The text the grammar forces (a `free` drafter: its name and free-ness come from its
    registry row, like every drafter's)."""

    max_draft = MAX_DRAFT

    def __init__(self, source: GrammarDraftSource | None) -> None:
        """`source` None: a generation without a grammar, where nothing is ever forced."""
        self.source = source
        self.state: Constraint | None = None
        if source is not None:
            self._ids = np.concatenate([source.char_ids, source.eog_ids]).astype(np.int64)
            self._n_chars = len(source.char_ids)
            self._chars = source.chars
            self._tokenize = source.tokenize

    def begin(self, prompt: Sequence[int]) -> None:
        # the grammar starts after the prompt
        self.state = self.source.constraint.clone() if self.source is not None else None

    def observe(self, tokens: Sequence[int]) -> None:
        for t in tokens:
            if self.state is None:
                return
            if not bool(self.state.allowed(np.array([t], dtype=np.int64))[0]):
                self.state = None  # not the grammar's text (cannot happen in the loop): stop
                return
            self.state.accept(t)

    def forced_text(self) -> str:
        """The characters the grammar allows as the only way on from here."""
        if self.state is None:
            return ""
        s = self.state.clone()
        out: list[str] = []
        while len(out) < MAX_CHARS:
            ok = np.asarray(s.allowed(self._ids), dtype=bool)
            if ok[self._n_chars :].any() or int(ok[: self._n_chars].sum()) != 1:
                break  # the end is allowed, or a choice, or nothing printable
            i = int(np.flatnonzero(ok)[0])
            s.accept(int(self._ids[i]))
            out.append(self._chars[i])
        return "".join(out)

    def propose(self, n_max: int, gate: DraftGate | None = None) -> Draft:
        return self.peek(n_max)

    def peek(self, n_max: int) -> Draft:
        text = self.forced_text()
        return Draft(self._tokenize(text)[:n_max]) if text else Draft()

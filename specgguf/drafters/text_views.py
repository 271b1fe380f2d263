"""Escape-aware lookups: the prompt as a JSON string would spell it, and the other way round.

A coding agent writes a file through a tool call: the code is the value of a JSON string, so
every newline is `\\n`, every quote `\\"`, every backslash `\\\\`. The file itself is in the
prompt unescaped (the user pasted it, a read_file tool returned it), so an n-gram lookup keyed
on what the model is writing never finds it there: the tokens differ wherever the code has a
newline, which is every line. The reverse happens too: a tool result hands the file over as
an escaped JSON string and the model rewrites it as plain text in a code block.

So an n-gram drafter is also given *views* of the prompt: its text JSON-escaped (as it would
appear inside a string), and, where the prompt holds JSON escapes, its text with them decoded.
Each view is tokenized with the target's own tokenizer, the way the target tokenizes text it
writes, and read before the prompt itself, so that the drafter's ordinary lookups (keyed on
the last tokens emitted) find the escaped file while the output is inside a string and the
raw one elsewhere; inside a string the continuation it copies is already escaped and in the
target's tokens. No JSON string tracker is needed: the last n tokens say by themselves which
spelling they are in. Like every draft, a view only guesses; the verifier keeps the text
exact.

This module is pure (text in, text out); the tokenizer comes from the backend
(`TextViews` is built with the target's `tokenize` and `detokenize`). What a view costs is one
detokenization and at most two tokenizations of each prompt, and the drafter reads at most
`MAX_VIEW_FACTOR` times the prompt's tokens more: nothing per emitted token.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

from specgguf.core.draft import Draft, Drafter, DraftGate

#: a JSON string escape: the two-character ones and \\uXXXX
_ESCAPE = re.compile(r'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})')
_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
#: an escape right before a word character: a model writes the escape as a token of its own
#: and the word after it as another (`\\n` `def`), where tokenizing the escaped text in one
#: piece would glue the escape's letter to the word (`\\` `ndef`); views are cut there
_CUT_AFTER = re.compile(r'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})(?=\w)')
#: a view is built only when the prompt has this many escapes / escapable characters: one
#: stray backslash is no JSON document
MIN_ESCAPES = 2
#: the view tokens a drafter reads at most, as a multiple of the prompt's tokens (an escaped
#: text is longer than the raw one, never this much)
MAX_VIEW_FACTOR = 4
#: the views are made of the prompt's last this many tokens (what an agent rewrites is what
#: it was just shown): making them costs about 15 ms per 1,000 tokens (a detokenization and
#: three tokenizations), and an 8,192-token tail keeps that near 0.1 s however long the prompt
MAX_VIEW_SOURCE = 8192

#: a view of a text: the text as it would be spelled, or None where it would not change
View = Callable[[str], "str | None"]


def json_escape(text: str) -> str:
    """`text` as the body of a JSON string (without the quotes), non-ASCII kept as it is: the
    way models and `json.dumps(..., ensure_ascii=False)` write it."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _decode(match: re.Match[str]) -> str:
    code = match.group(1)
    if len(code) == 1:
        return _SIMPLE[code]
    ch = chr(int(code[1:], 16))
    # a lone surrogate (half of a pair written as two escapes) cannot be encoded: keep it
    # spelled out, the view only has to be right where the text is ordinary
    return match.group(0) if 0xD800 <= ord(ch) <= 0xDFFF else ch


def json_unescape(text: str) -> str:
    """Every JSON string escape in `text` decoded, the rest left as it is (the inverse of
    `json_escape` on its output; on any other text a tolerant reading, good enough to look
    things up in)."""
    return _ESCAPE.sub(_decode, text)


def escaped_view(text: str) -> str | None:
    """The text as it reads inside a JSON string, or None where escaping changes too little
    to be worth a view (no newline, quote or backslash to speak of)."""
    out = json_escape(text)
    return out if len(out) - len(text) >= MIN_ESCAPES else None


def single_quoted_view(text: str) -> str | None:
    """The escaped view with every double quote written as a single one, or None where the
    text has no double quotes. A model that writes code inside a JSON string often avoids
    `\\"` by switching string literals to single quotes (Python, JavaScript and shell allow
    either) and drops docstrings; this view lets the lookup follow such a rewrite."""
    if text.count('"') < MIN_ESCAPES:
        return None
    return json_escape(text.replace('"', "'"))


def unescaped_view(text: str) -> str | None:
    """The text with its JSON escapes decoded, or None where it holds almost none."""
    for n, _ in enumerate(_ESCAPE.finditer(text), start=1):
        if n >= MIN_ESCAPES:
            return json_unescape(text)
    return None


#: how text is spelled: as it is, or inside a JSON string
RAW, ESCAPED = "raw", "escaped"
#: the views every n-gram lookup is given, with the spelling each continues
VIEWS: tuple[tuple[View, str], ...] = (
    (unescaped_view, RAW),
    (single_quoted_view, ESCAPED),
    (escaped_view, ESCAPED),
)
#: a raw newline, or a JSON-escaped one (two characters)
_NEWLINE = re.compile(r"\n|\\n")


class TextViews:
    """The views of a prompt in the target's tokens: `tokenize` and `detokenize` are the
    target's (text without special tokens parsed, tokens to their text)."""

    def __init__(
        self,
        tokenize: Callable[[str], list[int]],
        detokenize: Callable[[Sequence[int]], str],
        views: Sequence[tuple[View, str]] = VIEWS,
    ) -> None:
        self.tokenize = tokenize
        self.detokenize = detokenize
        self.views = tuple(views)
        #: the last prompt asked about and its views (a server's slots ask from their own
        #: threads: the pair is replaced whole, so a reader sees one or the other)
        self._last: tuple[list[int], dict[str, list[int]]] | None = None

    def tokenize_as_written(self, text: str) -> list[int]:
        """`text` in the tokens a model writes it with: tokenized piece by piece, cut after
        each escape that a word follows (measured on the default target writing a file into
        a tool call: 73% of its 12-token runs appear in the view cut this way, 54% in the
        text tokenized whole)."""
        out: list[int] = []
        start = 0
        for m in _CUT_AFTER.finditer(text):
            out.extend(self.tokenize(text[start : m.end()]))
            start = m.end()
        out.extend(self.tokenize(text[start:]))
        return out

    def __call__(self, prompt: Sequence[int]) -> dict[str, list[int]]:
        """Spelling -> the tokens of every view of `prompt` (its last MAX_VIEW_SOURCE tokens)
        in that spelling that differs from it, one after another; all of them bounded by
        MAX_VIEW_FACTOR x the tokens viewed. The drafters of one generation ask for the same
        prompt one after another: the last answer is kept and given again."""
        if self._last is not None and self._last[0] == prompt:
            return self._last[1]
        out = self._make(prompt[-MAX_VIEW_SOURCE:])
        self._last = (list(prompt), out)
        return out

    def _make(self, prompt: Sequence[int]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {RAW: [], ESCAPED: []}
        if not prompt:
            return out
        text = self.detokenize(prompt)
        budget = MAX_VIEW_FACTOR * len(prompt)
        for view, spelling in self.views:
            spelled = view(text)
            if spelled is None:
                continue
            tokens = self.tokenize_as_written(spelled)
            budget -= len(tokens)
            if budget < 0:
                break
            out[spelling].extend(tokens)
        return out

    def spelling(self, tokens: Sequence[int], before: str = "") -> str | None:
        """How the last line break in the text of `tokens` is spelled (RAW or ESCAPED), or
        None without one: inside a JSON string a line ends in `\\n`. `before` is the text
        just before them (an escape's backslash may end the previous tokens)."""
        last = None
        for m in _NEWLINE.finditer(before + self.detokenize(tokens)):
            last = m
        if last is None:
            return None
        return RAW if last.group(0) == "\n" else ESCAPED


class WithTextViews(Drafter):
    """An n-gram lookup that reads the views of each prompt as well as the prompt.

    A lookup that copies the most recent match (ngram-simple, ngram-map-k, ...) cannot tell a
    line of the raw file from the same line of its escaped view where the key holds nothing
    to escape, and the raw prompt, read last, would win even inside a string. So such a
    drafter is two (`per_spelling`): one over the raw views and the prompt, one over the
    prompt and the escaped views; each round asks first the one whose spelling the output's
    last line break has (inside a JSON string: `\\n`), then the other. A lookup that takes
    the longest match (suffix) tells them apart by the context and is one drafter over all.

    Everything else is the inner drafters': the loop sees their name, sizes and feedback,
    and each sees its views as part of its history, so nothing about its own rules changes."""

    def __init__(
        self, make: Callable[[], Drafter], views: TextViews, *, per_spelling: bool = True
    ) -> None:
        self.inner = make()
        #: the lookup over the escaped views (None: one drafter reads everything)
        self.escaped = make() if per_spelling else None
        self.views = views
        self.max_draft = self.inner.max_draft
        #: the spelling the output is in now (the last line break's), None: not known yet
        self.mode: str | None = None
        self._before = ""  # the text of the last token observed
        self._proposer: Drafter | None = None
        #: how many view tokens the last prompt brought (for tests)
        self.view_tokens = 0

    def __setattr__(self, name: str, value: object) -> None:
        # the registry names the drafter, marks it free and gives it its tree shape after
        # building it, and the loop tells it how wide a tree the target verifies: the inner
        # ones must carry the same marks (auto and the stats read them through either)
        super().__setattr__(name, value)
        if name in ("name", "free", "tree", "tree_leaves"):
            for d in (self.__dict__.get("inner"), self.__dict__.get("escaped")):
                if d is not None:
                    setattr(d, name, value)

    def _both(self) -> list[Drafter]:
        return [self.inner] if self.escaped is None else [self.inner, self.escaped]

    def begin(self, prompt: Sequence[int]) -> None:
        views = self.views(prompt)
        raw, escaped = views[RAW], views[ESCAPED]
        self.view_tokens = len(raw) + len(escaped)
        self.mode = None
        self._before = ""
        self._proposer = None
        if self.escaped is None:
            self.inner.begin([*raw, *prompt, *escaped])
            return
        self.inner.begin([*raw, *prompt])
        self.escaped.begin([*prompt, *escaped])

    def observe(self, tokens: Sequence[int]) -> None:
        for d in self._both():
            d.observe(tokens)
        if self.escaped is not None and tokens:
            # the last token's text goes with the next ones: `\\` then `n` is one escape
            self.mode = self.views.spelling(tokens, self._before) or self.mode
            self._before = self.views.detokenize(tokens[-1:])

    def _order(self) -> list[Drafter]:
        if self.escaped is None:
            return [self.inner]
        if self.mode == ESCAPED:
            return [self.escaped, self.inner]
        return [self.inner, self.escaped]

    def propose(self, budget: int, gate: DraftGate | None = None) -> Draft:
        self._proposer = None
        for d in self._order():
            draft = d.propose(budget, gate)
            if draft.tokens:
                self._proposer = d
                return draft
        return Draft()

    def peek(self, budget: int) -> Draft:
        for d in self._order():
            draft = d.peek(budget)
            if draft.tokens:
                return draft
        return Draft()

    def feedback(self, n_drafted: int, n_accepted: int) -> None:
        if self._proposer is not None:
            self._proposer.feedback(n_drafted, n_accepted)
        self._proposer = None

    def forget(self) -> None:
        for d in self._both():
            d.forget()

    def close(self) -> None:
        for d in self._both():
            d.close()

"""The findings of one file's text: each command found is migrated and its edits planned.

The per-kind scanners (scan_shell, scan_dockerfile, scan_yaml, scan_markdown) find commands
and hand their words to `Scan.command`; `Scan.env` handles LLAMA_ARG_* variables
(specgguf.migrate.env); `resolve_overlaps` keeps two edits from ever touching the same text.
"""

from __future__ import annotations

import bisect
import re
import shlex
from dataclasses import dataclass

from specgguf.migrate import drafter_kind
from specgguf.migrate import env as migrate_env
from specgguf.migrate import removed_flags as lg
from specgguf.migrate.argv import migrate_words
from specgguf.migrate.edit import CannotQuote, Edit, ShellStyle, shell_word, text_edits
from specgguf.migrate.plan import MigrationResult, apply_ops
from specgguf.migrate.word import Word


@dataclass
class Finding:
    """One command (or variable) of a file: what it was, what it becomes, why, and the edits."""

    line: int
    old: str
    new: str
    notes: list[str]
    unsafe: list[str]
    edits: list[Edit]
    span: tuple[int, int] = (0, 0)  # the command in the original text

    @property
    def changed(self) -> bool:
        return bool(self.edits)


_ENV_RE = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(sorted({*lg.RENAMED_ENV, *lg.DEAD_ENV}))
                     + r")(?![A-Za-z0-9_])")
_LLAMA_ENV = re.compile(r"LLAMA_ARG_[A-Z0-9_]+")


class Scan:
    """Findings of one file's text; all offsets are into the whole text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.env_names = frozenset(_LLAMA_ENV.findall(text))
        self.findings: list[Finding] = []
        self._newlines: list[int] | None = None
        self.exempt: list[tuple[int, int]] = []  # free-text values: never an argument
        self.bat = False  # Windows batch: `^` continues a line
        self.base: str | None = None  # the file's directory: where relative drafts are read

    def line_of(self, offset: int) -> int:
        if self._newlines is None:  # once per file: a lookup per finding stays cheap
            self._newlines = [m.start() for m in re.finditer("\n", self.text)]
        return bisect.bisect_left(self._newlines, offset) + 1

    def command(self, seq: list[Word], tool: str, width: int, style: ShellStyle) -> None:
        """Migrate one command found in the text (`width`: the words naming the tool) and
        record it, with its edits written in `style`, when anything needs attention."""
        argv = [w.value for w in seq]
        for prev, word in zip(argv, seq[1:], strict=False):
            if lg.normalize_flag(prev) in lg.TEXT_VALUE_FLAGS \
                    and lg.normalize_flag(prev) not in lg.DRAFT_MODEL_FLAGS:
                self.exempt.append((word.start, word.end))
        dynamic = frozenset(i for i, w in enumerate(seq) if w.dynamic)
        res = migrate_words(argv, tool, width, dynamic, self.env_names, self.base)
        if not res.needs_attention:
            return
        notes, unsafe = list(res.notes), list(res.unsafe)
        try:
            edits = text_edits(self.text, seq, res.ops, style)
        except CannotQuote as err:  # nothing is changed, so no "->" notes either
            edits, notes, unsafe = [], [], [*unsafe, str(err)]
        old, new = self._display(seq, res, style)
        self.findings.append(Finding(self.line_of(seq[0].start), old,
                                     new if edits else old, notes, unsafe, edits,
                                     (seq[0].start, seq[-1].end)))

    def _display(self, seq: list[Word], res: MigrationResult, style: ShellStyle
                 ) -> tuple[str, str]:
        if style.list_like or style.outer:
            return shlex.join(res.original), shlex.join(res.argv)
        raw = [re.sub(r"\\\r?\n[ \t]*", "", self.text[w.start:w.end]) for w in seq]
        return " ".join(raw), " ".join(apply_ops(raw, res.ops, shell_word))

    def env(self, start: int, end: int) -> None:
        """Old LLAMA_ARG_* names: renamed where there is a successor, reported where not.

        A block that relied on the old draft behaviour also gets LLAMA_ARG_SPEC_TYPE and the
        old defaults (specgguf.migrate.env), or is reported when that cannot be decided.
        """
        spans: list[tuple[int, int, str]] = []
        for m in _ENV_RE.finditer(self.text, start, end):
            line_start = self.text.rfind("\n", 0, m.start()) + 1
            if re.search(r"(^|\s)#", self.text[line_start:m.start()]):
                continue  # a comment
            name = m.group(1)
            if name in lg.DEAD_ENV:
                self.findings.append(Finding(self.line_of(m.start()), name, name, [],
                                             [f"{name} {lg.DEAD_ENV[name]}"], [],
                                             (m.start(), m.end())))
                continue
            spans.append((m.start(), m.end(), name))
        if not spans:
            return
        inserted = " ".join(e.text for f in self.findings for e in f.edits)
        flags = {lg.normalize_flag(t.split("=")[0])
                 for t in re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*(?:=\S*)?", self.text)}
        res = migrate_env.migrate_env(
            self.text, spans,
            spec_type_set=lg.SPEC_TYPE_FLAG in flags or "--spec-type" in inserted,
            flags_in_file=flags,
            has_draft_flag=bool(flags & lg.DRAFT_MODEL_FLAGS),
            classify=lambda value: drafter_kind.classify_draft(value, self.base))
        for s, e, new in res.renames:
            name = self.text[s:e]
            self.findings.append(Finding(
                self.line_of(s), name, new,
                [f"{name} -> {new}: llama.cpp now "
                 f"{'refuses' if name in lg.REMOVED_ENV else 'ignores'} the old name"],
                [], [Edit(s, e, new)], (s, e)))
        for edit in res.inserts:
            line = self.line_of(edit.start)
            shown = "; ".join(x.strip() for x in edit.text.splitlines() if x.strip())
            self.findings.append(Finding(line, "", shown, [], [],
                                         [Edit(edit.start, edit.end, edit.text)],
                                         (edit.start, edit.end)))
        for at, note in res.notes:
            self.findings.append(Finding(self.line_of(at), "", "", [note], [], [], (at, at)))
        for at, why in res.unsafe:
            a = self.text.rfind("\n", 0, at) + 1
            self.findings.append(Finding(self.line_of(at), "", "", [], [why], [],
                                         (a, self.text.find("\n", at) % (len(self.text) + 1))))

    def resolve_overlaps(self) -> None:
        """A bug guard: overlapping edits would corrupt the file, so report those instead."""
        taken: list[tuple[int, int]] = []  # sorted, never overlapping: ends rise with starts
        for f in sorted(self.findings, key=lambda f: min((e.start for e in f.edits),
                                                         default=0)):
            spans = [(e.start, e.end) for e in f.edits]
            if any(_overlaps(taken, a, b) for a, b in spans):
                f.unsafe.append("overlaps another edit; migrate this one by hand")
                f.edits, f.new = [], f.old
                continue
            for span in spans:
                bisect.insort(taken, span)


def _overlaps(taken: list[tuple[int, int]], a: int, b: int) -> bool:
    k = bisect.bisect_right(taken, (b, b)) - 1
    while k >= 0 and taken[k][1] >= a:
        x, y = taken[k]
        if (a < y and x < b) or (a == b == x == y):
            return True
        k -= 1
    return False

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

from specgguf.migrate import drafter_kind, guard
from specgguf.migrate import env as migrate_env
from specgguf.migrate import removed_flags as lg
from specgguf.migrate.argv import migrate_words
from specgguf.migrate.edit import CannotQuote, Edit, ShellStyle, shell_word, text_edits
from specgguf.migrate.plan import Fragment, MigrationResult, apply_ops
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
_OPTION = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*(?:=\S*)?")
_SPEC_TYPE_VALUE = re.compile(r"(?:--spec[-_]type|LLAMA_ARG_SPEC_TYPE)[\s=:\"',\[\]]+"
                              r"([a-z][\w-]*(?:,[a-z][\w-]*)*)")
_LLAMA_TOOL = re.compile(r"(?<![\w-])(" + "|".join(sorted(lg.LLAMA_TOOLS, key=len, reverse=True))
                         + r")(?![\w-])")
_VLLM_ONLY = frozenset({*lg.VLLM_KEYS, *lg.VLLM_GONE})
#: options that only llama.cpp's tools take: words holding one are not a vLLM command
_LLAMA_ONLY = frozenset({*lg.REMOVED_BY_NAME, *lg.DRAFT_MODEL_FLAGS, lg.SPEC_TYPE_FLAG})


#: words that run the command after them (exec "$LLAMA" ..., nohup $BIN ...)
_PREFIX_WORDS = frozenset({"exec", "nohup", "time", "command", "env", "nice", "setsid"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _command_prefix(seq: list[Word]) -> int:
    """How many words before the command: exec, nohup, time, env and `NAME=value`
    assignments (a tool they run is found by name anyway; this is for one in a variable)."""
    n = 0
    while n < len(seq) - 1 and (seq[n].value in _PREFIX_WORDS
                                or (_ASSIGNMENT.match(seq[n].value) and not seq[n].dynamic)):
        n += 1
    return n


class Scan:
    """Findings of one file's text; all offsets are into the whole text."""

    def __init__(self, text: str, draft_kind: str | None = None) -> None:
        self.text = text
        self.draft_kind = draft_kind  # --draft-kind: what a draft that cannot be read is
        # `specgguf-migrate: draft-kind=KIND` comments: each holds from its line on
        self._directives = [(m.start(), m.group(1))
                            for m in drafter_kind.DIRECTIVE.finditer(text)]
        self.env_names = frozenset(_LLAMA_ENV.findall(text))
        self.findings: list[Finding] = []
        self._newlines: list[int] | None = None
        self.exempt: list[tuple[int, int]] = []  # free-text values: never an argument
        self.bat = False  # Windows batch: `^` continues a line
        self.ps = False  # PowerShell: ` continues a line
        self.docs = False  # Markdown: `<draft.gguf>` placeholders are words
        self.base: str | None = None  # the file's directory: where relative drafts are read
        self._flags: frozenset[str] | None = None
        self._types: tuple[str, ...] | None = None  # what --spec-type names in the text
        self._added_types: list[str] = []  # what this scan added to a fragment

    def draft_kind_at(self, offset: int) -> str | None:
        """The draft kind said for what stands at `offset`: the last directive above it, else
        --draft-kind."""
        said = [kind for at, kind in self._directives if at <= offset]
        return said[-1] if said else self.draft_kind

    def line_of(self, offset: int) -> int:
        if self._newlines is None:  # once per file: a lookup per finding stays cheap
            self._newlines = [m.start() for m in re.finditer("\n", self.text)]
        return bisect.bisect_left(self._newlines, offset) + 1

    def flags_in_file(self) -> frozenset[str]:
        """Every option name written anywhere in the text, normalized (computed once)."""
        if self._flags is None:
            self._flags = frozenset(lg.normalize_flag(t.split("=")[0])
                                    for t in _OPTION.findall(self.text))
        return self._flags

    def fragment_context(self) -> Fragment:
        """The file's options and speculative types, those this scan added included (a second
        fragment then gets no second --spec-type)."""
        if self._types is None:
            types: list[str] = []
            for m in _SPEC_TYPE_VALUE.finditer(self.text):
                for t in m.group(1).split(","):
                    t = lg.REMOVED_SPEC_TYPES.get(t, t)
                    if t not in types and t != "none":
                        types.append(t)
            self._types = tuple(types)
        return Fragment(self.flags_in_file(), (*self._types, *self._added_types))

    def fragment(self, seq: list[Word], style: ShellStyle) -> bool:
        """Options found without their tool's name: a bash array, a string kept in a
        variable, a YAML list of flags, a bare line in Markdown, vLLM's flags after a wrapper.

        The dialect is vLLM's when the words hold only vLLM's removed flags; otherwise it is
        that of the llama.cpp tool the file runs (llama-server when it names none). llama.cpp
        options are taken only where the words start with an option or a variable (`echo
        --draft-max` is someone's text; vLLM's flags may follow any wrapper). Returns whether
        the words were taken (they are then migrated, or reported).
        """
        if not seq or any(w.value.endswith(lg.SPECGGUF) for w in seq):
            return False  # `specgguf migrate -- ...`: an example of this tool, kept as written
        names = {lg.normalize_flag(lg.split_flag(w.value)[0]) for w in seq
                 if not guard.someone_elses(self.text, w.start, w.value)}
        if not names & (_LLAMA_ONLY | _VLLM_ONLY):
            return False
        if names & _VLLM_ONLY and not names & _LLAMA_ONLY:
            self.command(seq, lg.VLLM, 0, style)
            return True
        lead = _command_prefix(seq)
        if lead and seq[lead].dynamic:  # `exec "$LLAMA_SERVER" ...`: the variable runs
            seq = seq[lead:]
        if not (seq[0].value.startswith("-") or seq[0].dynamic):
            return False
        m = _LLAMA_TOOL.search(self.text)
        self.command(seq, m.group(1) if m else lg.LLAMA_SERVER, 0, style,
                     fragment=self.fragment_context())
        return True

    def command(self, seq: list[Word], tool: str, width: int, style: ShellStyle,
                fragment: Fragment | None = None) -> None:
        """Migrate one command found in the text (`width`: the words naming the tool) and
        record it, with its edits written in `style`, when anything needs attention."""
        argv = [w.value for w in seq]
        for prev, word in zip(argv, seq[1:], strict=False):
            if lg.normalize_flag(prev) in lg.TEXT_VALUE_FLAGS \
                    and lg.normalize_flag(prev) not in lg.DRAFT_MODEL_FLAGS:
                self.exempt.append((word.start, word.end))
        dynamic = frozenset(i for i, w in enumerate(seq) if w.dynamic)
        res = migrate_words(argv, tool, width, dynamic, self.env_names, self.base,
                            self.draft_kind_at(seq[0].start), fragment)
        if not res.needs_attention:
            return
        notes, unsafe = list(res.notes), list(res.unsafe)
        if style.renames_only and any(op.kind != "set" for op in res.ops):
            dropped = [n for n in notes if " -> " not in n]
            why = dropped[0] if dropped else "it needs more than a new name"
            res.ops[:] = []
            notes, unsafe = [], [*unsafe, f"{shlex.join(argv)}: no one-to-one replacement in "
                                          f"prose ({why}); reword it by hand"]
        try:
            edits = text_edits(self.text, seq, res.ops, style)
        except CannotQuote as err:  # nothing is changed, so no "->" notes either
            edits, notes, unsafe = [], [], [*unsafe, str(err)]
        if fragment is not None and edits:
            self._added_types += [w for op in res.ops if op.kind == "insert"
                                  for k, w in enumerate(op.words[1:])
                                  if op.words[k] == lg.SPEC_TYPE_FLAG]
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
        flags = set(self.flags_in_file())
        res = migrate_env.migrate_env(
            self.text, spans,
            spec_type_set=lg.SPEC_TYPE_FLAG in flags or "--spec-type" in inserted,
            flags_in_file=flags,
            has_draft_flag=bool(flags & lg.DRAFT_MODEL_FLAGS),
            classify=lambda value, at, unread: drafter_kind.draft_kind(
                value, self.base, self.draft_kind_at(at), unread))
        for s, e, new in res.renames:
            name = self.text[s:e]
            self.findings.append(Finding(
                self.line_of(s), name, new,
                [f"{name} -> {new}: llama.cpp now "
                 f"{'refuses' if name in lg.REMOVED_ENV else 'ignores'} the old name"],
                [], [Edit(s, e, new)], (s, e)))
        for edit in res.inserts:
            line = self.line_of(edit.start)
            self.findings.append(Finding(line, "", edit.shown, [], [],
                                         [Edit(edit.start, edit.end, edit.text)],
                                         (edit.start, edit.end)))
        for at, note in res.notes:
            self.findings.append(Finding(self.line_of(at), "", "", [note], [], [], (at, at)))
        for at, why in res.unsafe:
            a = self.text.rfind("\n", 0, at) + 1
            self.findings.append(Finding(self.line_of(at), "", "", [], [why], [],
                                         (a, self.text.find("\n", at) % (len(self.text) + 1))))

    def env_renames(self, start: int, end: int) -> None:
        """Old LLAMA_ARG_* names in prose (Markdown inline code): the new name where there is
        one, as an inline flag gets its new name; nothing is added to a sentence."""
        for m in _ENV_RE.finditer(self.text, start, end):
            name = m.group(1)
            new = lg.RENAMED_ENV.get(name)
            if new is not None:
                self.findings.append(Finding(
                    self.line_of(m.start()), name, new,
                    [f"{name} -> {new}: llama.cpp now "
                     f"{'refuses' if name in lg.REMOVED_ENV else 'ignores'} the old name"],
                    [], [Edit(m.start(), m.end(), new)], (m.start(), m.end())))

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

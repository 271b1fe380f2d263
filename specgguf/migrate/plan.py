"""One command as a list of words: its options, and the edits a dialect plans on them.

A dialect (llama_argv, vllm_argv) reads the options `scan_flags` finds and records what it
would change in a `Plan`; the plan becomes a `MigrationResult` whose `ops` are operations on
word indices, so the same edit can be applied to a list of words (`apply_ops`) or, through
the lexers' word positions, to the text of a file (specgguf.migrate.edit).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from specgguf.migrate import removed_flags as lg


@dataclass(frozen=True)
class Op:
    """An edit on word indices: "set" word `index`, "delete" it, "insert" `words` after it."""

    kind: str
    index: int
    words: tuple[str, ...] = ()


@dataclass
class MigrationResult:
    """A migrated command: its new words, why each change (notes), what was refused (unsafe),
    the edits as `ops` on the original words, and the dialect (`tool`) it was read in."""

    argv: list[str]
    notes: list[str]
    unsafe: list[str]
    ops: list[Op]
    tool: str
    original: list[str]

    @property
    def changed(self) -> bool:
        return self.argv != self.original

    @property
    def needs_attention(self) -> bool:
        return self.changed or bool(self.unsafe)


@dataclass
class Flag:
    """One option as written in the command: where it is, and its value and where that is."""

    name: str  # normalized (`--a_b` -> `--a-b`)
    typed: str  # as written, without `=value`
    index: int
    value: str | None
    value_index: int | None  # == index for `--flag=value`
    dynamic: bool

    @property
    def inline(self) -> bool:
        return self.value_index == self.index

    @property
    def last_index(self) -> int:
        return self.index if self.value_index is None else self.value_index

    def show(self) -> str:
        if self.value is None:
            return self.typed
        sep = "=" if self.inline else " "
        return f"{self.typed}{sep}{self.value}"


# How many words follow each option we must step over or read. Free-text values (-p ...) are
# here so that a prompt mentioning "--draft-max" is never taken for the flag.
_ARITY: dict[str, int] = {
    **lg.value_flags(),  # every llama.cpp option with a value: the flag table's
    **{name: 1 for name in lg.REMOVED_BY_NAME},
    **{name: 1 for name in lg.DRAFT_MODEL_FLAGS},
    **{name: 1 for name in lg.CTX_FLAGS},
    **{name: 1 for name in lg.VLLM_KEYS},
    **{name: n for name, n in lg.VLLM_GONE.items() if n},
    **{name: 1 for name in lg.SGLANG_FLAGS},
    **{f.new: 1 for f in lg.SGLANG_FLAGS.values()},
    lg.SPEC_TYPE_FLAG: 1,
    "--spec-draft-n-max": 1, "--spec-draft-n-min": 1, "--spec-draft-p-min": 1,
    "--draft-p-min": 1, "--spec-draft-p-split": 1, "--draft-p-split": 1,
    "--speculative-config": 1,
    **lg.TEXT_VALUE_FLAGS,
}
_NUMBER = re.compile(r"-?\d+(\.\d*)?")


def scan_flags(argv: Sequence[str], start: int, dynamic: frozenset[int]
                ) -> tuple[list[Flag], list[str]]:
    """Options in order, and the words whose meaning is unknowable here ($ARGS and the like)."""
    flags: list[Flag] = []
    opaque: list[str] = []
    i = start
    while i < len(argv):
        tok = argv[i]
        typed, inline = lg.split_flag(tok)
        name = lg.normalize_flag(typed)
        arity = _ARITY.get(name)
        if arity is None and inline is not None:  # `=` only splits options we know
            typed, inline, name = tok, None, lg.normalize_flag(tok)
            arity = _ARITY.get(name)
        if arity is not None:
            if inline is not None:
                flags.append(Flag(name, typed, i, inline, i, i in dynamic))
                i += arity
            elif arity and i + 1 < len(argv):
                flags.append(Flag(name, typed, i, argv[i + 1], i + 1, i + 1 in dynamic))
                i += 1 + arity
            else:
                flags.append(Flag(name, typed, i, None, None, False))
                i += 1
            continue
        if tok.startswith("-") and len(tok) > 1 and not _NUMBER.fullmatch(tok):
            flags.append(Flag(name, typed, i, None, None, False))
        elif i in dynamic and (i == start or not argv[i - 1].startswith("-")):
            opaque.append(tok)  # not the value of a preceding option: a bag of arguments
        i += 1
    return flags, opaque


@dataclass(frozen=True)
class Fragment:
    """What the rest of a file says, for options found without their tool's name (a bash
    array, a string kept in a variable, a YAML list of flags, a bare line in Markdown).

    Such words end up in some command, so a value they leave out may be set elsewhere in the
    same file: an option written anywhere in it is not added as an old default, and a
    --spec-type anywhere in it stands for the fragment's too.
    """

    flags: frozenset[str]  # every option name written in the file, normalized
    spec_types: tuple[str, ...]  # the types --spec-type / LLAMA_ARG_SPEC_TYPE name, renamed


class Plan:
    """Collects the operations, reasons and refusals for one command."""

    def __init__(self, argv: list[str], tool: str, start: int, dynamic: frozenset[int],
                 env_names: frozenset[str], base: str | None = None,
                 draft_kind: str | None = None, fragment: Fragment | None = None) -> None:
        self.base = base  # the directory relative draft paths are read from
        self.draft_kind = draft_kind  # what a draft that cannot be read is (--draft-kind)
        self.fragment = fragment  # None for a command that names its tool
        self.argv, self.tool, self.start = argv, tool, start
        self.dynamic, self.env_names = dynamic, env_names
        self.notes: list[str] = []
        self.unsafe: list[str] = []
        self._sets: dict[int, str] = {}
        self._deletes: set[int] = set()
        self._inserts: dict[int, list[str]] = {}

    def rename(self, flag: Flag, new_name: str | None = None,
               new_value: str | None = None) -> None:
        """Keeps the form the user wrote: `--a=v` stays one word, `--a v` two."""
        if flag.inline:
            value = flag.value if new_value is None else new_value
            self._sets[flag.index] = f"{new_name or flag.typed}={value}"
            return
        if new_name is not None:
            self._sets[flag.index] = new_name
        if new_value is not None and flag.value_index is not None:
            self._sets[flag.value_index] = new_value

    def delete(self, flag: Flag) -> None:
        self._deletes.add(flag.index)
        if flag.value_index is not None:
            self._deletes.add(flag.value_index)

    def insert(self, after: int, words: Sequence[str]) -> None:
        self._inserts.setdefault(after, []).extend(words)

    def ops(self) -> list[Op]:
        ops = [Op("set", i, (w,)) for i, w in sorted(self._sets.items())]
        ops += [Op("delete", i) for i in sorted(self._deletes)]
        ops += [Op("insert", i, tuple(ws)) for i, ws in sorted(self._inserts.items())]
        return ops

    def result(self) -> MigrationResult:
        ops = self.ops()
        return MigrationResult(apply_ops(self.argv, ops), self.notes, self.unsafe, ops,
                               self.tool, list(self.argv))


def apply_ops(argv: Sequence[str], ops: Iterable[Op],
              render: Callable[[str], str] | None = None) -> list[str]:
    """The words after `ops`; `render` (for display) is applied to new words only."""
    fresh = render or (lambda w: w)
    sets = {op.index: op.words[0] for op in ops if op.kind == "set"}
    deletes = {op.index for op in ops if op.kind == "delete"}
    inserts = {op.index: op.words for op in ops if op.kind == "insert"}
    out: list[str] = []
    for i, tok in enumerate(argv):
        if i not in deletes:
            out.append(fresh(sets[i]) if i in sets else tok)
        out.extend(fresh(w) for w in inserts.get(i, ()))
    return out

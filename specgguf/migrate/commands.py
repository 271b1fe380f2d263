"""`specgguf migrate`: rewrite removed llama.cpp / vLLM speculative-decoding flags.

Three layers, each pure and testable on its own:

1. `migrate_argv` works on a command as a list of words and returns the new list, the reasons,
   and what it refused to guess, plus the edits as operations on word indices.
2. Lexers turn shell text, JSON arrays and YAML lists into words that remember where every
   character came from, so an edit can replace just the changed characters of a token: the
   indentation, quoting, continuations and comments around it stay byte-for-byte the same.
3. Scanners find invocations in shell scripts, Dockerfiles, Makefiles, YAML (compose, k8s,
   CI) and Markdown code blocks; `run_migrate` reports, checks, diffs or rewrites files.

What was removed, and the defaults that changed, live in specgguf.migrate.removed_flags
(shared with `run`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from specgguf.migrate import removed_flags as lg

# ---------------------------------------------------------------------------------------------
# Layer 1: one command as a list of words
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """An edit on word indices: "set" word `index`, "delete" it, "insert" `words` after it."""

    kind: str
    index: int
    words: tuple[str, ...] = ()


@dataclass
class MigrationResult:
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
class _Flag:
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


# vLLM's pre-0.8 flags and the --speculative-config key each became
_VLLM_KEYS: dict[str, tuple[str, type]] = {
    "--speculative-model": ("model", str),
    "--num-speculative-tokens": ("num_speculative_tokens", int),
    "--ngram-prompt-lookup-max": ("prompt_lookup_max", int),
    "--ngram-prompt-lookup-min": ("prompt_lookup_min", int),
    "--speculative-draft-tensor-parallel-size": ("draft_tensor_parallel_size", int),
    "-spec-draft-tp": ("draft_tensor_parallel_size", int),
    "--speculative-max-model-len": ("max_model_len", int),
    "--speculative-model-quantization": ("quantization", str),
}
# V0-only knobs with no --speculative-config key today: reported, never dropped silently
_VLLM_GONE: dict[str, int] = {
    # current SpeculativeConfig has no disable_by_batch_size: vLLM rejects the key
    "--speculative-disable-by-batch-size": 1,
    "--spec-decoding-acceptance-method": 1,
    "--typical-acceptance-sampler-posterior-threshold": 1,
    "--typical-acceptance-sampler-posterior-alpha": 1,
    "--speculative-disable-mqa-scorer": 0,
    "--disable-logprobs-during-spec-decoding": 0,
}
_VLLM_KEY_ORDER = ("method", "model", "num_speculative_tokens", "prompt_lookup_max",
                   "prompt_lookup_min")

# How many words follow each option we must step over or read. Free-text values (-p ...) are
# here so that a prompt mentioning "--draft-max" is never taken for the flag.
_ARITY: dict[str, int] = {
    **{name: 1 for name in lg.REMOVED_BY_NAME},
    **{name: 1 for name in lg.DRAFT_MODEL_FLAGS},
    **{name: 1 for name in lg.CTX_FLAGS},
    **{name: 1 for name in _VLLM_KEYS},
    **{name: n for name, n in _VLLM_GONE.items() if n},
    lg.SPEC_TYPE_FLAG: 1,
    "--spec-draft-n-max": 1, "--spec-draft-n-min": 1, "--spec-draft-p-min": 1,
    "--draft-p-min": 1, "--spec-draft-p-split": 1, "--draft-p-split": 1,
    "--speculative-config": 1,
    **lg.TEXT_VALUE_FLAGS,
}
_NUMBER = re.compile(r"-?\d+(\.\d*)?")


def _scan_flags(argv: Sequence[str], start: int, dynamic: frozenset[int]
                ) -> tuple[list[_Flag], list[str]]:
    """Options in order, and the words whose meaning is unknowable here ($ARGS and the like)."""
    flags: list[_Flag] = []
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
                flags.append(_Flag(name, typed, i, inline, i, i in dynamic))
                i += arity
            elif arity and i + 1 < len(argv):
                flags.append(_Flag(name, typed, i, argv[i + 1], i + 1, i + 1 in dynamic))
                i += 1 + arity
            else:
                flags.append(_Flag(name, typed, i, None, None, False))
                i += 1
            continue
        if tok.startswith("-") and len(tok) > 1 and not _NUMBER.fullmatch(tok):
            flags.append(_Flag(name, typed, i, None, None, False))
        elif i in dynamic and (i == start or not argv[i - 1].startswith("-")):
            opaque.append(tok)  # not the value of a preceding option: a bag of arguments
        i += 1
    return flags, opaque


class _Plan:
    """Collects the operations, reasons and refusals for one command."""

    def __init__(self, argv: list[str], tool: str, start: int, dynamic: frozenset[int],
                 env_names: frozenset[str], base: str | None = None) -> None:
        self.base = base  # the directory relative draft paths are read from
        self.refused = False  # nothing of this command may change: a person must decide
        self.argv, self.tool, self.start = argv, tool, start
        self.dynamic, self.env_names = dynamic, env_names
        self.notes: list[str] = []
        self.unsafe: list[str] = []
        self._sets: dict[int, str] = {}
        self._deletes: set[int] = set()
        self._inserts: dict[int, list[str]] = {}

    def rename(self, flag: _Flag, new_name: str | None = None,
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

    def delete(self, flag: _Flag) -> None:
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


_IMAGE_TOOLS = (
    (re.compile(r"llama[._-]?cpp[^:\s]*:server(?:[-.:\w]*)$", re.I), lg.LLAMA_SERVER),
    (re.compile(r"llama[._-]?cpp[^:\s]*:light(?:[-.:\w]*)$", re.I), lg.LLAMA_CLI),
    (re.compile(r"(?:^|/)vllm-openai(?::[-.\w]+)?$"), lg.VLLM),
)


def image_tool(image: str) -> str | None:
    """The tool a container image runs by default (ghcr.io/ggml-org/llama.cpp:server...)."""
    for pattern, tool in _IMAGE_TOOLS:
        if pattern.search(image):
            return tool
    return None


def _basename(word: str) -> str:
    base = re.split(r"[/\\]", word)[-1]
    return base[:-4] if base.lower().endswith(".exe") else base


def find_anchor(words: Sequence[str]) -> tuple[int, str, int] | None:
    """(index, tool, words the tool name takes) of the first invocation in `words`."""
    for k, word in enumerate(words):
        base = _basename(word)
        if base in lg.LLAMA_TOOLS:
            return k, base, 1
        if base == lg.SPECGGUF:
            rest = [w for w in words[k + 1:] if not w.startswith("-")]
            return None if rest[:1] == ["migrate"] else (k, lg.SPECGGUF, 1)
        if base == "vllm" and words[k + 1:k + 2] == ["serve"]:
            return k, lg.VLLM, 2
        if word == "vllm.entrypoints.openai.api_server":
            return k, lg.VLLM, 1
        tool = image_tool(word)
        if tool:
            return k, tool, 1
    return None


def migrate_argv(argv: Sequence[str], *, tool: str | None = None,
                 dynamic: Iterable[int] = (), env_names: Iterable[str] = ()) -> MigrationResult:
    """Migrate one command given as words (`["llama-server", "-m", ...]`).

    `tool` forces the dialect when argv holds only arguments (a compose `command:` list under
    a llama.cpp image); `dynamic` marks words whose value the shell decides ($N); `env_names`
    are LLAMA_ARG_* variables set elsewhere in the same file, which may already set a value.
    """
    words = list(argv)
    start = 0
    if tool is None:
        anchor = find_anchor(words)
        tool, start = (anchor[1], anchor[0] + anchor[2]) if anchor else (lg.GENERIC, 0)
    elif words and _basename(words[0]) == tool:
        start = 2 if tool == lg.VLLM and words[1:2] == ["serve"] else 1
    return _migrate(words, tool, start, frozenset(dynamic), frozenset(env_names))


def _migrate(argv: list[str], tool: str, start: int, dynamic: frozenset[int],
             env_names: frozenset[str], base: str | None = None) -> MigrationResult:
    plan = _Plan(argv, tool, start, dynamic, env_names, base)
    if tool == lg.VLLM:
        _migrate_vllm(plan)
    else:
        _migrate_llama(plan)
    return plan.result()


# --- llama.cpp -------------------------------------------------------------------------------


@dataclass
class _SpecTypes:
    types: list[str] = field(default_factory=list)
    source: str = ""  # what else may select types (a variable, $ARGS); "" when all is here
    renamed: bool = False
    new_names: bool = False  # draft-simple & co. exist only in llama.cpp after the rename

    @property
    def known(self) -> bool:
        return not self.source

    @property
    def drafts(self) -> list[str]:
        return [t for t in self.types if t.startswith("draft")]

    @property
    def ngrams(self) -> list[str]:
        return [t for t in self.types if t.startswith("ngram-")]


def _spec_types(plan: _Plan, spec_flags: list[_Flag], opaque: list[str]) -> _SpecTypes:
    """What --spec-type selects once renamed; `known` is False when the shell decides."""
    st = _SpecTypes()
    if opaque:
        st.source = f"{opaque[0]} may set --spec-type"
    elif not spec_flags and lg.SPEC_TYPE_ENV in plan.env_names:
        st.source = f"{lg.SPEC_TYPE_ENV} is set in this file"
    for flag in spec_flags:
        if flag.value is None or flag.dynamic:
            st.source = st.source or f"--spec-type is {flag.value or 'missing its value'}"
            continue
        items = flag.value.split(",")
        new_items = [lg.REMOVED_SPEC_TYPES.get(t.strip(), t) for t in items]
        if new_items != items:
            new_value = ",".join(new_items)
            plan.rename(flag, new_value=new_value)
            plan.notes.append(f"{flag.show()} -> {flag.typed} {new_value}: llama.cpp renamed "
                              "the type")
            st.renamed = True
        st.new_names |= any(t.strip().startswith("draft-") for t in items)
        for t in new_items:
            t = t.strip()
            if t == "none":
                st.types = []
            elif t not in st.types:
                st.types.append(t)
    return st


def _choose(entry: lg.RemovedFlag, tool: str, st: _SpecTypes, has_draft: bool
            ) -> tuple[str | None, str]:
    """The replacement for a removed numeric option, or None and why not."""
    if entry.draft_flag and tool not in lg.SPEC_TYPE_TOOLS | {lg.SPECGGUF, lg.GENERIC}:
        return entry.draft_flag, ""  # llama-speculative / llama-lookup have no --spec-type
    if entry.draft_flag:
        if "ngram-mod" in st.types and st.drafts:
            return None, (f"--spec-type names both ngram-mod and {st.drafts[0]}, so it cannot be "
                          f"told whether it bounded the draft model ({entry.draft_flag}) or "
                          f"ngram-mod ({entry.ngram_flags['ngram-mod']})")
        if "ngram-mod" in st.types:
            return entry.ngram_flags["ngram-mod"], ""
        if not st.known and not has_draft:
            return None, (f"{st.source}, so it cannot be told whether to use "
                          f"{entry.draft_flag} or {entry.ngram_flags['ngram-mod']}")
        return entry.draft_flag, ""
    if not st.known:
        return None, f"{st.source}, so the ngram type it configured is unknown"
    if not st.ngrams:
        return None, "no ngram type in --spec-type, so the ngram type it configured is unknown"
    if len(st.ngrams) > 1:
        return None, (f"--spec-type names several ngram types ({', '.join(st.ngrams)}); each "
                      "now has its own option")
    new = entry.ngram_flags.get(st.ngrams[0])
    if new is None:
        return None, f"{st.ngrams[0]} has no equivalent setting"
    return new, ""


def _last(flags: list[_Flag], names: Iterable[str]) -> _Flag | None:
    wanted = set(names)
    found = [f for f in flags if f.name in wanted]
    return found[-1] if found else None


def _drop_ctx_draft(plan: _Plan, flag: _Flag, flags: list[_Flag]) -> None:
    """There is nothing to rename -cd to; say what the draft context becomes instead."""
    plan.delete(flag)
    ctx = _last(flags, lg.CTX_FLAGS)
    head = f"{flag.show()} removed: the draft context now follows the target's"
    if flag.value is None:
        plan.notes.append(head)
    elif flag.dynamic or (ctx is not None and (ctx.dynamic or ctx.value is None)):
        plan.notes.append(f"{head}; cannot compare {flag.value} with -c here, check it")
    elif ctx is None:
        plan.notes.append(f"warning: {head} (no -c: the model's training context), "
                          f"it was {flag.value}")
    elif _same_int(flag.value, ctx.value):
        plan.notes.append(f"{head} ({ctx.show()}, the same value)")
    else:
        plan.notes.append(f"warning: {head}: it was {flag.value}, it is now {ctx.show()}")


def _same_int(a: str | None, b: str | None) -> bool:
    try:
        return int(a or "") == int(b or "")
    except ValueError:
        return a == b


#: options of llama.cpp forks (DFlash, MTP heads, EAGLE builds): such a command was written
#: for that fork, whose own flags (--draft-max included) may still be valid there
FORK_FLAGS = frozenset({"--dflash", "--mtp", "-mtp", "--mtp-head", "--eagle", "--eagle3",
                        "--draft-block-size", "--dflash-model", "--spec-dflash"})
#: what each drafter kind is called in reports
DRAFTER_NAMES = {"mtp": "an MTP drafter", "eagle3": "an EAGLE-3 drafter",
                 "dflash": "a DFlash drafter"}


def classify_draft(value: str, base: str | None = None) -> tuple[str | None, str]:
    """("plain" | "mtp" | "eagle3" | "dflash", "") for a draft file we can read, else (None, why).

    Current llama.cpp takes MTP, EAGLE-3 and DFlash drafters' type from their GGUF, and uses a
    plain draft model only with `--spec-type draft-simple`; so whether to add that option
    depends on the file. When the file is not here to read, nothing is guessed.
    """
    if not value or value.startswith(("$", "%", "{")) or "$" in value:
        return None, f"{value or 'its path'} is decided when the command runs"
    candidates = [value] if os.path.isabs(value) or base is None \
        else [os.path.join(base, value), value]
    path = next((c for c in candidates if os.path.isfile(c)), None)
    if path is None:
        return None, f"{value} is not here to read"
    from specgguf.backend.gguf_info import read_gguf_info

    try:
        info = read_gguf_info(path)
    except Exception as err:  # any unreadable file: report, never guess
        return None, f"cannot read {value}: {str(err).splitlines()[0]}"
    arch = info.architecture.lower()
    meta = info.metadata
    name = f"{arch} {meta.get('general.name') or ''} {meta.get('general.basename') or ''}".lower()
    if "dflash" in name:
        return "dflash", ""
    if "eagle" in name:
        return "eagle3", ""
    nextn = [v for k, v in meta.items() if k.endswith(".nextn_predict_layers")]
    if any(isinstance(v, int) and v > 0 for v in nextn) or "mtp" in arch \
            or "assistant" in arch:
        return "mtp", ""
    return "plain", ""


def _migrate_llama(plan: _Plan) -> None:
    flags, opaque = _scan_flags(plan.argv, plan.start, plan.dynamic)
    removed = [f for f in flags if f.name in lg.REMOVED_BY_NAME]
    fork = [f for f in flags if f.name in FORK_FLAGS]
    has_old = removed or any(f.name == lg.SPEC_TYPE_FLAG and f.value and any(
        t.strip() in lg.REMOVED_SPEC_TYPES for t in f.value.split(",")) for f in flags)
    if fork and has_old:
        plan.unsafe.append(f"{fork[0].typed} is not a llama.cpp option: this command was "
                           "written for a fork, whose flags may still be valid there; "
                           "migrate it by hand")
        return
    spec_flags = [f for f in flags if f.name == lg.SPEC_TYPE_FLAG]
    st = _spec_types(plan, spec_flags, opaque)
    draft = _last(flags, lg.DRAFT_MODEL_FLAGS)
    for flag in removed:
        entry = lg.REMOVED_BY_NAME[flag.name]
        if entry.kind == "ctx_draft":
            _drop_ctx_draft(plan, flag, flags)
            continue
        new, why = _choose(entry, plan.tool, st, draft is not None)
        if new is None:
            plan.unsafe.append(f"{flag.show()}: {why}")
            continue
        plan.rename(flag, new_name=new)
        shown = f"{new}={flag.value}" if flag.inline else f"{new} {flag.value or ''}".strip()
        plan.notes.append(f"{flag.show()} -> {shown}: llama.cpp removed {flag.name}")
    # a command with nothing removed is left as it is: it was written for current llama.cpp
    additions = _spec_type_addition(plan, st, spec_flags, draft, opaque) \
        if (removed or st.renamed) else []
    # A command that already uses names only new llama.cpp knows was written for its defaults
    # (or edited by hand against them): only commands written for the old ones keep old values.
    new_style = st.new_names or any(f.name.startswith(lg.NEW_ONLY_PREFIXES) for f in flags)
    if (removed or st.renamed or additions) and not new_style:
        additions += _old_defaults(plan, st, flags, opaque, draft is not None)
    if additions:
        after = draft.last_index if draft is not None else len(plan.argv) - 1
        plan.insert(after, additions)
    if plan.refused:  # a half-migrated command would pass --check and lose its drafting
        plan._sets.clear()
        plan._deletes.clear()
        plan._inserts.clear()
        plan.notes.clear()


def _spec_type_addition(plan: _Plan, st: _SpecTypes, spec_flags: list[_Flag],
                        draft: _Flag | None, opaque: list[str]) -> list[str]:
    """llama.cpp now ignores -md unless --spec-type names a draft type."""
    if plan.tool not in lg.SPEC_TYPE_TOOLS:
        return []
    if draft is None:
        env = sorted(plan.env_names & {"LLAMA_ARG_MODEL_DRAFT", "LLAMA_ARG_SPEC_DRAFT_MODEL"})
        if env and not spec_flags:
            plan.unsafe.append(f"a draft model may come from {env[0]} (set in this file): "
                               "llama.cpp only uses it with --spec-type draft-simple")
        return []
    if spec_flags:
        if st.known and not st.drafts:
            plan.unsafe.append(f"{draft.show()} is ignored: --spec-type {','.join(st.types)} "
                               "names no draft type (add draft-simple if it should be used)")
        return []
    if lg.SPEC_TYPE_ENV in plan.env_names or opaque:
        source = opaque[0] if opaque else lg.SPEC_TYPE_ENV
        if draft.value and not draft.dynamic \
                and classify_draft(draft.value, plan.base)[0] not in (None, "plain"):
            return []  # a drafter llama.cpp recognises from its file needs no type
        plan.unsafe.append(f"{draft.show()} needs --spec-type draft-simple now, unless {source} "
                           "already sets a draft type")
        return []
    kind, why = ("plain", "") if draft.value is None else \
        classify_draft(draft.value, plan.base) if not draft.dynamic \
        else (None, f"{draft.value} is decided when the command runs")
    if kind is None:
        st.source = st.source or "the draft file could not be read"
        plan.unsafe.append(f"{draft.show()}: cannot tell what kind of drafter it is ({why}): "
                           "add --spec-type draft-simple if it is a plain draft model (an MTP, "
                           "EAGLE-3 or DFlash drafter needs none), then migrate again")
        plan.refused = True
        st.types = ["?"]
        return []
    if kind != "plain":
        plan.notes.append(f"{draft.show()} is {DRAFTER_NAMES[kind]}: llama.cpp takes its type "
                          "from the file, so no --spec-type is added")
        st.types = [kind]
        return []
    st.types = ["draft-simple"]
    plan.notes.append(f"added --spec-type draft-simple: llama.cpp ignores {draft.typed} unless "
                      "--spec-type names a draft type")
    return [lg.SPEC_TYPE_FLAG, "draft-simple"]


def _old_defaults(plan: _Plan, st: _SpecTypes, flags: list[_Flag], opaque: list[str],
                  has_draft: bool) -> list[str]:
    """Write out the old default where a legacy command relied on one that changed."""
    out: list[str] = []
    for d in lg.OLD_DEFAULTS:
        if plan.tool not in d.tools:
            continue
        if plan.tool in lg.SPEC_TYPE_TOOLS:
            if not has_draft:
                continue  # no draft model here: the draft defaults never applied
            if st.types == ["?"]:
                continue  # reported with the drafter
            if not st.known:
                plan.unsafe.append(f"{st.source}, so it cannot be told whether draft-simple "
                                   f"is used: add {d.flag} {d.old} if it is (the old "
                                   f"{d.what} default; the new one is {d.new})")
                continue
            if "draft-simple" not in st.types:
                continue
        if any(f.name in (d.flag, *d.aliases) for f in flags):
            continue
        env = sorted(plan.env_names & set(d.envs))
        if env:
            plan.notes.append(f"{d.flag} not added: {env[0]} is set in this file")
            continue
        if opaque:
            plan.unsafe.append(f"{opaque[0]} may set {d.flag}; if it does not, add {d.flag} "
                               f"{d.old} (the old {d.what} default; the new one is {d.new})")
            continue
        out += [d.flag, d.old]
        plan.notes.append(f"added {d.flag} {d.old}: the old {d.what} default was {d.old}, "
                          f"the new default is {d.new}")
    return out


# --- vLLM ------------------------------------------------------------------------------------


def _migrate_vllm(plan: _Plan) -> None:
    """vLLM 0.8 folded the separate speculative flags into one --speculative-config JSON."""
    flags, _ = _scan_flags(plan.argv, plan.start, plan.dynamic)
    for flag in flags:
        if flag.name in _VLLM_GONE:
            plan.unsafe.append(f"{flag.show()}: no --speculative-config equivalent (current "
                               "vLLM has no such setting); remove it by hand")
    old = [f for f in flags if f.name in _VLLM_KEYS]
    if not old:
        return
    if any(f.name == "--speculative-config" for f in flags):
        plan.unsafe.append("both --speculative-config and "
                           f"{', '.join(f.typed for f in old)}: merge them by hand")
        return
    config = _vllm_config(plan, old)
    if config is None:
        return
    text = json.dumps(config)
    plan.rename(old[0], new_name="--speculative-config", new_value=text)
    for flag in old[1:]:
        plan.delete(flag)
    plan.notes.append(f"{' '.join(f.show() for f in old)} -> --speculative-config "
                      f"{shlex.quote(text)}: vLLM replaced these flags with one JSON argument")


def _vllm_config(plan: _Plan, old: list[_Flag]) -> dict[str, object] | None:
    values: dict[str, object] = {}
    for flag in old:
        key, kind = _VLLM_KEYS[flag.name]
        if flag.value is None:
            plan.unsafe.append(f"{flag.typed} has no value")
            return None
        if flag.dynamic:
            plan.unsafe.append(f"{flag.show()}: a shell variable cannot be placed inside the "
                               "--speculative-config JSON safely; write the JSON by hand")
            return None
        try:
            values[key] = kind(flag.value)
        except ValueError:
            plan.unsafe.append(f"{flag.show()}: not an integer")
            return None
    if values.get("model") == "[ngram]":
        del values["model"]
        values["method"] = "ngram"
    elif "model" not in values and {"prompt_lookup_max", "prompt_lookup_min"} & set(values):
        values["method"] = "ngram"
    elif "model" not in values:
        # no draft model: old vLLM ran the target's own multi-token-prediction layers
        # (DeepSeek-V3 style); current vLLM needs that said as method "mtp"
        values["method"] = "mtp"
        plan.notes.append("no draft model: the target's own MTP layers drafted, which current "
                          'vLLM needs as "method": "mtp"')
    ordered = {k: values[k] for k in _VLLM_KEY_ORDER if k in values}
    ordered.update((k, v) for k, v in values.items() if k not in ordered)
    return ordered


# --- `specgguf run` refusal ------------------------------------------------------------------


def corrected_run_command(sub: str, args: Sequence[str], env: Mapping[str, str]
                          ) -> tuple[str, list[str]]:
    """The exact command to type instead, and what could not be corrected safely.

    Old variables become the equivalent options (the command line wins over the environment
    in llama.cpp, and --spec-type adds to what the environment selected) and are unset with
    `env -u`, so the corrected line works whatever the shell exports.
    """
    words = list(args)
    unset: list[str] = []
    if lg.SPEC_TYPE_ENV in env and any(t.strip() in lg.REMOVED_SPEC_TYPES
                                       for t in env[lg.SPEC_TYPE_ENV].split(",")):
        unset.append(lg.SPEC_TYPE_ENV)
        words += [lg.SPEC_TYPE_FLAG, env[lg.SPEC_TYPE_ENV]]
    for var, entry in lg.REMOVED_ENV.items():
        if var not in env:
            continue
        unset.append(var)
        given = {lg.normalize_flag(lg.split_flag(w)[0]) for w in words}
        replacements = {entry.draft_flag, *entry.ngram_flags.values()}
        if not given & (set(entry.names) | replacements):
            words += [entry.names[-1], env[var]]
    result = migrate_argv(words, tool=lg.SPECGGUF)
    prefix = ["env", *(x for var in unset for x in ("-u", var))] if unset else []
    return shlex.join([*prefix, "specgguf", sub, *result.argv]), result.unsafe


# ---------------------------------------------------------------------------------------------
# Layer 2: words that remember where they came from
# ---------------------------------------------------------------------------------------------


@dataclass
class Word:
    value: str
    start: int
    end: int
    pos: tuple[int, ...]  # offset in the text of every character of `value`
    dynamic: bool = False  # the shell (or compose) decides part of it
    quote: str = ""  # the quote character when the word is exactly one quoted string
    redirect: bool = False
    prev_end: int | None = None  # end of the previous word of the same command or list
    next_start: int | None = None


_BLANK = " \t\r\f\v"
_OPERATORS = ";&|()<>"


class _ShellLexer:
    """POSIX-shell words, enough of them to find and edit commands.

    It knows quoting, escapes, `\\`-newline continuations, comments, command separators,
    redirections, $VAR / ${...} / $(...) / backticks (marked dynamic). It is not a shell: it
    does not expand anything, and heredoc bodies are read as commands.
    """

    def __init__(self, text: str, start: int, end: int, newline_is_space: bool,
                 bat: bool = False) -> None:
        self.text, self.i, self.end = text, start, end
        self.newline_is_space = newline_is_space
        self.bat = bat

    def commands(self) -> list[list[Word]]:
        commands: list[list[Word]] = []
        current: list[Word] = []
        redirect_next = False
        text, end = self.text, self.end
        while self.i < end:
            c = text[self.i]
            if c in _BLANK:
                self.i += 1
            elif c in "\\^" and self._continuation(self.i):
                self.i += self._continuation(self.i)
            elif c == "\n":
                self.i += 1
                if not self.newline_is_space:
                    commands.append(current)
                    current = []
            elif c == "#":
                nl = text.find("\n", self.i, end)
                self.i = end if nl < 0 else nl
            elif c in "<>" or (c == "&" and text.startswith(">", self.i + 1)):
                while self.i < end and text[self.i] in "<>&|-":
                    self.i += 1
                redirect_next = True
            elif c in _OPERATORS:
                while self.i < end and text[self.i] in ";&|":
                    self.i += 1
                self.i += c in "()"
                commands.append(current)
                current = []
            else:
                word = self._word()
                if redirect_next or (word.value.isdigit() and text.startswith(("<", ">"),
                                                                               self.i)):
                    word.redirect = True
                redirect_next = False
                current.append(word)
        commands.append(current)
        for cmd in commands:
            _link(cmd)
        return [cmd for cmd in commands if cmd]

    def _continuation(self, i: int) -> int:
        mark = "^" if self.bat else "\\"
        if self.text.startswith(mark + "\n", i):
            return 2
        return 3 if self.text.startswith(mark + "\r\n", i) else 0

    def _word(self) -> Word:
        text, end, start = self.text, self.end, self.i
        chars: list[str] = []
        pos: list[int] = []
        dynamic = False
        quoted_segments, bare = 0, 0
        quote = ""
        while self.i < end:
            c = text[self.i]
            if c in _BLANK or c == "\n" or c in _OPERATORS:
                break
            if c == "^" and self.bat:
                skip = self._continuation(self.i)
                if skip:
                    self.i += skip
                    continue
            if c == "%" and self.bat and re.match(r"%[\w~:.,=-]+%", text[self.i:self.i + 64]):
                dynamic = True  # %VAR%: the batch file decides
            if c == "\\" and not self.bat:
                skip = self._continuation(self.i)
                if skip:
                    self.i += skip
                    continue
                if self.i + 1 < end:
                    chars.append(text[self.i + 1])
                    pos.append(self.i + 1)
                    self.i += 2
                    bare += 1
                    continue
            if c == "'":
                close = text.find("'", self.i + 1, end)
                close = end if close < 0 else close
                chars.extend(text[self.i + 1:close])
                pos.extend(range(self.i + 1, close))
                self.i = close + 1
                quoted_segments, quote = quoted_segments + 1, "'"
            elif c == '"':
                dynamic |= self._double(chars, pos)
                quoted_segments, quote = quoted_segments + 1, '"'
            elif c in "$`":
                dynamic = True
                self._expansion(chars, pos)
                bare += 1
            else:
                chars.append(c)
                pos.append(self.i)
                self.i += 1
                bare += 1
        whole = quote if quoted_segments == 1 and not bare else ""
        return Word("".join(chars), start, self.i, tuple(pos), dynamic, whole)

    def _double(self, chars: list[str], pos: list[int]) -> bool:
        text, end = self.text, self.end
        self.i += 1
        dynamic = False
        while self.i < end:
            c = text[self.i]
            if c == '"':
                self.i += 1
                break
            if c == "\\" and self.i + 1 < end and text[self.i + 1] in '$`"\\\n':
                if text[self.i + 1] != "\n":
                    chars.append(text[self.i + 1])
                    pos.append(self.i + 1)
                self.i += 2
            elif c in "$`":
                dynamic = True
                self._expansion(chars, pos)
            else:
                chars.append(c)
                pos.append(self.i)
                self.i += 1
        return dynamic

    def _expansion(self, chars: list[str], pos: list[int]) -> None:
        """Copy $x, ${...}, $(...) or `...` verbatim: one unit, whatever it contains."""
        text, end, i = self.text, self.end, self.i
        if text[i] == "`":
            close = text.find("`", i + 1, end)
            j = end if close < 0 else close + 1
        elif text.startswith(("$(", "${"), i):
            opener = text[i + 1]
            closer = ")" if opener == "(" else "}"
            depth, j = 0, i + 1
            while j < end:
                depth += (text[j] == opener) - (text[j] == closer)
                j += 1
                if depth == 0:
                    break
        else:
            j = i + 1
        chars.extend(text[i:j])
        pos.extend(range(i, j))
        self.i = j


def _link(words: list[Word]) -> None:
    for a, b in zip(words, words[1:], strict=False):
        a.next_start, b.prev_end = b.start, a.end


def lex_shell(text: str, start: int = 0, end: int | None = None, *,
              newline_is_space: bool = False, bat: bool = False) -> list[list[Word]]:
    """Commands (lists of words) in text[start:end]; `bat`: Windows batch (`^` continues)."""
    return _ShellLexer(text, start, len(text) if end is None else end,
                       newline_is_space, bat).commands()


_JSON_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
                 "t": "\t"}


def _quoted_string(text: str, i: int, end: int, yaml_single: bool = False
                   ) -> tuple[Word, int] | None:
    """A JSON / YAML double-quoted or YAML single-quoted scalar starting at text[i]."""
    q = text[i]
    chars: list[str] = []
    pos: list[int] = []
    j = i + 1
    while j < end:
        c = text[j]
        if c == q:
            if yaml_single and text.startswith("''", j):
                chars.append("'")
                pos.append(j)
                j += 2
                continue
            word = Word("".join(chars), i, j + 1, tuple(pos), quote=q)
            return word, j + 1
        if c == "\\" and not yaml_single and j + 1 < end:
            if text[j + 1] == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[j + 2:j + 6]):
                chars.append(chr(int(text[j + 2:j + 6], 16)))
                pos.append(j)
                j += 6
                continue
            chars.append(_JSON_ESCAPES.get(text[j + 1], text[j + 1]))
            pos.append(j)
            j += 2
            continue
        chars.append(c)
        pos.append(j)
        j += 1
    return None


def _skip_flow_space(text: str, i: int, end: int) -> int:
    while i < end:
        if text[i] in " \t\r\n":
            i += 1
        elif text.startswith("\\\n", i) or text.startswith("\\\r\n", i):
            i += 2 if text[i + 1] == "\n" else 3  # Dockerfile continuation inside exec form
        elif text[i] == "#" and (i == 0 or text[i - 1] in " \t\n"):
            nl = text.find("\n", i, end)
            i = end if nl < 0 else nl
        else:
            break
    return i


def lex_list(text: str, start: int, end: int, *, yaml: bool = False
             ) -> tuple[list[Word], int] | None:
    """A JSON array of strings (Dockerfile exec form) or a YAML flow sequence: words, end."""
    i = _skip_flow_space(text, start, end)
    if i >= end or text[i] != "[":
        return None
    words: list[Word] = []
    i += 1
    while True:
        i = _skip_flow_space(text, i, end)
        if i >= end:
            return None
        c = text[i]
        if c == "]":
            _link(words)
            return words, i + 1
        if c in "\"'" and (c == '"' or yaml):
            parsed = _quoted_string(text, i, end, yaml_single=c == "'")
            if parsed is None:
                return None
            word, i = parsed
        elif yaml and c != ",":
            m = re.compile(r"[^,\]\n]*").match(text, i, end)
            raw = m.group(0).rstrip() if m else ""
            word = Word(raw, i, i + len(raw), tuple(range(i, i + len(raw))))
            i += len(raw)
        else:
            return None
        word.dynamic = yaml and _compose_dynamic(word.value)
        words.append(word)
        i = _skip_flow_space(text, i, end)
        if i < end and text[i] == ",":
            i += 1
        elif i < end and text[i] != "]":
            return None


def _compose_dynamic(value: str) -> bool:
    """Compose interpolates $VAR and ${VAR} in every string ($$ is a literal $)."""
    return bool(re.search(r"(?<!\$)\$(?!\$)", value.replace("$$", "")))


# ---------------------------------------------------------------------------------------------
# Edits: how a word is written into each kind of text
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    start: int
    end: int
    text: str


class CannotQuote(ValueError):
    """A word that cannot be written into this place of the file without restructuring it."""


_SAFE_SHELL = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def _shell_word(word: str, prefer_double: bool = False) -> str:
    """shlex.quote, or double quotes where the surrounding text is single-quoted."""
    if _SAFE_SHELL.fullmatch(word):
        return word
    if prefer_double:
        return '"' + re.sub(r'([\\"$`])', r"\\\1", word) + '"'
    return shlex.quote(word)


def _compact_json(word: str) -> str:
    """`{"a": 1}` -> `{"a":1}`: a plain YAML scalar cannot contain ": "."""
    try:
        return json.dumps(json.loads(word), separators=(",", ":"))
    except ValueError:
        return word


class ShellStyle:
    """Shell words, possibly inside a string of an outer language.

    outer: "" (plain shell), "dq"/"sq" (inside a shell "..." / '...' string), "json" (inside a
    JSON string), "yaml-dq", "yaml-sq", "yaml-plain" (inside a YAML scalar). `make` doubles
    `$` for Makefiles.
    """

    list_like = False

    def __init__(self, outer: str = "", make: bool = False) -> None:
        self.outer, self.make = outer, make

    def quote(self, word: str) -> str:
        if self.outer == "yaml-plain" and word.startswith("{"):
            word = _compact_json(word)
        inner = _shell_word(word, prefer_double=self.outer in ("sq", "yaml-sq"))
        out = self._escape(inner)
        if self.outer == "yaml-plain" and (": " in out or " #" in out):
            raise CannotQuote(f"{out} cannot go into a plain YAML string; quote the string "
                              "first")
        return out.replace("$", "$$") if self.make else out

    def _escape(self, s: str) -> str:
        if self.outer == "dq":
            return re.sub(r'([\\"$`])', r"\\\1", s)
        if self.outer in ("json", "yaml-dq"):
            return json.dumps(s, ensure_ascii=False)[1:-1]
        if self.outer == "sq":
            return s.replace("'", "'\\''")
        if self.outer == "yaml-sq":
            return s.replace("'", "''")
        return s

    def safe(self, s: str) -> bool:
        return not s or bool(_SAFE_SHELL.fullmatch(s))

    def insert(self, text: str, word: Word, new: Sequence[str]) -> Edit:
        return Edit(word.end, word.end, "".join(" " + self.quote(w) for w in new))

    def delete(self, text: str, first: Word, last: Word) -> Edit:
        if first.prev_end is not None:
            return Edit(first.prev_end, last.end, "")
        return Edit(first.start, last.next_start if last.next_start is not None else last.end,
                    "")

    def nested(self, quote: str) -> ShellStyle | None:
        """The style for a command inside one of our quoted words (sh -c "...")."""
        if self.outer:
            return None
        return ShellStyle("sq" if quote == "'" else "dq", self.make)


class FlowListStyle(ShellStyle):
    """Items of a JSON array (Dockerfile exec form) or a YAML flow sequence [a, "b"]."""

    list_like = True

    def __init__(self, yaml: bool = False) -> None:
        super().__init__()
        self.yaml = yaml

    def quote(self, word: str) -> str:
        return json.dumps(word, ensure_ascii=False)

    def safe(self, s: str) -> bool:
        return not s or bool(re.fullmatch(r"[A-Za-z0-9_@%+=:./-]+", s))

    def insert(self, text: str, word: Word, new: Sequence[str]) -> Edit:
        return Edit(word.end, word.end, "".join(", " + self.quote(w) for w in new))

    def nested(self, quote: str) -> ShellStyle | None:
        if quote == "'":
            return ShellStyle("yaml-sq")
        return ShellStyle("yaml-dq" if self.yaml else "json") if quote == '"' else None


_YAML_PLAIN_OK = re.compile(r"[A-Za-z0-9_./@%+=-][A-Za-z0-9_./@%+=:,-]*")
_YAML_NON_STRING = re.compile(
    r"[-+]?(\d[\d_]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?|0x[0-9a-fA-F]+|0o[0-7]+|\.inf|\.nan"
    r"|true|false|yes|no|on|off|y|n|null|~", re.I)


class BlockListStyle(ShellStyle):
    """Items of a YAML block sequence, one `- item` per line."""

    list_like = True

    def quote(self, word: str) -> str:
        if (_YAML_PLAIN_OK.fullmatch(word) and not _YAML_NON_STRING.fullmatch(word)
                and ": " not in word):
            return word
        if '"' in word and "'" not in word:
            return f"'{word}'"
        return json.dumps(word, ensure_ascii=False)

    def safe(self, s: str) -> bool:
        return not s or bool(re.fullmatch(r"[A-Za-z0-9_./@%+=-]+", s))

    def insert(self, text: str, word: Word, new: Sequence[str]) -> Edit:
        line_start = text.rfind("\n", 0, word.start) + 1
        m = re.compile(r"[ \t]*-[ \t]+").match(text, line_start)
        lead = m.group(0) if m else "- "
        eol = text.find("\n", word.end)
        eol = len(text) if eol < 0 else eol
        newline = "\n"
        if eol > 0 and text[eol - 1] == "\r":
            eol, newline = eol - 1, "\r\n"
        return Edit(eol, eol, "".join(f"{newline}{lead}{self.quote(w)}" for w in new))

    def delete(self, text: str, first: Word, last: Word) -> Edit:
        start = text.rfind("\n", 0, first.start) + 1
        eol = text.find("\n", last.end)
        return Edit(start, len(text) if eol < 0 else eol + 1, "")

    def nested(self, quote: str) -> ShellStyle | None:
        return ShellStyle({"'": "yaml-sq", '"': "yaml-dq"}.get(quote, "yaml-plain"))


def _set_edit(text: str, word: Word, new: str, style: ShellStyle) -> Edit:
    """Replace only the characters that changed, when they sit in one plain run of the text."""
    old = word.value
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    s = 0
    while s < min(len(old), len(new)) - p and old[-1 - s] == new[-1 - s]:
        s += 1
    mid_old, mid_new = old[p:len(old) - s], new[p:len(new) - s]
    if style.safe(mid_new) and old:
        span = _raw_span(text, word, p, len(old) - s, mid_old)
        if span is not None:
            return Edit(span[0], span[1], mid_new)
    return Edit(word.start, word.end, style.quote(new))


def _raw_span(text: str, word: Word, a: int, b: int, mid_old: str) -> tuple[int, int] | None:
    pos = word.pos
    if a < b:
        lo, hi = pos[a], pos[b - 1] + 1
        return (lo, hi) if text[lo:hi] == mid_old else None
    if a == 0:
        return pos[0], pos[0]
    at = pos[a - 1] + 1
    if a < len(pos) and pos[a] != at:
        return None
    return at, at


def text_edits(text: str, words: Sequence[Word], ops: Iterable[Op],
               style: ShellStyle) -> list[Edit]:
    """The text edits that carry out `ops` on `words` (which are argv, index for index)."""
    edits: list[Edit] = []
    deleted = sorted(op.index for op in ops if op.kind == "delete")
    for op in ops:
        if op.kind == "set":
            edits.append(_set_edit(text, words[op.index], op.words[0], style))
        elif op.kind == "insert":
            edits.append(style.insert(text, words[op.index], op.words))
    for run in _runs(deleted):
        edits.append(style.delete(text, words[run[0]], words[run[-1]]))
    return edits


def _runs(indices: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """Apply non-overlapping edits; at one offset a deletion goes before an insertion."""
    for e in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        text = text[:e.start] + e.text + text[e.end:]
    return text


# ---------------------------------------------------------------------------------------------
# Layer 3: finding invocations in files
# ---------------------------------------------------------------------------------------------


@dataclass
class Finding:
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


_TOOL_HINT = re.compile(r"llama-(?:server|cli|speculative|lookup)|specgguf|vllm|llama[._-]?cpp")
_ENV_RE = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(sorted({*lg.RENAMED_ENV, *lg.DEAD_ENV}))
                     + r")(?![A-Za-z0-9_])")
_LLAMA_ENV = re.compile(r"LLAMA_ARG_[A-Z0-9_]+")


class _Scan:
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
        import bisect

        return bisect.bisect_left(self._newlines, offset) + 1

    def command(self, seq: list[Word], tool: str, width: int, style: ShellStyle) -> None:
        argv = [w.value for w in seq]
        for prev, word in zip(argv, seq[1:], strict=False):
            if lg.normalize_flag(prev) in lg.TEXT_VALUE_FLAGS \
                    and lg.normalize_flag(prev) not in lg.DRAFT_MODEL_FLAGS:
                self.exempt.append((word.start, word.end))
        dynamic = frozenset(i for i, w in enumerate(seq) if w.dynamic)
        res = _migrate(argv, tool, width, dynamic, self.env_names, self.base)
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
        return " ".join(raw), " ".join(apply_ops(raw, res.ops, _shell_word))

    def env(self, start: int, end: int) -> None:
        """Old LLAMA_ARG_* names: renamed where there is a successor, reported where not.

        A block that relied on the old draft behaviour also gets LLAMA_ARG_SPEC_TYPE and the
        old defaults (specgguf.migrate.env), or is reported when that cannot be decided.
        """
        from specgguf.migrate import env as migrate_env
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
            classify=lambda value: classify_draft(value, self.base))
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
        import bisect

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
    import bisect

    k = bisect.bisect_right(taken, (b, b)) - 1
    while k >= 0 and taken[k][1] >= a:
        x, y = taken[k]
        if (a < y and x < b) or (a == b == x == y):
            return True
        k -= 1
    return False


def _scan_shell(scan: _Scan, start: int, end: int, style: ShellStyle, *,
                newline_is_space: bool = False, implicit: str | None = None) -> str | None:
    """Commands in a shell region; returns the tool of the first invocation found."""
    first_tool = None
    for n, cmd in enumerate(lex_shell(scan.text, start, end,
                                      newline_is_space=newline_is_space, bat=scan.bat)):
        seq = [w for w in cmd if not w.redirect]
        anchor = find_anchor([w.value for w in seq])
        rest = seq
        if anchor:
            k, tool, width = anchor
            scan.command(seq[k:], tool, width, style)
            first_tool, rest = first_tool or tool, seq[:k]
        elif implicit and n == 0 and seq:
            scan.command(seq, implicit, 0, style)
            rest = []
        for word in rest:
            _scan_nested(scan, word, style)
    return first_tool


def _scan_nested(scan: _Scan, word: Word, style: ShellStyle) -> None:
    """A command inside a quoted word: sh -c "llama-server ...", ["sh", "-c", "..."]."""
    if not word.quote or not _TOOL_HINT.search(word.value) or len(word.value.split()) < 2:
        return
    inner = style.nested(word.quote)
    if inner is not None:
        _scan_shell(scan, word.start + 1, word.end - 1, inner)


def _scan_words(scan: _Scan, words: list[Word], style: ShellStyle,
                implicit: str | None) -> str | None:
    """An argv already split into words (exec form, YAML lists)."""
    anchor = find_anchor([w.value for w in words])
    if anchor:
        k, tool, width = anchor
        scan.command(words[k:], tool, width, style)
        rest = words[:k]
    elif implicit and words:
        scan.command(words, implicit, 0, style)
        return None
    else:
        rest = words
    for word in rest:
        _scan_nested(scan, word, style)
    return anchor[1] if anchor else None


# --- Dockerfile ------------------------------------------------------------------------------


def _dockerfile_instructions(text: str, start: int, end: int
                             ) -> Iterable[tuple[str, int, int]]:
    """(KEYWORD, args start, end) per instruction, continuation lines included."""
    i = start
    while i < end:
        eol = _eol(text, i, end)
        line = text[i:eol]
        if not line.strip() or line.lstrip().startswith("#"):
            i = eol + 1
            continue
        j = eol
        while text[i:j].rstrip().endswith("\\") and j < end:
            j = _eol(text, j + 1, end)
            while j < end and text[text.rfind("\n", 0, j) + 1:j].lstrip().startswith("#"):
                j = _eol(text, j + 1, end)  # comment lines inside a continued instruction
        m = re.compile(r"[ \t]*([A-Za-z]+)[ \t]*").match(text, i, j)
        if m:
            yield m.group(1).upper(), m.end(), j
        i = j + 1


def _eol(text: str, i: int, end: int) -> int:
    nl = text.find("\n", i, end)
    return end if nl < 0 else nl


def scan_dockerfile(scan: _Scan, start: int = 0, end: int | None = None) -> None:
    end = len(scan.text) if end is None else end
    image_default: str | None = None
    entry: str | None = None
    for keyword, a, b in _dockerfile_instructions(scan.text, start, end):
        if keyword == "FROM":
            images = [t for t in scan.text[a:b].split() if not t.startswith("--")]
            image_default = image_tool(images[0]) if images else None
            entry = None
        elif keyword in ("RUN", "CMD", "ENTRYPOINT"):
            implicit = (entry or image_default) if keyword == "CMD" else None
            tool = _scan_instruction(scan, a, b, implicit)
            if keyword == "ENTRYPOINT":
                entry = tool


def _scan_instruction(scan: _Scan, a: int, b: int, implicit: str | None) -> str | None:
    parsed = lex_list(scan.text, a, b)
    if parsed is not None:
        return _scan_words(scan, parsed[0], FlowListStyle(), implicit)
    return _scan_shell(scan, a, b, ShellStyle(), implicit=implicit)


# --- YAML ------------------------------------------------------------------------------------

_YAML_KEY = re.compile(r"(?P<lead>[ \t]*(?:-[ \t]+)*)(?P<key>[A-Za-z_][\w.-]*)[ \t]*:"
                       r"(?:[ \t]+|$)(?P<rest>[^\n]*)")
_ARGV_KEYS = {"command", "entrypoint", "args"}
_SCRIPT_KEYS = {"run", "script", "before_script", "after_script"}


@dataclass
class _Line:
    start: int
    end: int  # before the newline

    def text(self, src: str) -> str:
        return src[self.start:self.end]


def _lines(text: str, start: int, end: int) -> list[_Line]:
    out: list[_Line] = []
    i = start
    while i < end:
        eol = _eol(text, i, end)
        out.append(_Line(i, eol))
        i = eol + 1
    return out


def _indent(s: str) -> int:
    return len(s) - len(s.lstrip(" \t"))


def _is_blank(s: str) -> bool:
    return not s.strip() or s.lstrip().startswith("#")


def scan_yaml(scan: _Scan, start: int = 0, end: int | None = None) -> None:
    """command:/entrypoint:/args: (strings and lists) and run:/script: shell in YAML files."""
    end = len(scan.text) if end is None else end
    lines = _lines(scan.text, start, end)
    for n, line in enumerate(lines):
        m = _YAML_KEY.fullmatch(line.text(scan.text))
        if not m or m.group("key") not in _ARGV_KEYS | _SCRIPT_KEYS:
            continue
        col = len(m.group("lead"))
        value_at = line.start + m.start("rest")
        key = m.group("key")
        implicit = _yaml_implicit_tool(scan.text, lines, n, col) if key in _ARGV_KEYS else None
        _scan_yaml_value(scan, lines, n, col, value_at, key, implicit)


def _scan_yaml_value(scan: _Scan, lines: list[_Line], n: int, col: int, at: int, key: str,
                     implicit: str | None) -> None:
    text = scan.text
    script = key in _SCRIPT_KEYS
    rest = text[at:lines[n].end]
    head = rest.lstrip()[:1]
    if head in ("", "#"):
        items = _block_items(text, lines, n + 1, col)
        if script:
            for item, style in items:
                _scan_yaml_scalar_words(scan, item, style)
        elif items:
            _scan_words(scan, [w for w, _ in items], BlockListStyle(), implicit)
    elif head in "|>":
        body = _following(text, lines, n + 1, col)
        if body:
            _scan_shell(scan, body[0].start, body[-1].end, ShellStyle(),
                        newline_is_space=not script, implicit=implicit)
    elif head == "[":
        parsed = lex_list(text, at, len(text), yaml=True)
        if parsed is not None:
            if script:
                for w in parsed[0]:
                    _scan_yaml_scalar_words(scan, w, FlowListStyle(yaml=True).nested(w.quote))
            else:
                _scan_words(scan, parsed[0], FlowListStyle(yaml=True), implicit)
    elif head in "\"'":
        parsed_q = _quoted_string(text, at + len(rest) - len(rest.lstrip()), len(text),
                                  yaml_single=head == "'")
        if parsed_q is not None:
            word = parsed_q[0]
            _scan_shell(scan, word.start + 1, word.end - 1,
                        ShellStyle("yaml-sq" if head == "'" else "yaml-dq"),
                        newline_is_space=not script, implicit=implicit)
    else:
        stop = _plain_end(text, at, lines[n].end)
        cont = _plain_continuation(text, lines, n + 1, col)
        _scan_shell(scan, at, cont[-1].end if cont else stop, ShellStyle("yaml-plain"),
                    newline_is_space=True, implicit=implicit)


def _scan_yaml_scalar_words(scan: _Scan, word: Word, style: ShellStyle | None) -> None:
    """One script line given as a YAML scalar: a shell command in its own right."""
    if style is None:
        return
    a, b = (word.start + 1, word.end - 1) if word.quote else (word.start, word.end)
    _scan_shell(scan, a, b, style)


def _plain_end(text: str, at: int, eol: int) -> int:
    m = re.compile(r"[ \t]+#").search(text, at, eol)
    stop = m.start() if m else eol
    while stop > at and text[stop - 1] in " \t\r":
        stop -= 1
    return stop


def _plain_continuation(text: str, lines: list[_Line], n: int, col: int) -> list[_Line]:
    out: list[_Line] = []
    for line in lines[n:]:
        s = line.text(text)
        if not s.strip() or _indent(s) <= col or s.lstrip().startswith(("#", "- ")) \
                or re.search(r":(\s|$)", s):
            break
        out.append(line)
    return out


def _following(text: str, lines: list[_Line], n: int, col: int) -> list[_Line]:
    """The lines of a block scalar: indented deeper than its key (blank lines inside)."""
    body: list[_Line] = []
    pending: list[_Line] = []
    for line in lines[n:]:
        s = line.text(text)
        if not s.strip():
            pending.append(line)
            continue
        if _indent(s) <= col:
            break
        body += [*pending, line]
        pending = []
    return body


def _block_items(text: str, lines: list[_Line], n: int, col: int
                 ) -> list[tuple[Word, ShellStyle | None]]:
    """The `- item` lines under a key: each item as a Word, with the style of its scalar."""
    items: list[tuple[Word, ShellStyle | None]] = []
    item_col = None
    for line in lines[n:]:
        s = line.text(text)
        if _is_blank(s):
            continue
        m = re.compile(r"([ \t]*)-[ \t]+").match(s)
        if not m or len(m.group(1)) < col or (item_col is not None
                                              and len(m.group(1)) != item_col):
            break
        item_col = len(m.group(1))
        at = line.start + m.end()
        word = _block_scalar_word(text, at, line.end)
        if word is None:
            break
        word.dynamic = _compose_dynamic(word.value)
        items.append((word, BlockListStyle().nested(word.quote)))
    _link([w for w, _ in items])
    return items


def _block_scalar_word(text: str, at: int, eol: int) -> Word | None:
    if at < eol and text[at] in "\"'":
        parsed = _quoted_string(text, at, eol, yaml_single=text[at] == "'")
        return parsed[0] if parsed else None
    stop = _plain_end(text, at, eol)
    return Word(text[at:stop], at, stop, tuple(range(at, stop)))


def _yaml_implicit_tool(text: str, lines: list[_Line], n: int, col: int) -> str | None:
    """The tool an argv-only key runs: a sibling command:/entrypoint: naming it, or the image:."""
    for key, value in _siblings(text, lines, n, col):
        if key in ("command", "entrypoint") and value:
            anchor = find_anchor(re.findall(r"[\w./:\\-]+", value))
            if anchor:
                return anchor[1]
        if key == "image":
            tool = image_tool(value.strip().strip("\"'"))
            if tool:
                return tool
    return None


def _siblings(text: str, lines: list[_Line], n: int, col: int) -> list[tuple[str, str]]:
    """Keys at the same column in the same mapping as line n, with their value text."""
    out: list[tuple[str, str]] = []
    for step in (-1, 1):
        k = n + step
        while 0 <= k < len(lines):
            s = lines[k].text(text)
            if _is_blank(s):
                k += step
                continue
            m = _YAML_KEY.fullmatch(s)
            if m and len(m.group("lead")) == col and k != n:
                value = m.group("rest")
                if not value.strip():
                    value = " ".join(ln.text(text) for ln in lines[k + 1:k + 12])
                out.append((m.group("key"), value))
            if _indent(s) < col and (step == 1 or not (m and len(m.group("lead")) == col)):
                break
            if step == -1 and m and len(m.group("lead")) == col and "-" in m.group("lead"):
                break  # the first key of this list item
            k += step
    return out


# --- Markdown --------------------------------------------------------------------------------

_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})[ \t]*([^\n`]*)")
_SHELL_LANGS = {"", "sh", "bash", "shell", "console", "zsh", "ksh", "shell-session",
                "shellsession", "text", "txt", "plaintext", "powershell", "ps1", "ps", "pwsh",
                "bat", "cmd", "batch", "nohighlight", "terminal"}


def _markdown_blocks(text: str) -> Iterable[tuple[str, int, int]]:
    """(language, start, end) of each fenced code block's content."""
    lines = _lines(text, 0, len(text))
    n = 0
    while n < len(lines):
        m = _FENCE.fullmatch(lines[n].text(text))
        if not m:
            n += 1
            continue
        fence = m.group(1)
        lang = (m.group(2).split() or [""])[0].strip("{}.").lower()
        close = re.compile(r"[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*")
        k = n + 1
        while k < len(lines) and not close.fullmatch(lines[k].text(text)):
            k += 1
        start = lines[n + 1].start if n + 1 < len(lines) else len(text)
        end = lines[k].start if k < len(lines) else len(text)
        yield lang, start, end
        n = k + 1


def scan_markdown(scan: _Scan) -> list[tuple[int, int]]:
    regions = []
    for lang, a, b in _markdown_blocks(scan.text):
        if lang in ("yaml", "yml"):
            scan_yaml(scan, a, b)
        elif lang in ("dockerfile", "docker", "containerfile"):
            scan_dockerfile(scan, a, b)
        elif lang in ("make", "makefile", "mk"):
            _scan_shell(scan, a, b, ShellStyle(make=True))
        elif lang in _SHELL_LANGS:
            _scan_shell(scan, a, b, ShellStyle())
        else:
            continue
        regions.append((a, b))
    return regions


# --- file kinds ------------------------------------------------------------------------------

def file_kind(path: str, text: str = "") -> str | None:
    """What a file is, from its name (or its #! line); None when no structured rewrite applies."""
    name = os.path.basename(path)
    lower = name.lower()
    if lower in ("dockerfile", "containerfile") or lower.startswith(("dockerfile.",
                                                                     "containerfile.")) \
            or lower.endswith((".dockerfile", ".containerfile")):
        return "dockerfile"
    if lower in ("makefile", "gnumakefile") or lower.startswith(("makefile.", "gnumakefile.")) \
            or lower.endswith((".mk", ".make", ".mak")):
        return "make"
    if lower.endswith((".yml", ".yaml")):
        return "yaml"
    if lower.endswith((".md", ".markdown", ".mdx")):
        return "markdown"
    if lower.endswith((".bat", ".cmd")):
        return "bat"
    if lower.endswith((".sh", ".bash", ".zsh", ".ksh", ".envrc", ".ps1", ".env")) \
            or lower == ".env" or lower.startswith(".env."):
        return "shell"
    if lower.endswith((".service", ".socket", ".timer", ".container", ".conf", ".txt")):
        return "shell"
    if re.match(r"#!.*\b(sh|bash|zsh|ksh|dash)\b", text):
        return "shell"
    return None


def detect(path: str, text: str) -> tuple[str | None, str]:
    """(kind for the structured rewrite or None, comment syntax for the token scan).

    The same for a named file and a file found in a directory. Unknown text files are read as
    shell (their command lines look like one); source files (.py, .js, .json ...) get the token
    scan only, since their command lines are string literals.
    """
    from specgguf.migrate.files import SOURCE_EXTS

    kind = file_kind(path, text)
    if kind is not None:
        return kind, {"markdown": "markdown"}.get(kind, kind)
    ext = os.path.splitext(path)[1].lower()
    if ext in SOURCE_EXTS:
        return None, SOURCE_EXTS[ext]
    if text.startswith("#!"):
        return None, "python" if "python" in text.split("\n", 1)[0] else "source"
    return "shell", "shell"


def scan_text(text: str, kind: str) -> list[Finding]:
    """Every finding in one file's text, in file order."""
    return _scan_text(text, kind).findings


def _scan_text(text: str, kind: str, base: str | None = None) -> _Scan:
    scan = _Scan(text)
    scan.base = base
    if kind == "markdown":
        regions = scan_markdown(scan)
    else:
        regions = [(0, len(text))]
        if kind == "dockerfile":
            scan_dockerfile(scan)
        elif kind == "yaml":
            scan_yaml(scan)
        else:
            scan.bat = kind == "bat"
            _scan_shell(scan, 0, len(text), ShellStyle(make=kind == "make"))
    for a, b in regions:
        scan.env(a, b)
    scan.resolve_overlaps()
    scan.findings.sort(key=lambda f: (f.line, f.old))
    return scan


def migrate_text(text: str, kind: str) -> tuple[str, list[Finding]]:
    findings = scan_text(text, kind)
    return apply_edits(text, [e for f in findings for e in f.edits]), findings


def check_text(text: str, kind: str | None, comments: str | None = None,
               base: str | None = None) -> tuple[str, list[Finding]]:
    """The structured rewrite, then the token scan: what `migrate FILE` does with one text.

    Findings on lines opted out with `specgguf-migrate: ignore` are dropped (the rewrite does
    not touch them either). Every removed name the rewrite leaves behind becomes a finding of
    its own that cannot be migrated safely, so a file never passes `--check` with one.
    """
    from specgguf.migrate import guard
    ignored, whole = guard.ignored_lines(text)
    if whole:
        return text, []
    scan = _scan_text(text, kind, base) if kind else _Scan(text)
    findings = [f for f in scan.findings if not _touches(text, f, ignored)]
    edits = [e for f in findings for e in f.edits]
    hits = guard.scan_tokens(text, comments or kind or "shell", scan.exempt)
    # sorted intervals: one lookup per hit, whatever the number of edits and findings
    changed = guard._merge([(e.start, e.end) for e in edits])
    reported = guard._merge([f.span for f in findings if f.unsafe])
    for hit in hits:
        if _touching(changed, hit.start, hit.end):
            continue  # the rewrite changes this very token
        if _touching(reported, hit.start, hit.start, closed=False):
            continue  # its command is reported already, with the reason
        line = scan.line_of(hit.start)
        message = hit.message()
        findings.append(Finding(line, hit.name, hit.name, [], [message], [],
                                (hit.start, hit.end)))
    findings.sort(key=lambda f: (f.line, f.old))
    return apply_edits(text, edits), findings


def _touching(spans: list[tuple[int, int]], a: int, b: int, closed: bool = True) -> bool:
    """Whether [a, b] meets one of the sorted, merged `spans` (its ends included if closed)."""
    import bisect

    k = bisect.bisect_right(spans, (b, len(spans) and spans[-1][1] + 1)) - 1
    if k < 0:
        return False
    x, y = spans[k]
    return (x <= b and y >= a) if closed else (x <= a < y)


def _touches(text: str, finding: Finding, ignored: set[int]) -> bool:
    if not ignored:
        return False
    lines = {text.count("\n", 0, e.start) + 1 for e in finding.edits}
    lines.add(finding.line)
    return bool(lines & ignored)


# ---------------------------------------------------------------------------------------------
# Reporting, checking, rewriting
# ---------------------------------------------------------------------------------------------


def report_lines(path: str, findings: Iterable[Finding], changes: bool = True) -> list[str]:
    """`path:line: old -> new`, then the reasons and refusals, one line each."""
    out: list[str] = []
    for f in findings:
        if f.changed and changes:
            out.append(f"{path}:{f.line}: {f.old} -> {f.new}" if f.old
                       else f"{path}:{f.line}: added: {f.new}")
        out += [f"{path}:{f.line}: note: {n}" for n in f.notes]
        out += [f"{path}:{f.line}: cannot migrate safely: {u}" for u in f.unsafe]
    return out


def atomic_write(path: str, data: bytes) -> None:
    """See specgguf.migrate.files.atomic_write (kept here for callers of the old name)."""
    from specgguf.migrate.files import atomic_write as write

    write(path, data)


def _diff(path: str, old: str, new: str) -> str:
    import difflib

    return "".join(difflib.unified_diff(old.splitlines(keepends=True),
                                        new.splitlines(keepends=True), path, path))


def run_migrate(paths: Sequence[str], check: bool = False, write: bool = False,
                diff: bool = False, stdout: TextIO | None = None,
                stderr: TextIO | None = None, verbose: bool = False) -> int:
    """Scan files; report (default), --diff, --write. Returns the exit status.

    1 when --check finds anything to migrate, when something could not be migrated safely
    (a person has to look), or when a path is missing, unreadable or binary (named
    explicitly); 0 otherwise. `verbose` lists what a directory scan skipped, and why.
    """
    from specgguf.migrate import files as mf
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    files, skipped, missing = mf.expand(paths)
    named = {os.path.normpath(p) for p in paths if os.path.isfile(p)}
    failed = bool(missing)
    for path in missing:
        print(f"error: {path}: no such file or directory", file=err)
    attention = unsafe = False
    for path in files:
        try:
            src = mf.read(path)
        except mf.Unreadable as why:
            if os.path.normpath(path) in named or not str(why).startswith("binary"):
                print(f"error: {path}: {why}", file=err)
                failed = True
            else:
                skipped.append((path, str(why)))
            continue
        if src.note and verbose:
            print(f"{path}: {src.note}", file=err)
        kind, comments = detect(path, src.text)
        new, findings = check_text(src.text, kind, comments,
                                   os.path.dirname(os.path.abspath(path)))
        if not findings:
            continue
        attention = True
        unsafe = unsafe or any(f.unsafe for f in findings)
        if diff and new != src.text:
            out.write(_diff(path, src.text, new))
            for line in report_lines(path, findings, changes=False):
                print(f"# {line}", file=out)
        else:
            for line in report_lines(path, findings):
                print(line, file=out)
        if write and new != src.text:
            try:
                mf.atomic_write(path, src.encode(new))
            except OSError as why:  # one line, the file as it was, and exit 1
                print(f"error: {path}: not rewritten: {why.strerror or why}", file=err)
                failed = True
                continue
            print(f"{path}: rewritten", file=out)
    if verbose:
        for path, why in skipped:
            print(f"skipped: {path}: {why}", file=err)
    if failed or unsafe or (check and attention):
        return 1
    return 0


def is_command_argv(args: Sequence[str]) -> bool:
    """True when `migrate` was given a command (after --) rather than files."""
    if not args:
        return False
    if any(a.startswith("-") and not os.path.exists(a) for a in args):
        return True
    return find_anchor(list(args[:2])) is not None and not os.path.isfile(args[0])


def migrate_command(argv: Sequence[str], check: bool = False,
                    stdout: TextIO | None = None) -> int:
    """Print the migrated command, then the reasons as # comments (the output stays runnable).

    Exit status 1 when something could not be migrated safely, or with --check when anything
    changed.
    """
    out = stdout or sys.stdout
    res = migrate_argv(argv)
    print(shlex.join(res.argv), file=out)
    for note in res.notes:
        print(f"# {note}", file=out)
    for problem in res.unsafe:
        print(f"# cannot migrate safely: {problem}", file=out)
    return 1 if res.unsafe or (check and res.changed) else 0

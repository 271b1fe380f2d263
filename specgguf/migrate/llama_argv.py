"""The llama.cpp dialect (llama-server, llama-cli, llama-speculative*, llama-lookup, specgguf):
removed options renamed to their successors, `--spec-type draft` renamed, and what a command
relied on written out (--spec-type draft-simple for a plain draft model, the old defaults).
A specgguf command also gets specgguf's names for SGLang's tree flags (sglang_argv).

Where the replacement depends on something the command does not say (which ngram type, what
a variable holds, what kind of drafter a file is), the command is reported, not guessed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from specgguf.migrate import drafter_kind
from specgguf.migrate import removed_flags as lg
from specgguf.migrate.plan import Flag, Plan, scan_flags
from specgguf.migrate.sglang_argv import migrate_sglang_names

#: options of llama.cpp forks (DFlash, MTP heads, EAGLE builds): such a command was written
#: for that fork, whose own flags (--draft-max included) may still be valid there
FORK_FLAGS = frozenset({"--dflash", "--mtp", "-mtp", "--mtp-head", "--eagle", "--eagle3",
                        "--draft-block-size", "--dflash-model", "--spec-dflash"})


@dataclass
class _SpecTypes:
    """What --spec-type selects in one command, once renamed, and whether that is all of it."""

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


def _spec_types(plan: Plan, spec_flags: list[Flag], opaque: list[str]) -> _SpecTypes:
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
        old = lg.removed_type(flag.value)
        if old is not None:
            new_value = ",".join(new_items)
            plan.rename(flag, new_value=new_value)
            plan.notes.append(f"{flag.show()} -> {flag.typed} {new_value}: "
                              f"{lg.removed_type_reason(old)}")
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


def _last(flags: list[Flag], names: Iterable[str]) -> Flag | None:
    wanted = set(names)
    found = [f for f in flags if f.name in wanted]
    return found[-1] if found else None


def _drop_ctx_draft(plan: Plan, flag: Flag, flags: list[Flag]) -> None:
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


def migrate_llama(plan: Plan) -> None:
    """Fill `plan` for a llama.cpp (or specgguf) command; a fork's command is only reported."""
    flags, opaque = scan_flags(plan.argv, plan.start, plan.dynamic)
    if plan.tool == lg.SPECGGUF:
        migrate_sglang_names(plan, flags)
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
    if plan.fragment is not None and not spec_flags and st.known:
        st.types = list(plan.fragment.spec_types)  # the file's --spec-type stands for it
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


def _spec_type_addition(plan: Plan, st: _SpecTypes, spec_flags: list[Flag],
                        draft: Flag | None, opaque: list[str]) -> list[str]:
    """llama.cpp now ignores -md unless --spec-type names a draft type."""
    if plan.tool not in lg.SPEC_TYPE_TOOLS:
        return []
    if draft is None:
        env = sorted(plan.env_names & {"LLAMA_ARG_MODEL_DRAFT", "LLAMA_ARG_SPEC_DRAFT_MODEL"})
        if env and not spec_flags:
            plan.unsafe.append(f"a draft model may come from {env[0]} (set in this file): "
                               "llama.cpp only uses it with --spec-type draft-simple")
        return []
    if plan.fragment is not None and plan.fragment.spec_types and not spec_flags:
        return []  # the file sets --spec-type elsewhere, for the command these words join
    if spec_flags:
        if st.known and not st.drafts:
            plan.unsafe.append(f"{draft.show()} is ignored: --spec-type {','.join(st.types)} "
                               "names no draft type (add draft-simple if it should be used)")
        return []
    if lg.SPEC_TYPE_ENV in plan.env_names or opaque:
        source = opaque[0] if opaque else lg.SPEC_TYPE_ENV
        if draft.value and not draft.dynamic \
                and drafter_kind.classify_draft(draft.value, plan.base)[0] not in (None, "plain"):
            return []  # a drafter llama.cpp recognises from its file needs no type
        plan.unsafe.append(f"{draft.show()} needs --spec-type draft-simple now, unless {source} "
                           "already sets a draft type")
        return []
    kind, assumed = drafter_kind.draft_kind(
        draft.value, plan.base, plan.draft_kind,
        f"{draft.value} is decided when the command runs" if draft.dynamic else None)
    if assumed:
        plan.notes.append(assumed)
    if kind != "plain":
        plan.notes.append(f"{draft.show()} is {drafter_kind.DRAFTER_NAMES[kind]}: llama.cpp "
                          "takes its type from the file, so no --spec-type is added")
        st.types = [kind]
        return []
    st.types = ["draft-simple"]
    plan.notes.append(f"added --spec-type draft-simple: llama.cpp ignores {draft.typed} unless "
                      "--spec-type names a draft type")
    return [lg.SPEC_TYPE_FLAG, "draft-simple"]


def _old_defaults(plan: Plan, st: _SpecTypes, flags: list[Flag], opaque: list[str],
                  has_draft: bool) -> list[str]:
    """Write out the old default where a legacy command relied on one that changed."""
    out: list[str] = []
    for d in lg.OLD_DEFAULTS:
        if plan.tool not in d.tools:
            continue
        if any(f.name in (d.flag, *d.aliases) for f in flags):
            continue  # the command sets it: no default of either version applies
        if plan.tool in lg.SPEC_TYPE_TOOLS:
            if not has_draft:
                continue  # no draft model here: the draft defaults never applied
            if not st.known:
                plan.unsafe.append(f"{st.source}, so it cannot be told whether draft-simple "
                                   f"is used: add {d.flag} {d.old} if it is (the old "
                                   f"{d.what} default; the new one is {d.new})")
                continue
            if "draft-simple" not in st.types:
                continue
        if plan.fragment is not None and {d.flag, *d.aliases} & plan.fragment.flags:
            continue  # set elsewhere in the file, maybe for the command these words join
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

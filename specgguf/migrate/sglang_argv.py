"""SGLang's tree flags in a specgguf command: given specgguf's names (the table is
removed_flags.SGLANG_FLAGS).

specgguf drafts the trees SGLang's EAGLE does, under its own names: someone who copies
`--speculative-eagle-topk 4 --speculative-num-steps 5 --speculative-num-draft-tokens 8` from
an SGLang launch line into `specgguf run` means `--spec-tree-topk 4 --spec-draft-n-max 5
--spec-tree-nodes 7`. An SGLang command itself is left alone: the flags are valid there.
"""

from __future__ import annotations

from specgguf.migrate import removed_flags as lg
from specgguf.migrate.plan import Flag, Plan


def _spellings(new: str) -> set[str]:
    """The names that set `new` in a specgguf command: itself, and the removed llama.cpp
    options the same rewrite renames to it (--draft-max -> --spec-draft-n-max)."""
    return {new} | {n for n, e in lg.REMOVED_BY_NAME.items() if e.draft_flag == new}


def migrate_sglang_names(plan: Plan, flags: list[Flag]) -> None:
    """Rename each SGLang tree flag in `flags` to specgguf's, or say why it cannot be."""
    given = {f.name: f for f in flags}
    for flag in flags:
        entry = lg.SGLANG_FLAGS.get(flag.name)
        if entry is None:
            continue
        other = next((given[n] for n in sorted(_spellings(entry.new)) if n in given), None)
        if other is not None:
            plan.unsafe.append(f"both {other.show()} and SGLang's {flag.show()}: merge them "
                               "by hand")
            continue
        value, warning = _value(plan, flag, entry)
        if value is None:
            continue
        plan.rename(flag, new_name=entry.new, new_value=value)
        shown = f"{entry.new}={value}" if flag.inline else f"{entry.new} {value}"
        why = f"SGLang's name for specgguf's {entry.new}"
        if entry.offset:
            why = (f"SGLang counts the tree's root among its draft tokens, specgguf's "
                   f"{entry.new} does not")
        plan.notes += [f"{flag.show()} -> {shown}: {why}", *warning]


def _value(plan: Plan, flag: Flag, entry: lg.SglangFlag) -> tuple[str | None, list[str]]:
    """The value the specgguf option gets (the word as written where nothing is added or
    checked) and a warning when it had to be clamped; None with the reason in plan.unsafe."""
    if flag.value is None:
        plan.unsafe.append(f"{flag.typed} has no value")
        return None, []
    if flag.dynamic:
        if entry.offset:
            plan.unsafe.append(f"{flag.show()}: a shell variable cannot be lowered by "
                               f"{-entry.offset} here; write {entry.new} by hand")
            return None, []
        return flag.value, []  # renamed; specgguf checks the value when the command runs
    if entry.bounds is None and not entry.offset:
        return flag.value, []
    try:
        number = int(flag.value) + entry.offset
    except ValueError:
        plan.unsafe.append(f"{flag.show()}: not an integer")
        return None, []
    if entry.bounds is None:
        return str(number), []
    low, high = entry.bounds
    kept = min(max(number, low), high)
    if kept == number:
        return str(kept), []
    limit = f"at most {high}" if number > high else f"at least {low}"
    return str(kept), [f"warning: {flag.show()} means {number} {entry.meaning}; specgguf "
                       f"takes {limit}, so {entry.new} {kept} is written"]

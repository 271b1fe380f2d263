"""--spec-type parsing: llama.cpp's type names, its `none` reset, and its fixed priority order.

The names, their order and what each needs are the registry's (specgguf.drafters.registry);
this module only turns a command line's string into a list of them.
"""

from __future__ import annotations

from specgguf.drafters.registry import PRIORITY, SPEC_TYPES
from specgguf.errors import UsageError

#: the free drafters that join the default --spec-type under `--spec-draft-n-max auto`: an
#: n-gram lookup costs next to nothing, and auto sends its drafts only while they pay (which
#: on "print the whole file with this edit" prompts is about 2x, and elsewhere never)
AUTO_DEFAULT_NGRAM = ("ngram-map-k", "suffix")


def default_spec_types(
    *, have_draft_model: bool, auto: bool, draft_type: str = "draft-simple"
) -> list[str]:
    """What no --spec-type means. With a fixed draft length: llama.cpp's meaning (nothing),
    except that a draft model (-md) selects the type its file makes it (`draft_type`:
    draft-simple for a model, draft-eagle3 for an EAGLE-3 head, draft-dflash or draft-dspark
    for a DFlash or DSpark drafter, draft-mtp for a separate MTP drafter such as a Gemma-4
    assistant; llama.cpp would ignore a plain -md and print a
    failure; we take the friendlier default and say so in --help). Under auto the free n-gram
    drafters join, in priority order, since auto only uses them where they pay."""
    chosen = list(AUTO_DEFAULT_NGRAM) if auto else []
    if have_draft_model:
        chosen.append(draft_type)
    return sorted(chosen, key=PRIORITY.index)


def parse_spec_types(
    value: str | None,
    *,
    have_draft_model: bool,
    auto: bool = False,
    draft_type: str = "draft-simple",
) -> list[str]:
    """Comma list -> types in priority order. `none` anywhere resets what came before it.
    No list at all: `default_spec_types` (with the type the -md file makes, `draft_type`)."""
    if value is None:
        return default_spec_types(
            have_draft_model=have_draft_model, auto=auto, draft_type=draft_type
        )
    chosen: list[str] = []
    for raw in value.split(","):
        name = raw.strip()
        if name == "none":
            chosen = []
            continue
        if name not in PRIORITY:
            raise UsageError(
                f"invalid value for --spec-type: {name!r} (expected one of: none, "
                + ", ".join(PRIORITY)
                + ")"
            )
        SPEC_TYPES[name].check_supported()
        if name not in chosen:
            chosen.append(name)
    for name in chosen:
        if SPEC_TYPES[name].needs_model and not have_draft_model:
            raise UsageError(f"--spec-type {name} needs a draft model: pass -md FILE")
    return sorted(chosen, key=PRIORITY.index)

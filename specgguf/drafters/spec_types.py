"""--spec-type parsing: llama.cpp's type names, its `none` reset, and its fixed priority order."""

from __future__ import annotations

from specgguf.errors import UsageError

#: every name llama.cpp accepts, in the order a round tries them (first non-empty draft wins)
PRIORITY = (
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
)
NGRAM_TYPES = frozenset(t for t in PRIORITY if t.startswith("ngram-"))
MODEL_TYPES = frozenset({"draft-simple"})

#: types that need model files and hidden states llama-cpp-python 0.3.36 does not hand to Python
UNSUPPORTED = {
    "draft-eagle3": "an EAGLE-3 draft GGUF fed with 3 of the target's hidden layers",
    "draft-mtp": "a target GGUF with MTP heads and llama.cpp's MTP context",
    "draft-dflash": "a DFlash draft GGUF fed with the target's hidden states",
    "draft-dspark": "a DSpark draft GGUF fed with the target's hidden states",
}


#: the longest draft `--spec-draft-n-max auto` may choose (specgguf.auto.policy's cap)
AUTO_N_MAX_CAP = 8

#: the free drafters that join the default --spec-type under `--spec-draft-n-max auto`: an
#: n-gram lookup costs next to nothing, and auto sends its drafts only while they pay (which
#: on "print the whole file with this edit" prompts is about 2x, and elsewhere never)
AUTO_DEFAULT_NGRAM = ("ngram-map-k",)


def default_spec_types(*, have_draft_model: bool, auto: bool) -> list[str]:
    """What no --spec-type means. With a fixed draft length: llama.cpp's meaning (nothing),
    except that a draft model (-md) selects draft-simple (llama.cpp would ignore -md and print
    a failure; we take the friendlier default and say so in --help). Under auto the free
    n-gram drafters join, in priority order, since auto only uses them where they pay."""
    chosen = list(AUTO_DEFAULT_NGRAM) if auto else []
    if have_draft_model:
        chosen.append("draft-simple")
    return sorted(chosen, key=PRIORITY.index)


def parse_spec_types(
    value: str | None, *, have_draft_model: bool, auto: bool = False
) -> list[str]:
    """Comma list -> types in priority order. `none` anywhere resets what came before it.
    No list at all: `default_spec_types`."""
    if value is None:
        return default_spec_types(have_draft_model=have_draft_model, auto=auto)
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
        if name in UNSUPPORTED:
            raise UsageError(
                f"--spec-type {name} needs {UNSUPPORTED[name]}, which llama-cpp-python does "
                "not expose to Python; use draft-simple or an ngram-* type"
            )
        if name not in chosen:
            chosen.append(name)
    if "draft-simple" in chosen and not have_draft_model:
        raise UsageError("--spec-type draft-simple needs a draft model: pass -md FILE")
    return sorted(chosen, key=PRIORITY.index)

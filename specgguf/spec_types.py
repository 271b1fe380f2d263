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


def parse_spec_types(value: str | None, *, have_draft_model: bool) -> list[str]:
    """Comma list -> types in priority order. `none` anywhere resets what came before it.

    With no --spec-type, a draft model (-md) selects draft-simple: llama.cpp would ignore -md
    and print a failure; we take the friendlier default and say so in --help.
    """
    if value is None:
        return ["draft-simple"] if have_draft_model else []
    chosen: list[str] = []
    for raw in value.split(","):
        name = raw.strip()
        if name == "none":
            chosen = []
            continue
        if name == "draft":
            raise UsageError(
                'error while handling argument "--spec-type": type "draft" has been renamed. '
                "use draft-simple"
            )
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

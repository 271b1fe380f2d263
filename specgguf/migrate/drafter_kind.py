"""What kind of drafter a draft GGUF is, read from the file itself.

Current llama.cpp takes an MTP, EAGLE-3 or DFlash drafter's type from its GGUF and uses a plain
draft model only with `--spec-type draft-simple`, so whether a migrated command (or env block)
needs that option depends on the file. Callers look `classify_draft` up on this module, so a
test can replace it in one place.

A draft file that cannot be read (the usual case in a repository: models are never committed,
and paths are often variables) is assumed to be a plain draft model unless its name says it is
an MTP, EAGLE-3, DFlash or DSpark drafter; the report names the assumption, and `--draft-kind`
or a `specgguf-migrate: draft-kind=KIND` comment replaces it (`draft_kind`).
"""

from __future__ import annotations

import os
import re

#: what each drafter kind is called in reports; the keys are the values --draft-kind takes
DRAFTER_NAMES = {"plain": "a plain draft model", "mtp": "an MTP drafter",
                 "eagle3": "an EAGLE-3 drafter", "dflash": "a DFlash drafter",
                 "dspark": "a DSpark drafter"}
DRAFT_KINDS = tuple(DRAFTER_NAMES)
#: what a draft's name (or the variable holding it) says about its kind, first match wins
_NAME_HINTS = (("dflash", re.compile(r"dflash", re.I)), ("dspark", re.compile(r"dspark", re.I)),
               ("eagle3", re.compile(r"eagle", re.I)),
               ("mtp", re.compile(r"(?<![a-z])(mtp|nextn)(?![a-z])", re.I)))
#: `specgguf-migrate: draft-kind=mtp` in any comment syntax
DIRECTIVE = re.compile(r"specgguf-migrate:\s*draft-kind=(" + "|".join(DRAFT_KINDS) + r")\b")


def kind_from_name(value: str) -> str:
    """The kind a draft's path (or variable name) says it is; "plain" when it says nothing."""
    name = re.split(r"[/\\]", value.rstrip("/\\"))[-1] or value
    return next((kind for kind, pattern in _NAME_HINTS if pattern.search(name)), "plain")


def draft_kind(value: str | None, base: str | None = None, override: str | None = None,
               unread: str | None = None) -> tuple[str, str]:
    """(kind, note): the kind read from the file, else `override`, else what the name says.

    `unread` says why there is no file to read (a variable, a Hugging Face repository). The
    note is "" when the file was read; otherwise it names what was assumed and why, so the
    report shows every guess. The file wins over `override` when it can be read: it is what
    llama.cpp itself will look at.
    """
    if value is None:
        return "plain", ""
    why = unread
    if why is None:
        kind, why = classify_draft(value, base)
        if kind is not None:
            return kind, ""
    if override is not None:
        return override, (f"{value} taken as {DRAFTER_NAMES[override]} (draft-kind {override}; "
                          f"{why})")
    kind = kind_from_name(value)
    said = "its name says so" if kind != "plain" else "its name says nothing else"
    return kind, (f"assumed {value} is {DRAFTER_NAMES[kind]} ({why}; {said}); if it is not, "
                  "give --draft-kind or a `specgguf-migrate: draft-kind=KIND` comment")


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
    from specgguf.modelfiles.gguf_info import read_gguf_info

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

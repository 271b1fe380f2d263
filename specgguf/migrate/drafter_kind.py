"""What kind of drafter a draft GGUF is, read from the file itself.

Current llama.cpp takes an MTP, EAGLE-3 or DFlash drafter's type from its GGUF and uses a plain
draft model only with `--spec-type draft-simple`, so whether a migrated command (or env block)
needs that option depends on the file. Callers look `classify_draft` up on this module, so a
test can replace it in one place.
"""

from __future__ import annotations

import os

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

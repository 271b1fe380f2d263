"""The dialect registry: one row per family of tool-call syntax, most specific first.

`detect(source)` walks the rows in order and takes the first whose markers all occur in the
chat template's source (and whose excluded markers do not): the template a model ships is the
only reliable sign of what its fine-tuning taught it to write. A template of no known family
gets the last row, llama-server's generic JSON (`generic`), which the server describes to the
model in a system message when the template does not render `tools` itself. A family that has
no forced form of its own is forced into Hermes' <tool_call> JSON (FORCED_FALLBACK), the
closest to what most families write.

To add a family: one module in this folder defining a `Dialect`, and its row here (the recipe
is in ARCHITECTURE.md)."""

from __future__ import annotations

from specgguf.chat.dialects import (
    command_r7b,
    deepseek,
    firefunction,
    functionary,
    functionary_v32,
    gemma4,
    generic,
    glm,
    granite,
    harmony,
    hermes,
    kimi,
    llama3,
    mistral,
    qwen3_coder,
)
from specgguf.chat.dialects.base import Dialect

DIALECTS: tuple[Dialect, ...] = (
    harmony.DIALECT,
    deepseek.R1,
    deepseek.V31,
    kimi.DIALECT,
    glm.DIALECT,
    mistral.DEVSTRAL,
    mistral.SMALL_32,
    mistral.NEMO,
    qwen3_coder.DIALECT,
    functionary.DIALECT,
    llama3.DIALECT,
    gemma4.DIALECT,
    granite.DIALECT,
    functionary_v32.DIALECT,
    firefunction.DIALECT,
    command_r7b.DIALECT,
    hermes.DIALECT,
    generic.DIALECT,  # the fallback: no markers, so it matches any template
)
FALLBACK = generic.DIALECT
FORCED_FALLBACK = hermes.DIALECT


def detect(source: str) -> Dialect:
    """The family of the template `source` (FALLBACK when none matches)."""
    return next((d for d in DIALECTS if d.matches(source)), FALLBACK)


def by_name(name: str) -> Dialect:
    """The row named `name` (KeyError naming the known ones otherwise)."""
    for d in DIALECTS:
        if d.name == name:
            return d
    raise KeyError(f"unknown dialect {name!r} (one of {', '.join(d.name for d in DIALECTS)})")

"""The flags of the pinned llama.cpp's --help, as recorded in llama_cpp_help.json.

The file is generated from llama.cpp's own option declarations by scripts/llama_help_flags.py
and checked in: the rows of the flag table take each flag's spellings, value form, variable and
programs from it, so those facts are written down once."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

#: the llama.cpp programs whose --help is recorded, and the specgguf command each maps to
PROGRAM_COMMANDS = {"llama-server": "serve", "llama-cli": "run", "llama-completion": "run"}


@dataclass(frozen=True)
class VendoredFlag:
    """One option as llama.cpp declares it."""

    spellings: tuple[str, ...]  # e.g. ("-fa", "--flash-attn")
    negative: tuple[str, ...]  # the spellings that turn a switch off ("--no-mmproj")
    values: tuple[str, ...]  # value hints: () for a switch, ("N",) for one value
    default: str | None  # as its help states it, where it states one
    env: str | None  # its LLAMA_ARG_* (or other) variable
    programs: tuple[str, ...]  # the programs whose --help lists it
    sampling: bool  # listed under "sampling params"
    help: str

    @property
    def key(self) -> str:
        """The name the flag table knows it by: its first long spelling."""
        return next((s for s in self.spellings if s.startswith("--")), self.spellings[0])


@cache
def vendored_flags() -> tuple[VendoredFlag, ...]:
    """Every recorded option, one per key (an option declared twice for two programs, as -np
    is, becomes one with both programs)."""
    raw = json.loads(resources.files(__package__).joinpath("llama_cpp_help.json").read_text())
    by_key: dict[str, VendoredFlag] = {}
    for o in raw:
        flag = VendoredFlag(
            tuple(o["spellings"]), tuple(o["negative"]), tuple(o["values"]), o["default"],
            o["env"], tuple(o["programs"]), o["sampling"], o["help"],
        )  # fmt: skip
        seen = by_key.get(flag.key)
        if seen is not None:
            programs = tuple(dict.fromkeys(seen.programs + flag.programs))
            flag = VendoredFlag(**{**seen.__dict__, "programs": programs})
        by_key[flag.key] = flag
    return tuple(by_key.values())

"""Multi-letter short flags (`-np`, `-ngl`, `-cnv`, ...) name themselves in a command that
does not take them.

The option parser reads a single-dash token that its command does not declare as a cluster of
one-letter flags: `specgguf run -np 0` became `-n p`, and the error was about -n's value, a
flag the user never gave. So before the parse, a token that is one of the multi-letter short
flags some command of this CLI declares, standing where it would be read as a flag (not as the
value of the option before it, not after `--`), is refused with one line naming it and the
commands that take it. The flags are read from the commands themselves: there is no second
list of them to keep.
"""

from __future__ import annotations

from typing import Any

from specgguf.errors import UsageError


def _options(command: Any) -> list[Any]:
    return [p for p in command.params if p.param_type_name == "option"]


def _names(option: Any) -> list[str]:
    return [*option.opts, *option.secondary_opts]


def is_multi_letter_short(name: str) -> bool:
    """`-np`, `-ngl`: one dash, more than one letter (what the parser may split)."""
    return len(name) > 2 and name[0] == "-" and name[1] != "-"


def multi_letter_short_flags(group: Any) -> dict[str, list[str]]:
    """Every multi-letter short flag of the CLI -> the commands that take it."""
    out: dict[str, list[str]] = {}
    for sub, command in group.commands.items():
        for option in _options(command):
            for name in _names(option):
                if is_multi_letter_short(name):
                    out.setdefault(name, []).append(sub)
    return out


def check_short_flags(group: Any, argv: list[str]) -> None:
    """UsageError naming the first multi-letter short flag in `argv` (`[command, ...]`) that
    the command does not take. Commands that pass unknown flags on (migrate reads llama.cpp
    command lines) are left alone."""
    if not argv or argv[0] not in group.commands:
        return
    sub, command = argv[0], group.commands[argv[0]]
    if command.context_settings.get("ignore_unknown_options"):
        return
    takes_value = {}
    for option in _options(command):
        for name in _names(option):
            takes_value[name] = 0 if option.is_flag or option.count else option.nargs
    flags = multi_letter_short_flags(group)
    i = 1
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return
        name = token.split("=", 1)[0]
        if name in takes_value:
            i += 1 + (takes_value[name] if "=" not in token else 0)
            continue
        if name in flags:
            takers = flags[name]
            which = ", ".join(takers[:-1]) + " and " if len(takers) > 1 else ""
            raise UsageError(
                f"specgguf {sub} has no option {name} (it is an option of specgguf "
                f"{which}{takers[-1]})"
            )
        i += 1

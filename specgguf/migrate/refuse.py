"""`specgguf run` (and bench, serve) refuse llama.cpp's removed flags before anything is loaded.

The refusal has two lines: llama.cpp's own (from the tables in removed_flags), then the exact
corrected command (from the argv rewrite) or why none can be given safely. The tables stay a
leaf that imports nothing of the migration; this module is the caller above both, and loads
the rewrite only when something was refused, so a clean start-up stays as light as the tables.
"""

from __future__ import annotations

from collections.abc import Mapping

from specgguf.errors import UsageError
from specgguf.migrate.removed_flags import first_refusal

_SUBCOMMANDS = ("run", "bench", "serve")


def check_run_argv(argv: list[str], env: Mapping[str, str]) -> None:
    """Refuse a removed flag or variable before anything is loaded.

    `argv` is what follows `specgguf` (`["run", ...]`) or what follows `specgguf run`. The
    error has two lines: llama.cpp's own, then the exact corrected command (shell-quoted),
    or why no correction can be given safely.
    """
    sub, args = (argv[0], list(argv[1:])) if argv and argv[0] in _SUBCOMMANDS else ("run", argv)
    first = first_refusal(args, env)
    if first is None:
        return
    from specgguf.migrate.argv import corrected_run_command  # only now: keeps start-up light

    fixed, problems = corrected_run_command(sub, args, env)
    if problems:
        raise UsageError(f"{first}\ncannot be corrected automatically: {'; '.join(problems)}")
    raise UsageError(f"{first}\ncorrected: {fixed}")

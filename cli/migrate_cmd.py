"""`specgguf migrate`: rewrite removed llama.cpp / vLLM speculative-decoding flags.

Two forms share one subcommand because both answer the same question ("what do I type now?"):
`specgguf migrate -- llama-server ...` for a command, `specgguf migrate FILE...` for scripts,
Dockerfiles, Makefiles, YAML and Markdown. Register it with
`context_settings={"allow_extra_args": True, "ignore_unknown_options": True}` so the words of a
command reach `paths` untouched.
"""

from __future__ import annotations

import sys

import typer

from specgguf.errors import ExitCode

_Paths = typer.Argument(
    None, metavar="FILE... | -- COMMAND...",
    help="Files or directories to scan, or (after --) one command to migrate.",
    show_default=False,
)
_Check = typer.Option(
    False, "--check",
    help="Exit 1 when anything needs migrating (for CI and pre-commit); change nothing.",
)
_Write = typer.Option(
    False, "--write",
    help="Rewrite the files in place (atomically; only the changed words are touched).",
)
_Diff = typer.Option(False, "--diff", help="Show the changes as a unified diff.")
_Verbose = typer.Option(
    False, "--verbose", "-v",
    help="Also list what a directory scan skipped and why (binary, too large, .git ...).",
)


def migrate(
    paths: list[str] = _Paths,
    check: bool = _Check,
    write: bool = _Write,
    diff: bool = _Diff,
    verbose: bool = _Verbose,
) -> None:
    """Rewrite removed speculative-decoding flags (--draft-max, -cd, vLLM's --speculative-model).

    A command that relied on a default llama.cpp changed gets the old value written, with why.

    What cannot be migrated without guessing is reported and left alone (exit status 1).
    """
    from specgguf.migrate.check import is_command_argv, migrate_command, run_migrate

    args = list(paths or [])
    if not args:
        _fail("give files to scan, or -- and a command to migrate")
    if is_command_argv(args):
        if write:
            _fail("--write needs files; a command given after -- is printed migrated")
        code = migrate_command(args, check=check, stdout=sys.stdout)
    else:
        code = run_migrate(args, check=check, write=write, diff=diff,
                           stdout=sys.stdout, stderr=sys.stderr, verbose=verbose)
    raise typer.Exit(code)


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(int(ExitCode.USAGE))

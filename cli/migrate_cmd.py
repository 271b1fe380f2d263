"""`specgguf migrate`: rewrite removed llama.cpp / vLLM speculative-decoding flags.

Two forms share one subcommand because both answer the same question ("what do I type now?"):
`specgguf migrate -- llama-server ...` for a command, `specgguf migrate FILE...` for scripts,
Dockerfiles, Makefiles, YAML and Markdown. Register it with
`context_settings={"allow_extra_args": True, "ignore_unknown_options": True}` so the words of a
command reach `paths` untouched.
"""

from __future__ import annotations

import os
import sys

import typer

from specgguf.errors import ExitCode
from specgguf.migrate.drafter_kind import DRAFT_KINDS

_Paths = typer.Argument(
    None, metavar="FILE... | - | -- COMMAND...",
    help="Files or directories to scan; - for stdin (the migrated text is written to stdout, "
         "the report to stderr); or (after --) one command to migrate.",
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
_DraftKind = typer.Option(
    None, "--draft-kind", metavar="|".join(DRAFT_KINDS),
    help="What a draft model file that cannot be read is (models are rarely in a repository): "
         "without it, a plain draft model unless its name says mtp, eagle, dflash or dspark. A "
         "`specgguf-migrate: draft-kind=KIND` comment in a file says it for what follows.",
    show_default=False,
)
_StdinName = typer.Option(
    None, "--stdin-filename", metavar="NAME",
    help="With -: the name stdin's text is read as (Dockerfile, compose.yaml, README.md: its "
         "kind, and where a relative draft path is looked for); without it, a shell script.",
    show_default=False,
)
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
    draft_kind: str | None = _DraftKind,
    stdin_filename: str | None = _StdinName,
) -> None:
    """Rewrite removed speculative-decoding flags (--draft-max, -cd, vLLM's --speculative-model).

    A command that relied on a default llama.cpp changed gets the old value written, with why.

    A draft file that cannot be read is taken as plain unless its name says otherwise.

    What cannot be migrated without guessing is reported with its reason (exit status 1).

    `specgguf migrate - < serve.sh > new.sh` migrates stdin's text to stdout (report on stderr).
    """
    from specgguf.migrate.check import (
        is_command_argv,
        migrate_command,
        migrate_stdin,
        run_migrate,
    )

    args = list(paths or [])
    if draft_kind is not None and draft_kind not in DRAFT_KINDS:
        _fail(f"--draft-kind {draft_kind}: not one of {', '.join(DRAFT_KINDS)}")
    if not args:
        _fail("give files to scan, or -- and a command to migrate")
    others = [a for a in args if a != "-"]
    if "-" in args and (args[0] == "-" or all(os.path.exists(a) for a in others)):
        if others:  # (a command after -- may hold a - of its own: -f - reads its prompt)
            _fail("- reads stdin alone: give files, or -, not both")
        if write:
            _fail("--write needs files; stdin's text is printed migrated on stdout")
        raise typer.Exit(migrate_stdin(sys.stdin.buffer, check=check, diff=diff,
                                       stdout=sys.stdout, stderr=sys.stderr,
                                       name=stdin_filename, draft_kind=draft_kind))
    if stdin_filename is not None:
        _fail("--stdin-filename names stdin's text: give - too")
    if is_command_argv(args):
        if write:
            _fail("--write needs files; a command given after -- is printed migrated")
        code = migrate_command(args, check=check, stdout=sys.stdout, draft_kind=draft_kind)
    else:
        code = run_migrate(args, check=check, write=write, diff=diff,
                           stdout=sys.stdout, stderr=sys.stderr, verbose=verbose,
                           draft_kind=draft_kind)
    raise typer.Exit(code)


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(int(ExitCode.USAGE))

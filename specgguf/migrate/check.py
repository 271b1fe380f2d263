"""`specgguf migrate`: what cli/migrate_cmd.py calls. Files are reported, checked, diffed or
rewritten (`run_migrate`); a command given after `--` is printed migrated (`migrate_command`).

The work itself is elsewhere in this package: removed_flags (what was removed), argv and its
dialects (one command), the lexers and scanners (commands in files), edit (writing them back),
guard (the token scan), files (reading and writing files), text (one file's text).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterable, Sequence
from typing import BinaryIO, TextIO

from specgguf.migrate import files as mf
from specgguf.migrate.argv import find_anchor, migrate_argv
from specgguf.migrate.kinds import detect
from specgguf.migrate.reasons import tagged
from specgguf.migrate.scan import Finding
from specgguf.migrate.text import check_text


def report_lines(path: str, findings: Iterable[Finding], changes: bool = True) -> list[str]:
    """`path:line: old -> new`, then the reasons and refusals, one line each."""
    out: list[str] = []
    for f in findings:
        if f.changed and changes:
            out.append(f"{path}:{f.line}: {f.old} -> {f.new}" if f.old
                       else f"{path}:{f.line}: added: {f.new}")
        out += [f"{path}:{f.line}: note: {n}" for n in f.notes]
        out += [f"{path}:{f.line}: cannot migrate safely: {tagged(u)}" for u in f.unsafe]
    return out


def _diff(path: str, old: str, new: str) -> str:
    import difflib

    return "".join(difflib.unified_diff(old.splitlines(keepends=True),
                                        new.splitlines(keepends=True), path, path))


def run_migrate(paths: Sequence[str], check: bool = False, write: bool = False,
                diff: bool = False, stdout: TextIO | None = None,
                stderr: TextIO | None = None, verbose: bool = False,
                draft_kind: str | None = None) -> int:
    """Scan files; report (default), --diff, --write. Returns the exit status.

    1 when --check finds anything to migrate, when something could not be migrated safely
    (a person has to look), or when a path is missing, unreadable or binary (named
    explicitly); 0 otherwise. `verbose` lists what a directory scan skipped, and why;
    `draft_kind` is what a draft file that cannot be read is taken for (else its name says).
    """
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    files, skipped, missing = mf.expand(paths)
    named = {os.path.normpath(p) for p in paths if os.path.isfile(p)}
    failed = bool(missing)
    for path in missing:  # not a directory, not a regular file: absent, or a device or FIFO
        why = "not a regular file" if os.path.exists(path) else "no such file or directory"
        print(f"error: {path}: {why}", file=err)
    attention = unsafe = False
    for path in files:
        try:
            src = mf.read(path)
        except mf.Unreadable as why:
            if os.path.normpath(path) in named or not str(why).startswith("binary"):
                print(f"error: {path}: {why}", file=err)
                failed = True
            else:
                skipped.append((path, str(why)))
            continue
        if src.note and verbose:
            print(f"{path}: {src.note}", file=err)
        kind, comments = detect(path, src.text)
        new, findings = check_text(src.text, kind, comments,
                                   os.path.dirname(os.path.abspath(path)), draft_kind)
        if not findings:
            continue
        attention = True
        unsafe = unsafe or any(f.unsafe for f in findings)
        if diff and new != src.text:
            out.write(_diff(path, src.text, new))
            for line in report_lines(path, findings, changes=False):
                print(f"# {line}", file=out)
        else:
            for line in report_lines(path, findings):
                print(line, file=out)
        if write and new != src.text:
            try:
                mf.atomic_write(path, src.encode(new))
            except OSError as why:  # one line, the file as it was, and exit 1
                print(f"error: {path}: not rewritten: {why.strerror or why}", file=err)
                failed = True
                continue
            print(f"{path}: rewritten", file=out)
    if verbose:
        for path, why in skipped:
            print(f"skipped: {path}: {why}", file=err)
    if failed or unsafe or (check and attention):
        return 1
    return 0


#: what the report calls stdin's text when --stdin-filename gives it no name
STDIN_LABEL = "<stdin>"


def migrate_stdin(stdin: BinaryIO, check: bool = False, diff: bool = False,
                  stdout: TextIO | None = None, stderr: TextIO | None = None,
                  name: str | None = None, draft_kind: str | None = None) -> int:
    """`migrate -`: stdin's text in, the migrated text out on stdout (every byte outside the
    changed words as it came), the report on stderr. With --check or --diff, stdout gets what
    a file's would (the report; the diff), not the text. `name` (--stdin-filename) is what the
    text is read as (Dockerfile, compose.yaml, README.md: its kind, and the directory a draft
    path is relative to); without it the text is a shell script, as an unknown file is.
    The exit status is a file's: 1 when something could not be migrated safely, or with
    --check when anything would change."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    label = name or STDIN_LABEL
    data = stdin.read(mf.MAX_BYTES + 1)
    try:
        if len(data) > mf.MAX_BYTES:
            raise mf.Unreadable(f"larger than {mf.MAX_BYTES // (1024 * 1024)} MiB, not read")
        src = mf.decode(data)
    except mf.Unreadable as why:
        print(f"error: {label}: {why}", file=err)
        return 1
    kind, comments = detect(name or "", src.text)
    base = os.path.dirname(os.path.abspath(name)) if name else os.getcwd()
    new, findings = check_text(src.text, kind, comments, base, draft_kind)
    report = report_lines(label, findings)
    if check or diff:
        if diff and new != src.text:
            out.write(_diff(label, src.text, new))
            report = [f"# {line}" for line in report_lines(label, findings, changes=False)]
        for line in report:
            print(line, file=out)
    else:
        buffer = getattr(out, "buffer", None)
        if buffer is None:  # a text stream only (tests): the text as it decoded
            out.write(new)
        else:
            out.flush()
            buffer.write(src.encode(new))
            buffer.flush()
        for line in report:
            print(line, file=err)
    if any(f.unsafe for f in findings) or (check and findings):
        return 1
    return 0


def is_command_argv(args: Sequence[str]) -> bool:
    """True when `migrate` was given a command (after --) rather than files."""
    if not args:
        return False
    if any(a.startswith("-") and not os.path.exists(a) for a in args):
        return True
    return find_anchor(list(args[:2])) is not None and not os.path.isfile(args[0])


def migrate_command(argv: Sequence[str], check: bool = False,
                    stdout: TextIO | None = None, draft_kind: str | None = None) -> int:
    """Print the migrated command, then the reasons as # comments (the output stays runnable).

    Exit status 1 when something could not be migrated safely, or with --check when anything
    changed.
    """
    out = stdout or sys.stdout
    res = migrate_argv(argv, draft_kind=draft_kind)
    print(shlex.join(res.argv), file=out)
    for note in res.notes:
        print(f"# {note}", file=out)
    for problem in res.unsafe:
        print(f"# cannot migrate safely: {tagged(problem)}", file=out)
    return 1 if res.unsafe or (check and res.changed) else 0

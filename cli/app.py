"""specgguf's command line: llama.cpp's flag names, aliases, defaults and LLAMA_ARG_* variables.

Every failure a user can cause ends in ONE line on stderr and a documented exit status
(specgguf.errors.ExitCode); a traceback escaping `main` is a bug.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys

import typer

from specgguf.errors import ExitCode, OutputError, SpecggufError

app = typer.Typer(
    name="specgguf",
    help="Lossless speculative decoding for GGUF models (llama.cpp flags, llama-cpp-python).",
    context_settings={"help_option_names": ["-h", "--help", "--usage"]},
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


_registered = False


def _register() -> None:
    """Subcommands live in their own modules; importing them here keeps start-up light
    (llama_cpp is only imported by commands that load a model). Once per process: run_cli
    may be called many times in-process (tests, embedding)."""
    global _registered
    if _registered:
        return
    _registered = True
    # a command module that fails to import is a broken install: let it say so, never hide
    # the command ("No such command" would send the user looking in the wrong place)
    from specgguf_cli import (
        bench_cmd,
        check_cmd,
        migrate_cmd,
        pull_cmd,
        rpc_server_cmd,
        run_cmd,
        serve_cmd,
    )

    app.command("run", context_settings={"ignore_unknown_options": False})(run_cmd.run)
    app.command("serve")(serve_cmd.serve)
    app.command("pull")(pull_cmd.pull)
    app.command("check")(check_cmd.check)
    app.command(
        "migrate",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(migrate_cmd.migrate)
    app.command("bench")(bench_cmd.bench)
    app.command("rpc-server")(rpc_server_cmd.rpc_server)


@functools.cache
def command():
    """The click group of every subcommand, built once per process: building it reads every
    option's signature, which costs far more than parsing a command line (run_cli may be
    called many times in-process: tests, embedding)."""
    _register()
    return typer.main.get_command(app)


def _silence_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so the interpreter's final flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


def error_line(message: str) -> str:
    # llama.cpp's own messages already start with "error while handling ..."
    return message if message.startswith("error") else f"error: {message}"


#: errno values that mean "the output cannot be written" (full disk, quota, I/O error)
_WRITE_ERRNOS = frozenset(
    getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EFBIG", "EIO", "EROFS") if hasattr(errno, n)
)


def _stderr_line(line: str) -> None:
    """One line on stderr; a stderr that cannot be written either is left alone."""
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr)


def _dashes_for_underscores(argv: list[str]) -> list[str]:
    """llama.cpp reads `--repeat_penalty` as `--repeat-penalty`: a long flag's underscores are
    dashes. Done for the words (and the name part of `--name=value`) that are not a flag as
    written but are one with dashes, before `--`; a value is left as it is."""
    if not argv or argv[0] not in ("run", "bench", "serve"):
        return argv
    params = command().commands[argv[0]].params
    known = {n for p in params for n in (*p.opts, *p.secondary_opts)}
    valued = {n for p in params if not getattr(p, "is_flag", False) for n in p.opts}
    out = [argv[0]]
    for i, word in enumerate(argv[1:], start=1):
        if word == "--":
            return out + argv[i:]
        name, eq, value = word.partition("=")
        dashed = name.replace("_", "-")
        is_value = out[-1] in valued  # the word after a flag that takes one
        fixed = name.startswith("--") and not is_value and name not in known and dashed in known
        out.append(dashed + eq + value if fixed else word)
    return out


def run_cli(argv: list[str]) -> int:
    """Run one command; every outcome is an exit status. SIGINT, SIGTERM and SIGHUP are
    handled by specgguf.interrupts for the duration (128 + the signal's number)."""
    from specgguf import interrupts

    try:
        with interrupts.handling():
            code = _run_cli(argv)
    except KeyboardInterrupt:  # in the instant between the command's end and the restore
        code = interrupts.exit_code()
    if interrupts.received() is not None and code in (0, int(ExitCode.INTERRUPTED)):
        # typer answers any KeyboardInterrupt with 130, whatever the signal was; and one that
        # came after the work was done is still reported
        code = interrupts.exit_code()
    interrupts.reset()  # a caller that goes on (tests, embedding) starts with a clean slate
    return code


def _run_cli(argv: list[str]) -> int:
    from specgguf import interrupts

    _register()
    try:
        from specgguf_cli.fim_presets import expand

        argv = expand(argv)  # serve --fim-qwen-*: llama-server's presets, as flags
        if argv and argv[0] in ("run", "bench", "serve"):
            from specgguf_cli.table_flags import (
                expand_model_presets,
                expand_presets,
                with_bare_values,
            )

            from specgguf.migrate.refuse import check_run_argv

            # -fa/--color alone mean on; --spec-default stands for its flags (the flag table)
            # and a model preset (--gpt-oss-20b-default) for its -hf model and settings
            words = expand_model_presets(argv[0], with_bare_values(argv[1:]))
            argv = [argv[0], *expand_presets(words)]
            check_run_argv(argv, os.environ)
        argv = _dashes_for_underscores(argv)
        from specgguf_cli.short_flags import check_short_flags

        group = command()
        check_short_flags(group, argv)
        if argv[:1] in (["run"], ["bench"], ["serve"]) and "--completion-bash" in argv[1:]:
            # the script covers every command: made here, where the whole group is known
            from specgguf_cli.completion_bash import completion_script

            print(completion_script(group), end="")
            return 0
        rv = group.main(args=argv, prog_name="specgguf", standalone_mode=False)
        return int(rv) if isinstance(rv, int) else 0
    except OutputError as err:
        if err.stdout:
            _silence_stdout()
        _stderr_line(error_line(str(err)))
        return int(err.code)
    except SpecggufError as err:
        _stderr_line(error_line(str(err)))
        return int(err.code)
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:  # click's name for a KeyboardInterrupt
        return interrupts.exit_code()
    except typer.TyperException as e:  # click's usage errors (typer vendors click)
        if type(e).__name__ == "NoArgsIsHelpError":
            print(e.format_message())
            return 0
        _stderr_line(error_line(e.format_message()))
        return int(ExitCode.USAGE)
    except KeyboardInterrupt:
        return interrupts.exit_code()
    except BrokenPipeError:
        _silence_stdout()
        return 141
    except OSError as e:
        # stdout on a full disk outside a run's own checks (check, migrate, bench print
        # through the buffered stdout): one line, never a traceback
        if e.errno not in _WRITE_ERRNOS:
            raise
        _silence_stdout()
        _stderr_line(error_line(f"cannot write stdout: {e.strerror or e}"))
        return int(ExitCode.OUTPUT)
    except SystemExit as e:
        # Typer turns EPIPE into sys.exit(1) itself; a closed stdout is 141, quietly.
        if isinstance(e.__context__, BrokenPipeError):
            _silence_stdout()
            return 141
        raise


def main() -> None:
    code = int(ExitCode.INTERRUPTED)
    try:
        code = run_cli(sys.argv[1:])
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        code = code or 141
    except OSError as e:  # what stayed in stdout's buffer does not fit on the disk
        _silence_stdout()
        _stderr_line(error_line(f"cannot write stdout: {e.strerror or e}"))
        code = code or int(ExitCode.OUTPUT)
    except KeyboardInterrupt:  # Ctrl-C while the last output drains into a slow reader
        code = code or int(ExitCode.INTERRUPTED)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()

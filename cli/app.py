"""specgguf's command line: llama.cpp's flag names, aliases, defaults and LLAMA_ARG_* variables.

Every failure a user can cause ends in ONE line on stderr and a documented exit status
(specgguf.errors.ExitCode); a traceback escaping `main` is a bug.
"""

from __future__ import annotations

import os
import sys

import typer

from specgguf.errors import ExitCode, SpecggufError

app = typer.Typer(
    name="specgguf",
    help="Lossless speculative decoding for GGUF models (llama.cpp flags, llama-cpp-python).",
    context_settings={"help_option_names": ["-h", "--help"]},
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
    from specgguf_cli import pull_cmd, run_cmd

    app.command("run", context_settings={"ignore_unknown_options": False})(run_cmd.run)
    app.command("pull")(pull_cmd.pull)
    try:
        from specgguf_cli import check_cmd

        app.command("check")(check_cmd.check)
    except ImportError:  # pragma: no cover - during development only
        pass
    try:
        from specgguf_cli import migrate_cmd

        app.command(
            "migrate",
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        )(migrate_cmd.migrate)
    except ImportError:  # pragma: no cover
        pass
    try:
        from specgguf_cli import rpc_server_cmd

        app.command("rpc-server")(rpc_server_cmd.rpc_server)
    except ImportError:  # pragma: no cover
        pass
    try:
        from specgguf_cli import bench_cmd

        app.command("bench")(bench_cmd.bench)
    except ImportError:  # pragma: no cover
        pass


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


def run_cli(argv: list[str]) -> int:
    _register()
    try:
        if argv and argv[0] in ("run", "bench"):
            from specgguf.legacy import check_run_argv

            check_run_argv(argv, os.environ)
        rv = app(args=argv, prog_name="specgguf", standalone_mode=False)
        return int(rv) if isinstance(rv, int) else 0
    except SpecggufError as err:
        print(error_line(str(err)), file=sys.stderr)
        return int(err.code)
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        return int(ExitCode.INTERRUPTED)
    except typer.TyperException as e:  # click's usage errors (typer vendors click)
        if type(e).__name__ == "NoArgsIsHelpError":
            print(e.format_message())
            return 0
        print(error_line(e.format_message()), file=sys.stderr)
        return int(ExitCode.USAGE)
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        _silence_stdout()
        return 141
    except SystemExit as e:
        # Typer turns EPIPE into sys.exit(1) itself; a closed stdout is 141, quietly.
        if isinstance(e.__context__, BrokenPipeError):
            _silence_stdout()
            return 141
        raise


def main() -> None:
    code = run_cli(sys.argv[1:])
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        code = code or 141
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()

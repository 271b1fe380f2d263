"""Models by name: `-hf user/model[:QUANT]` (and `-hff FILE`, `-hfd` for the draft),
resolved and downloaded from the Hugging Face Hub with huggingface_hub.

Which file a name means follows llama.cpp: `-hff` names it; else the first GGUF whose name
carries the quant tag (case-insensitive, followed by "." or "-"); with no tag Q4_K_M, then Q8_0,
then the first GGUF of the repository. Projector, imatrix and drafter-head files (mmproj,
imatrix, mtp-, eagle3-, dflash-, dspark-) are never the model; a split model is all its parts,
loaded from the first.

Files land in huggingface_hub's cache, which is llama.cpp's too (LLAMA_CACHE, when set, is
used for both); a file an older llama.cpp already downloaded into its flat cache
(~/.cache/llama.cpp/user_model_FILE) is used where it is. A dropped connection resumes from
the bytes already received, within a run and across runs: a file the repository lists a SHA-256
for is downloaded into a partial file of specgguf's own beside the cache's blobs (named by that
hash, kept when the download fails or the process is killed), the rest asked for with a ranged
request; once whole it is checked against the SHA-256 and becomes the cache's blob and
snapshot entry, as huggingface_hub lays them out. (A file listed without one goes through
huggingface_hub, which keeps no partial file between processes.) --offline (or
HF_HUB_OFFLINE) uses the cache only. Every failure is one PullError line (exit 6)."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specgguf.errors import PullError, UsageError

#: the quant tags tried in order when a name carries none (llama.cpp's)
DEFAULT_TAGS = ("Q4_K_M", "Q8_0")
#: name parts of GGUFs that sit beside a model but are not one
SIDECARS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
#: the most files of a repository listed (a model repository has tens, not thousands)
MAX_FILES = 10_000


@dataclass(frozen=True)
class HubModel:
    """A model named on the command line: its repository, quant tag and/or file."""

    repo: str
    tag: str | None = None
    file: str | None = None
    flag: str = "-hf"  # how the command line named it (for messages)

    @classmethod
    def parse(cls, spec: str, file: str | None = None, flag: str = "-hf") -> HubModel:
        """`user/model[:QUANT]` (UsageError when it is not one)."""
        repo, _, tag = spec.strip().partition(":")
        if not _REPO.match(repo) or ".." in repo:
            raise UsageError(f"invalid value for {flag}: {spec!r} (expected user/model[:QUANT])")
        return cls(repo, tag or None, file or None, flag)


def is_model_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".gguf") and not any(s in name for s in SIDECARS)


def _first_part(path: str) -> bool:
    m = _SPLIT.search(path)
    return m is None or int(m.group(1)) == 1


def choose_files(files: Sequence[str], model: HubModel, where: str = "repository") -> list[str]:
    """The files `model` means among a repository's `files`: the model file first, then its
    other split parts (PullError listing the GGUFs there when none fits)."""
    if model.file is not None:
        primary = model.file if model.file in files else None
    else:
        primary = None
        for tag in (model.tag,) if model.tag else DEFAULT_TAGS:
            pattern = re.compile(re.escape(tag) + r"[.-]", re.IGNORECASE)
            primary = next((f for f in files if is_model_file(f) and _first_part(f)
                            and pattern.search(f)), None)  # fmt: skip
            if primary:
                break
        if primary is None and model.tag is None:
            primary = next((f for f in files if is_model_file(f) and _first_part(f)), None)
    if primary is None:
        ggufs = [f for f in files if f.endswith(".gguf")]
        wanted = f"file {model.file!r}" if model.file else (
            f"GGUF of quant {model.tag}" if model.tag else "GGUF model")
        listing = f" (it has: {', '.join(ggufs[:12])}{' ...' if len(ggufs) > 12 else ''})"
        raise PullError(f"{model.flag} {model.repo}: no {wanted} in the {where}"
                        + (listing if ggufs else ""))  # fmt: skip
    m = _SPLIT.search(primary)
    if m is None:
        return [primary]
    stem, count = primary[: m.start()], m.group(2)
    parts = [f"{stem}-{i:05d}-of-{count}.gguf" for i in range(1, int(count) + 1)]
    missing = [p for p in parts if p not in files]
    if missing:
        raise PullError(f"{model.flag} {model.repo}: split model {primary} lacks {missing[0]}")
    return parts


def cache_dir() -> Path | None:
    """llama.cpp's LLAMA_CACHE when set (huggingface_hub's layout under it, as llama.cpp
    uses); None: huggingface_hub's own (HF_HUB_CACHE, HF_HOME, ~/.cache/huggingface/hub),
    which is llama.cpp's default too."""
    value = os.environ.get("LLAMA_CACHE")
    return Path(value) if value else None


def legacy_cached(repo: str, file: str) -> Path | None:
    """A file an older llama.cpp downloaded into its flat cache, where it is there."""
    base = cache_dir() or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    base = base if cache_dir() else base / "llama.cpp"
    flat = base / f"{repo.replace('/', '_')}_{file.replace('/', '_')}"
    return flat if flat.is_file() else None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class Hub:
    """Where and how to reach the Hub: the token (--hf-token, else HF_TOKEN), --offline, and
    whether to draw the progress bar."""

    token: str | None = None
    offline: bool = False
    progress: bool = True

    def fetch(self, model: HubModel) -> Path:
        """The local path of `model`'s file (its first part when split), downloaded when the
        cache lacks it."""
        try:
            import huggingface_hub  # noqa: F401
        except ImportError:
            raise PullError(f"{model.flag} needs huggingface_hub: pip install huggingface_hub"
                            ) from None  # fmt: skip
        if self.offline or _env_offline():
            return self._from_cache(model)
        return self._download(model)

    def _download(self, model: HubModel) -> Path:
        from huggingface_hub import HfApi, hf_hub_download, try_to_load_from_cache

        token = self.token or None
        endpoint = os.environ.get("HF_ENDPOINT") or None  # read now, not at import
        with _hub_errors(model, token):
            info = HfApi(endpoint=endpoint, token=token).model_info(model.repo,
                                                                    files_metadata=True)
            siblings = {s.rfilename: s for s in (info.siblings or [])[:MAX_FILES]}
            paths = []
            for name in choose_files(list(siblings), model):
                legacy = legacy_cached(model.repo, name)
                if legacy is not None:
                    paths.append(legacy)
                    continue
                cached = try_to_load_from_cache(model.repo, name, cache_dir=cache_dir(),
                                                revision=info.sha)  # fmt: skip
                if isinstance(cached, str):
                    paths.append(Path(cached))
                    continue
                sha = _listed_sha256(siblings[name])
                if sha is not None:  # resumable across runs: our partial file, then the cache
                    paths.append(self._resumable(model, name, info.sha, sha, siblings[name],
                                                 token, endpoint))  # fmt: skip
                    continue
                path = Path(hf_hub_download(
                    model.repo, name, revision=info.sha, cache_dir=cache_dir(), token=token,
                    endpoint=endpoint, tqdm_class=None if self.progress else _Silent,
                ))  # fmt: skip
                paths.append(path)
        return paths[0]

    def _resumable(self, model: HubModel, name: str, revision: str, sha: str, sibling: object,
                   token: str | None, endpoint: str | None) -> Path:  # fmt: skip
        """Download `name` into a partial file of its own (named by its SHA-256, kept when
        the download fails or the process is killed), resuming from its length with a ranged
        request; once whole and checked, it becomes the cache's blob and snapshot entry, as
        huggingface_hub lays them out."""
        from huggingface_hub import constants, hf_hub_url
        from huggingface_hub.file_download import http_get
        from huggingface_hub.utils import build_hf_headers

        repo_dir = (cache_dir() or Path(constants.HF_HUB_CACHE)) / (
            "models--" + model.repo.replace("/", "--"))
        blob = repo_dir / "blobs" / sha
        partial = blob.with_name(f"{sha}.specgguf-partial")
        partial.parent.mkdir(parents=True, exist_ok=True)
        url = hf_hub_url(model.repo, name, revision=revision, endpoint=endpoint)
        size = getattr(sibling, "size", None)
        if isinstance(size, int) and partial.exists() and partial.stat().st_size > size:
            partial.unlink()  # longer than the file: not a part of it, start again
        with open(partial, "ab") as out:
            http_get(url, out, resume_size=out.tell(), headers=build_hf_headers(token=token),
                     expected_size=size, displayed_filename=name,
                     tqdm_class=None if self.progress else _Silent)  # fmt: skip
        got = sha256_of(partial)
        if got != sha:
            partial.unlink(missing_ok=True)
            raise PullError(f"{model.flag} {model.repo}: {name} failed its checksum (sha256 "
                            f"{got[:12]}..., expected {sha[:12]}...): removed; run again")
        os.replace(partial, blob)
        link = repo_dir / "snapshots" / revision / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        try:
            link.symlink_to(os.path.relpath(blob, link.parent))
        except OSError:  # no symlinks here (huggingface_hub then copies too)
            import shutil

            shutil.copyfile(blob, link)
        return link

    def _from_cache(self, model: HubModel) -> Path:
        """--offline: the newest cached snapshot of the repository (or llama.cpp's flat
        cache), or one line saying it is not there."""
        from huggingface_hub import constants

        root = cache_dir() or Path(constants.HF_HUB_CACHE)
        repo_dir = root / f"models--{model.repo.replace('/', '--')}"
        ref = repo_dir / "refs" / "main"
        snapshots = repo_dir / "snapshots"
        if ref.is_file():
            snapshot: Path | None = snapshots / ref.read_text().strip()[:64]
        else:  # downloaded at a pinned commit: the newest snapshot
            found = sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime) if (
                snapshots.is_dir()) else []
            snapshot = found[-1] if found else None
        files = []
        if snapshot is not None and snapshot.is_dir():
            files = sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*.gguf"))
        if model.file and legacy_cached(model.repo, model.file):
            return legacy_cached(model.repo, model.file)  # type: ignore[return-value]
        if not files:
            raise PullError(f"{model.flag} {model.repo}: not in the cache ({root}) and --offline "
                            "forbids downloading it: run once without --offline")  # fmt: skip
        chosen = choose_files(files, model, "cache (--offline)")
        return snapshot / chosen[0]  # type: ignore[operator]


class _Silent:
    """A tqdm stand-in that draws nothing (-q)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _env_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _listed_sha256(sibling: object) -> str | None:
    """The repository's SHA-256 of a file (its LFS pointer), None when it lists none."""
    lfs = getattr(sibling, "lfs", None)
    sha = getattr(lfs, "sha256", None) if lfs is not None else None
    return sha if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha) else None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__


def _transport_error(err: BaseException) -> bool:
    """A failure of the HTTP client under huggingface_hub (a dropped connection, a timeout)."""
    return type(err).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore", "requests",
                                                  "urllib3")  # fmt: skip


class _hub_errors:  # noqa: N801 - used as a context manager
    """huggingface_hub's exceptions as one PullError line each."""

    def __init__(self, model: HubModel, token: str | None) -> None:
        self.model, self.token = model, token

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, err, tb) -> bool:  # noqa: ANN001
        if err is None or isinstance(err, (PullError, KeyboardInterrupt)):
            return False
        from huggingface_hub import errors

        m = self.model
        status = getattr(getattr(err, "response", None), "status_code", None)
        if isinstance(err, errors.GatedRepoError):
            why = "is gated: accept its terms on the Hub, then pass --hf-token or HF_TOKEN"
        elif status == 401 and self.token:
            why = "refused the token (--hf-token / HF_TOKEN): check it, or drop it for a public repository"  # noqa: E501
        elif isinstance(err, errors.RepositoryNotFoundError) or status in (401, 404):
            why = "not found (or private: pass --hf-token or HF_TOKEN)"
        elif isinstance(err, errors.RevisionNotFoundError | errors.EntryNotFoundError):
            why = f"a file went missing while downloading ({err.__class__.__name__})"
        elif isinstance(err, OSError | errors.HfHubHTTPError) or _transport_error(err):
            why = f"download failed: {_first_line(err)} (run again; --offline uses the cache)"
        else:
            return False
        raise PullError(f"{m.flag} {m.repo}: {why}") from None

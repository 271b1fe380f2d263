"""-mu/--model-url: a GGUF downloaded from an address into llama.cpp's cache directory, as
llama.cpp does: the file is named by the address's last path segment (query and fragment
left out) and kept flat in LLAMA_CACHE, else $XDG_CACHE_HOME/llama.cpp, else
~/.cache/llama.cpp. A whole file already there is used as it is. The download is written to a
partial file beside it, resumed from its length with a ranged request when run again, drawn
with a progress bar, and renamed into place once complete."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from specgguf.errors import PullError, UsageError

#: llama.cpp's suffix for a download under way (its next run resumes it)
PARTIAL = ".downloadInProgress"


def llama_cache_dir() -> Path:
    """llama.cpp's own cache directory (its plain-URL downloads lie flat in it)."""
    value = os.environ.get("LLAMA_CACHE")
    if value:
        return Path(value)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llama.cpp"


def file_name(url: str) -> str:
    """The name the download is kept under: the address's last path segment."""
    parts = urlsplit(url)
    name = unquote(parts.path.rsplit("/", 1)[-1])
    if parts.scheme not in ("http", "https") or not name or name in (".", "..") or "\\" in name:
        raise UsageError(f"-mu/--model-url {url}: not an http(s) address of a file")
    return name


def fetch_url(url: str, *, offline: bool = False, progress: bool = True) -> Path:
    """The local path of the file at `url`, downloaded into llama.cpp's cache unless whole
    there already (PullError, exit 6, when it cannot be)."""
    dest = llama_cache_dir() / file_name(url)
    if dest.is_file():
        return dest
    if offline or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes"):
        raise PullError(f"-mu {url}: not in the cache ({dest}) and --offline is given")
    try:
        from huggingface_hub.file_download import http_get
    except ImportError:
        raise PullError("-mu needs huggingface_hub: pip install huggingface_hub") from None
    from specgguf.modelfiles.hub import _first_line, _Silent

    partial = dest.with_name(dest.name + PARTIAL)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(partial, "ab") as out:
            http_get(url, out, resume_size=out.tell(), displayed_filename=dest.name,
                     tqdm_class=None if progress else _Silent)  # fmt: skip
    except Exception as err:  # noqa: BLE001 - HTTP, transport and disk errors: one line
        raise PullError(f"-mu {url}: {_first_line(err)} (what arrived is kept in {partial}: "
                        "the next run resumes it)") from None  # fmt: skip
    os.replace(partial, dest)
    return dest

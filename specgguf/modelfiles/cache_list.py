"""--cache-list: the models already downloaded by name, as llama.cpp lists them: one
`user/model:TAG` per repository and quant, from the Hub cache -hf uses (LLAMA_CACHE when set,
else huggingface_hub's own), numbered. Sidecar files (projectors, draft heads) and the later
parts of a split model are not models of their own, as llama.cpp counts them."""

from __future__ import annotations

import re
from pathlib import Path

from specgguf.modelfiles.hub import SIDECARS, cache_dir

_SPLIT = re.compile(r"-(\d{5})-of-\d{5}$")
_TAG = re.compile(r"[-.](I?Q\d+(?:_[A-Z0-9]+)*|[BF]F?16|F32|MXFP4(?:_MOE)?)$", re.IGNORECASE)
#: repositories and files looked at, at most (a cache is not read without bound)
MAX_ENTRIES = 100_000


def hub_cache() -> Path:
    base = cache_dir()
    if base is not None:
        return base
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def cached_models(root: Path | None = None) -> list[str]:
    """`user/model:TAG` of each first-part GGUF in the cache, sorted, once each."""
    root = root or hub_cache()
    found: set[str] = set()
    seen = 0
    for repo_dir in sorted(root.glob("models--*--*")):
        repo = repo_dir.name.removeprefix("models--").replace("--", "/", 1)
        for path in repo_dir.glob("snapshots/*/**/*.gguf"):
            seen += 1
            if seen > MAX_ENTRIES:
                return sorted(found)
            stem = path.name.removesuffix(".gguf")
            split = _SPLIT.search(stem)
            if split is not None and split.group(1) != "00001":
                continue
            stem = stem[: split.start()] if split else stem
            tag = _TAG.search(stem)
            if tag is None or any(s in path.name.lower() for s in SIDECARS):
                continue
            found.add(f"{repo}:{tag.group(1).upper()}")
    return sorted(found)


def format_cache_list(models: list[str]) -> str:
    lines = [f"number of models in cache: {len(models)}"]
    lines += [f"{i:4d}. {m}" for i, m in enumerate(models, start=1)]
    return "\n".join(lines)

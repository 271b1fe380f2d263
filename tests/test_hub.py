"""Models by name (-hf): the file a name means, and downloading it, against a loopback
stand-in of the Hub (tests/hub_standin.py; HF_ENDPOINT points at it, nothing reaches the
internet): quant selection, a missing repository, a refused token, a private repository, an
interrupted download resumed, a corrupt download refused, --offline hits and misses, and
`specgguf serve -hf` downloading, verifying and serving a tiny model."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hub_standin import HubStandIn, Repo, point_at
from specgguf_cli.app import run_cli

from specgguf.errors import PullError, UsageError
from specgguf.modelfiles.hub import Hub, HubModel, choose_files

pytest.importorskip("huggingface_hub")

Q4 = b"GGUF" + bytes(range(256)) * 40
Q8 = b"GGUF" + b"8" * 9000


def _choose(files: list[str], spec: str, file: str | None = None) -> list[str]:
    return choose_files(files, HubModel.parse(spec, file))


def test_quant_selection_follows_llama_cpp() -> None:
    files = ["README.md", "m-mmproj-Q4_K_M.gguf", "m-Q8_0.gguf", "m-Q4_K_M.gguf", "m-f16.gguf"]
    assert _choose(files, "u/m") == ["m-Q4_K_M.gguf"]  # default tag, sidecars skipped
    assert _choose(files, "u/m:q8_0") == ["m-Q8_0.gguf"]  # case-insensitive tag
    assert _choose(["a-Q8_0.gguf", "a-f16.gguf"], "u/m") == ["a-Q8_0.gguf"]  # then Q8_0
    assert _choose(["a-f16.gguf", "imatrix.gguf"], "u/m") == ["a-f16.gguf"]  # then the first
    assert _choose(files, "u/m", "m-f16.gguf") == ["m-f16.gguf"]  # -hff wins
    split = ["b-Q4_K_M-00002-of-00002.gguf", "b-Q4_K_M-00001-of-00002.gguf"]
    assert _choose(split, "u/m") == ["b-Q4_K_M-00001-of-00002.gguf", split[0]]
    with pytest.raises(PullError, match="no GGUF of quant IQ2_XS in the repository"):
        _choose(files, "u/m:IQ2_XS")  # a tag that is not there has no fallback
    with pytest.raises(UsageError, match="user/model"):
        HubModel.parse("not-a-repo")


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """The stand-in with a public and a private repository; the caches in tmp_path."""
    standin = HubStandIn(
        repos={"u/m-GGUF": Repo({"m-Q4_K_M.gguf": Q4, "m-Q8_0.gguf": Q8, "README.md": b"#"}),
               "u/secret": Repo({"s-Q8_0.gguf": Q8}, private=True)},
        tokens={"good-token"},
    ).start()  # fmt: skip
    point_at(standin, monkeypatch, tmp_path)
    yield standin
    standin.stop()


def _fetch(spec: str, **kw) -> Path:
    return Hub(progress=False, **kw).fetch(HubModel.parse(spec))


def test_download_then_cache_hit(hub) -> None:
    path = _fetch("u/m-GGUF")
    assert path.read_bytes() == Q4 and path.name == "m-Q4_K_M.gguf"
    downloads = [r for r in hub.requests if r[0] == "GET" and "/resolve/" in r[1]]
    assert len(downloads) == 1
    assert _fetch("u/m-GGUF") == path  # the second time: no download
    assert [r for r in hub.requests if r[0] == "GET" and "/resolve/" in r[1]] == downloads


def test_missing_repository_is_one_line(hub) -> None:
    with pytest.raises(PullError, match=r"^-hf u/nope: not found \(or private"):
        _fetch("u/nope")


def test_wrong_token_is_named(hub) -> None:
    with pytest.raises(PullError, match="refused the token"):
        _fetch("u/m-GGUF", token="wrong")


def test_private_repository_needs_its_token(hub) -> None:
    with pytest.raises(PullError, match="not found"):
        _fetch("u/secret")
    assert _fetch("u/secret", token="good-token").read_bytes() == Q8


def test_interrupted_download_resumes(hub) -> None:
    """A download cut short resumes where it stopped (a ranged request for the rest)."""
    hub.cuts["m-Q4_K_M.gguf"] = [1000, 2000]
    assert _fetch("u/m-GGUF").read_bytes() == Q4
    assert _ranges(hub) == [None, "bytes=1000-", "bytes=3000-"]


def test_download_given_up_is_one_line_and_the_next_run_completes(hub) -> None:
    hub.cuts["m-Q8_0.gguf"] = [3000] + [0] * 6  # then nothing more comes through
    with pytest.raises(PullError, match=r"^-hf u/m-GGUF: download failed: .*run again"):
        _fetch("u/m-GGUF:Q8_0")
    hub.cuts.clear()
    assert _fetch("u/m-GGUF:Q8_0").read_bytes() == Q8


def test_a_download_given_up_resumes_in_the_next_run(hub, tmp_path) -> None:
    """Across runs (a process killed, or one that gave up): the partial file is kept, and the
    next run asks only for the rest."""
    hub.cuts["m-Q8_0.gguf"] = [3000] + [0] * 6
    with pytest.raises(PullError):
        _fetch("u/m-GGUF:Q8_0")
    partials = list((tmp_path / "cache").rglob("*.specgguf-partial"))
    assert [p.stat().st_size for p in partials] == [3000]
    hub.cuts.clear()
    hub.requests.clear()
    assert _fetch("u/m-GGUF:Q8_0").read_bytes() == Q8
    assert _ranges(hub) == ["bytes=3000-"]
    assert not list((tmp_path / "cache").rglob("*.specgguf-partial"))
    hub.requests.clear()
    assert _fetch("u/m-GGUF:Q8_0").read_bytes() == Q8  # now a cache hit
    assert _ranges(hub) == []


def _ranges(hub) -> list[str | None]:
    return [r[2] for r in hub.requests if r[0] == "GET" and "/resolve/" in r[1]]


def test_corrupt_download_is_refused_and_removed(hub) -> None:
    hub.listed_sha["m-Q8_0.gguf"] = "0" * 64
    with pytest.raises(PullError, match="failed its checksum"):
        _fetch("u/m-GGUF:Q8_0")
    assert not list(Path(os.environ["LLAMA_CACHE"]).rglob("m-Q8_0.gguf"))
    del hub.listed_sha["m-Q8_0.gguf"]
    assert _fetch("u/m-GGUF:Q8_0").read_bytes() == Q8  # downloaded again, intact


def test_offline_hits_and_misses(hub, monkeypatch) -> None:
    with pytest.raises(PullError, match=r"not in the cache .* --offline"):
        _fetch("u/m-GGUF", offline=True)
    path = _fetch("u/m-GGUF")
    n = len(hub.requests)
    assert _fetch("u/m-GGUF", offline=True) == path
    assert _fetch("u/m-GGUF:q4_k_m", offline=True) == path
    assert len(hub.requests) == n  # offline asked the stand-in nothing
    with pytest.raises(PullError, match=r"no GGUF of quant Q8_0 in the cache \(--offline\)"):
        _fetch("u/m-GGUF:Q8_0", offline=True)


def test_older_llama_cpp_flat_cache_is_used(hub, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("LLAMA_CACHE")
    flat = tmp_path / "xdg" / "llama.cpp" / "u_m-GGUF_m-Q4_K_M.gguf"
    flat.parent.mkdir(parents=True)
    flat.write_bytes(Q4)
    assert _fetch("u/m-GGUF") == flat
    assert not [r for r in hub.requests if r[0] == "GET" and "/resolve/" in r[1]]


def test_cli_bad_repo_and_token_exit_6(hub, capsys) -> None:
    assert run_cli(["run", "-hf", "u/nope", "-p", "x"]) == 6
    assert capsys.readouterr().err.strip() == (
        "error: -hf u/nope: not found (or private: pass --hf-token or HF_TOKEN)")
    assert run_cli(["serve", "-hf", "u/m-GGUF", "--hf-token", "bad"]) == 6
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "refused the token" in err
    assert run_cli(["run", "-hf", "u/m-GGUF", "-m", "x.gguf", "-p", "x"]) == 1


def test_serve_by_name_downloads_verifies_and_serves(hub, tiny_target, monkeypatch) -> None:
    """`specgguf serve -hf` against the stand-in: the tiny model is downloaded, checked and
    served (the server is started in-process on a free port and asked one completion)."""
    from serve_helpers import Server, env

    data = Path(tiny_target).read_bytes()
    hub.repos["u/tiny-GGUF"] = Repo({"tiny-Q4_K_M.gguf": data})
    environ = {**env(), "HF_ENDPOINT": hub.endpoint, "LLAMA_CACHE": os.environ["LLAMA_CACHE"]}
    monkeypatch.setattr("serve_helpers.env", lambda: environ)
    server = Server(["-hf", "u/tiny-GGUF", "--spec-type", "none", "-c", "256", "-n", "4"])
    try:
        answer = server.post("/completion", {"prompt": "ab", "n_predict": 4})
        assert isinstance(answer.get("content"), str)
    finally:
        server.stop()
    got = next(Path(environ["LLAMA_CACHE"]).rglob("tiny-Q4_K_M.gguf"))
    assert hashlib.sha256(got.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()

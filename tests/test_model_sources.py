"""Models named without -m, and the flags that answer without a model: -mu/--model-url (from a
loopback server, never the internet: downloaded into llama.cpp's cache, resumed, reused), the
presets that name a model llama-server downloads (--gpt-oss-20b-default ...), --cache-list and
--completion-bash; and llama.cpp's underscore spellings of long flags."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hub_standin import HubStandIn, Repo, point_at
from load_stop import STOPPED, stop_at_load
from specgguf_cli.app import run_cli

from specgguf.flag_table.table import MODEL_PRESETS
from specgguf.modelfiles.cache_list import cached_models, format_cache_list

pytest.importorskip("huggingface_hub")

DATA = b"GGUF" + bytes(range(256)) * 20
RUN = ["run", "-p", "x", "--spec-type", "none", "-q"]


@pytest.fixture
def hub(tmp_path, monkeypatch):
    repos = {"u/tiny-GGUF": Repo({"tiny-Q4_K_M.gguf": DATA})}
    for preset in MODEL_PRESETS.values():
        repos[preset.repo] = Repo({preset.file or "model-Q4_K_M.gguf": DATA})
    standin = HubStandIn(repos=repos).start()
    point_at(standin, monkeypatch, tmp_path)
    yield standin
    standin.stop()


@pytest.fixture
def loads(monkeypatch, tmp_path):
    return stop_at_load(monkeypatch, tmp_path)


def _url(hub: HubStandIn) -> str:
    return f"{hub.endpoint}/u/tiny-GGUF/resolve/main/tiny-Q4_K_M.gguf?download=true"


def test_model_url_downloads_into_llama_cpps_cache_then_reuses(hub, loads, tmp_path) -> None:
    assert run_cli([*RUN, "-mu", _url(hub)]) == STOPPED
    got = loads[-1].model
    assert got == tmp_path / "cache" / "tiny-Q4_K_M.gguf"  # named without the query
    assert got.read_bytes() == DATA
    hub.stop()  # the second run needs no server: the whole file is in the cache
    assert run_cli([*RUN, "--model-url", _url(hub)]) == STOPPED
    assert loads[-1].model == got


def test_model_url_cut_short_resumes_from_what_arrived(hub, loads) -> None:
    hub.cuts["tiny-Q4_K_M.gguf"] = [1000]
    assert run_cli([*RUN, "-mu", _url(hub)]) == STOPPED
    assert loads[-1].model.read_bytes() == DATA
    ranges = [r for m, p, r in hub.requests if m == "GET" and "tiny-Q4_K_M" in p]
    assert ranges[-1] == "bytes=1000-"  # the second request asked only for the rest


def test_model_url_missing_offline_and_with_m_are_one_line(hub, loads, capsys) -> None:
    missing = f"{hub.endpoint}/u/tiny-GGUF/resolve/main/nope.gguf"
    assert run_cli([*RUN, "-mu", missing]) == 6
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"error: -mu {missing}:")
    assert run_cli([*RUN, "-mu", _url(hub), "--offline"]) == 6
    assert "not in the cache" in capsys.readouterr().err
    assert run_cli([*RUN, "-mu", _url(hub), "-m", "x.gguf"]) == 1
    assert run_cli([*RUN, "-mu", "ftp://host/x.gguf"]) == 1
    assert not loads


def test_gpt_oss_preset_downloads_its_model_with_its_settings(hub, loads) -> None:
    argv = ["serve", "--gpt-oss-20b-default", "--spec-type", "none", "-q"]
    assert run_cli(argv) == STOPPED
    options = loads[-1]
    assert options.model.name == "gpt-oss-20b-mxfp4.gguf" and options.model.read_bytes() == DATA
    assert (options.n_ctx, options.n_batch, options.n_ubatch) == (262144, 32768, 2048)
    # a flag given wins; a model given replaces the preset's (nothing downloaded for it)
    assert run_cli([*argv, "-c", "4096", "-m", str(options.model)]) == STOPPED
    assert loads[-1].n_ctx == 4096 and loads[-1].model == options.model
    assert run_cli(["run", "--gpt-oss-120b-default", "-p", "x", "--spec-type", "none"]) == STOPPED
    assert loads[-1].model.parent.parent.parent.name == "models--ggml-org--gpt-oss-120b-GGUF"


def test_embedding_preset_serves_embeddings(hub, loads, capsys) -> None:
    assert run_cli(["serve", "--embd-gemma-default", "--spec-type", "none", "-q"]) == STOPPED
    assert loads[-1].model.name == "embeddinggemma-300M-qat-Q4_0.gguf"
    assert dict(loads[-1].tuning.embeddings)["on"] is True
    capsys.readouterr()
    assert run_cli(["run", "--embd-gemma-default", "-p", "x"]) == 1  # llama-server's alone
    assert "No such option: --embd-gemma-default" in capsys.readouterr().err
    assert run_cli(["serve", "--gpt-oss-20b-default", "--embd-gemma-default"]) == 1


def test_cache_list_in_llama_cpps_shape(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path))
    snap = tmp_path / "models--u--m-GGUF" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    for name in ("m-Q4_K_M.gguf", "m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00002-of-00002.gguf",
                 "mmproj-m-F16.gguf", "README.md"):  # fmt: skip
        (snap / name).write_bytes(b"GGUF")
    assert cached_models() == ["u/m-GGUF:Q4_K_M", "u/m-GGUF:Q8_0"]
    assert run_cli(["serve", "--cache-list"]) == 0
    assert capsys.readouterr().out == (
        "number of models in cache: 2\n   1. u/m-GGUF:Q4_K_M\n   2. u/m-GGUF:Q8_0\n")
    assert format_cache_list([]) == "number of models in cache: 0"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_completion_bash_completes_commands_flags_and_files(capsys, tmp_path) -> None:
    assert run_cli(["run", "--completion-bash"]) == 0
    script = tmp_path / "c.sh"
    script.write_text(capsys.readouterr().out)
    (tmp_path / "a.gguf").write_bytes(b"")
    (tmp_path / "a.txt").write_bytes(b"")

    def complete(*words: str) -> list[str]:
        line = " ".join(words)
        out = subprocess.run(
            ["bash", "-c", f"source {script}; COMP_WORDS=(specgguf {line}); "
             f"COMP_CWORD={len(words)}; _specgguf_completions; echo ${{COMPREPLY[@]}}"],
            capture_output=True, text=True, check=True, cwd=tmp_path)  # fmt: skip
        return out.stdout.split()

    assert complete("se") == ["serve"]
    assert complete("run", "--hf-r") == ["--hf-repo", "--hf-repo-draft"]
    assert "--models-dir" in complete("serve", "--models-") and not complete("run", "--models-")
    assert complete("run", "-m", "a") == ["a.gguf"]


def test_underscore_spellings_are_llama_cpps_dashes(loads, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("specgguf_cli.options.resolve_models", lambda m, d: (m, d))
    base = ["run", "-m", str(tmp_path / "t.gguf"), "--spec-type", "none", "-q"]
    assert run_cli([*base, "--ctx_size", "512", "--n_gpu_layers=0", "-p", "--top_k"]) == STOPPED
    assert loads[-1].n_ctx == 512 and loads[-1].n_gpu_layers == "0"
    assert run_cli([*base, "--not_a_flag", "1", "-p", "x"]) == 1  # unknown either way

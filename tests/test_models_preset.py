"""serve --models-preset FILE: llama-server's INI file of router presets. The file is read as
llama.cpp reads it (sections, comments, key spellings, switches and their negatives), [*]'s
options go under each model's own and the command line's over both; the router serves the
file's models by name and alias, loads the load-on-startup ones as it starts, and each
model's server gets its preset's flags."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from specgguf_cli.app import run_cli

from specgguf.errors import UsageError
from specgguf.server import presets as ps
from specgguf.server.router import child_argv
from tests.serve_helpers import FAST, serving


def test_the_ini_grammar_is_llama_cpps() -> None:
    text = ("version = 1\n; a comment\n  # another\nloose = 1\n[*]\nc = 8192 ; inline\n"
            "[ m ]\nx = a#b\ny=  spaced value  \n[m]\nz = 2\r\n[n]\n")  # fmt: skip
    got = ps.parse_ini(text, "f")
    assert got["default"] == {"version": "1", "loose": "1"}
    assert got["*"] == {"c": "8192"}
    assert got["m"] == {"z": "2"}  # a repeated section starts over, as llama.cpp's map does
    assert got["n"] == {}
    assert ps.parse_ini("[a]\nx = a#b\ny = v w\n", "f")["a"] == {"x": "a", "y": "v w"}
    with pytest.raises(UsageError, match="line 2 is not"):
        ps.parse_ini("[a]\nnot a key line\n", "f")


def test_section_tags_are_canonical() -> None:
    assert ps.canonical_name("org/M-GGUF:q4_k_m") == "org/M-GGUF:Q4_K_M"
    assert ps.canonical_name("org/M-GGUF:model-q8_0") == "org/M-GGUF:Q8_0"
    assert ps.canonical_name("plain") == "plain" and ps.canonical_name("*") == "*"


def _read(tmp_path: Path, text: str):
    f = tmp_path / "p.ini"
    f.write_text(text, encoding="utf-8")
    return ps.read_presets(f)


def test_keys_are_flag_names_short_names_or_variables(tmp_path) -> None:
    glob, models = _read(tmp_path, "[*]\nc = 1024\n[m]\nmodel = /x.gguf\nctx-size = 256\n"
                         "LLAMA_ARG_CACHE_RAM = 0\nno-warmup = true\nload-on-startup = true\n"
                         "stop-timeout = 3\ndedup-cache-models = 1\n")  # fmt: skip
    assert glob.values == {"--ctx-size": "1024"}
    m = models["m"]
    assert m.values == {"--model": "/x.gguf", "--ctx-size": "256", "--cache-ram": "0",
                        "--warmup": "false"}  # fmt: skip
    assert m.load_on_startup and m.stop_timeout == 3
    assert ps.preset_args(m.values) == ["--model", "/x.gguf", "--ctx-size", "256",
                                        "--cache-ram", "0", "--no-warmup"]  # fmt: skip
    # a switch without a negative spelling: true gives it, false leaves it out
    assert ps.preset_args({"--rerank": "true"}) == ["--reranking"]
    assert ps.preset_args({"--rerank": "false"}) == []


@pytest.mark.parametrize(("text", "says"), [
    ("[m]\nnonsense-key = 1\n", "option 'nonsense-key' not recognized in preset 'm'"),
    ("[m]\nport = 9000\n", "free port the router picks"),
    ("[m]\napi-key = k\n", "the router checks the API keys"),
    ("[m]\nmmproj = vision.gguf\n", "refused by serve"),
    ("[m]\nno-jinja = true\n", "refused by serve"),
    ("[m]\nstop-timeout = soon\n", "stop-timeout must be"),
    ("[m]\ncontrol-vector-layer-range = 1 2\n", "takes two values"),
])  # fmt: skip
def test_what_serve_cannot_take_is_one_line_at_start(tmp_path, text, says) -> None:
    with pytest.raises(UsageError, match=says) as e:
        _read(tmp_path, text)
    assert "\n" not in str(e.value)


def test_the_file_is_bounded(tmp_path) -> None:
    f = tmp_path / "big.ini"
    f.write_bytes(b"; " + b"x" * ps.MAX_PRESET_BYTES)
    with pytest.raises(UsageError, match="larger than"):
        ps.read_presets(f)
    f.write_bytes(b"[m]\nc = \xff\n")
    with pytest.raises(UsageError, match="not valid UTF-8"):
        ps.read_presets(f)


def test_precedence_is_global_then_model_then_command_line(tmp_path) -> None:
    glob, models = _read(tmp_path, "[*]\nc = 1024\nn-predict = 7\nb = 64\n"
                         "[alpha]\nc = 256\nalias = a1, a2\n[gamma]\nhf-repo = u/m-GGUF\n")
    got = ps.router_models({"alpha": Path("/d/alpha.gguf")}, glob, models, {"--batch-size"})
    alpha, gamma = got["alpha"], got["gamma"]
    assert alpha.path == Path("/d/alpha.gguf") and alpha.aliases == ("a1", "a2")
    assert alpha.args == ("--ctx-size", "256", "--n-predict", "7", "--model", "/d/alpha.gguf")
    assert gamma.path is None
    assert gamma.args == ("--ctx-size", "1024", "--n-predict", "7", "--hf-repo", "u/m-GGUF")
    with pytest.raises(UsageError, match="must name its model"):
        ps.router_models({}, glob, {"beta": ps.Preset("beta", {"--ctx-size": "1"})}, set())


def test_the_router_flags_stay_with_the_router() -> None:
    argv = ["serve", "--models-preset", "p.ini", "--models-dir=d", "-c", "512"]
    assert child_argv(argv) == ["serve", "-c", "512"]


@pytest.fixture(scope="module")
def preset_file(tmp_path_factory, tiny_target, tiny_draft) -> Path:
    d = tmp_path_factory.mktemp("preset")
    (d / "models").mkdir()
    (d / "models" / "alpha.gguf").symlink_to(tiny_target)
    f = d / "models.ini"
    f.write_text(f"version = 1\n[*]\nc = 768\n[alpha]\nctx-size = 256\n"
                 f"[gamma]\nmodel = {tiny_draft}\nalias = g\nload-on-startup = true\n",
                 encoding="utf-8")  # fmt: skip
    return f


@pytest.fixture(scope="module")
def server(preset_file):
    yield from serving(["--models-dir", str(preset_file.parent / "models"), "--models-preset",
                        str(preset_file), "--models-max", "2", *FAST,
                        "--spec-type", "none"])  # fmt: skip


def _status(server) -> dict[str, str]:
    status, _, listing = server.request("GET", "/v1/models")
    assert status == 200, listing
    return {m["id"]: m["status"]["value"] for m in listing["data"]}


def test_the_router_serves_the_presets(server) -> None:
    deadline = time.monotonic() + 120
    while _status(server)["gamma"] != "loaded":  # load-on-startup: nobody asked for it
        assert time.monotonic() < deadline, _status(server)
        time.sleep(0.2)
    assert _status(server)["alpha"] == "unloaded"
    # each model's server has its preset's context: [alpha]'s own, [*]'s for gamma
    status, _, props = server.request("GET", "/props?model=alpha")
    assert status == 200 and props["default_generation_settings"]["n_ctx"] == 256
    status, _, props = server.request("GET", "/props?model=g")  # by its alias
    assert status == 200 and props["default_generation_settings"]["n_ctx"] == 768
    assert props["model_alias"] == "gamma"
    out = server.post("/completion", {"model": "g", "prompt": "hello", "n_predict": 2})
    assert out["tokens_predicted"] == 2


def test_a_bad_preset_stops_the_router_in_one_line(tmp_path, capsys) -> None:
    f = tmp_path / "bad.ini"
    f.write_text("[m]\nmodel = x.gguf\nwhatever = 1\n", encoding="utf-8")
    assert run_cli(["serve", "--models-preset", str(f)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'whatever' not recognized" in err

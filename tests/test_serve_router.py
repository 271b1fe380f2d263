"""Router mode (`serve --models-dir DIR`): a directory's GGUFs served by name, each in a
serve of its own loaded on demand, at most --models-max at once (the least recently used
idle one stopped), listed with their status by GET /models, loaded and unloaded by POST
/models/load and /models/unload.

Two tiny models (the pair's files under two names), -np 1, --models-max 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgguf.errors import UsageError
from specgguf.server.router import child_argv, directory_models
from tests.serve_helpers import FAST, serving


def _status(server) -> dict[str, str]:
    status, _, listing = server.request("GET", "/v1/models")
    assert status == 200, listing
    return {m["id"]: m["status"]["value"] for m in listing["data"]}


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory, tiny_target, tiny_draft) -> Path:
    d = tmp_path_factory.mktemp("router")
    (d / "alpha.gguf").symlink_to(tiny_target)
    (d / "beta").mkdir()
    (d / "beta" / "beta-00001-of-00001.gguf").symlink_to(tiny_draft)
    return d


@pytest.fixture(scope="module")
def server(models_dir):
    yield from serving(["--models-dir", str(models_dir), "--models-max", "1", *FAST,
                        "-c", "512", "--spec-type", "none"])  # fmt: skip


def test_models_are_listed_by_name_unloaded(server):
    assert _status(server) == {"alpha": "unloaded", "beta": "unloaded"}


def test_requests_go_to_their_model_and_models_max_unloads_the_oldest(server):
    body = {"prompt": "hello there", "n_predict": 4}
    a = server.post("/completion", {**body, "model": "alpha"})
    assert a["model"] == "alpha" and a["tokens_predicted"] > 0
    assert _status(server) == {"alpha": "loaded", "beta": "unloaded"}
    b = server.post("/v1/completions", {**body, "model": "beta", "max_tokens": 4})
    assert b["model"] == "beta"
    assert _status(server) == {"alpha": "unloaded", "beta": "loaded"}  # --models-max 1
    # a GET names its model in the query
    status, _, props = server.request("GET", "/props?model=beta")
    assert status == 200 and props["model_alias"] == "beta"


def test_a_stream_is_relayed_as_it_comes(server):
    from tests.serve_helpers import sse_events

    conn, resp = server.stream("/v1/chat/completions", {
        "model": "alpha", "stream": True, "max_tokens": 4,
        "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    events = list(sse_events(resp))
    conn.close()
    assert events[-1] == "[DONE]" and events[0]["model"] == "alpha"


def test_load_unload_and_unknown_models(server):
    assert server.post("/models/unload", {"model": "alpha"}) == {"success": True}
    assert _status(server)["alpha"] == "unloaded"
    assert server.post("/models/load", {"model": "beta"}) == {"success": True}
    assert _status(server)["beta"] == "loaded"
    status, _, err = server.request("POST", "/completion", {"model": "gamma", "prompt": "x"})
    assert status == 404 and err["error"]["code"] == "model_not_found"
    status, _, err = server.request("POST", "/completion", {"prompt": "x"})
    assert status == 400 and "model" in err["error"]["message"]
    # ?autoload=false: a model not loaded is not loaded for the request
    status, _, err = server.request("POST", "/completion?autoload=false",
                                    {"model": "alpha", "prompt": "x"})  # fmt: skip
    assert status == 400 and err["error"]["code"] == "model_not_loaded"


def test_directory_listing_and_the_childs_arguments(tmp_path):
    with pytest.raises(UsageError, match="no .gguf"):
        directory_models(tmp_path)
    (tmp_path / "m.gguf").write_bytes(b"")
    assert directory_models(tmp_path) == {"m": tmp_path / "m.gguf"}
    argv = ["serve", "--models-dir", "d", "--models-max=2", "--no-models-autoload", "--host",
            "0.0.0.0", "--port", "8080", "-c", "512"]  # fmt: skip
    assert child_argv(argv) == ["serve", "-c", "512"]


def test_a_model_beside_the_directory_is_one_line(models_dir, tiny_target, capsys):
    from specgguf_cli.app import run_cli

    assert run_cli(["serve", "--models-dir", str(models_dir), "-m", str(tiny_target)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "drop -m" in err


def test_a_model_whose_server_died_is_loaded_again(server):
    server.post("/models/load", {"model": "alpha"})
    router_pid = server.proc.pid
    import subprocess

    children = subprocess.run(["pgrep", "-P", str(router_pid)], capture_output=True,
                              text=True).stdout.split()  # fmt: skip
    assert len(children) == 1
    subprocess.run(["kill", "-9", children[0]], check=True)
    answer = server.post("/completion", {"model": "alpha", "prompt": "hi", "n_predict": 2})
    assert answer["model"] == "alpha"


def test_router_flags_without_a_directory_warn(tiny_target, capsys, monkeypatch):
    from specgguf_cli import options as o
    from specgguf_cli.app import run_cli

    def stop(*args, **kwargs):
        raise SystemExit(99)

    monkeypatch.setattr(o.SessionFlags, "resolve", stop)
    with pytest.raises(SystemExit):
        run_cli(["serve", "-m", str(tiny_target), "--models-max", "2"])
    assert "--models-max and --models-autoload are for router mode" in capsys.readouterr().err

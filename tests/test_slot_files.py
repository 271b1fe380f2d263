"""serve --slot-save-path: POST /slots/{id}?action=save|restore|erase.

The filename rules (the security boundary) and the file's layout without a model; then on a
served tiny model, with one slot and with two: a saved slot erased and restored makes the same
prompt reuse its cache and give the same text; a slot a request runs in is saved once that
request ends; bad names, links out of the directory, foreign and oversized files are refused
and leave the slot empty."""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import pytest

from specgguf.binding import slot_files as bf
from specgguf.server.slot_files import valid_filename
from tests.serve_helpers import FAST, serving, sse_events

# -- without a model ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a.bin", "slot 1.bin", "ünï.bin", "x" * 255, ".hidden"])
def test_plain_names_are_valid(name):
    assert valid_filename(name)


@pytest.mark.parametrize("name", [
    "", ".", "..", "../x", "a/b", "/etc/passwd", "a\\b", "x.", " x", "x ", "a:b", "a*b", "a?b",
    'a"b', "a<b", "a>b", "a|b", "a\x00b", "a\nb", "a\x7fb", "a\x85b", "a\uff0eb", "a\u2215b",
    "a\u2216b", "a\ufffdb", "\ufeffa", "a..b", "é" * 128,
])  # fmt: skip
def test_names_that_could_leave_the_directory_or_mislead_are_refused(name):
    assert not valid_filename(name)


def _file(stream: list[int], state: bytes = b"", magic: int = bf.MAGIC,
          version: int = bf.LAYOUT_VERSION) -> bytes:  # fmt: skip
    return struct.pack(f"<III{len(stream)}i", magic, version, len(stream), *stream) + state


def test_llama_servers_stream_and_the_plain_list_are_read():
    assert bf.read_tokens(_file([-1, 1, 3, 7, 8, 9, 0], b"S"))[0] == [7, 8, 9]
    assert bf.read_tokens(_file([5, 6]))[0] == [5, 6]  # an older server's plain list
    assert bf.read_tokens(_file([-1, 1, 2, 7, 8, 0], b"S"))[1] == 12 + 6 * 4


@pytest.mark.parametrize("data, why", [
    (b"ggsq", "too short"),
    (_file([1], magic=0x12345678), "not a sequence state file"),
    (_file([1], version=2), "layout 2"),
    (_file([1, 2])[:-4], "past the end"),
    (_file([-1, 9, 0, 0]), "unknown version"),
    (_file([-1, 1, 5, 1, 0]), "runs past its stream"),
    (_file([-1, 1, 1, 7, 1, 4]), "media"),
    (_file([-1, 1, 1, 7, 0, 0]), "trailing data"),
])  # fmt: skip
def test_malformed_heads_are_refused(data, why):
    with pytest.raises(bf.SlotFileError, match=why):
        bf.read_tokens(data)


def test_the_bound_grows_with_the_context_and_the_kv_row():
    assert bf.size_limit(100, (8, 8)) - bf.size_limit(100, None) == 100 * 16 * 4
    assert bf.size_limit(200, (8, 8)) > bf.size_limit(100, (8, 8))


def test_without_the_flag_the_action_is_not_supported():
    from starlette.testclient import TestClient

    from specgguf.server.app import App, ServerConfig

    app = App(None, None, ServerConfig(model_id="m", model_path="m"))  # type: ignore[arg-type]
    r = TestClient(app.asgi).post("/slots/0?action=save", json={"filename": "a.bin"})
    assert r.status_code == 501
    assert "--slot-save-path" in r.json()["error"]["message"]


# -- on a served tiny model --------------------------------------------------------------------

PROMPT = ("the quick brown fox jumps over the lazy dog while the cat sleeps on the warm red mat "
          "near the door of the old house and")  # fmt: skip


@pytest.fixture(scope="module", params=[1, 2], ids=["np1", "np2"])
def saved(request, tiny_target, tmp_path_factory):
    """(server, its slot directory), with -np 1 and with -np 2."""
    folder = tmp_path_factory.mktemp(f"slots{request.param}")
    args = ["-m", str(tiny_target), *FAST, "-c", "4096", "-np", str(request.param),
            "--slot-save-path", str(folder)]  # fmt: skip
    for server in serving(args):
        yield server, folder


def _complete(server, prompt: str = PROMPT, n: int = 8) -> dict:
    return server.post("/completion", {"prompt": prompt, "n_predict": n})


def _slots(server) -> list[dict]:
    status, _, out = server.request("GET", "/slots")
    assert status == 200, out
    return out


def _act(server, action: str, body=None, slot: int | str = 0):
    return server.request("POST", f"/slots/{slot}?action={action}", body)


def test_saved_erased_and_restored_the_slot_reuses_its_cache(saved):
    server, folder = saved
    first = _complete(server)
    slot = first["id_slot"]
    status, _, out = _act(server, "save", {"filename": "fox.bin"}, slot)
    assert status == 200, out
    assert out["id_slot"] == slot and out["filename"] == "fox.bin"
    assert out["n_saved"] == first["tokens_cached"] > 0
    assert out["n_written"] == (folder / "fox.bin").stat().st_size
    assert "save_ms" in out["timings"]
    head = (folder / "fox.bin").read_bytes()[:20]
    assert head[:4] == struct.pack("<I", bf.MAGIC) and head[12:16] == struct.pack("<i", -1)

    status, _, out = _act(server, "erase", slot=slot)
    assert (status, out) == (200, {"id_slot": slot, "n_erased": first["tokens_cached"]})
    erased = _complete(server)
    assert erased["timings"]["cache_n"] == 0  # erased (or the other, empty slot)
    assert _act(server, "erase", slot=erased["id_slot"])[0] == 200

    status, _, out = _act(server, "restore", {"filename": "fox.bin"}, slot)
    assert status == 200, out
    assert out["n_restored"] == first["tokens_cached"]
    assert out["n_read"] == (folder / "fox.bin").stat().st_size
    again = _complete(server)
    assert again["id_slot"] == slot  # the slot that holds its prompt
    assert again["timings"]["cache_n"] >= first["tokens_evaluated"] - 1
    assert again["content"] == first["content"]  # the restored cache is exact


def test_a_busy_slot_is_saved_once_its_request_ends(saved):
    server, _ = saved
    conn, resp = server.stream("/completion", {"prompt": PROMPT, "n_predict": 1500,
                                               "stream": True, "ignore_eos": True})
    events = sse_events(resp)
    next(events)  # it runs
    slot = next(s["id"] for s in _slots(server) if s["is_processing"])
    answer: dict = {}

    def save() -> None:
        answer.update(server.post(f"/slots/{slot}?action=save", {"filename": "busy.bin"}))

    t = threading.Thread(target=save)
    t.start()
    last = [e for e in events if e != "[DONE]"][-1]
    conn.close()
    t.join(60)
    assert answer["n_saved"] == last["tokens_cached"]  # the whole answer: saved after it


@pytest.mark.parametrize("body, action, slot, code", [
    ({"filename": "../x.bin"}, "save", 0, "invalid_filename"),
    ({"filename": "a/b.bin"}, "restore", 0, "invalid_filename"),
    ({"filename": 3}, "save", 0, "missing_field"),
    ({}, "save", 0, "missing_field"),
    ({"filename": "a.bin"}, "save", 9, "invalid_slot"),
    ({"filename": "a.bin"}, "save", "x", "invalid_slot"),
    ({"filename": "a.bin"}, "copy", 0, "invalid_action"),
])  # fmt: skip
def test_bad_requests_are_400(saved, body, action, slot, code):
    status, _, out = _act(saved[0], action, body, slot)
    assert status == 400, out
    assert out["error"]["code"] == code


def test_a_link_out_of_the_directory_is_refused(saved, tmp_path):
    server, folder = saved
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"secret")
    link = folder / "link.bin"
    if not link.exists():
        os.symlink(outside, link)
    for action in ("save", "restore"):
        status, _, out = _act(server, action, {"filename": "link.bin"})
        assert status == 400 and out["error"]["code"] == "invalid_filename", out
    assert outside.read_bytes() == b"secret"


@pytest.mark.parametrize("make", ["missing", "garbage", "tokens", "oversized", "state"])
def test_files_that_do_not_fit_are_refused_and_leave_the_slot_empty(saved, make):
    server, folder = saved
    slot = _complete(server)["id_slot"]
    path: Path = folder / f"{make}.bin"
    if make == "missing":
        pass
    elif make == "garbage":
        path.write_bytes(b"not a state file at all")
    elif make == "tokens":  # a token outside the tiny vocabulary
        path.write_bytes(_file([-1, 1, 2, 1, 10**8, 0]))
    elif make == "state":  # a valid head, a state llama.cpp cannot read
        path.write_bytes(_file([-1, 1, 2, 1, 2, 0], b"\x01\x02\x03"))
    else:  # larger than any slot's state (sparse: no disk used)
        with open(path, "wb") as f:
            f.truncate(bf.STATE_MARGIN + (1 << 30))
    status, _, out = _act(server, "restore", {"filename": path.name}, slot)
    assert status == 400 and out["error"]["code"] == "invalid_slot_file", out
    assert _slots(server)[slot]["n_cached"] == 0  # emptied, as llama-server does


@pytest.mark.parametrize("extra, says", [
    (["--slot-save-path", "/nonexistent/slots"], "--slot-save-path: not a directory"),
    (["--slot-save-path", "{tmp}", "--api-key", "a,b"], "several --api-key keys must not share"),
])  # fmt: skip
def test_a_path_that_cannot_serve_is_one_line_before_the_load(tiny_target, tmp_path, extra, says):
    import subprocess
    import sys

    from tests.serve_helpers import env

    args = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    done = subprocess.run([sys.executable, "-m", "specgguf_cli.app", "serve", "-m",
                           str(tiny_target), "--port", "0", *args],
                          capture_output=True, text=True, env=env(), timeout=120)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0 and says in done.stderr, done.stderr

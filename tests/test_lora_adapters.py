"""serve's GET/POST /lora-adapters and --lora-init-without-apply on a tiny model with a rank-1
LoRA that makes the target write "x": the list, new scales taking effect for the next
request, a cached prompt not reused across a change of scales, a running request finishing
under the scales it started with, speculation (the draft model without the adapter) equal to
the adapted target's text, and bad bodies as 400s."""

from __future__ import annotations

import threading

import pytest

from tests.serve_helpers import FAST, serving, sse_events
from tests.test_adapters import write_lora

PROMPT = "the cat sat on the"


@pytest.fixture(scope="module", params=["np1", "np2-init"])
def lora_server(request, tiny_target, tiny_draft, tmp_path_factory):
    """(server, adapter path, started without applying): one slot, or two slots with
    --lora-init-without-apply; a draft model drafts (without the adapter)."""
    lora = write_lora(tmp_path_factory.mktemp("lora") / "x.gguf", token=ord("x"), strength=60.0)
    extra = ["-np", "1"] if request.param == "np1" else ["-np", "2", "--lora-init-without-apply"]
    args = ["-m", str(tiny_target), "-md", str(tiny_draft), *FAST, "-c", "2048",
            "--lora", str(lora), *extra]  # fmt: skip
    for server in serving(args):
        yield server, lora, request.param != "np1"


def _set(server, body) -> tuple[int, dict]:
    status, _, out = server.request("POST", "/lora-adapters", body)
    return status, out


def _complete(server, n: int = 12) -> dict:
    return server.post("/completion", {"prompt": PROMPT, "n_predict": n})


def test_the_list_and_new_scales_for_the_next_request(lora_server):
    server, lora, init_without_apply = lora_server
    status, _, listed = server.request("GET", "/lora-adapters")
    assert status == 200
    assert listed == [{"id": 0, "path": str(lora), "scale": 0.0 if init_without_apply else 1.0}]

    assert _set(server, [{"id": 0, "scale": 1}]) == (200, {"success": True})
    adapted = _complete(server)
    assert adapted["content"] == "x" * 12
    assert adapted["timings"]["draft_n"] > 0  # the draft model drafted, the target decided

    assert _set(server, [{"id": 0, "scale": 0.0}])[0] == 200
    assert server.request("GET", "/lora-adapters")[2][0]["scale"] == 0.0
    base = _complete(server)
    assert "x" not in base["content"]
    assert base["timings"]["cache_n"] == 0  # the same prompt: computed under other scales

    assert _set(server, [{"id": 0, "scale": 1}])[0] == 200
    assert _complete(server)["content"] == "x" * 12
    assert _set(server, [])[0] == 200  # an adapter not named goes to 0, as llama-server's
    assert "x" not in _complete(server)["content"]


def test_a_running_request_ends_under_the_scales_it_started_with(lora_server):
    server = lora_server[0]
    assert _set(server, [{"id": 0, "scale": 1}])[0] == 200
    conn, resp = server.stream("/completion", {"prompt": PROMPT, "n_predict": 400,
                                               "stream": True, "ignore_eos": True})  # fmt: skip
    events = sse_events(resp)
    text = next(events)["content"]
    answers: list = []
    t = threading.Thread(target=lambda: answers.append(_set(server, [{"id": 0, "scale": 0}])))
    t.start()
    text += "".join(e["content"] for e in events if e != "[DONE]")
    conn.close()
    t.join(60)
    assert answers == [(200, {"success": True})]
    assert text == "x" * 400  # every token under the old scale
    assert "x" not in _complete(server)["content"]  # the next one under the new


@pytest.mark.parametrize("body, says", [
    ({"id": 0, "scale": 1}, "array"),
    ([{"id": 1, "scale": 1}], "no LoRA adapter has id 1"),
    ([{"id": "0", "scale": 1}], "no LoRA adapter has id"),
    ([{"id": 0, "scale": "big"}], "must be a number"),
    ([{"id": 0, "scale": 1}, {"id": 0, "scale": 2}], "twice"),
    ([{"id": 0, "scale": 1, "task": "x"}], "'id' and 'scale'"),
])  # fmt: skip
def test_bad_bodies_are_400(lora_server, body, says):
    status, out = _set(lora_server[0], body)
    assert status == 400 and says in out["error"]["message"], out


def test_a_request_asking_its_own_scales_is_refused(lora_server):
    status, _, out = lora_server[0].request(
        "POST", "/completion", {"prompt": PROMPT, "lora": [{"id": 0, "scale": 0.5}]}
    )
    assert status == 400 and "/lora-adapters" in out["error"]["message"], out

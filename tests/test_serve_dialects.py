"""`specgguf serve` on the tiny models under foreign families' real chat templates: the family
is recognised (/props), a forced call comes back as `tool_calls` in the family's id shape, the
next turn with the server's own ids renders, and a request that asks for thinking off or sets
template kwargs is rendered with them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.serve_helpers import FAST, assert_streamed_as_whole, serving
from tests.test_serve_tools import TOOLS, USER

TEMPLATES = Path(__file__).parent / "data" / "templates"
#: template, the dialect /props names, the shape of the ids the server hands out
FAMILIES = [
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral-nemo", r"[A-Za-z0-9]{9}"),
    ("unsloth-mistral-Devstral-Small-2507.jinja", "devstral", r"call_[0-9a-f]{24}"),
    ("Qwen3-Coder.jinja", "qwen3-coder", r"call_[0-9a-f]{24}"),
]


@pytest.fixture(scope="module", params=FAMILIES, ids=[f[1] for f in FAMILIES])
def family(request, tiny_target, tiny_draft):

    name, dialect, ids = request.param
    args = ["-m", str(tiny_target), "-md", str(tiny_draft), *FAST, "-c", "8192",
            "--chat-template-file", str(TEMPLATES / name)]  # fmt: skip
    for server in serving(args):
        yield server, dialect, ids


def test_a_forced_call_parses_and_the_next_turn_renders(family):
    server, dialect, ids = family
    status, _, props = server.request("GET", "/props")
    assert status == 200 and props["chat_dialect"] == dialect
    body = {"messages": USER, "tools": TOOLS, "tool_choice": "required",
            "parallel_tool_calls": False, "max_tokens": 120}  # fmt: skip
    r = server.post("/v1/chat/completions", body)
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    (call,) = choice["message"]["tool_calls"]
    assert re.fullmatch(ids, call["id"]), call["id"]
    assert call["function"]["name"] in ("get_weather", "get_time")
    assert isinstance(json.loads(call["function"]["arguments"]), dict)
    # the next turn: the server's own call and ids, the tool's result, an answer, a question
    turn = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
            {"role": "assistant", "content": "Sunny."},
            {"role": "user", "content": "Thanks. And tomorrow?"}]  # fmt: skip
    prompt = server.post("/apply-template", {"messages": turn, "tools": TOOLS})["prompt"]
    assert "sunny" in prompt and "tomorrow" in prompt


#: an answer that thinks first, held to that shape by a grammar (the tiny model never would)
THINKING = 'root ::= "<think>" [a-z ]{1,12} "</think>" [a-z]{1,8}'


def test_reasoning_comes_apart_whole_and_streamed(family):
    server = family[0]
    body = {"messages": USER, "grammar": THINKING, "max_tokens": 40}
    message = server.post("/v1/chat/completions", body)["choices"][0]["message"]
    assert message["reasoning_content"] and "<think>" not in message["content"]
    assert re.fullmatch(r"[a-z]{1,8}", message["content"])
    assert_streamed_as_whole(server, body, message)
    raw = server.post("/v1/chat/completions", {**body, "reasoning_format": "none"})
    text = raw["choices"][0]["message"]["content"]
    assert text.startswith("<think>") and "reasoning_content" not in raw["choices"][0]["message"]

"""`specgguf serve` on the tiny models under foreign families' real chat templates: the family
is recognised (/props), a forced call comes back as `tool_calls` in the family's id shape, the
next turn with the server's own ids renders, and a request that asks for thinking off or sets
template kwargs is rendered with them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specgguf.chat.dialects import by_name
from specgguf.chat.dialects.command_r7b import RESPONSE
from specgguf.chat.tools import gbnf_literal
from tests.serve_helpers import FAST, assert_streamed_as_whole, serving, sse_events
from tests.test_serve_tools import TOOLS, USER

TEMPLATES = Path(__file__).parent / "data" / "templates"
OPENAI_ID = r"call_[0-9a-f]{24}"
#: template, the dialect /props names, the shape of the ids the server hands out
FAMILIES = [
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral-nemo", r"[A-Za-z0-9]{9}"),
    ("unsloth-mistral-Devstral-Small-2507.jinja", "devstral", r"[A-Za-z0-9]{9}"),
    ("Qwen3-Coder.jinja", "qwen3-coder", OPENAI_ID),
    ("ibm-granite-granite-3.3-2B-Instruct.jinja", "granite", OPENAI_ID),
    ("standins/gemma4.jinja", "gemma4", OPENAI_ID),
    ("standins/functionary-v3.2.jinja", "functionary-v3.2", OPENAI_ID),
    ("standins/firefunction-v2.jinja", "firefunction-v2", OPENAI_ID),
    ("standins/command-r7b.jinja", "command-r7b", OPENAI_ID),
    ("standins/plain.jinja", "generic", OPENAI_ID),
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
    assert f"chat dialect: {dialect} (".encode() in server.err  # said at start
    # thinking off: the tiny model, let to think first, would think to the end of max_tokens
    body = {"messages": USER, "tools": TOOLS, "tool_choice": "required",
            "parallel_tool_calls": False, "max_tokens": 120,
            "reasoning_effort": "none"}  # fmt: skip
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


def test_forced_calls_stream_in_pieces_that_add_up_to_the_whole_answer(family):
    server, dialect, ids = family
    # one call: the tiny model, let write several, would go on to the end of max_tokens
    body = {"messages": USER, "tools": TOOLS, "tool_choice": "required", "max_tokens": 120,
            "parallel_tool_calls": False, "reasoning_effort": "none"}  # fmt: skip
    whole = server.post("/v1/chat/completions", body)["choices"][0]
    conn, resp = server.stream("/v1/chat/completions", {**body, "stream": True})
    events = [e for e in sse_events(resp) if e != "[DONE]" and e["choices"]]
    conn.close()
    calls: dict[int, dict] = {}
    for e in events:
        for piece in e["choices"][0]["delta"].get("tool_calls") or []:
            call = calls.setdefault(piece["index"], {"id": None, "name": None, "arguments": ""})
            if "id" in piece:  # the first piece names the call
                call["id"], call["name"] = piece["id"], piece["function"]["name"]
            call["arguments"] += piece["function"]["arguments"]
    assert whole["finish_reason"] == events[-1]["choices"][0]["finish_reason"] == "tool_calls"
    got = [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())]
    want = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in whole["message"]["tool_calls"]]  # fmt: skip
    assert got == want and all(re.fullmatch(ids, c["id"]) for c in calls.values())


def thinking_grammar(dialect: str) -> str:
    """An answer that thinks first in the family's markers, held to that shape by a grammar
    (the tiny model never would)."""
    open_, close = (gbnf_literal(m) for m in by_name(dialect).thinking)
    answer = "[a-z]{1,8}"
    if dialect == "command-r7b":  # its reply between its markers, which are not content
        answer = f'"{RESPONSE[0]}" {answer} "{RESPONSE[1]}"'
    return f"root ::= {open_} [a-z ]{{1,12}} {close} {answer}"


def test_reasoning_comes_apart_whole_and_streamed(family):
    server, dialect, _ = family
    body = {"messages": USER, "grammar": thinking_grammar(dialect), "max_tokens": 120}
    message = server.post("/v1/chat/completions", body)["choices"][0]["message"]
    opening = by_name(dialect).thinking[0]
    assert message["reasoning_content"] and opening not in message["content"]
    assert re.fullmatch(r"[a-z]{1,8}", message["content"])
    assert_streamed_as_whole(server, body, message)
    raw = server.post("/v1/chat/completions", {**body, "reasoning_format": "none"})
    text = raw["choices"][0]["message"]["content"]
    assert text.startswith(opening) and "reasoning_content" not in raw["choices"][0]["message"]

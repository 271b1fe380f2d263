"""The default model (select with `-m real`) served under foreign families' chat templates: a
forced call comes back as `tool_calls` that parse, in the family's id shape, and the next turn,
with the server's own call and ids, renders and is answered. One server per template; short
answers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specgguf.modelfiles.models import DRAFT, TARGET, is_present
from tests.serve_helpers import Server

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(
        not (is_present(TARGET) and is_present(DRAFT)), reason="run `specgguf pull` first"
    ),
]

TEMPLATES = Path(__file__).parent / "data" / "templates"
COMMON = ["-t", "1", "-c", "2048", "--temp", "0", "--spec-draft-n-max", "3"]
#: template, the dialect it is read in, the shape of the ids the server hands out
FAMILIES = [
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral-nemo", r"[A-Za-z0-9]{9}"),
    ("ibm-granite-granite-3.3-2B-Instruct.jinja", "granite", r"call_[0-9a-f]{24}"),
    ("standins/plain.jinja", "generic", r"call_[0-9a-f]{24}"),
]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Today's weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}},
            "required": ["city"],
        },
    },
}
USER = [{"role": "user", "content": "What is the weather in Paris today?"}]


@pytest.fixture(scope="module", params=FAMILIES, ids=[f[1] for f in FAMILIES])
def served(request):
    name, dialect, ids = request.param
    server = Server([*COMMON, "--chat-template-file", str(TEMPLATES / name)], timeout=600)
    try:
        yield server, dialect, ids
    finally:
        server.stop()


def test_a_forced_call_in_the_familys_format_parses_and_the_next_turn_is_answered(served):
    server, dialect, ids = served
    assert server.request("GET", "/props")[2]["chat_dialect"] == dialect
    body = {"messages": USER, "tools": [WEATHER], "tool_choice": "required",
            "parallel_tool_calls": False, "max_tokens": 48}  # fmt: skip
    choice = server.post("/v1/chat/completions", body)["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    (call,) = choice["message"]["tool_calls"]
    assert re.fullmatch(ids, call["id"]) and call["function"]["name"] == "get_weather", call
    assert isinstance(json.loads(call["function"]["arguments"])["city"], str)
    turn = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "Sunny, 21 C."}]  # fmt: skip
    answer = server.post("/v1/chat/completions",
                         {"messages": turn, "tools": [WEATHER], "max_tokens": 8})  # fmt: skip
    assert answer["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls"), answer

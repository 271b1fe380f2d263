"""`specgguf serve` on the tiny models under the real templates of families that think before
they call (GPT-OSS, DeepSeek R1, Kimi K2, GLM 4.6): /props names the family, a forced call
(written in the family's own syntax, after the thinking the prompt opened) comes back as
`tool_calls`, the next turn with the server's own ids renders, and GPT-OSS' analysis channel
comes back as reasoning, whole and streamed, with no harmony marker in the content. The tiny
model would think forever: a thinking budget (reasoning_budget_tokens) closes its thinking."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.serve_helpers import FAST, assert_streamed_as_whole, serving
from tests.test_serve_tools import TOOLS, USER

TEMPLATES = Path(__file__).parent / "data" / "templates"
#: template, the dialect /props names
FAMILIES = [
    ("openai-gpt-oss-120b.jinja", "gpt-oss"),
    ("llama-cpp-deepseek-r1.jinja", "deepseek-r1"),
    ("moonshotai-Kimi-K2.jinja", "kimi-k2"),
    ("GLM-4.6.jinja", "glm-4.5"),
]


@pytest.fixture(scope="module", params=FAMILIES, ids=[f[1] for f in FAMILIES])
def family(request, tiny_target, tiny_draft):
    name, dialect = request.param
    args = ["-m", str(tiny_target), "-md", str(tiny_draft), *FAST, "-c", "8192",
            "--chat-template-file", str(TEMPLATES / name)]  # fmt: skip
    for server in serving(args):
        yield server, dialect


def test_a_forced_call_in_the_family_syntax_parses_and_the_next_turn_renders(family):
    server, dialect = family
    assert server.request("GET", "/props")[2]["chat_dialect"] == dialect
    # the tiny model would think on forever: the budget closes its thinking after 4 tokens
    body = {"messages": USER, "tools": TOOLS, "tool_choice": "required",
            "parallel_tool_calls": False, "max_tokens": 400,
            "reasoning_budget_tokens": 4}  # fmt: skip
    choice = server.post("/v1/chat/completions", body)["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] in ("get_weather", "get_time")
    assert isinstance(json.loads(call["function"]["arguments"]), dict)
    assert "<|" not in (choice["message"]["content"] or "")
    turn = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
            {"role": "user", "content": "Thanks. And tomorrow?"}]  # fmt: skip
    prompt = server.post("/apply-template", {"messages": turn, "tools": TOOLS})["prompt"]
    assert "sunny" in prompt and "tomorrow" in prompt and call["function"]["name"] in prompt


#: a harmony answer that thinks first, held to that shape (the tiny model never would)
HARMONY = (
    'root ::= "<|channel|>analysis<|message|>" [a-z ]{1,12} "<|end|><|start|>assistant'
    '<|channel|>final<|message|>" [a-z]{1,8}'
)


def test_harmony_reasoning_comes_apart_whole_and_streamed(family):
    server, dialect = family
    if dialect != "gpt-oss":
        pytest.skip("the analysis channel is GPT-OSS'")
    body = {"messages": USER, "grammar": HARMONY, "max_tokens": 200}
    message = server.post("/v1/chat/completions", body)["choices"][0]["message"]
    assert message["reasoning_content"] and "<|" not in message["content"]
    assert 1 <= len(message["content"]) <= 8 and message["content"].isalpha()
    assert_streamed_as_whole(server, body, message)
    raw = server.post("/v1/chat/completions", {**body, "reasoning_format": "none"})
    text = raw["choices"][0]["message"]["content"]
    assert text.startswith("<|channel|>analysis<|message|>") and text.endswith(message["content"])


def test_a_bad_budget_is_a_400_naming_the_field(family):
    server, dialect = family
    if dialect != "deepseek-r1":
        pytest.skip("one family is enough")
    for body, field in (({"reasoning_budget_tokens": -2}, "reasoning_budget_tokens"),
                        ({"thinking_budget_tokens": "x"}, "thinking_budget_tokens"),
                        ({"reasoning_budget_message": "x" * 2000}, "reasoning_budget_message")):
        status, _, obj = server.request(
            "POST", "/v1/chat/completions", {"messages": USER, **body}
        )
        assert status == 400 and field in obj["error"]["message"], obj

"""`specgguf serve` with OpenAI tools on the tiny models and Qwen2.5's chat template: tools
rendered into the prompt, tool_choice "required" / a named function constrained to a call that
parses (whole and streamed, through the official openai client), auto left to the model, and
400s naming the field."""

from __future__ import annotations

import json

import pytest

from tests.serve_helpers import function_tool, openai_client, tool_serving

CITIES = ["Paris", "Zürich", "Oslo"]
TOOLS = [
    function_tool(
        "get_weather",
        {"city": {"enum": CITIES}, "unit": {"type": "string", "maxLength": 6}},
        description="The weather in a city",
        closed=True,
    ),
    function_tool("get_time", {"tz": {"enum": ["UTC", "CET"]}}, closed=True),
]
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
N = 120


@pytest.fixture(scope="module")
def server(tiny_target, tiny_draft):
    yield from tool_serving(tiny_target, tiny_draft)


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server)


def ask(client, **kw):
    kw.setdefault("messages", USER)
    return client.chat.completions.create(model="m", max_tokens=N, tools=TOOLS, **kw)


def test_required_gives_a_parsed_call_with_valid_arguments(client):
    r = ask(client, tool_choice="required", parallel_tool_calls=False)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    args = json.loads(call.function.arguments)
    if call.function.name == "get_weather":
        assert args["city"] in CITIES and len(args["unit"]) <= 6 and set(args) == {"city", "unit"}
    else:
        assert call.function.name == "get_time" and args["tz"] in ("UTC", "CET")


def test_a_named_function_is_the_one_called(client):
    named = {"type": "function", "function": {"name": "get_time"}}
    r = ask(client, tool_choice=named, parallel_tool_calls=False)
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_time" and json.loads(call.function.arguments)["tz"]


def test_streamed_calls_equal_the_whole_answer(client):
    named = {"type": "function", "function": {"name": "get_weather"}}
    # a fixed draft length: rounds of at most 3 tokens, so the arguments arrive in several
    # fragments whatever auto would decide from this machine's timings (under auto, rounds
    # as long as the whole arguments are allowed, and the fragment count is the clock's)
    fixed = {"speculative.n_max": 2}
    whole = ask(client, tool_choice=named, parallel_tool_calls=False,
                extra_body=fixed).choices[0].message
    calls: dict[int, dict] = {}
    pieces = []
    finish = None
    for chunk in ask(client, tool_choice=named, parallel_tool_calls=False, stream=True,
                     extra_body=fixed):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        assert not d.content
        for tc in d.tool_calls or []:
            pieces.append(tc)
            c = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            c["name"] += (tc.function.name or "") if tc.function else ""
            c["arguments"] += (tc.function.arguments or "") if tc.function else ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    # as OpenAI streams a call: its id, type and name with empty arguments, then the
    # arguments in fragments as they are decoded, adding up to the whole answer's exactly
    first, rest = pieces[0], pieces[1:]
    assert first.id.startswith("call_") and first.type == "function"
    assert first.function.name == "get_weather" and first.function.arguments == ""
    assert len(rest) >= 3 and all(p.id is None and not p.function.name for p in rest)
    assert [(c["name"], c["arguments"]) for c in calls.values()] == [
        (t.function.name, t.function.arguments) for t in whole.tool_calls
    ]


def test_speculation_does_not_change_the_call(server):
    body = {"messages": USER, "max_tokens": N, "tools": TOOLS, "tool_choice": "required",
            "parallel_tool_calls": False}  # fmt: skip
    on = server.post("/v1/chat/completions", {**body, "speculative.n_max": 4})
    off = server.post("/v1/chat/completions", {**body, "speculative": False})
    def functions(r):  # the calls without their ids (fresh for every answer)
        return [c["function"] for c in r["choices"][0]["message"]["tool_calls"]]

    assert functions(on) == functions(off)
    assert on["timings"]["draft_n"] > 0


def test_auto_leaves_it_to_the_model(client):
    # the tiny model writes no call on its own: its text comes back as content
    r = client.chat.completions.create(model="m", messages=USER, max_tokens=12, tools=TOOLS)
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].message.content and not r.choices[0].message.tool_calls


def test_auto_reads_the_fenced_call_qwen_coder_writes(client):
    # a request grammar makes the model write what Qwen2.5-Coder writes under "auto": the call
    # in a ```json fence after a sentence; it must come back as a call, whole and streamed
    call = '{"name": "get_time", "arguments": {"tz": "CET"}}'
    text = f"Checking.\n```json\n{call}\n```"
    grammar = "root ::= " + json.dumps(text)  # a JSON string is a GBNF literal here
    kw = dict(messages=USER, max_tokens=N, tools=TOOLS, extra_body={"grammar": grammar})
    r = client.chat.completions.create(model="m", **kw)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Checking."
    assert [(c.function.name, c.function.arguments) for c in choice.message.tool_calls] == [
        ("get_time", '{"tz": "CET"}')
    ]
    content, args, finish = "", "", None
    for chunk in client.chat.completions.create(model="m", stream=True, **kw):
        if chunk.choices:
            d = chunk.choices[0].delta
            content += d.content or ""
            args += "".join(tc.function.arguments or "" for tc in d.tool_calls or [])
            finish = chunk.choices[0].finish_reason or finish
    assert (content, args, finish) == ("Checking.", '{"tz": "CET"}', "tool_calls")


def test_tools_and_earlier_calls_are_rendered_by_the_template(server):
    history = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    ]  # fmt: skip
    prompt = server.post("/apply-template", {"messages": history, "tools": TOOLS})["prompt"]
    assert "<tools>" in prompt and '"name": "get_weather"' in prompt
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}' in prompt
    assert "<tool_response>\n{\"temp\": 21}" in prompt
    none = server.post("/apply-template", {"messages": USER, "tools": TOOLS, "tool_choice": "none"})
    assert "<tools>" not in none["prompt"]


@pytest.mark.parametrize(
    "extra,words",
    [
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]},
         "'tools[0].function.name'"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "'tool_choice.function.name': 'nope' is not among the tools"),
        ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
         "cannot be combined"),
    ],
)  # fmt: skip
def test_bad_tool_requests_are_400(server, extra, words):
    status, _, obj = server.request("POST", "/v1/chat/completions", {"messages": USER, **extra})
    assert status == 400 and words in obj["error"]["message"], obj


def test_tools_on_a_completion_endpoint_are_refused(server):
    body = {"prompt": "hi", "tools": TOOLS}
    for path in ("/v1/completions", "/completion"):
        status, _, obj = server.request("POST", path, body)
        assert status == 400 and obj["error"]["code"] == "unsupported", obj

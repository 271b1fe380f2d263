"""`specgguf serve` with constrained output on the tiny models: OpenAI's `response_format`
(json_object, json_schema) through the official openai client, llama-server's `grammar` and
`json_schema` fields, the same answer with speculation on and off, and 400s naming the field.
"""

from __future__ import annotations

import json

import pytest

from tests.serve_helpers import FAST, openai_client, serving, sse_events
from tests.test_grammar_tiny import RECORD, RECORD_RE, SCHEMA

N = 120
USER = [{"role": "user", "content": "give me a record"}]


@pytest.fixture(scope="module")
def server(tiny_target, tiny_draft):
    yield from serving(["-m", str(tiny_target), "-md", str(tiny_draft), *FAST, "-c", "2048"])


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server)


def schema_format(schema=SCHEMA) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "rec", "schema": schema}}


def check(obj: dict) -> None:
    assert set(obj) == {"name", "ok", "tags"} and isinstance(obj["ok"], bool)
    assert len(obj["name"]) <= 10 and set(obj["tags"]) <= {"x", "y"}


def test_response_format_json_schema_with_the_openai_client(client):
    texts = set()
    for content in ("a record", "the cat sat on", "def main():", "Once upon a time"):
        r = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": content}],
            max_tokens=N,
            response_format=schema_format(),
        )
        check(json.loads(r.choices[0].message.content))
        assert r.choices[0].finish_reason == "stop"
        texts.add(r.choices[0].message.content)
    assert len(texts) > 1  # the prompt still matters


def test_streamed_json_schema_equals_the_whole_answer(client):
    whole = client.chat.completions.create(
        model="m", messages=USER, max_tokens=N, response_format=schema_format()
    )
    chunks = client.chat.completions.create(
        model="m", messages=USER, max_tokens=N, response_format=schema_format(), stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content


def test_json_object_gives_an_object(client):
    r = client.chat.completions.create(
        model="m", messages=USER, max_tokens=N, response_format={"type": "json_object"}
    )
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_speculation_on_and_off_give_the_same_constrained_text(server):
    body = {"messages": USER, "max_tokens": N, "response_format": schema_format()}
    on = server.post("/v1/chat/completions", {**body, "speculative.n_max": 4})  # fixed: drafts
    off = server.post("/v1/chat/completions", {**body, "speculative": False})
    assert on["choices"][0]["message"] == off["choices"][0]["message"]
    assert on["timings"]["draft_n"] > 0


def test_llama_server_grammar_and_json_schema_fields(server):
    r = server.post("/completion", {"prompt": "the cat", "n_predict": 80, "grammar": RECORD})
    assert RECORD_RE.fullmatch(r["content"]) and r["stop_type"] == "eos"
    r = server.post("/completion", {"prompt": "the cat", "n_predict": N, "json_schema": SCHEMA})
    check(json.loads(r["content"]))
    c, resp = server.stream(
        "/completion", {"prompt": "the cat", "n_predict": 80, "grammar": RECORD, "stream": True}
    )
    text = "".join(e["content"] for e in sse_events(resp) if isinstance(e, dict))
    c.close()
    assert RECORD_RE.fullmatch(text)


def _error(server, path, body):
    status, _, obj = server.request("POST", path, body)
    assert set(obj) == {"error"}, obj
    return status, obj["error"]


@pytest.mark.parametrize(
    "extra,words",
    [
        ({"grammar": 'root ::= "a'}, "'grammar': the grammar does not parse"),
        ({"grammar": "root ::= nope"}, "'grammar': the grammar does not parse"),
        ({"grammar": 5}, "'grammar' must be a string"),
        ({"json_schema": {"type": "nope"}}, "'json_schema': the schema cannot be turned"),
        ({"json_schema": [1]}, "'json_schema' must be a JSON schema object"),
        ({"response_format": {"type": "xml"}}, "'response_format.type' must be"),
        ({"response_format": {"type": "json_schema"}}, "'response_format.json_schema.schema'"),
        (
            {"response_format": schema_format({"$ref": "#/nowhere"})},
            "'response_format.json_schema.schema': the schema cannot be turned",
        ),
        ({"grammar": 'root ::= "a"', "json_schema": {}}, "cannot be combined"),
    ],
)
def test_bad_constraints_are_400_naming_the_field(server, extra, words):
    status, err = _error(server, "/v1/chat/completions", {"messages": USER, **extra})
    assert status == 400 and words in err["message"], err
    assert err["type"] == "invalid_request_error"


def test_a_dead_end_is_a_400_and_the_server_lives(server):
    dead = r'root ::= "a" "\x00"'
    body = {"prompt": "hi", "n_predict": 10, "grammar": dead, "speculative": False}
    status, err = _error(server, "/completion", body)
    assert status == 400 and "allows no token after 1 generated tokens" in err["message"]
    assert server.post("/completion", {"prompt": "hi", "n_predict": 2})["tokens_predicted"] == 2


def test_text_response_format_is_free_text(server):
    r = server.post(
        "/v1/chat/completions",
        {"messages": USER, "max_tokens": 8, "response_format": {"type": "text"}},
    )
    assert r["choices"][0]["finish_reason"] == "length"


def test_a_template_without_tools_gets_them_as_a_system_message(server):
    # the tiny model's template never reads `tools` (no family: the generic dialect): their
    # description, and the JSON to answer in, is a system turn
    tools = [{"type": "function", "function": {"name": "get_time"}}]
    prompt = server.post("/apply-template", {"messages": USER, "tools": tools})["prompt"]
    assert prompt.startswith("<|im_start|>system\nYou can call these tools")
    assert '\n{"type": "function", "function": {"name": "get_time"}}\n' in prompt
    assert '{"tool_calls": [' in prompt and '{"response": ' in prompt
    assert prompt.endswith("<|im_start|>user\ngive me a record<|im_end|>\n<|im_start|>assistant\n")


def test_serve_grammar_flags_are_every_requests_default(tiny_target, capsys):
    from specgguf_cli.app import run_cli

    from tests.serve_helpers import Server

    s = Server(["-m", str(tiny_target), *FAST, "-c", "1024", "-j", json.dumps(SCHEMA)])
    try:
        r = s.post("/completion", {"prompt": "the cat", "n_predict": N})
        check(json.loads(r["content"]))  # no field: the server's schema
        own = s.post("/completion", {"prompt": "the cat", "n_predict": 80, "grammar": RECORD})
        assert RECORD_RE.fullmatch(own["content"])  # a request's own constraint wins
    finally:
        assert s.stop()[0] == 0
    assert run_cli(["serve", "-m", str(tiny_target), "--grammar", "root ::= nope"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --grammar: the grammar does not parse: Undefined rule")

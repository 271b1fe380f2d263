"""JSON schemas as a user meets them, on the tiny models: a real `specgguf run` process (its
output, or its exit status and one stderr line) and a real `specgguf serve` over HTTP (the
answer, or a 400 with OpenAI's error object). What hostile use found dropped or broken:
numeric bounds, regex escapes in `pattern`, recursive `$ref`s, tools whose parameters use
`$defs`, `true` / `false` as schemas, and tool_choice without tools."""

from __future__ import annotations

import json
import re

import pytest

from specgguf.errors import ExitCode
from tests.serve_helpers import tool_serving
from tests.test_hostile import one_line, specgguf

GREEDY = ["--temp", "0", "-t", "1", "-c", "512"]


def run_schema(model, schema, prompt="y =", n=24, *extra):
    text = schema if isinstance(schema, str) else json.dumps(schema)
    return specgguf("run", "-m", model, "-j", text, "-p", prompt, "-n", n, *GREEDY, *extra)


def output(result) -> str:
    code, out, err = result
    assert code == 0, err
    assert "Traceback" not in err, err
    return out.strip()


# -- specgguf run -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lo", "hi"),
    [(0, 5), (1000, 1003), (-7, -3), (1, 9), (-2, 250), (123456, 123460)],
)
def test_run_writes_an_integer_within_the_bounds(tiny_target, lo, hi):
    schema = {"type": "integer", "minimum": lo, "maximum": hi}
    for prompt in ("y =", "The year was", "count:"):
        text = output(run_schema(tiny_target, schema, prompt, 12, "--spec-type", "none"))
        assert lo <= int(text) <= hi, (schema, prompt, text)  # before: 0, or 200000


def test_run_exclusive_bounds_and_a_bounded_number(tiny_target):
    text = output(run_schema(tiny_target, {"type": "integer", "exclusiveMinimum": 40,
                                           "exclusiveMaximum": 43}))  # fmt: skip
    assert int(text) in (41, 42), text
    value = json.loads(output(run_schema(tiny_target, {"type": "number", "minimum": 7,
                                                       "maximum": 9})))  # fmt: skip
    assert 7 <= value <= 9, value


@pytest.mark.parametrize(
    ("schema", "keyword"),
    [
        ({"type": "integer", "multipleOf": 3}, "'multipleOf'"),
        ({"type": "number", "minimum": 0.5}, "'minimum' 0.5"),
        ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True, "minItems": 3},
         "'uniqueItems' with 'minItems' 3"),
        ({"type": "string", "format": "email"}, "'format' 'email'"),
        ({"type": "object", "minProperties": 1}, "'minProperties'"),
        ({"type": "string", "pattern": "^a+$", "maxLength": 3}, "'pattern' and 'maxLength'"),
        ({"not": {"type": "null"}}, "'not'"),
        ({"type": "string", "pattern": "^(?=x)x$"}, "'(?='"),
        ({"type": "integer", "minimum": 9, "maximum": 1}, "no integer is within the bounds"),
        ("false", "false: no value matches it"),
    ],
)
def test_run_refuses_what_it_cannot_enforce_in_one_line(tiny_target, schema, keyword):
    code, out, err = run_schema(tiny_target, schema)
    assert code == ExitCode.USAGE and out == "", err
    line = one_line(err)
    assert line.startswith("error: -j/--json-schema: ") and keyword in line, line


def test_run_takes_true_as_any_value(tiny_target):
    json.loads(output(run_schema(tiny_target, "true", "x", 16)))  # before: 'bool' object ...


def test_run_pattern_with_regex_escapes(tiny_target):
    pattern = r"^\d{3}-\w\w\.\/\(x\)\s\-[\d.]{1,4}$"
    text = output(run_schema(tiny_target, {"type": "string", "pattern": pattern}, "id:", 40))
    value = json.loads(text)  # before: "unknown escape at \d"
    assert re.fullmatch(pattern, value), value


TREE = {
    "$ref": "#/$defs/node",
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "v": {"type": "integer", "minimum": 1, "maximum": 9},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
            },
            "required": ["v", "kids"],
            "additionalProperties": False,
        }
    },
}


def check_tree(node, depth=0) -> int:
    assert set(node) == {"v", "kids"} and 1 <= node["v"] <= 9, node
    assert len(node["kids"]) <= 2
    return 1 + sum(check_tree(k, depth + 1) for k in node["kids"])


def test_run_recursive_schema(tiny_target):
    code, out, err = run_schema(tiny_target, TREE, "tree:", 200)
    assert code == 0, err  # before: "cannot be turned into a grammar: '#/$defs/node'"
    try:
        check_tree(json.loads(out))
    except json.JSONDecodeError:  # cut by -n: still a tree's beginning
        assert out.startswith('{"v": ') or out.startswith('{ "v"'), out


def test_run_answers_validate_under_pydantic(tiny_target):
    """A pydantic model's schema as pydantic writes it ($defs, a discriminated union, a set,
    bounds, a pattern, formats), sampled hot: every finished answer validates."""
    pydantic = pytest.importorskip("pydantic")  # the openai client's dependency
    import datetime
    import uuid
    from typing import Literal

    field = pydantic.Field

    class Cat(pydantic.BaseModel):
        kind: Literal["cat"]
        lives: int = field(gt=0, lt=10)

    class Dog(pydantic.BaseModel):
        kind: Literal["dog"]
        bark: bool

    class Addr(pydantic.BaseModel):
        street: str = field(max_length=8)
        zip: str = field(pattern=r"^\d{5}$")

    class Person(pydantic.BaseModel):
        name: str = field(min_length=1, max_length=6)
        age: int = field(ge=0, le=130)
        score: float = field(ge=0.0, le=1.0)
        born: datetime.date
        id: uuid.UUID
        addr: Addr | None = None
        tags: set[str] = set()
        pet: Cat | Dog = field(discriminator="kind")
        pair: tuple[int, str]

    schema = json.dumps(Person.model_json_schema())
    answers = set()
    for seed in range(4):
        code, out, err = specgguf(
            "run", "-m", tiny_target, "-j", schema, "-p", "person:", "-n", 400, "--temp", 1,
            "--seed", seed, "-t", 1, "-c", 1024,
        )  # fmt: skip
        assert code == 0, err
        Person.model_validate_json(out)  # before: refused (uniqueItems) or bounds ignored
        answers.add(out)
    assert len(answers) > 1  # sampled, not one greedy answer


# -- specgguf serve -----------------------------------------------------------------------

YEAR = {
    "type": "object",
    "properties": {"title": {"type": "string", "maxLength": 12},
                   "year": {"type": "integer", "minimum": 1, "maximum": 9}},
    "required": ["title", "year"],
    "additionalProperties": False,
}  # fmt: skip
PARAMS_WITH_DEFS = {  # as pydantic writes a model with a nested model
    "$defs": {
        "Place": {
            "type": "object",
            "properties": {"city": {"enum": ["Paris", "Oslo"]},
                           "floor": {"type": "integer", "minimum": 2, "maximum": 4}},
            "required": ["city", "floor"],
            "additionalProperties": False,
        }
    },
    "type": "object",
    "properties": {"place": {"$ref": "#/$defs/Place"}},
    "required": ["place"],
    "additionalProperties": False,
}  # fmt: skip
TOOLS = [
    {"type": "function", "function": {"name": "go", "parameters": PARAMS_WITH_DEFS}},
    {"type": "function", "function": {"name": "stay", "parameters": {"type": "object"}}},
]
USER = [{"role": "user", "content": "Tell me about a film."}]


@pytest.fixture(scope="module")
def server(tiny_target, tiny_draft):
    yield from tool_serving(tiny_target, tiny_draft)


def chat(server, **body):
    body = {"messages": USER, "max_tokens": 120, **body}
    return server.request("POST", "/v1/chat/completions", body)


def content(server, **body) -> str:
    status, _, obj = chat(server, **body)
    assert status == 200, obj
    return obj["choices"][0]["message"]["content"]


def schema_format(schema) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}


def test_serve_keeps_an_integer_within_the_bounds(server):
    for text in ("Tell me about a film.", "the year", "1942 was a year"):
        obj = json.loads(content(server, messages=[{"role": "user", "content": text}],
                                 response_format=schema_format(YEAR)))  # fmt: skip
        assert 1 <= obj["year"] <= 9, obj  # before: 1942


def test_serve_refuses_an_unenforced_keyword_with_a_400(server):
    bad = {**YEAR, "properties": {**YEAR["properties"], "year": {"type": "integer",
                                                                  "multipleOf": 2}}}  # fmt: skip
    status, _, obj = chat(server, response_format=schema_format(bad))
    assert status == 400 and obj["error"]["code"] == "invalid_schema", obj
    assert "'multipleOf' is not supported (at 'year')" in obj["error"]["message"], obj


def test_serve_true_and_false_schemas(server):
    json.loads(content(server, json_schema=True))  # before: 'bool' object has no attribute
    status, _, obj = chat(server, json_schema=False)
    assert status == 400 and obj["error"]["code"] == "invalid_schema", obj
    assert "false: no value matches it" in obj["error"]["message"]
    status, _, obj = chat(server, response_format=schema_format(False))
    assert status == 400 and "false" in obj["error"]["message"], obj


def test_serve_pattern_and_recursive_schema(server):
    pattern = r"^[A-Z]\d\d\.\w{1,6}$"
    value = json.loads(content(server, json_schema={"type": "string", "pattern": pattern}))
    assert re.fullmatch(pattern, value), value
    status, _, obj = chat(server, json_schema=TREE, max_tokens=300)
    assert status == 200, obj
    text = obj["choices"][0]["message"]["content"]
    if obj["choices"][0]["finish_reason"] == "stop":
        check_tree(json.loads(text))


def test_serve_tool_with_defs_and_tool_choice_required(server):
    named = {"type": "function", "function": {"name": "go"}}
    for choice in ("required", named):
        status, _, obj = chat(server, tools=TOOLS, tool_choice=choice, parallel_tool_calls=False)
        assert status == 200, obj  # before: 400 "Error resolving ref ... $defs not in"
        calls = obj["choices"][0]["message"]["tool_calls"]
        assert len(calls) == 1, obj
        call = calls[0]["function"]
        args = json.loads(call["arguments"])
        if call["name"] == "go":
            place = args["place"]
            assert place["city"] in ("Paris", "Oslo") and 2 <= place["floor"] <= 4, args
        else:
            assert choice == "required" and isinstance(args, dict)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"tools": [], "tool_choice": "required"}, "'tool_choice' \"required\" needs at least"),
        ({"tool_choice": "required"}, "needs at least one tool"),
        ({"tool_choice": {"type": "function", "function": {"name": "go"}}},
         "'tool_choice' names the function 'go', but no 'tools' are given"),
        ({"tools": [], "tool_choice": {"type": "function", "function": {"name": "go"}}},
         "no 'tools' are given"),
        ({"tool_choice": "sometimes"}, "'tool_choice' must be"),
    ],
)  # fmt: skip
def test_serve_tool_choice_without_tools_is_400(server, extra, words):
    status, _, obj = chat(server, **extra)  # before: 200 with unconstrained text
    assert status == 400, obj
    err = obj["error"]
    assert err["type"] == "invalid_request_error" and words in err["message"], obj


def test_serve_tool_choice_none_or_auto_without_tools_still_answers(server):
    for choice in ("none", "auto"):
        assert isinstance(content(server, tools=[], tool_choice=choice, max_tokens=4), str)

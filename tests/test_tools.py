"""Tool calls in and out of text (specgguf.io.tools): Qwen/Hermes <tool_call> blocks and bare
JSON calls parsed into OpenAI tool_calls, the same whole or streamed in any pieces; the
request's tools and tool_choice validated with the field named; the call grammar's wrapper."""

from __future__ import annotations

import json

import pytest

from specgguf.io.tools import (
    ToolCallStream,
    ToolsError,
    call_schema,
    split_tool_calls,
    template_messages,
    validate_tool_choice,
    validate_tools,
    wrap_call_grammar,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}
TOOLS = [WEATHER, TIME]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def calls_of(text: str):
    content, calls = split_tool_calls(text, TOOLS)
    return content, [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize(
    "text,content,calls",
    [
        (CALL, "", [("get_weather", {"city": "Paris"})]),
        ("Let me look.\n" + CALL, "Let me look.", [("get_weather", {"city": "Paris"})]),
        (CALL + "\n" + CALL.replace("get_weather", "get_time"), "",
         [("get_weather", {"city": "Paris"}), ("get_time", {"city": "Paris"})]),
        ('{"name": "get_time", "arguments": {}}', "", [("get_time", {})]),
        (' {"name": "get_time", "parameters": {"tz": "UTC"}}\n', "", [("get_time", {"tz": "UTC"})]),
        # not a call: stays the content, untouched
        ('{"name": "rm_rf", "arguments": {}}', '{"name": "rm_rf", "arguments": {}}', []),
        ('{"a": 1} and more', '{"a": 1} and more', []),
        ("<tool_call>\nnot json\n</tool_call>", "<tool_call>\nnot json\n</tool_call>", []),
        ("cut short <tool_call>\n{\"name\": ", "cut short <tool_call>\n{\"name\": ", []),
        ("plain text < and <tool", "plain text < and <tool", []),
    ],
)  # fmt: skip
def test_whole_answers(text, content, calls):
    assert calls_of(text) == (content, calls)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_streamed_in_any_pieces_equals_the_whole(size):
    for text in ("Let me look.\n" + CALL + "\n" + CALL, '{"name": "get_time", "arguments": {}}',
                 "no call here <tool", "x <tool_call>oops</tool_call> y"):  # fmt: skip
        s = ToolCallStream(TOOLS)
        content, calls = "", []
        for i in range(0, len(text), size):
            c, done = s.feed(text[i : i + size])
            content += c
            calls += done
        c, done = s.close()
        content += c
        calls += done
        whole_content, whole_calls = split_tool_calls(text, TOOLS)
        assert [(c.name, c.arguments) for c in calls] == [
            (c.name, c.arguments) for c in whole_calls
        ]
        assert content.strip() == whole_content.strip()


def test_content_before_a_call_is_released_before_the_call_closes():
    s = ToolCallStream(TOOLS)
    assert s.feed("Checking the weather <tool") == ("Checking the weather ", [])
    assert s.feed('_call>\n{"name": "get_weather", "arguments": {"city": "X"}}') == ("", [])
    content, calls = s.feed("\n</tool_call>")
    assert content == "" and [c.name for c in calls] == ["get_weather"]


@pytest.mark.parametrize(
    "tools,words",
    [
        ("x", "'tools' must be a list"),
        ([{"type": "code"}], "'tools[0].type' must be \"function\""),
        ([{"type": "function"}], "'tools[0].function' must be an object"),
        ([{"type": "function", "function": {"name": "a b"}}], "'tools[0].function.name'"),
        ([WEATHER, WEATHER], "'tools[1].function.name': 'get_weather' is given twice"),
        ([{"type": "function", "function": {"name": "f", "parameters": 3}}], "parameters"),
    ],
)
def test_bad_tools_name_the_field(tools, words):
    with pytest.raises(ToolsError) as e:
        validate_tools(tools)
    assert words in str(e.value)


def test_tool_choice():
    assert validate_tool_choice(None, TOOLS) == "auto"
    assert validate_tool_choice("required", TOOLS) == "required"
    named = {"type": "function", "function": {"name": "get_time"}}
    assert validate_tool_choice(named, TOOLS) == "function:get_time"
    for bad, words in (
        ("sometimes", "'tool_choice' must be"),
        ({"type": "function"}, "name"),
        ({"function": {"name": "nope"}}, "'nope' is not among the tools"),
    ):
        with pytest.raises(ToolsError) as e:
            validate_tool_choice(bad, TOOLS)
        assert words in str(e.value)
    # without tools, nothing can be called: "none" and "auto" stand, a forced call is refused
    assert validate_tool_choice("auto", []) == "auto"
    for forced, words in (("required", "needs at least one tool"),
                          (named, "names the function 'get_time', but no 'tools'")):  # fmt: skip
        with pytest.raises(ToolsError, match=words):
            validate_tool_choice(forced, [])


def test_earlier_calls_reach_the_template_with_object_arguments():
    msgs = [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}]  # fmt: skip
    fixed = template_messages(msgs)
    assert fixed[0]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert msgs[0]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'  # a copy


DEEP = "[" * 100_000 + "]" * 100_000  # JSON inside a string: the body's own depth is 1


def test_deeply_nested_json_in_a_call_is_not_a_crash():
    # before: RecursionError out of json.loads (a 500 from the server, with a traceback)
    msgs = [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "1", "type": "function",
         "function": {"name": "get_weather", "arguments": DEEP}}]}]  # fmt: skip
    assert template_messages(msgs)[0]["tool_calls"][0]["function"]["arguments"] == DEEP
    text = '<tool_call>\n{"name": "get_weather", "arguments": ' + DEEP + "}\n</tool_call>"
    assert calls_of(text) == (text, [])  # not a call: the content, untouched


def test_call_schema_and_wrapper():
    one = call_schema(TOOLS, "get_weather")
    assert one["properties"]["name"] == {"const": "get_weather"}
    assert one["properties"]["arguments"] == WEATHER["function"]["parameters"]
    assert len(call_schema(TOOLS)["anyOf"]) == 2
    g = wrap_call_grammar('root ::= "{}"\nspace ::= " "?', parallel=False)
    assert g.splitlines()[0] == 'root ::= "<tool_call>\\n" specgguf-tool-call "\\n</tool_call>"'
    assert 'specgguf-tool-call ::= "{}"' in g
    assert '("\\n" "<tool_call>' in wrap_call_grammar('root ::= "{}"', parallel=True)

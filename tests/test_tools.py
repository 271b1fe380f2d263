"""Tool calls in and out of text (specgguf.chat.tools): Qwen/Hermes <tool_call> blocks and bare
JSON calls parsed into OpenAI tool_calls, the same whole or streamed in any pieces; the
request's tools and tool_choice validated with the field named; the call grammar's wrapper."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specgguf.chat.tools import (
    CallDelta,
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


def streamed(text: str, size: int, tools=TOOLS):
    """`text` fed in pieces of `size` characters: (content, {index: [name, id, arguments]},
    the call pieces in order)."""
    s = ToolCallStream(tools)
    events = []
    for i in range(0, len(text), size):
        events += s.feed(text[i : i + size])
    events += s.close()
    content = "".join(e for e in events if isinstance(e, str))
    calls: dict[int, list] = {}
    pieces = [e for e in events if isinstance(e, CallDelta)]
    for d in pieces:
        if d.id is not None:
            assert d.index not in calls and d.arguments == "", d  # the first piece names it
            calls[d.index] = [d.name, d.id, ""]
        else:
            calls[d.index][2] += d.arguments
    assert [c.arguments for c in s.calls] == [calls[i][2] for i in sorted(calls)]
    return content, calls, pieces


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_streamed_in_any_pieces_equals_the_whole(size):
    for text in ("Let me look.\n" + CALL + "\n" + CALL, '{"name": "get_time", "arguments": {}}',
                 "no call here <tool", "x <tool_call>oops</tool_call> y",
                 *(f.format(call=WEATHER_JSON) for f in FENCED),
                 "Here:\n```json\n" + WEATHER_JSON + "\n```\nand more text",
                 "```python\nprint('```json')\n```\n",
                 '```json\n{"a": [1, "}"]}\n```'):  # fmt: skip
        content, calls, _ = streamed(text, size)
        whole_content, whole_calls = split_tool_calls(text, TOOLS)
        assert [(n, args) for n, _, args in calls.values()] == [
            (c.name, c.arguments) for c in whole_calls
        ], text
        assert content.strip() == whole_content.strip()


def test_content_before_a_call_is_released_before_the_call_closes():
    s = ToolCallStream(TOOLS)
    assert s.feed("Checking the weather <tool") == ["Checking the weather"]  # blank held
    first = s.feed('_call>\n{"name": "get_weather", "arguments": {"city": ')
    assert [(d.index, d.name, d.arguments) for d in first] == [
        (0, "get_weather", ""), (0, None, '{"city": ')
    ]  # fmt: skip
    assert first[0].id == s.calls[0].id and first[0].id.startswith("call_")
    assert [d.arguments for d in s.feed('"X"}}')] == ['"X"}']  # the object's "}" is not
    assert s.feed("\n</tool_call>") == [] and s.close() == []
    assert s.calls[0].arguments == '{"city": "X"}' and not s.truncated


WEATHER_JSON = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
#: what Qwen2.5-Coder writes under tool_choice auto, and llama.cpp's Hermes parser reads
FENCED = [
    "```json\n{call}\n```",
    "```json\n{call}\n```\n",
    "```xml\n{call}\n```",
    "```\n{call}\n```",
    "```json\n<tool_call>\n{call}\n</tool_call>\n```",
    "<tool_call>\n```json\n{call}\n```\n</tool_call>",
    "\n\n```json\n  {call}\n```",
]


@pytest.mark.parametrize("shape", FENCED)
def test_a_fenced_call_is_a_call(shape):
    text = shape.format(call=WEATHER_JSON)
    assert calls_of(text) == ("", [("get_weather", {"city": "Paris"})])
    content, calls = calls_of("I will check.\n" + text + "\nOne moment.")
    assert content.split("\n") in (["I will check.", "One moment."],
                                   ["I will check.", "", "One moment."])  # fmt: skip
    assert calls == [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize(
    "text,calls",
    [
        ("```json\n" + WEATHER_JSON + "\n" + WEATHER_JSON.replace("get_weather", "get_time")
         + "\n```", ["get_weather", "get_time"]),
        ("```json\n" + CALL + "\n" + CALL + "\n```", ["get_weather", "get_weather"]),
        ("```json\n" + WEATHER_JSON + "\n```\n```json\n" + WEATHER_JSON + "\n```",
         ["get_weather", "get_weather"]),
    ],
)  # fmt: skip
def test_several_calls_in_one_fence_or_one_after_another(text, calls):
    content, got = split_tool_calls(text, TOOLS)
    assert content == "" and [c.name for c in got] == calls


@pytest.mark.parametrize(
    "text",
    [
        "```json\n" + WEATHER_JSON.replace("get_weather", "rm_rf") + "\n```",  # no such tool
        '```json\n{"city": "Paris"}\n```',  # JSON, but not a call
        "```python\n" + WEATHER_JSON + "\n```",  # another language
        "```jsonc\n" + WEATHER_JSON + "\n```",
        "```json\n" + WEATHER_JSON[:30],  # cut short before its arguments
        "Calls look like " + WEATHER_JSON + " in my answers.",  # bare JSON within content
    ],
)
def test_what_is_not_a_fenced_call_stays_content_untouched(text):
    for size in (1, 5, len(text)):
        content, calls, _ = streamed(text, size)
        assert (content, calls) == (text, {})
    assert split_tool_calls(text, TOOLS) == (text, [])


def test_keys_in_another_order_give_the_call_whole():
    text = '```json\n{"arguments": {"city": "Oslo"}, "name": "get_weather"}\n```'
    content, calls, pieces = streamed(text, 1)
    assert content == "" and [(n, json.loads(a)) for n, _, a in calls.values()] == [
        ("get_weather", {"city": "Oslo"})
    ]
    assert [p.arguments for p in pieces] == ["", '{"city": "Oslo"}']


def test_arguments_stream_as_the_model_writes_them():
    args = '{"path": "a.py", "content": "def f():\\n    return {\\"}\\": [1, 2]}\\n"}'
    text = '```json\n{"name": "get_weather", "arguments": ' + args + '}\n```\n'
    content, calls, pieces = streamed(text, 3)
    assert content == "" and calls[0][2] == args  # the model's text, byte for byte
    assert json.loads(calls[0][2])["content"].startswith("def f():")
    # piece by piece: every fragment arrives with the feed that brought it
    assert len(pieces) > len(args) // 3 - 2
    assert split_tool_calls(text, TOOLS)[1][0].arguments == args


def test_arguments_cut_short_are_marked_truncated():
    s = ToolCallStream(TOOLS)
    s.feed('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par')
    s.close()
    assert s.truncated and s.calls[0].arguments == '{"city": "Par'


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


#: pieces of text near the parser's markers, put together at random
_PARTS = ["```", "```json\n", "```\n", "```python\n", '"parameters"', "<tool_call>",
          "</tool_call>", "\n", " ", "{", "}", '"name"', ": ", '"get_weather"', ", ",
          '"arguments"', '{"city": "Paris"}', "x", '"', "\\", "[", "]", WEATHER_JSON,
          CALL]  # fmt: skip


@given(
    parts=st.lists(st.sampled_from(_PARTS), max_size=14),
    cuts=st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=6),
)
@settings(max_examples=300, deadline=None)
def test_any_text_in_any_pieces_parses_as_the_whole_and_loses_nothing(parts, cuts):
    text = "".join(parts)
    s = ToolCallStream(TOOLS)
    events, i, k = [], 0, 0
    while i < len(text):
        n = cuts[k % len(cuts)]
        events += s.feed(text[i : i + n])
        i, k = i + n, k + 1
    events += s.close()
    content = "".join(e for e in events if isinstance(e, str))
    whole_content, whole_calls = split_tool_calls(text, TOOLS)
    if s.invalid:  # a call whose arguments are not JSON: the whole answer is content
        assert (whole_content, whole_calls) == (text, [])
        return
    assert [(c.name, c.arguments) for c in s.calls] == [
        (c.name, c.arguments) for c in whole_calls
    ]
    assert content.strip() == whole_content.strip()
    if not s.calls:
        assert content == text  # not a call: every character is content, in order
    for c in s.calls:  # what streamed is what the call says
        assert "".join(e.arguments for e in events
                       if isinstance(e, CallDelta) and e.index == s.calls.index(c)) == c.arguments


@pytest.mark.parametrize(
    "text",
    [
        # arguments that are not JSON, name first (streamed path) or arguments first (whole)
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": Oslo}}\n</tool_call>',
        '<tool_call>\n{"arguments": {"city": Oslo}, "name": "get_weather"}\n</tool_call>',
        # string arguments that are not the JSON text of an object
        '<tool_call>\n{"name": "get_weather", "arguments": "not json"}\n</tool_call>',
        '<tool_call>\n{"name": "get_weather", "arguments": "[1, 2]"}\n</tool_call>',
        '<tool_call>\n{"name": "get_weather", "arguments": [1, 2]}\n</tool_call>',
    ],
)
def test_a_call_whose_arguments_are_not_a_json_object_is_content(text):
    assert split_tool_calls(text, TOOLS) == (text, [])


@pytest.mark.parametrize(
    "args", ['{"city": "\\ud800"}', '{"city": ' + "[" * 300 + "]" * 300 + "}"]
)
def test_the_verdict_does_not_depend_on_key_order(args):
    # a lone surrogate, nesting past the JSON reader's bound: content, whichever key is first
    for obj in (f'{{"name": "get_weather", "arguments": {args}}}',
                f'{{"arguments": {args}, "name": "get_weather"}}'):  # fmt: skip
        text = f"<tool_call>\n{obj}\n</tool_call>"
        assert split_tool_calls(text, TOOLS) == (text, []), obj


def test_a_streamed_call_with_bad_arguments_is_marked_invalid():
    s = ToolCallStream(TOOLS)
    s.feed('<tool_call>\n{"name": "get_weather", "arguments": {"city": ')
    s.feed("Oslo}}\n</tool_call>")
    s.close()
    assert s.invalid  # its deltas went out already: the server ends the answer as no call


def test_the_closing_fence_of_the_contents_code_block_stays():
    text = "Code:\n```\nprint(1)\n```\n" + CALL
    assert calls_of(text) == ("Code:\n```\nprint(1)\n```", [("get_weather", {"city": "Paris"})])
    for size in (1, 2, 5):
        assert streamed(text, size)[0].strip() == "Code:\n```\nprint(1)\n```"


def test_parameters_must_be_an_object_schema():
    for params in ({"type": "array"}, {"type": "string"}, []):
        with pytest.raises(ToolsError, match="must be a JSON schema of an object"):
            validate_tools([{"type": "function", "function": {"name": "f", "parameters": params}}])
    validate_tools([{"type": "function", "function": {"name": "f", "parameters": {}}}])

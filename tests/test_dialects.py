"""Tool-call dialects (specgguf/chat/dialects/): each family recognised from its real chat
template, its native calls parsed whole and fed in random pieces (the same calls, the same
content, arguments that add up), call ids in the family's shape. The outputs are our own
fixtures of what each family writes."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from specgguf.chat.dialects import DIALECTS, FALLBACK, by_name, detect
from specgguf.chat.dialects.framed import Framed
from specgguf.chat.tools import CallDelta

TEMPLATES = Path(__file__).parent / "data" / "templates"

SPECIAL = {
    "type": "function",
    "function": {
        "name": "special_function",
        "parameters": {"type": "object", "properties": {"arg1": {"type": "integer"}}},
    },
}
WITH_OPT = {
    "type": "function",
    "function": {
        "name": "special_function_with_opt",
        "parameters": {
            "type": "object",
            "properties": {"arg1": {"type": "integer"}, "arg2": {"type": "integer"}},
        },
    },
}
PYTHON = {
    "type": "function",
    "function": {
        "name": "python",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}},
    },
}
TOOLS = [SPECIAL, WITH_OPT, PYTHON]

#: a minimal template with Llama 3.1's markers (its own template is not shipped: licence)
LLAMA3_LIKE = "<|start_header_id|>{% for m in messages %}{{ m.content }}{% endfor %}ipython"


@pytest.mark.parametrize(
    "template,dialect",
    [
        ("Qwen3-Coder.jinja", "qwen3-coder"),
        ("Qwen3.5-4B.jinja", "qwen3-coder"),
        ("Qwen-Qwen3-0.6B.jinja", "hermes"),
        ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "hermes"),
        ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral-nemo"),
        ("Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral-small-3.2"),
        ("unsloth-mistral-Devstral-Small-2507.jinja", "devstral"),
    ],
)
def test_the_family_is_recognised_from_its_template(template, dialect):
    assert detect((TEMPLATES / template).read_text()).name == dialect


def test_unknown_templates_fall_back_and_names_are_unique():
    assert detect("{{ messages }}") is FALLBACK
    assert detect(LLAMA3_LIKE).name == "llama3"
    assert len({d.name for d in DIALECTS}) == len(DIALECTS)
    assert by_name("devstral").name == "devstral"
    with pytest.raises(KeyError, match="unknown dialect 'nope'"):
        by_name("nope")


ONE = [("special_function", {"arg1": 1})]
TWO = ONE + [("special_function_with_opt", {"arg1": 1, "arg2": 2})]
CODE = 'def hello():\n    print("Hello, world!")\n\nhello()'

#: (dialect, the model's text, the content, the calls)
CASES = [
    ("hermes", '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
     "", ONE),
    ("llama3", '{"name": "special_function", "parameters": {"arg1": 1}}', "", ONE),
    ("qwen3-coder", "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n"
     "</parameter>\n</function>\n</tool_call>", "", ONE),
    ("qwen3-coder", "Let me see.\n<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n"
     "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=special_function_with_opt>"
     "\n<parameter=arg1>\n1\n</parameter>\n<parameter=arg2>\n2\n</parameter>\n</function>\n"
     "</tool_call>", "Let me see.", TWO),
    ("qwen3-coder", f"<tool_call>\n<function=python>\n<parameter=code>\n{CODE}\n</parameter>\n"
     "</function>\n</tool_call>", "", [("python", {"code": CODE})]),
    ("qwen3-coder", "<tool_call>\n<function=rm_rf>\n</function>\n</tool_call>",
     "<tool_call>\n<function=rm_rf>\n</function>\n</tool_call>", []),
    ("mistral-nemo", '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, '
     '"id": "123456789"}]', "", ONE),
    ("mistral-small-3.2", '[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]{"arg1": 1}'
     '[TOOL_CALLS]special_function_with_opt[CALL_ID]000000002[ARGS]{"arg1": 1, "arg2": 2}',
     "", TWO),
    ("devstral", '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}', "", ONE),
    ("devstral", 'Hello, world!\nWhat\'s up?[TOOL_CALLS]special_function[ARGS]{"arg1": 1}',
     "Hello, world!\nWhat's up?", ONE),
    ("devstral", "[TOOL_CALLS]special_function[ARGS]{arg1: 1}",
     "[TOOL_CALLS]special_function[ARGS]{arg1: 1}", []),
    ("functionary-v3.1", '<function=special_function>{"arg1": 1}</function>', "", ONE),
]  # fmt: skip


def parse(dialect: str, text: str, pieces: list[str] | None = None):
    s = by_name(dialect).parser(TOOLS)
    events: list = []
    for piece in pieces or [text]:
        events += s.feed(piece)
    events += s.close()
    content = "".join(e for e in events if isinstance(e, str))
    deltas = [e for e in events if isinstance(e, CallDelta)]
    streamed: dict[int, str] = {}
    for d in deltas:
        if d.id is not None:  # the first piece of a call names it, with its id
            assert d.index not in streamed and d.arguments == "" and d.name
            streamed[d.index] = ""
        else:
            streamed[d.index] += d.arguments
    assert [streamed[i] for i in sorted(streamed)] == [c.arguments for c in s.calls]
    calls = [(c.name, json.loads(c.arguments)) for c in s.calls]
    return (content.strip() if calls else content), calls, s


@pytest.mark.parametrize("dialect,text,content,calls", CASES)
def test_native_calls_parse_whole_and_in_random_pieces(dialect, text, content, calls):
    assert parse(dialect, text)[:2] == (content, calls)
    rng = random.Random(len(text))
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 12))))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        assert parse(dialect, text, pieces)[:2] == (content, calls), pieces


def test_mistral_ids_have_the_nine_characters_its_template_requires():
    _, _, s = parse("devstral", '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}')
    assert re.fullmatch(r"[A-Za-z0-9]{9}", s.calls[0].id)
    _, _, s = parse("mistral-small-3.2", '[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]{}')
    assert s.calls[0].id == "000000001"  # the model's own id, where it has the shape
    _, _, s = parse("hermes", '{"name": "special_function", "arguments": {}}')
    assert s.calls[0].id.startswith("call_")


#: the rows whose forced call is a JSON object in markers (a Framed form, with the tool's name
#: outside its arguments, is checked through libllama in tests/test_dialect_thinkers.py)
JSON_FORCED = [d for d in DIALECTS if not isinstance(d.forcing(FALLBACK).forced, Framed)]


@pytest.mark.parametrize("dialect", JSON_FORCED, ids=lambda d: d.name)
def test_a_forced_answer_is_read_back_by_the_dialect_that_forced_it(dialect):
    # the text a forced call's grammar allows, written out by hand from the row's Forced
    writer = dialect.forcing(FALLBACK)
    f = writer.forced
    assert f is not None
    objs = [json.dumps({"name": n, f.args_key: a}) for n, a in TWO]
    calls = [f.before + o + f.after for o in objs]
    text = f.open_all + (f.between.join(calls) if f.between is not None else calls[0])
    text += f.close_all
    want = TWO if f.between is not None else ONE
    assert parse(writer.name, text)[:2] == ("", want)
    g = f.grammar('root ::= "{}"', parallel=f.between is not None)
    assert g.startswith("root ::= ") and 'specgguf-tool-call ::= "{}"' in g


def test_the_docs_table_has_one_row_per_dialect_in_order():
    doc = (Path(__file__).parent.parent / "docs" / "structured-output.md").read_text()
    rows = re.findall(r"^\| `([a-z0-9.-]+)` \| ", doc, re.M)
    assert rows == [d.name for d in DIALECTS]

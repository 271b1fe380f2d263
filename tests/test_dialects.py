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

from specgguf.chat.dialects import DIALECTS, FALLBACK, FORCED_FALLBACK, by_name, detect
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
        ("ibm-granite-granite-3.3-2B-Instruct.jinja", "granite"),
        ("ibm-granite-granite-4.0.jinja", "hermes"),
    ],
)
def test_the_family_is_recognised_from_its_template(template, dialect):
    assert detect((TEMPLATES / template).read_text()).name == dialect


#: the markers each family's own template has (those templates are not shipped: licences)
MARKED = [
    ("{{- '<|tool_call>call:' + function['name'] + '{' -}}", "gemma4"),
    ("{{ '>>>all\\n' }} {{ '>>>${recipient}\\n${content}' }}<|start_header_id|>",
     "functionary-v3.2"),
    ("<|start_header_id|>{{ ' functools[' + calls | join(', ') + ']' }}", "firefunction-v2"),
    ("<|START_THINKING|><|END_THINKING|><|START_ACTION|>[]<|END_ACTION|><|START_RESPONSE|>",
     "command-r7b"),
]  # fmt: skip


@pytest.mark.parametrize("source,dialect", MARKED)
def test_families_without_a_shipped_template_are_recognised_by_their_markers(source, dialect):
    assert detect(source).name == dialect


def test_unknown_templates_fall_back_and_names_are_unique():
    assert detect("{{ messages }}") is FALLBACK and FALLBACK.name == "generic"
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
    ("functionary-v3.1", 'Sure.<function=special_function>{"arg1": 1}</function>\n'
     '<function=special_function_with_opt>{"arg1": 1, "arg2": 2}</function>', "Sure.", TWO),
    ("hermes", '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n'
     '{"name": "special_function_with_opt", "arguments": {"arg1": 1, "arg2": 2}}\n</tool_call>',
     "", TWO),
    # Gemma 4: its own notation, strings between <|"|>
    ("gemma4", '<|tool_call>call:special_function{arg1:1}<tool_call|>', "", ONE),
    ("gemma4", 'Hello, world!\nWhat\'s up?<|tool_call>call:python{code:<|"|>print("a, b: {c}")'
     '<|"|>}<tool_call|>', "Hello, world!\nWhat's up?",
     [("python", {"code": 'print("a, b: {c}")'})]),
    ("gemma4", '<|tool_call>call:special_function{arg1:1}<tool_call|><|tool_call>call:'
     'special_function_with_opt{arg1:1,arg2:2}<tool_call|>', "", TWO),
    ("gemma4", '<|tool_call>call:python{code:[<|"|>a<|"|>,{x:-1.5e3,y:[true,null]}]}<tool_call|>',
     "", [("python", {"code": ["a", {"x": -1500.0, "y": [True, None]}]})]),
    ("gemma4", "<|tool_call>call:special_function{arg1:one}<tool_call|>",
     "<|tool_call>call:special_function{arg1:one}<tool_call|>", []),
    # Granite 3.x
    ("granite", '<|tool_call|>[{"name": "special_function", "arguments": {"arg1": 1}}, '
     '{"name": "special_function_with_opt", "arguments": {"arg1": 1, "arg2": 2}}]', "", TWO),
    ("granite", "Hello, world!", "Hello, world!", []),
    # Functionary v3.2: after the prompt's >>>
    ("functionary-v3.2", "all\nHello, world!\nWhat's up?", "Hello, world!\nWhat's up?", []),
    ("functionary-v3.2", 'special_function\n{"arg1": 1}', "", ONE),
    ("functionary-v3.2", 'all\nLet me see.>>>special_function\n{"arg1": 1}>>>'
     'special_function_with_opt\n{"arg1": 1, "arg2": 2}', "Let me see.", TWO),
    ("functionary-v3.2", 'all\nA>>>rm_rf\n{"x": 1}', 'A>>>rm_rf\n{"x": 1}', []),
    # FireFunction v2
    ("firefunction-v2", ' functools[{"name": "special_function", "arguments": {"arg1": 1}}]',
     "", ONE),
    ("firefunction-v2", "Hello, world!\nWhat's up?", "Hello, world!\nWhat's up?", []),
    ("firefunction-v2", ' functools[{"name": "special_function", "arguments": {"arg1": 1}}, '
     '{"name": "special_function_with_opt", "arguments": {"arg1": 1, "arg2": 2}}]', "", TWO),
    # Command R7B (its thinking is split off before the call parser)
    ("command-r7b", "<|START_RESPONSE|>Hello, world!\nWhat's up?<|END_RESPONSE|>",
     "Hello, world!\nWhat's up?", []),
    ("command-r7b", '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "special_function", '
     '"parameters": {"arg1": 1}}\n]<|END_ACTION|>', "", ONE),
    ("command-r7b", '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "special_function", '
     '"parameters": {"arg1": 1}},\n    {"tool_call_id": "1", "tool_name": '
     '"special_function_with_opt", "parameters": {"arg1": 1, "arg2": 2}}\n]<|END_ACTION|>',
     "", TWO),
    # the generic fallback: its JSON shapes, and Hermes' for a model that writes those
    ("generic", '{"tool_calls": [{"name": "special_function", "arguments": {"arg1": 1}}, '
     '{"name": "special_function_with_opt", "arguments": {"arg1": 1, "arg2": 2}}]}', "", TWO),
    ("generic", '{"tool_call": {"name": "special_function", "arguments": {"arg1": 1}}}', "", ONE),
    ("generic", '{"response": "Hello, world!"}', "Hello, world!", []),
    ("generic", '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
     "", ONE),
    ("generic", '{"name": "special_function", "arguments": {"arg1": 1}}', "", ONE),
    ("generic", "Hello, world!", "Hello, world!", []),
    ("generic", '{"answer": 42}', '{"answer": 42}', []),
]  # fmt: skip

#: with parallel_tool_calls false: the first call, and the rest of the text as content
SINGLE = [
    ("hermes", '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>'
     '\n<tool_call>\n{"name": "special_function", "arguments": {"arg1": 2}}\n</tool_call>',
     '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 2}}\n</tool_call>', ONE),
    # a family whose calls run to the end of the answer holds them in one block: all content
    ("devstral", '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}[TOOL_CALLS]python[ARGS]{}',
     '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}[TOOL_CALLS]python[ARGS]{}', []),
    ("gemma4", '<|tool_call>call:special_function{arg1:1}<tool_call|><|tool_call>call:python{}'
     '<tool_call|>', "<|tool_call>call:python{}<tool_call|>", ONE),
    ("functionary-v3.2", 'special_function\n{"arg1": 1}>>>python\n{}', ">>>python\n{}", ONE),
    ("generic", '{"tool_calls": [{"name": "special_function", "arguments": {"arg1": 1}}, '
     '{"name": "python", "arguments": {}}]}', ', {"name": "python", "arguments": {}}]}', ONE),
]  # fmt: skip


def parse(dialect: str, text: str, pieces: list[str] | None = None, *, parallel: bool = True):
    s = by_name(dialect).parser(TOOLS, parallel=parallel)
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


def random_pieces(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 12))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@pytest.mark.parametrize("dialect,text,content,calls", SINGLE)
def test_without_parallel_calls_one_call_is_read_and_the_rest_is_content(
    dialect, text, content, calls
):
    assert parse(dialect, text, parallel=False)[:2] == (content, calls)
    rng = random.Random(len(text))
    for _ in range(10):
        pieces = random_pieces(text, rng)
        assert parse(dialect, text, pieces, parallel=False)[:2] == (content, calls), pieces


def test_mistral_ids_have_the_nine_characters_its_template_requires():
    _, _, s = parse("devstral", '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}')
    assert re.fullmatch(r"[A-Za-z0-9]{9}", s.calls[0].id)
    _, _, s = parse("mistral-small-3.2", '[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]{}')
    assert s.calls[0].id == "000000001"  # the model's own id, where it has the shape
    _, _, s = parse("hermes", '{"name": "special_function", "arguments": {}}')
    assert s.calls[0].id.startswith("call_")


def _call(name: str, args: dict, name_key: str = "name", args_key: str = "arguments") -> str:
    return json.dumps({name_key: name, args_key: args})


C1, C2 = TWO[0], TWO[1]
#: each forced form written out by hand, with two calls (one where the family writes one):
#: the text its grammar must take whole, and its parser read back
FORCED = {
    "hermes": "\n".join(f"<tool_call>\n{_call(*c)}\n</tool_call>" for c in TWO),
    "llama3": _call(*C1, args_key="parameters"),
    "mistral-nemo": f"[TOOL_CALLS][{_call(*C1)}, {_call(*C2)}]",
    "mistral-small-3.2": "".join(
        f"[TOOL_CALLS]{n}[CALL_ID]a1B2c3D4e[ARGS]{json.dumps(a)}" for n, a in TWO
    ),
    "devstral": "".join(f"[TOOL_CALLS]{n}[ARGS]{json.dumps(a)}" for n, a in TWO),
    "functionary-v3.1": "".join(f"<function={n}>{json.dumps(a)}</function>" for n, a in TWO),
    "qwen3-coder": "\n".join(
        f"<tool_call>\n<function={n}>\n"
        + "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in a.items())
        + "</function>\n</tool_call>"
        for n, a in TWO
    ),
    "gemma4": "<|channel>thought\nLet me call.<channel|><|tool_call>call:special_function{arg1:1}"
    "<tool_call|><|tool_call>call:special_function_with_opt{arg1:1,arg2:2}<tool_call|>",
    "granite": f"<|tool_call|>[{_call(*C1)}, {_call(*C2)}]",
    "functionary-v3.2": f'special_function\n{json.dumps(C1[1])}>>>special_function_with_opt\n'
    f"{json.dumps(C2[1])}",
    "firefunction-v2": f" functools[{_call(*C1)}, {_call(*C2)}]",
    "command-r7b": "<|START_THINKING|>I will call.<|END_THINKING|><|START_ACTION|>["
    + ", ".join(
        json.dumps({"tool_call_id": str(i), "tool_name": n, "parameters": a})
        for i, (n, a) in enumerate(TWO)
    )
    + "]<|END_ACTION|>",
    "generic": json.dumps({"tool_calls": [{"name": n, "arguments": a} for n, a in TWO]}),
}


@pytest.fixture(scope="module")
def vocab(tiny_target):
    from specgguf.binding import engine

    return engine.Model(tiny_target)


def forced_grammar(dialect, *, parallel: bool, only: str | None = None, think=True) -> str:
    from specgguf.generator import OutputGrammar

    forced = dialect.forced
    return OutputGrammar.for_tools(TOOLS, only, parallel=parallel, forced=forced, think=think).gbnf


#: the rows whose forced form is a Forced (a Framed form, with the tool's name outside its
#: arguments, is checked through libllama in tests/test_dialect_thinkers.py)
OWN_FORCED = [d for d in DIALECTS if not isinstance(d.forcing(FORCED_FALLBACK).forced, Framed)]


@pytest.mark.parametrize("dialect", OWN_FORCED, ids=lambda d: d.name)
def test_a_forced_answer_is_taken_by_its_grammar_and_read_back_by_its_parser(vocab, dialect):
    from specgguf.chat.reasoning import split_reasoning
    from tests.test_json_ranges import engine_accepts

    writer = dialect.forcing(FORCED_FALLBACK)
    text = FORCED[writer.name]
    parallel = writer.forced.between is not None
    assert engine_accepts(vocab, forced_grammar(writer, parallel=parallel), text)
    reasoning, answer = split_reasoning(text, markers=writer.thinking)
    assert parse(writer.name, answer)[:2] == ("", TWO if parallel else ONE)
    if reasoning:  # thinking first only where the request lets the model think
        no_thinking = forced_grammar(writer, parallel=parallel, think=False)
        assert not engine_accepts(vocab, no_thinking, text)
        assert engine_accepts(vocab, no_thinking, answer)
    if not parallel:
        return
    one = forced_grammar(writer, parallel=False)  # parallel_tool_calls false: one call only
    assert not engine_accepts(vocab, one, text)
    named = forced_grammar(writer, parallel=True, only="special_function_with_opt")
    assert not engine_accepts(vocab, named, text)  # a named function: only its calls


def test_the_docs_table_has_one_row_per_dialect_in_order():
    doc = (Path(__file__).parent.parent / "docs" / "structured-output.md").read_text()
    rows = re.findall(r"^\| `([a-z0-9.-]+)` \| ", doc, re.M)
    assert rows == [d.name for d in DIALECTS]


def test_generic_calls_stream_their_arguments_as_they_come():
    text = ('{"tool_calls": [{"name": "special_function", "arguments": {"arg1": 1}}, '
            '{"name": "special_function_with_opt", "arguments": {"arg1": 1, "arg2": 2}}]}')
    s = by_name("generic").parser(TOOLS)
    events = [e for i in range(len(text)) for e in s.feed(text[i])] + s.close()
    args = [e for e in events if isinstance(e, CallDelta) and e.id is None]
    assert len(args) > 4  # fragments, not each call's arguments in one piece
    assert [(c.name, json.loads(c.arguments)) for c in s.calls] == TWO
    assert not [e for e in events if isinstance(e, str) and e.strip()]


def test_gemma_forced_values_have_their_schemas_types(vocab):
    from tests.test_json_ranges import engine_accepts

    g = forced_grammar(by_name("gemma4"), parallel=False, think=False)
    call = "<|tool_call>call:{}<tool_call|>"
    assert engine_accepts(vocab, g, call.format("special_function{arg1:-12}"))
    assert engine_accepts(vocab, g, call.format('python{code:<|"|>print(1)<|"|>}'))
    assert not engine_accepts(vocab, g, call.format('special_function{arg1:<|"|>1<|"|>}'))
    assert not engine_accepts(vocab, g, call.format("special_function{arg1:1.5}"))
    assert not engine_accepts(vocab, g, call.format("python{code:1}"))
    assert not engine_accepts(vocab, g, call.format("python{other:1}"))


def test_qwen3_coder_forced_strings_are_free_text_up_to_their_closing_tag(vocab):
    from tests.test_json_ranges import engine_accepts

    g = forced_grammar(by_name("qwen3-coder"), parallel=False)
    call = "<tool_call>\n<function=python>\n<parameter=code>\n{}\n</parameter>\n</function>\n"
    code = 'def f(x):\n    return "<b>" + x\n'
    assert engine_accepts(vocab, g, call.format(code) + "</tool_call>")
    got = parse("qwen3-coder", call.format(code) + "</tool_call>")[1]
    assert got == [("python", {"code": code})]
    assert not engine_accepts(vocab, g, call.format("a\n</parameter>\nb") + "</tool_call>")

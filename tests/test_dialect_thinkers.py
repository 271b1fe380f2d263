"""The families that think before they call and write a tool's name outside its arguments:
GPT-OSS (harmony channels), DeepSeek R1 and V3.1 (tool-call tokens), Kimi K2 and GLM 4.5/4.6.
Each is recognised from its real template; its native answers (our own fixtures, modelled on
what llama-server's tests expect of these templates) come apart into reasoning, content and
calls, whole and fed in random pieces; its forced-call grammar, through libllama, takes the
family's own call syntax after the thinking (and the thinking the prompt already opened) and
nothing else; and its template renders the thinking switch, the effort and earlier turns."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from specgguf.chat.dialects import by_name, detect
from specgguf.chat.reasoning import CONTENT, REASONING
from specgguf.chat.render import RenderOptions, render_conversation
from specgguf.chat.tools import CallDelta
from specgguf.generator import OutputGrammar
from tests.test_chat_render import WEATHER, history, template, thinking_on_and_off
from tests.test_dialects import ONE, TOOLS, TWO

TEMPLATES = Path(__file__).parent / "data" / "templates"


@pytest.mark.parametrize(
    "name,dialect",
    [
        ("openai-gpt-oss-120b.jinja", "gpt-oss"),
        ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "deepseek-r1"),
        ("llama-cpp-deepseek-r1.jinja", "deepseek-r1"),
        ("deepseek-ai-DeepSeek-V3.1.jinja", "deepseek-v3.1"),
        ("moonshotai-Kimi-K2.jinja", "kimi-k2"),
        ("Kimi-K2-Instruct.jinja", "kimi-k2"),
        ("Kimi-K2-Thinking.jinja", "kimi-k2"),
        ("GLM-4.6.jinja", "glm-4.5"),
    ],
)
def test_the_family_is_recognised_from_its_template(name, dialect):
    assert detect((TEMPLATES / name).read_text()).name == dialect


R1_BEGIN = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
R1_END = "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
SEP = "<｜tool▁sep｜>"
KIMI_CALL = "<|tool_call_begin|>functions.{}:{}<|tool_call_argument_begin|>{}<|tool_call_end|>"
THOUGHTS = "I'm\nthinking"

#: (dialect, the prompt opened the thinking, the model's text, reasoning, content, calls)
CASES = [
    ("gpt-oss", False, "<|channel|>final<|message|>Hello, world!\nWhat's up?", "",
     "Hello, world!\nWhat's up?", []),
    ("gpt-oss", False, "<|channel|>commentary<|message|>Hello, world!", "", "Hello, world!", []),
    ("gpt-oss", False, f"<|channel|>analysis<|message|>{THOUGHTS}<|end|><|start|>assistant"
     "<|channel|>final<|message|>Hello, world!", THOUGHTS, "Hello, world!", []),
    ("gpt-oss", False, ' to=functions.special_function<|channel|>analysis<|message|>{"arg1": 1}',
     "", "", ONE),
    ("gpt-oss", False, '<|channel|>commentary to=functions.special_function<|message|>'
     '{"arg1": 1}', "", "", ONE),
    ("gpt-oss", False, ' to=functions.special_function<|channel|>analysis <|constrain|>json'
     '<|message|>{"arg1": 1}', "", "", ONE),
    ("gpt-oss", False, f"<|channel|>analysis<|message|>{THOUGHTS}<|end|><|start|>assistant"
     '<|channel|>commentary to=functions.special_function <|constrain|>json<|message|>'
     '{"arg1": 1}', THOUGHTS, "", ONE),
    # a built-in tool's call (no function of the request's): dropped, as llama-server does
    ("gpt-oss", False, "<|channel|>analysis<|message|>I will run python<|end|><|start|>"
     "assistant to=container.exec<|channel|>commentary<|message|>print(1)",
     "I will run python", "", []),
    ("deepseek-r1", True, "</think>Hello, world!", "", "Hello, world!", []),
    ("deepseek-r1", True, f"{THOUGHTS}</think>Hello, world!", THOUGHTS, "Hello, world!", []),
    ("deepseek-r1", True, f'</think>{R1_BEGIN}function{SEP}special_function\n```json\n'
     f'{{"arg1": 1}}```{R1_END}', "", "", ONE),
    ("deepseek-r1", False, f'{R1_BEGIN}function{SEP}special_function\n```json\n{{"arg1": 1}}\n'
     f"```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function{SEP}special_function_with_opt\n"
     f'```json\n{{"arg1": 1, "arg2": 2}}\n```{R1_END}', "", "", TWO),
    ("deepseek-v3.1", False, f'{R1_BEGIN}special_function{SEP}{{"arg1": 1}}{R1_END}', "", "",
     ONE),
    ("deepseek-v3.1", True, f'REASONING</think>CONTENT{R1_BEGIN}special_function{SEP}'
     f'{{"arg1": 1}}<｜tool▁call▁end｜><｜tool▁call▁begin｜>special_function_with_opt{SEP}'
     f'{{"arg1": 1, "arg2": 2}}{R1_END}', "REASONING", "CONTENT", TWO),
    ("deepseek-v3.1", True, "REASONING</think>\nCONTENT", "REASONING", "CONTENT", []),
    ("deepseek-v3.1", False, f'{R1_BEGIN}rm_rf{SEP}{{}}{R1_END}',
     "", f'{R1_BEGIN}rm_rf{SEP}{{}}{R1_END}', []),
    ("kimi-k2", False, "<think>hmm</think>Sure.<|tool_calls_section_begin|>"
     + KIMI_CALL.format("special_function", 0, '{"arg1": 1}')
     + KIMI_CALL.format("special_function_with_opt", 1, '{"arg1": 1, "arg2": 2}')
     + "<|tool_calls_section_end|>", "hmm", "Sure.", TWO),
    ("glm-4.5", False, "<think>hmm</think>\n<tool_call>special_function\n<arg_key>arg1</arg_key>"
     "\n<arg_value>1</arg_value>\n</tool_call>", "hmm", "", ONE),
    ("glm-4.5", False, "<tool_call>special_function\n<arg_key>arg1</arg_key>\n<arg_value>1"
     "</arg_value>\n</tool_call>\n<tool_call>special_function_with_opt\n<arg_key>arg1</arg_key>"
     "\n<arg_value>1</arg_value>\n<arg_key>arg2</arg_key>\n<arg_value>2</arg_value>\n"
     "</tool_call>", "", "", TWO),
    ("glm-4.5", False, "<tool_call>python\n<arg_key>code</arg_key>\n<arg_value>print('<a>')"
     "</arg_value>\n</tool_call>", "", "", [("python", {"code": "print('<a>')"})]),
]  # fmt: skip


def answer(dialect: str, pieces: list[str], *, opened: bool, extract: bool = True, tools=TOOLS):
    """What the server makes of the pieces: reasoning, content and calls (the streamed call
    deltas checked to add up to the calls)."""
    d = by_name(dialect)
    split = d.splitter(opened=opened, extract=extract, calls=bool(tools))
    calls = d.parser(tools) if tools else None
    reasoning, events = "", []

    def take(parts):
        nonlocal reasoning
        for kind, text in parts:
            if kind == REASONING:
                reasoning += text
            else:
                assert kind == CONTENT
                events.extend(calls.feed(text) if calls else [text])

    for piece in pieces:
        take(split.feed(piece) if split else [(CONTENT, piece)])
    if split:
        take(split.close())
    events += calls.close() if calls else []
    content = "".join(e for e in events if isinstance(e, str))
    streamed: dict[int, str] = {}
    for e in events:
        if isinstance(e, CallDelta):
            streamed[e.index] = streamed.get(e.index, "") + e.arguments
    found = calls.calls if calls else []
    assert [streamed[i] for i in sorted(streamed)] == [c.arguments for c in found]
    got = [(c.name, json.loads(c.arguments)) for c in found]
    return reasoning.rstrip(), content.strip() if found else content, got, found


def random_pieces(text: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 14))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@pytest.mark.parametrize("dialect,opened,text,reasoning,content,calls", CASES)
def test_native_answers_come_apart_whole_and_in_random_pieces(
    dialect, opened, text, reasoning, content, calls
):
    want = (reasoning, content, calls)
    assert answer(dialect, [text], opened=opened)[:3] == want
    for seed in range(20):
        pieces = random_pieces(text, seed)
        assert answer(dialect, pieces, opened=opened)[:3] == want, pieces


def test_harmony_control_tokens_never_reach_the_user():
    text = (f"<|channel|>analysis<|message|>{THOUGHTS}<|end|><|start|>assistant"
            "<|channel|>final<|message|>Hello")  # fmt: skip
    for seed in range(10):
        reasoning, content, _, _ = answer("gpt-oss", random_pieces(text, seed), opened=False)
        assert (reasoning, content) == (THOUGHTS, "Hello")
    # reasoning_format none: the analysis stays in the content with its markers, as
    # llama-server leaves it; without tools a call is dropped, not shown
    _, content, _, _ = answer("gpt-oss", [text], opened=False, extract=False)
    assert content == f"<|channel|>analysis<|message|>{THOUGHTS}<|end|>Hello"
    call = '<|channel|>commentary to=functions.special_function<|message|>{"arg1": 1}'
    assert answer("gpt-oss", [call], opened=False, tools=None)[:2] == ("", "")
    # a call cut short is content, its arguments as written, no marker
    cut = '<|channel|>commentary to=functions.special_function<|message|>{"arg1": '
    assert answer("gpt-oss", [cut], opened=False)[1:3] == ('{"arg1":', [])


def test_kimi_keeps_the_ids_its_template_writes_back():
    text = ("<|tool_calls_section_begin|>" + KIMI_CALL.format("special_function", 3, "{}")
            + "<|tool_calls_section_end|>")  # fmt: skip
    assert answer("kimi-k2", [text], opened=False)[3][0].id == "functions.special_function:3"


# -- forced calls through libllama ------------------------------------------------------------


@pytest.fixture(scope="module")
def model(tiny_target):
    from specgguf.binding import engine

    return engine.Model(tiny_target)


#: (dialect, the prompt opened the thinking, a forced answer the grammar takes, its calls)
FORCED = [
    ("gpt-oss", False, '<|channel|>commentary to=functions.special_function <|constrain|>json'
     '<|message|>{"arg1": 1}', ONE),
    ("gpt-oss", False, "<|channel|>analysis<|message|>I must call it.<|end|><|start|>assistant"
     '<|channel|>commentary to=functions.special_function <|constrain|>json<|message|>'
     '{"arg1": 1}', ONE),
    ("deepseek-r1", True, f'so I call it</think>\n{R1_BEGIN}function{SEP}special_function\n'
     f'```json\n{{"arg1": 1}}\n```{R1_END}', ONE),
    ("deepseek-r1", False, f'{R1_BEGIN}function{SEP}special_function\n```json\n{{"arg1": 1}}\n'
     f'```{R1_END}', ONE),
    ("deepseek-v3.1", True, f'ok</think>{R1_BEGIN}special_function{SEP}{{"arg1": 1}}'
     "<｜tool▁call▁end｜><｜tool▁call▁begin｜>special_function_with_opt"
     f'{SEP}{{"arg1": 1, "arg2": 2}}{R1_END}', TWO),
    ("kimi-k2", False, "<think>hmm</think><|tool_calls_section_begin|>"
     + KIMI_CALL.format("special_function", 0, '{"arg1": 1}') + "<|tool_calls_section_end|>",
     ONE),
    ("glm-4.5", False, "\n<think>hmm</think>\n<tool_call>special_function_with_opt\n"
     "<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
     [("special_function_with_opt", {"arg1": 1})]),
    ("glm-4.5", False, "<tool_call>python\n<arg_key>code</arg_key>\n<arg_value>print(1)"
     "</arg_value>\n</tool_call>", [("python", {"code": "print(1)"})]),
]  # fmt: skip


def forced_grammar(dialect: str, opened: bool, only: str | None = None) -> str:
    d = by_name(dialect)
    return OutputGrammar.for_tools(TOOLS, only, forced=d.forced, opened=opened).gbnf


@pytest.mark.parametrize("dialect,opened,text,calls", FORCED)
def test_the_forced_grammar_takes_the_family_syntax_and_it_reads_back(
    model, dialect, opened, text, calls
):
    from tests.test_json_ranges import engine_accepts

    assert engine_accepts(model, forced_grammar(dialect, opened), text)
    assert answer(dialect, [text], opened=opened)[2] == calls
    # no content before the call (in an opened thinking, text is thinking), no other tool
    # than the one named
    assert engine_accepts(model, forced_grammar(dialect, opened), "Sure. " + text) == opened
    assert not engine_accepts(model, forced_grammar(dialect, opened, "python"), text) or (
        calls[0][0] == "python"
    )


def test_a_prompt_that_opened_the_thinking_must_close_it_before_the_call(model):
    from tests.test_json_ranges import engine_accepts

    call = f'{R1_BEGIN}function{SEP}special_function\n```json\n{{"arg1": 1}}\n```{R1_END}'
    assert engine_accepts(model, forced_grammar("deepseek-r1", False), call)
    # opened: a call straight away would sit inside the thinking, where it is no call
    assert not engine_accepts(model, forced_grammar("deepseek-r1", True), call)
    assert engine_accepts(model, forced_grammar("deepseek-r1", True), "</think>" + call)


# -- rendering --------------------------------------------------------------------------------


def test_v31_reads_the_thinking_switch_under_its_own_name():
    on, off = thinking_on_and_off(template("deepseek-ai-DeepSeek-V3.1.jinja"))
    assert on.endswith("<｜Assistant｜><think>")
    assert off.endswith("<｜Assistant｜><think></think>")


def test_gpt_oss_gets_the_effort_and_an_earlier_turns_reasoning():
    t = template("openai-gpt-oss-120b.jinja")
    msgs = history("call_1")[:3]
    msgs[2] = {**msgs[2], "content": "Let me look.", "reasoning_content": "Paris, so look."}
    text = render_conversation(t, msgs, [WEATHER], RenderOptions(reasoning_effort="high"))
    assert "Reasoning: high" in text
    assert "<|channel|>analysis<|message|>Paris, so look.<|end|>" in text
    assert 'to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}' in text


@pytest.mark.parametrize("name", ["Kimi-K2-Instruct.jinja", "Kimi-K2-Thinking.jinja"])
def test_kimi_templates_queue_the_call_ids_for_the_results(name):
    text = render_conversation(template(name), history("functions.get_weather:0"), [WEATHER])
    assert "## Return of functions.get_weather:0\nsunny" in text


# -- forced calls under speculation -----------------------------------------------------------


@pytest.fixture(scope="module")
def sessions(tiny_target, tiny_draft):
    from tests.test_speculative_tiny import make_session

    made = {
        "plain": make_session(tiny_target, None, []),
        "draft": make_session(tiny_target, tiny_draft, ["draft-simple"], n_max=4,
                              draft_sampling="greedy", grammar_draft=True),  # fmt: skip
        "ngram": make_session(tiny_target, None, ["ngram-simple"]),
    }
    yield made
    for s in made.values():
        s.close()


FAMILY_TEMPLATES = {
    "gpt-oss": "openai-gpt-oss-120b.jinja",
    "deepseek-r1": "llama-cpp-deepseek-r1.jinja",
    "deepseek-v3.1": "deepseek-ai-DeepSeek-V3.1.jinja",
    "kimi-k2": "moonshotai-Kimi-K2.jinja",
    "glm-4.5": "GLM-4.6.jinja",
}


def forced_answer(session, dialect: str, seed: int) -> str:
    from specgguf.core.sampling import SamplerParams
    from specgguf.generator import Generator, GenParams

    template = (TEMPLATES / FAMILY_TEMPLATES[dialect]).read_text()
    sampler = SamplerParams(temp=0.0) if seed < 0 else SamplerParams(temp=1.0, top_k=40)
    gen = Generator(session, sampler=sampler, n_predict=400, seed=max(seed, 0),
                    template_src=template)  # fmt: skip
    grammar = OutputGrammar.for_tools(TOOLS, forced=by_name(dialect).forced)
    # the tiny model would think on forever: a budget closes its thinking
    params = GenParams(grammar=grammar, seed=max(seed, 0), reasoning_budget=4, format_tokens=True)
    g = gen.generate(gen.tokenize("Call a tool."), params)
    return "".join(c.text for c in g)


@pytest.mark.parametrize("dialect", sorted(FAMILY_TEMPLATES))
def test_a_forced_call_is_the_same_with_and_without_speculation(sessions, dialect):
    for seed in (-1, 5):  # greedy, and seeded sampling with one-hot drafts
        ref = forced_answer(sessions["plain"], dialect, seed)
        assert answer(dialect, [ref], opened=False)[2], ref  # it parses as a call
        for kind in ("draft", "ngram"):
            assert forced_answer(sessions[kind], dialect, seed) == ref, (kind, seed)

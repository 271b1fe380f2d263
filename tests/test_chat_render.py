"""Conversations rendered as llama-server renders them (specgguf/chat/render.py), with the real
templates of several families: tools always given, a multi-turn history of calls and results
(with the ids each family's parser makes), enable_thinking and the template kwargs, today's
date, and a system message merged into the first user turn where a template refuses one."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from specgguf.chat.dialects import detect
from specgguf.chat.render import RenderOptions, render_context, render_conversation
from specgguf.chat.template import ChatTemplate
from tests.test_tools import WEATHER as UNDESCRIBED

TEMPLATES = Path(__file__).parent / "data" / "templates"
#: Hermes 2 Pro's template reads every tool's description
WEATHER = {**UNDESCRIBED, "function": {**UNDESCRIBED["function"], "description": "Weather."}}



def history(call_id: str) -> list[dict]:
    """A user turn, the assistant's call (arguments as OpenAI sends them: a JSON string), the
    tool's result, the assistant's answer, and the next user turn."""
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": call_id, "name": "get_weather", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
        {"role": "user", "content": "And tomorrow?"},
    ]  # fmt: skip


def template(name: str) -> ChatTemplate:
    return ChatTemplate.compile(
        (TEMPLATES / name).read_text(), name, bos_token="<s>", eos_token="</s>"
    )


#: one user turn: what the thinking switch is rendered on
HI = [{"role": "user", "content": "hi"}]


def thinking_on_and_off(t: ChatTemplate) -> tuple[str, str]:
    """The prompt `t` renders for HI as it stands (thinking on, the templates' default) and
    with enable_thinking off."""
    return render_conversation(t, HI), render_conversation(
        t, HI, options=RenderOptions(enable_thinking=False)
    )


#: the real templates, and our stand-ins with the markers of those not shipped (standins/)
ALL = sorted(str(p.relative_to(TEMPLATES)) for p in TEMPLATES.rglob("*.jinja"))


@pytest.mark.parametrize("name", ALL)
def test_every_family_renders_tools_and_its_own_call_history(name):
    t = template(name)
    dialect = detect(t.source)
    call_id = dialect.new_id()  # what the server hands out for this family
    text = render_conversation(
        t, history(call_id), [WEATHER],
        describe=dialect.describe, variables=dialect.variables([WEATHER]),
    )  # fmt: skip
    assert "get_weather" in text and "Paris" in text and "sunny" in text
    assert "And tomorrow?" in text and "You are terse." in text


def test_mistral_refuses_other_ids_and_renders_its_own():
    t = template("mistralai-Mistral-Nemo-Instruct-2407.jinja")
    with pytest.raises(Exception, match="9"):
        render_conversation(t, history("call_0123456789abcdef01234567"), [WEATHER])
    text = render_conversation(t, history("a1B2c3D4e"), [WEATHER])
    assert '"id": "a1B2c3D4e"' in text or "a1B2c3D4e" in text


def test_thinking_switch_and_kwargs_reach_the_template():
    t = template("Qwen-Qwen3-0.6B.jinja")
    msgs = HI
    on, off = thinking_on_and_off(t)
    assert on.endswith("<|im_start|>assistant\n")
    assert off.endswith("<think>\n\n</think>\n\n")
    # a request's kwargs over the server's; reasoning_effort "none" turns thinking off too
    server = RenderOptions(kwargs={"enable_thinking": False})
    assert render_conversation(t, msgs, options=server.merged({"enable_thinking": True})) == (
        render_conversation(t, msgs)
    )
    assert render_conversation(t, msgs, options=RenderOptions(reasoning_effort="none")) == off


def test_dates_and_effort_in_the_context():
    ctx = render_context(RenderOptions(reasoning_effort="high"), datetime(2026, 12, 3))
    assert ctx["date_string"] == "03 Dec 2026" and ctx["datetime"] == "Dec 03 2026"
    assert ctx["reasoning_effort"] == "high" and ctx["enable_thinking"] is True
    t = ChatTemplate.compile("{{ date_string }}|{{ strftime_now('%Y') }}", "t")
    text = render_conversation(t, [{"role": "user", "content": "x"}])
    assert text == f"{datetime.now():%d %b %Y}|{datetime.now():%Y}"


REFUSES_SYSTEM = (
    "{% for m in messages %}{% if m.role == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "[{{ m.role }}]{{ m.content }}{% endfor %}"
)


def test_a_system_message_goes_into_the_first_user_turn_where_the_template_refuses_it():
    t = ChatTemplate.compile(REFUSES_SYSTEM, "t")
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert render_conversation(t, msgs) == "[user]Be brief.\n\nhi"


def test_tools_reach_a_template_that_reads_them_and_are_described_where_it_does_not():
    reads = ChatTemplate.compile("{{ tools | length }} {{ messages[0].content }}", "t")
    assert render_conversation(reads, [{"role": "user", "content": "x"}], [WEATHER]) == "1 x"
    blind = ChatTemplate.compile("{% for m in messages %}{{ m.content }}|{% endfor %}", "t")
    text = render_conversation(blind, [{"role": "user", "content": "x"}], [WEATHER])
    # a template of no family: the generic dialect's description and JSON
    assert '"name": "get_weather"' in text and '{"tool_calls": [' in text
    assert text.endswith("|x|")


def test_serve_flags_for_rendering_are_checked_in_one_line():
    from specgguf_cli.serve_cmd import template_kwargs_option

    from specgguf.errors import UsageError

    opts = template_kwargs_option('{"enable_thinking": false, "x": 1}', "on")
    assert opts.kwargs == {"enable_thinking": False, "x": 1, "preserve_reasoning": True}
    assert not opts.thinking()
    assert not template_kwargs_option(None, "off").thinking()
    for args, words in ((("[1]",), "must be a JSON object"), (("{",), "not JSON"),
                        (('{"enable_thinking": "no"}',), "true or false"),
                        ((None, "maybe"), "-rea/--reasoning"),
                        ((None, "auto", "r1"), "--reasoning-format")):  # fmt: skip
        with pytest.raises(UsageError, match=words):
            template_kwargs_option(*args)


def test_a_template_that_adds_arguments_to_strings_gets_openais_strings():
    # Functionary v3.2's template writes '>>>' + name + '\n' + arguments
    t = template("standins/functionary-v3.2.jinja")
    text = render_conversation(t, history("call_1"), [WEATHER])
    assert '>>>get_weather\n{"city": "Paris"}' in text


def test_the_generic_fallback_describes_the_tools_and_its_json_to_the_model():
    t = template("standins/plain.jinja")
    dialect = detect(t.source)
    assert dialect.name == "generic"
    text = render_conversation(t, history("call_1"), [WEATHER], describe=dialect.describe)
    assert '"name": "get_weather"' in text and '{"tool_calls": [' in text
    assert '{"response": ' in text


def test_firefunction_templates_read_the_tools_as_functions():
    from specgguf.chat.dialects import by_name

    t = ChatTemplate.compile("{{ functions }}|{{ messages[0].content }}", "t")
    variables = by_name("firefunction-v2").variables([WEATHER])
    assert '"name": "get_weather"' in render_conversation(t, history("c"), variables=variables)
    assert render_conversation(t, history("c"), variables=by_name("firefunction-v2").variables([]))

"""Chat templates: exact rendering (also of the template stored in a tiny GGUF), the Hugging Face
extras, the sandbox, and errors. Pure: no model is run here."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgguf.chat.template import (
    CHATML_TEMPLATE,
    ChatTemplate,
    ChatTemplateError,
    conversation,
    template_for,
    validate_messages,
)
from specgguf.errors import ExitCode, PromptError, UsageError
from specgguf.modelfiles.gguf_info import read_gguf_info
from tests.tiny_models import DEFAULT_TEMPLATE, TARGET_SEED, build_tiny_model

USER_HI = [{"role": "user", "content": "hi"}]

# A Hugging Face-style template exercising what real ones use: whitespace control with
# trim_blocks/lstrip_blocks, bos_token, raise_exception, loop controls, tojson, namespace.
HF_STYLE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system = messages[0]['content'] %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system = 'default system' %}
{%- endif %}
[SYS]{{ system }}[/SYS]
{% set ns = namespace(n=0) %}
{% for message in messages %}
    {% if message['role'] == 'tool' %}{% continue %}{% endif %}
    {% if (message['role'] == 'user') != (ns.n % 2 == 0) %}
        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {% endif %}
    {% set ns.n = ns.n + 1 %}
    {% if message['role'] == 'user' %}
[INST]{{ message['content'] }}[/INST]
    {% else %}
{{ message['content'] }}{{ eos_token }}
    {% endif %}
    {% if message.get('meta') %}{{ message['meta'] | tojson }}{% endif %}
{% endfor %}
{% if add_generation_prompt %}[ASSISTANT]{% endif %}"""


def test_default_template_exact():
    t = ChatTemplate.compile(DEFAULT_TEMPLATE, "test")
    assert t.render(USER_HI) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert t.render(USER_HI, add_generation_prompt=False) == "<|im_start|>user\nhi<|im_end|>\n"


def test_template_read_from_tiny_gguf_renders_exactly(tiny_target):
    info = read_gguf_info(tiny_target)
    assert info.chat_template == DEFAULT_TEMPLATE
    t, warning = template_for(info.chat_template)
    assert warning is None
    turns = [("user", "hi"), ("assistant", "hello"), ("user", "2+2?")]
    msgs = conversation("be brief", [{"role": r, "content": c} for r, c in turns])
    assert t.render(msgs) == (
        "<|im_start|>system\nbe brief<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\nhello<|im_end|>\n"
        "<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_conversation_puts_the_default_system_prompt_first_unless_one_is_given():
    turns = [{"role": "user", "content": "hi"}]
    assert conversation("S", turns) == [{"role": "system", "content": "S"}, *turns]
    assert conversation(None, turns) == turns and conversation("", turns) == turns
    own = [{"role": "system", "content": "mine"}, *turns]
    assert conversation("S", own) == own  # a request's own system message wins over -sys
    assert turns == [{"role": "user", "content": "hi"}]  # the caller's list is not changed


def test_custom_template_in_gguf(tmp_path):
    path = build_tiny_model(tmp_path / "hf.gguf", seed=TARGET_SEED, chat_template=HF_STYLE)
    info = read_gguf_info(path)
    t, _ = template_for(
        info.chat_template,
        bos_token=info.vocab.tokens[info.vocab.bos_id],
        eos_token=info.vocab.tokens[info.vocab.eos_id],
    )
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "a"},
        {"role": "tool", "content": "skipped"},
        {"role": "assistant", "content": "b", "meta": {"k": "é<>"}},
        {"role": "user", "content": "c"},
    ]
    assert t.render(msgs) == (
        '<|endoftext|>[SYS]S[/SYS]\n[INST]a[/INST]\nb<|im_end|>\n{"k": "é<>"}[INST]c[/INST]\n'
        "[ASSISTANT]"
    )
    with pytest.raises(ChatTemplateError, match="roles must alternate") as e:
        t.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert e.value.code == ExitCode.PROMPT


def test_bos_stripped_when_tokenizer_adds_it():
    src = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"
    keep = ChatTemplate.compile(src, "t", bos_token="<s>")
    strip = ChatTemplate.compile(src, "t", bos_token="<s>", strip_bos=True)
    assert keep.render(USER_HI) == "<s>hi"
    assert strip.render(USER_HI) == "hi"


def test_strftime_now_and_loop_break():
    t = ChatTemplate.compile(
        "{{ strftime_now('%Y') | length }}"
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.content }}"
        "{% endfor %}{% generation %}!{% endgeneration %}",
        "t",
    )
    assert t.render(USER_HI * 3) == "4hi!"


def test_chatml_fallback_with_warning():
    t, warning = template_for(None)
    assert "no chat template" in warning
    assert t.source == CHATML_TEMPLATE
    assert t.render(USER_HI) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_template_file_overrides_gguf(tmp_path):
    f = tmp_path / "t.jinja"
    f.write_text("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    t, warning = template_for(DEFAULT_TEMPLATE, template_file=f)
    assert warning is None
    assert t.render(USER_HI) == "<user>hi"
    with pytest.raises(UsageError, match="no such file"):
        template_for(DEFAULT_TEMPLATE, template_file=tmp_path / "missing.jinja")
    f.write_bytes(b"\xff\xfe")
    with pytest.raises(UsageError, match="not valid UTF-8"):
        template_for(DEFAULT_TEMPLATE, template_file=f)


def test_syntax_error_names_origin_and_line():
    with pytest.raises(ChatTemplateError, match=r"from gguf: line 2") as e:
        ChatTemplate.compile("ok\n{% for %}", "gguf", error_code=ExitCode.MODEL)
    assert e.value.code == ExitCode.MODEL
    with pytest.raises(ChatTemplateError) as e:
        template_for("{% if %}")
    assert e.value.code == ExitCode.MODEL
    assert "--chat-template-file" in str(e.value)


def test_sandbox_refuses_python_internals():
    t = ChatTemplate.compile("{{ messages.__class__.__mro__ }}", "evil")
    with pytest.raises(ChatTemplateError, match="unsafe"):
        t.render(USER_HI)
    t = ChatTemplate.compile("{{ messages.append(1) }}", "evil")
    with pytest.raises(ChatTemplateError):
        t.render(USER_HI)
    # a list the template made is its own to grow (Kimi K2 queues call ids so); the caller's
    # lists, nested ones too, stay as they are
    t = ChatTemplate.compile("{% set q = [] %}{{ q.append(1) or '' }}{{ q.pop(0) }}", "queue")
    assert t.render(USER_HI) == "1"
    for evil in ("{{ messages[0].content.append(1) }}", "{{ tools.pop() }}",
                 "{{ tools[0].function.required.append('x') }}"):  # fmt: skip
        with pytest.raises(ChatTemplateError):
            ChatTemplate.compile(evil, "evil").render(
                USER_HI, tools=[{"function": {"required": ["a"]}}]
            )


def test_a_missing_value_next_to_a_string_is_empty_as_llama_server_has_it():
    # GPT-OSS' template writes "// " + tool.description for tools that have none
    t = ChatTemplate.compile("{{ '// ' + tool.description + '|' + none_value }}", "t")
    assert t.render(USER_HI, tool={}, none_value=None) == "// |"
    with pytest.raises(ChatTemplateError):  # anything else with a missing value still fails
        ChatTemplate.compile("{{ tool.size + 1 }}", "t").render(USER_HI, tool={})


def test_template_runtime_errors_are_prompt_errors():
    t = ChatTemplate.compile("{{ messages[5].content + 1 }}", "t")
    with pytest.raises(ChatTemplateError) as e:
        t.render(USER_HI)
    assert e.value.code == ExitCode.PROMPT


@pytest.mark.parametrize(
    "messages, match",
    [
        ("hi", "must be a list"),
        ([], "empty"),
        (["hi"], r"messages\[0\] is not an object"),
        ([{"content": "x"}], r'"role" must be'),
        ([{"role": "user"}], r'"content" must be a string'),
        ([{"role": "user", "content": 3}], r'"content" must be a string'),
    ],
)
def test_validate_messages(messages, match):
    with pytest.raises(PromptError, match=match):
        validate_messages(messages)


def test_validate_messages_copies_and_keeps_extra_keys():
    src = [{"role": "assistant", "content": "", "tool_calls": [{"name": "f"}]}]
    out = validate_messages(src)
    assert out == src and out[0] is not src[0]


# -- OpenAI content parts ---------------------------------------------------------------------


def test_text_parts_are_joined_like_llama_server():
    parts = [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    out = validate_messages([{"role": "user", "content": parts, "name": "u"}])
    assert out == [{"role": "user", "content": "first\nsecond", "name": "u"}]
    assert validate_messages([{"role": "user", "content": []}])[0]["content"] == ""
    # every template sees a string: what it renders equals the plain-string message
    t = ChatTemplate.compile(CHATML_TEMPLATE, "test")
    plain = t.render([{"role": "user", "content": "first\nsecond"}])
    assert t.render([{"role": "user", "content": parts}]) == plain


@pytest.mark.parametrize(
    "part, match",
    [
        ({"type": "image_url", "image_url": {"url": "x"}}, r'content\[1\]: content part type '
         r'"image_url" is not supported \(only "text"'),
        ({"type": "input_audio"}, r'"input_audio" is not supported'),
        ({"text": "no type"}, r"content part type null is not supported"),
        ({"type": "text", "text": 5}, r'content\[1\]: "text" must be a string'),
        ("just a string", r"messages\[0\].content\[1\] is not an object"),
    ],
)
def test_non_text_parts_are_refused_in_one_line(part, match):
    with pytest.raises(PromptError, match=match) as e:
        validate_messages([{"role": "user", "content": [{"type": "text", "text": "a"}, part]}])
    assert "\n" not in str(e.value)


QWEN25 = (Path(__file__).parent / "data" / "qwen2.5-instruct.jinja").read_text()


def test_a_developer_message_reaches_a_template_that_knows_only_system():
    t = ChatTemplate.compile(QWEN25, "test")
    out = t.render([{"role": "developer", "content": "Answer in French."},
                    {"role": "user", "content": "hi"}])  # fmt: skip
    assert "<|im_start|>system\nAnswer in French.<|im_end|>" in out
    # a template that names the developer role itself gets it as it is
    knows = ChatTemplate.compile(
        "{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"
        "{% if false %}{{ 'developer' }}{% endif %}",
        "t",
    )
    assert knows.render([{"role": "developer", "content": "X"}]) == "developer:X;"
    # and it counts as the conversation's own system prompt: -sys does not add another
    msgs = [{"role": "developer", "content": "X"}]
    assert conversation("default", msgs) == msgs


def test_an_unknown_role_is_refused_by_name():
    with pytest.raises(PromptError, match='messages\\[1\\]: unknown role "wizard"'):
        validate_messages([{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}])

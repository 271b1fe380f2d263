"""`specgguf serve`'s chat flags on the tiny models: --chat-template given as a Jinja string,
--reasoning-effort and --no-reasoning-preserve reaching the template, --no-prefill-assistant
rendering a last assistant message whole, and --skip-chat-parsing returning the thinking in the
content; and, without a server, the prefill, the effort and preservation variables, the pure
content request, and the flags checked in one line before anything loads."""

from __future__ import annotations

import pytest

from specgguf.chat.render import RenderOptions, render_context, render_conversation
from specgguf.chat.template import ChatTemplate, ChatTemplateError
from tests.serve_helpers import FAST, serving

#: a template that shows what it was given
SHOWS = ("{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
         "{% if add_generation_prompt %}[assistant:{% endif %}"
         "effort={{ reasoning_effort }} preserve={{ preserve_thinking }}")  # fmt: skip
USER_THEN_ASSISTANT = [{"role": "user", "content": "Hi"},
                       {"role": "assistant", "content": "Sure,"}]  # fmt: skip


@pytest.fixture(scope="module")
def server(tiny_target, tiny_draft):
    args = ["-m", str(tiny_target), "-md", str(tiny_draft), *FAST, "--chat-template", SHOWS,
            "--reasoning-effort", "high", "--no-reasoning-preserve", "--skip-chat-parsing",
            "--no-prefill-assistant"]  # fmt: skip
    yield from serving(args)


def test_the_flags_reach_the_template(server) -> None:
    assert server.request("GET", "/props")[2]["chat_template"] == SHOWS
    prompt = server.post("/apply-template", {"messages": USER_THEN_ASSISTANT})["prompt"]
    # --no-prefill-assistant: the assistant's message is whole, and a new answer follows
    assert prompt == "[user:Hi][assistant:Sure,][assistant:effort=high preserve=False"


def test_skip_chat_parsing_returns_the_thinking_as_content(server) -> None:
    body = {"messages": USER_THEN_ASSISTANT[:1], "grammar": 'root ::= "<think>ab</think>cd"',
            "max_tokens": 40}  # fmt: skip
    message = server.post("/v1/chat/completions", body)["choices"][0]["message"]
    assert message["content"] == "<think>ab</think>cd" and "reasoning_content" not in message


def test_parse_chat_reads_nothing_of_a_pure_content_answer() -> None:
    from specgguf.server import protocol as p

    body = {"messages": USER_THEN_ASSISTANT[:1], "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}
    assert p.parse_chat(body).splitter() is not None and p.parse_chat(body).call_dialect()
    pure = p.parse_chat(body, pure_content=True)
    assert pure.splitter() is None and pure.call_dialect() is None


def test_a_last_assistant_message_is_continued_with_prefill() -> None:
    template = ChatTemplate.compile(SHOWS, "t")
    prefill = RenderOptions(prefill_assistant=True)
    text = render_conversation(template, USER_THEN_ASSISTANT, options=prefill)
    assert text == "[user:Hi][assistant:effort= preserve=Sure,"
    whole = RenderOptions(prefill_assistant=False)
    assert render_conversation(template, USER_THEN_ASSISTANT, options=whole).startswith(
        "[user:Hi][assistant:Sure,][assistant:")
    for bad in ([*USER_THEN_ASSISTANT, {"role": "assistant", "content": "x"}],
                [USER_THEN_ASSISTANT[0], {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "1", "type": "function",
                     "function": {"name": "f", "arguments": "{}"}}]}]):  # fmt: skip
        with pytest.raises(ChatTemplateError, match="continued"):
            render_conversation(template, bad, options=prefill)


def test_effort_and_preservation_variables() -> None:
    ctx = render_context(RenderOptions(reasoning_effort="high",
                                       kwargs={"preserve_reasoning": False}))  # fmt: skip
    assert ctx["reasoning_effort"] == ctx["reasoning_strength"] == "high"
    assert not ctx["preserve_thinking"] and ctx["clear_thinking"] and ctx["drop_thinking"]
    assert render_context(RenderOptions(kwargs={"preserve_reasoning": True}))["preserve_thinking"]


def test_serve_chat_defaults_are_checked_and_set() -> None:
    from specgguf_cli.serve_cmd import ChatDefaults, template_kwargs_option

    from specgguf.errors import UsageError

    opts = template_kwargs_option('{"preserve_reasoning": false}', "auto", "auto",
                                  ChatDefaults("low", None, False))  # fmt: skip
    assert opts.reasoning_effort == "low" and not opts.prefill_assistant
    assert template_kwargs_option(None).prefill_assistant  # serve's default: on
    assert opts.kwargs["preserve_reasoning"] is False  # the kwargs' own, the flag not given
    flag = template_kwargs_option('{"preserve_reasoning": false}', chat=ChatDefaults(
        reasoning_preserve=True))
    assert flag.kwargs["preserve_reasoning"] is True and flag.reasoning_effort is None
    with pytest.raises(UsageError, match="--reasoning-effort"):
        template_kwargs_option(None, chat=ChatDefaults("extreme"))


@pytest.mark.parametrize("command", ["run", "serve"])
def test_chat_template_is_checked_before_loading(command, capsys) -> None:
    from specgguf_cli.app import run_cli

    base = [command, "-m", "/nonexistent.gguf"] + (["-p", "x"] if command == "run" else [])
    for value, words in (("chatml2", "neither a Jinja template nor"),
                         ("granite", "not bundled"), ("{{ x }", "unexpected")):  # fmt: skip
        assert run_cli([*base, "--chat-template", value]) == 1
        err = capsys.readouterr().err.strip()
        assert words in err and "\n" not in err
    assert run_cli([*base, "--chat-template", "llama3"]) != 0
    assert "no such file" in capsys.readouterr().err  # past the template: at the model

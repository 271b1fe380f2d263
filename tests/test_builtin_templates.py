"""--chat-template NAME: each bundled Jinja template lays a conversation out exactly as
llama.cpp's own C++ formatter of that name does (asked through the bindings'
llama_chat_apply_template), the names are llama.cpp's, and a value is told apart as a
template, a name, or neither (one line)."""

from __future__ import annotations

import ctypes

import pytest

from specgguf.chat.builtin_templates import BUILTIN_TEMPLATES, LLAMA_CPP_NAMES, resolve
from specgguf.chat.render import RenderOptions, render_conversation
from specgguf.chat.template import ChatTemplate
from specgguf.errors import UsageError

llama_cpp = pytest.importorskip("llama_cpp")

CONVERSATIONS = (
    [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": " Hi\n"},
     {"role": "assistant", "content": " Hello! "}, {"role": "user", "content": "Why?"}],
    [{"role": "user", "content": "One"}],
)  # fmt: skip


def _llama_cpp_renders(name: str, messages: list[dict], add_assistant: bool) -> str:
    chat = (llama_cpp.llama_chat_message * len(messages))()
    keep = []  # the bytes the structs point into
    for i, m in enumerate(messages):
        role, content = m["role"].encode(), m["content"].encode()
        keep += [role, content]
        chat[i].role, chat[i].content = role, content
    buf = ctypes.create_string_buffer(1 << 16)
    n = llama_cpp.llama_chat_apply_template(name.encode(), chat, len(messages), add_assistant,
                                            buf, len(buf))  # fmt: skip
    assert 0 <= n < len(buf), name
    return buf.raw[:n].decode()


@pytest.mark.parametrize("name", sorted(BUILTIN_TEMPLATES))
def test_bundled_template_renders_as_llama_cpps_formatter(name: str) -> None:
    template = ChatTemplate.compile(BUILTIN_TEMPLATES[name], name)
    for messages in CONVERSATIONS:
        for add in (True, False):
            want = _llama_cpp_renders(name, messages, add)
            assert template.render(messages, add_generation_prompt=add) == want


def test_names_are_llama_cpps_built_in_list() -> None:
    names = (ctypes.c_char_p * 256)()
    n = llama_cpp.llama_chat_builtin_templates(names, 256)
    assert set(LLAMA_CPP_NAMES) == {names[i].decode() for i in range(n)}
    assert set(BUILTIN_TEMPLATES) <= set(LLAMA_CPP_NAMES)


def test_a_value_is_a_template_or_a_name() -> None:
    src, origin = resolve("{{ messages[0].content }}")
    assert src == "{{ messages[0].content }}" and "Jinja" in origin
    src, origin = resolve("llama3")
    assert src == BUILTIN_TEMPLATES["llama3"] and "llama3" in origin
    with pytest.raises(UsageError, match="not bundled"):
        resolve("granite")
    with pytest.raises(UsageError, match="neither a Jinja template nor"):
        resolve("chatml2")


def test_a_named_template_takes_the_chat_path() -> None:
    """Rendered by render_conversation like any template: a last assistant message is
    continued (the prefill), the system prompt kept."""
    template = ChatTemplate.compile(BUILTIN_TEMPLATES["llama3"], "llama3")
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Sure,"}]
    text = render_conversation(template, msgs, options=RenderOptions(prefill_assistant=True))
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\nSure,")

"""llama.cpp's built-in chat templates, by name (`--chat-template chatml`), as Jinja.

llama.cpp knows a set of chat formats by name and writes them in C++. A name given here is
rendered by a small Jinja template written for specgguf that lays the conversation out the
same way, so that a named template goes through the same path as every other: the sandboxed
renderer, the dialect detection, tools, thinking and the template kwargs. The names bundled
are the common ones (BUILTIN_TEMPLATES); the rest of llama.cpp's list (LLAMA_CPP_NAMES) is
refused in one line that says to pass the model's Jinja with --chat-template-file.

`resolve` tells a name from a template: a value with a Jinja tag (`{{`, `{%`) is a template;
any other value is a name, and an unknown one is refused (a word without tags would render
as itself, whatever the messages).

Pure: no model, no llama_cpp."""

from __future__ import annotations

from specgguf.chat.template import CHATML_TEMPLATE
from specgguf.errors import UsageError

#: every name llama.cpp's --chat-template takes (its built-in list, in its order)
LLAMA_CPP_NAMES = (
    "chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1",
    "mistral-v3", "mistral-v3-tekken", "mistral-v7", "mistral-v7-tekken", "phi3", "phi4",
    "falcon3", "zephyr", "monarch", "gemma", "orion", "openchat", "vicuna", "vicuna-orca",
    "deepseek", "deepseek2", "deepseek3", "deepseek-ocr", "command-r", "llama3", "chatglm3",
    "chatglm4", "glmedge", "minicpm", "exaone3", "exaone4", "exaone-moe", "rwkv-world",
    "granite", "granite-4.0", "granite-4.1", "gigachat", "megrez", "yandex", "bailing",
    "bailing-think", "bailing2", "llama4", "smolvlm", "hunyuan-moe", "gpt-oss",
    "hunyuan-dense", "hunyuan-vl", "kimi-k2", "seed_oss", "grok-2", "pangu-embedded",
    "solar-open",
)  # fmt: skip

_CONTENT = "{%- set c = message.content or '' -%}"


def _turns(system: str, user: str, assistant: str, other: str | None = None,
           generation: str = "") -> str:  # fmt: skip
    """A template writing each message by its role (Jinja expressions over `c`, the
    content, and `message.role`); `other` roles are written as `assistant` unless given
    ("''": left out); `generation` opens the answer."""
    other = assistant if other is None else other
    return (
        "{%- for message in messages -%}" + _CONTENT
        + "{%- if message.role == 'system' -%}{{- " + system + " -}}"
        + "{%- elif message.role == 'user' -%}{{- " + user + " -}}"
        + "{%- elif message.role == 'assistant' -%}{{- " + assistant + " -}}"
        + "{%- else -%}{{- " + other + " -}}{%- endif -%}{%- endfor -%}"
        + ("{%- if add_generation_prompt -%}{{- " + generation + " -}}{%- endif -%}"
           if generation else "")
    )  # fmt: skip


def _same_for_every_role(turn: str, generation: str) -> str:
    return _turns(turn, turn, turn, generation=generation)


def _llama2(system: str, reopen: str, content: str = "c") -> str:
    """Llama 2's [INST] turns: the first is open from the start; an answer closes one, and
    the next message opens another (`reopen`)."""
    return (
        "{%- set ns = namespace(open=true) -%}{{- '[INST] ' -}}"
        "{%- for message in messages -%}" + _CONTENT
        + "{%- set c = " + content + " -%}"
        "{%- if not ns.open -%}{%- set ns.open = true -%}{{- " + reopen + " -}}{%- endif -%}"
        "{%- if message.role == 'system' -%}{{- " + system + " -}}"
        "{%- elif message.role == 'user' -%}{{- c ~ ' [/INST]' -}}"
        "{%- else -%}{{- c ~ '</s>' -}}{%- set ns.open = false -%}{%- endif -%}"
        "{%- endfor -%}"
    )


def _mistral(lead: str, trail: str, answer: str) -> str:
    """Mistral's v1/v3 layouts: a system message joins the open [INST] turn."""
    return (
        "{%- set ns = namespace(open=false) -%}{%- for message in messages -%}" + _CONTENT
        + "{%- if not ns.open -%}{%- set ns.open = true -%}"
        f"{{{{- '{lead}[INST]{trail}' -}}}}{{%- endif -%}}"
        "{%- if message.role == 'system' -%}{{- c ~ '\\n\\n' -}}"
        f"{{%- elif message.role == 'user' -%}}{{{{- c ~ '{lead}[/INST]' -}}}}"
        f"{{%- else -%}}{{{{- '{trail}' ~ {answer} ~ '</s>' -}}}}{{%- set ns.open = false -%}}"
        "{%- endif -%}{%- endfor -%}"
    )


def _mistral_v7(space: str) -> str:
    return _turns(f"'[SYSTEM_PROMPT]{space}' ~ c ~ '[/SYSTEM_PROMPT]'",
                  f"'[INST]{space}' ~ c ~ '[/INST]'", f"'{space}' ~ c ~ '</s>'")  # fmt: skip


#: Gemma has no system turn: the system text goes before the next user turn's
_GEMMA = (
    "{%- set ns = namespace(system='') -%}{%- for message in messages -%}" + _CONTENT
    + "{%- if message.role == 'system' -%}{%- set ns.system = ns.system ~ (c | trim) -%}"
    "{%- else -%}{%- set role = 'model' if message.role == 'assistant' else message.role -%}"
    "{{- '<start_of_turn>' ~ role ~ '\\n' -}}"
    "{%- if ns.system and role != 'model' -%}{{- ns.system ~ '\\n\\n' -}}"
    "{%- set ns.system = '' -%}{%- endif -%}"
    "{{- (c | trim) ~ '<end_of_turn>\\n' -}}{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"
)

_COHERE = "'<|START_OF_TURN_TOKEN|><|{}_TOKEN|>' ~ (c | trim) ~ '<|END_OF_TURN_TOKEN|>'"
_DEEPSEEK_END = "<｜end▁of▁sentence｜>"

#: the names bundled here, each as its Jinja
BUILTIN_TEMPLATES: dict[str, str] = {
    "chatml": CHATML_TEMPLATE,
    "llama2": _llama2("c ~ '\\n'", "'[INST] '"),
    "llama2-sys": _llama2("'<<SYS>>\\n' ~ c ~ '\\n<</SYS>>\\n\\n'", "'[INST] '"),
    "llama2-sys-bos": _llama2("'<<SYS>>\\n' ~ c ~ '\\n<</SYS>>\\n\\n'", "'<s>[INST] '"),
    "llama2-sys-strip": _llama2("'<<SYS>>\\n' ~ c ~ '\\n<</SYS>>\\n\\n'", "'[INST] '",
                                "c | trim"),  # fmt: skip
    "mistral-v1": _mistral(" ", " ", "c"),
    "mistral-v3": _mistral("", " ", "(c | trim)"),
    "mistral-v3-tekken": _mistral("", "", "c"),
    "mistral-v7": _mistral_v7(" "),
    "mistral-v7-tekken": _mistral_v7(""),
    "phi3": _same_for_every_role("'<|' ~ message.role ~ '|>\\n' ~ c ~ '<|end|>\\n'",
                                 "'<|assistant|>\\n'"),  # fmt: skip
    "phi4": _same_for_every_role("'<|im_start|>' ~ message.role ~ '<|im_sep|>' ~ c ~ '<|im_end|>'",  # noqa: E501
                                 "'<|im_start|>assistant<|im_sep|>'"),  # fmt: skip
    "falcon3": _same_for_every_role("'<|' ~ message.role ~ '|>\\n' ~ c ~ '\\n'",
                                    "'<|assistant|>\\n'"),  # fmt: skip
    "zephyr": _same_for_every_role("'<|' ~ message.role ~ '|>\\n' ~ c ~ '<|endoftext|>\\n'",
                                   "'<|assistant|>\\n'"),  # fmt: skip
    "gemma": _GEMMA,
    "openchat": _turns("c ~ '<|end_of_turn|>'",
                       "'GPT4 Correct User: ' ~ c ~ '<|end_of_turn|>'",
                       "'GPT4 Correct Assistant: ' ~ c ~ '<|end_of_turn|>'",
                       "'GPT4 Correct ' ~ (message.role[:1] | upper) ~ message.role[1:] ~ ': ' ~ c ~ '<|end_of_turn|>'",  # noqa: E501
                       "'GPT4 Correct Assistant:'"),  # fmt: skip
    "vicuna": _turns("c ~ '\\n\\n'", "'USER: ' ~ c ~ '\\n'", "'ASSISTANT: ' ~ c ~ '</s>\\n'",
                     "''", "'ASSISTANT:'"),  # fmt: skip
    "vicuna-orca": _turns("'SYSTEM: ' ~ c ~ '\\n'", "'USER: ' ~ c ~ '\\n'",
                          "'ASSISTANT: ' ~ c ~ '</s>\\n'", "''", "'ASSISTANT:'"),  # fmt: skip
    "deepseek": _turns("c", "'### Instruction:\\n' ~ c ~ '\\n'",
                       "'### Response:\\n' ~ c ~ '\\n<|EOT|>\\n'", "''",
                       "'### Response:\\n'"),  # fmt: skip
    "deepseek2": _turns("c ~ '\\n\\n'", "'User: ' ~ c ~ '\\n\\n'",
                        f"'Assistant: ' ~ c ~ '{_DEEPSEEK_END}'", "''",
                        "'Assistant:'"),  # fmt: skip
    "deepseek3": _turns("c ~ '\\n\\n'", "'<｜User｜>' ~ c",
                        f"'<｜Assistant｜>' ~ c ~ '{_DEEPSEEK_END}'", "''",
                        "'<｜Assistant｜>'"),  # fmt: skip
    "command-r": _turns(_COHERE.format("SYSTEM"), _COHERE.format("USER"),
                        _COHERE.format("CHATBOT"), "''",
                        "'<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>'"),  # fmt: skip
    "llama3": _same_for_every_role(
        "'<|start_header_id|>' ~ message.role ~ '<|end_header_id|>\\n\\n' ~ (c | trim) ~ '<|eot_id|>'",  # noqa: E501
        "'<|start_header_id|>assistant<|end_header_id|>\\n\\n'",
    ),
}

#: the tags that make a --chat-template value a Jinja template rather than a name
_JINJA_TAGS = ("{{", "{%", "{#")


def resolve(value: str, flag: str = "--chat-template") -> tuple[str, str]:
    """(Jinja source, origin for messages) for a --chat-template value: a template as given,
    or a built-in name's bundled template; anything else is one UsageError line."""
    if any(tag in value for tag in _JINJA_TAGS):
        return value, f"{flag} (a Jinja template)"
    name = value.strip()
    if name in BUILTIN_TEMPLATES:
        return BUILTIN_TEMPLATES[name], f"{flag} {name} (built-in)"
    if name in LLAMA_CPP_NAMES:
        raise UsageError(
            f"{flag} {name}: this built-in template is not bundled with specgguf: pass the "
            f"model's Jinja template with --chat-template-file (bundled: {names()})"
        )
    raise UsageError(
        f"{flag}: {name[:40]!r} is neither a Jinja template nor a built-in template name "
        f"(one of: {names()})"
    )


def names() -> str:
    return ", ".join(BUILTIN_TEMPLATES)

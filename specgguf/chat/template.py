"""Chat templates: messages -> one prompt string, the way Hugging Face `transformers` renders them.

The template is the Jinja source stored in the target GGUF (`tokenizer.chat_template`) or given
with --chat-template-file. It is untrusted input (it came with a downloaded file), so it runs in
Jinja's ImmutableSandboxedEnvironment: no attribute access to Python internals, no mutation of
the messages. The environment mirrors transformers' `_compile_jinja_template`: trim_blocks and
lstrip_blocks, the loop-controls extension ({% break %}, {% continue %}), a `{% generation %}`
block (rendered as-is), `raise_exception`, `strftime_now`, and a `tojson` that keeps non-ASCII
characters and does not HTML-escape (Jinja's own would turn "<" into "\\u003c").

The sandbox stops a template from reaching Python internals, not from spending: rendering runs
in specgguf.chat.template_bounds' BoundedSandbox, which bounds steps, time, the size of every value
and of the output (16 characters per token of the context), call depth and range(); any
failure is one ChatTemplateError line (exit 5; compile failures take the origin's code).

Like llama.cpp (common/chat.cpp), a rendered prompt that starts with the BOS text has it removed
when the tokenizer adds BOS itself, so the model never sees two. A model without a template
falls back to ChatML, as llama.cpp does.

Pure: no llama_cpp import; the caller tokenizes the result.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from specgguf.chat.template_bounds import TemplateBoundsError, TemplateLimits, given
from specgguf.errors import ExitCode, PromptError, SpecggufError, read_user_text

#: The largest template compiled. Compiling costs far more than rendering (measured here: a
#: 64k-item list literal took 22 s and 400 MB to compile), so the source is lexed first and
#: refused past these; the largest of 70 real templates has 17 KB and 3770 tokens.
MAX_TEMPLATE_CHARS = 256 * 1024
MAX_TEMPLATE_TOKENS = 20_000

#: llama.cpp's fallback (CHATML_TEMPLATE_SRC) for models without tokenizer.chat_template.
CHATML_TEMPLATE = (
    "{%- for message in messages -%}\n"
    "  {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{- '<|im_start|>assistant\\n' -}}\n"
    "{%- endif -%}"
)


class ChatTemplateError(SpecggufError):
    """A template that does not compile (code given by where it came from), or one that refused
    the conversation while rendering (raise_exception: a PROMPT error)."""


def _tojson(x: Any, ensure_ascii: bool = False, indent=None, separators=None, sort_keys=False):
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_exception(message: str):
    from jinja2.exceptions import TemplateError

    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=1)
def generation_block() -> type:
    """The Jinja extension for transformers' `{% generation %}...{% endgeneration %}` (it marks
    assistant text for training masks); for rendering, the body is output unchanged. Built on
    first use: jinja2 is imported only when a template is."""
    from jinja2 import nodes
    from jinja2.ext import Extension

    class GenerationBlock(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body).set_lineno(lineno)

    return GenerationBlock


def _environment(limits: TemplateLimits):
    from specgguf.chat.template_bounds import BoundedSandbox

    env = BoundedSandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols", generation_block()],
        keep_trailing_newline=False,
        limits=limits,
    )
    env.add_filter("tojson", _tojson)
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _one_line(e: BaseException, limit: int = 300) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class ChatTemplate:
    """A compiled chat template plus the special-token texts it may refer to."""

    source: str
    origin: str  # for messages: "the target GGUF", "--chat-template-file X", "ChatML (fallback)"
    bos_token: str = ""
    eos_token: str = ""
    strip_bos: bool = False  # the tokenizer adds BOS itself: drop a leading bos_token
    #: time, size and depth bounds of rendering (the size cap follows the context: -c)
    limits: TemplateLimits = field(default_factory=TemplateLimits)
    _compiled: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def compile(
        cls,
        source: str,
        origin: str,
        *,
        bos_token: str = "",
        eos_token: str = "",
        strip_bos: bool = False,
        error_code: ExitCode = ExitCode.USAGE,
        limits: TemplateLimits | None = None,
    ) -> ChatTemplate:
        """Compile `source`; a template that cannot be compiled (syntax, nesting too deep for
        the parser or for Python, too long) is one ChatTemplateError line with `error_code`."""
        from jinja2.exceptions import TemplateSyntaxError

        limits = limits or TemplateLimits()
        if len(source) > MAX_TEMPLATE_CHARS:
            raise ChatTemplateError(
                f"chat template from {origin}: {len(source)} characters, more than the "
                f"{MAX_TEMPLATE_CHARS} accepted",
                error_code,
            )
        try:
            env = _environment(limits)
            for n, _ in enumerate(env.lex(source)):
                if n >= MAX_TEMPLATE_TOKENS:
                    raise ChatTemplateError(
                        f"chat template from {origin}: more than {MAX_TEMPLATE_TOKENS} "
                        "tokens, too large to compile",
                        error_code,
                    )
            compiled = env.from_string(source)
        except ChatTemplateError:
            raise
        except TemplateSyntaxError as e:
            raise ChatTemplateError(
                f"chat template from {origin}: line {e.lineno}: {e.message}", error_code
            ) from None
        except RecursionError:
            raise ChatTemplateError(
                f"chat template from {origin}: nested too deeply to compile", error_code
            ) from None
        except (MemoryError, TemplateBoundsError, Exception) as e:  # untrusted input: anything
            raise ChatTemplateError(
                f"chat template from {origin}: cannot be compiled: {type(e).__name__}: "
                f"{_one_line(e)}",
                error_code,
            ) from None
        return cls(source, origin, bos_token, eos_token, strip_bos, limits, compiled)

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        **extra: Any,
    ) -> str:
        """The prompt text for `messages` (validated first); template failures become one
        PromptError-coded line."""
        from jinja2.exceptions import TemplateError

        msgs = system_for_developer(validate_messages(messages), self.source)
        limits = self.limits
        env = self._compiled.environment
        where = f"chat template from {self.origin}"
        env.begin(limits)
        t0 = time.monotonic()
        try:
            parts: list[str] = []
            size = 0
            # generate(): the top-level output arrives piece by piece and is stopped as soon
            # as it passes the cap, instead of being joined first
            for chunk in self._compiled.generate(
                messages=given(msgs),
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **{k: given(v) for k, v in extra.items()},
            ):
                size += len(chunk)
                if size > limits.max_chars:
                    raise TemplateBoundsError(
                        f"the rendered prompt is longer than {limits.describe_chars()}"
                    )
                parts.append(chunk)
            text = "".join(parts)
        except TemplateBoundsError as e:
            raise ChatTemplateError(f"{where}: stopped: {e}", ExitCode.PROMPT) from None
        except TemplateError as e:
            raise ChatTemplateError(
                f"{where}: {_one_line(e) or type(e).__name__}", ExitCode.PROMPT
            ) from None
        except RecursionError:
            raise ChatTemplateError(
                f"{where}: stopped: recursion too deep (after {time.monotonic() - t0:.1f} s)",
                ExitCode.PROMPT,
            ) from None
        except MemoryError:
            raise ChatTemplateError(f"{where}: stopped: out of memory", ExitCode.PROMPT) from None
        except Exception as e:  # untrusted code: a template indexing past the messages, 1/0...
            raise ChatTemplateError(
                f"{where} failed: {type(e).__name__}: {_one_line(e)}", ExitCode.PROMPT
            ) from None
        finally:
            env.end()
        if self.strip_bos and self.bos_token and text.startswith(self.bos_token):
            text = text[len(self.bos_token) :]
        return text


#: the roles OpenAI's chat API knows; any other is refused by name rather than left for a
#: template to skip without a word ("function" is the API's older name for "tool")
ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def system_for_developer(msgs: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """OpenAI's newer clients send their instructions as `developer`; most templates know only
    `system` and would skip the message without a word, so it is renamed to `system` unless
    the template compares a role with the string 'developer' itself (GPT-OSS, Gemma 4 do)."""
    if "'developer'" in source or '"developer"' in source:
        return msgs
    return [{**m, "role": "system"} if m["role"] == "developer" else m for m in msgs]


def validate_messages(messages: Any) -> list[dict[str, Any]]:
    """A non-empty list of {"role": str, "content": str, ...}; copies, so a template cannot
    see (or keep) the caller's objects. Extra keys (name, tool_calls, ...) pass through. A
    role outside ROLES is refused by name (a template would drop it unseen).

    `content` may also be OpenAI's list of parts, [{"type": "text", "text": "..."}, ...]: the
    text parts are joined with newlines (as llama.cpp's server does for templates that want a
    string), so every template sees a string. Images, audio and other parts are refused: these
    models read text only."""
    if not isinstance(messages, list | tuple):
        raise PromptError('"messages" must be a list of {"role": ..., "content": ...} objects')
    if not messages:
        raise PromptError('"messages" is empty')
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise PromptError(f"messages[{i}] is not an object")
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise PromptError(f'messages[{i}]: "role" must be a non-empty string')
        if role not in ROLES:
            shown = json.dumps(role, ensure_ascii=False)[:40]
            raise PromptError(f'messages[{i}]: unknown role {shown} (one of {", ".join(ROLES)})')
        content = m.get("content")
        if isinstance(content, list):
            content = _join_text_parts(content, i)
        elif not isinstance(content, str):
            raise PromptError(
                f'messages[{i}]: "content" must be a string or a list of text parts'
            )
        out.append({**m, "content": content})
    return out


def _join_text_parts(parts: list[Any], i: int) -> str:
    """OpenAI's content parts -> one string; anything but {"type": "text", "text": str} is one
    clear PromptError line."""
    texts: list[str] = []
    for j, part in enumerate(parts):
        where = f"messages[{i}].content[{j}]"
        if not isinstance(part, Mapping):
            raise PromptError(f'{where} is not an object (expected {{"type": "text", ...}})')
        kind = part.get("type")
        if kind != "text":
            shown = json.dumps(kind, ensure_ascii=False, default=str)[:40]
            raise PromptError(
                f'{where}: content part type {shown} is not supported (only "text": '
                "these models read text)"
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise PromptError(f'{where}: "text" must be a string')
        texts.append(text)
    return "\n".join(texts)


def conversation(
    system_prompt: str | None, messages: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The message list a chat template renders: the default system prompt (-sys) first,
    unless the messages bring a system (or developer) message of their own, then the messages.

    The one place this is decided (Generator.chat_prompt calls it for `run --chat`, -cnv,
    --jsonl and every server endpoint), so that -sys means the same everywhere."""
    msgs = list(messages)
    if system_prompt and not any(
        isinstance(m, Mapping) and m.get("role") in ("system", "developer") for m in msgs
    ):
        msgs.insert(0, {"role": "system", "content": system_prompt})
    return msgs


def read_template_file(path: Path) -> str:
    return read_user_text(path, "--chat-template-file")


def template_for(
    gguf_template: str | None,
    *,
    template_file: Path | None = None,
    bos_token: str = "",
    eos_token: str = "",
    add_bos: bool = False,
    limits: TemplateLimits | None = None,
) -> tuple[ChatTemplate, str | None]:
    """The template to use: --chat-template-file, else the GGUF's, else ChatML.

    Returns (template, warning); the warning is set when falling back to ChatML.
    """
    kw = dict(bos_token=bos_token, eos_token=eos_token, strip_bos=add_bos, limits=limits)
    if template_file is not None:
        src = read_template_file(template_file)
        return ChatTemplate.compile(src, f"--chat-template-file {template_file}", **kw), None
    if gguf_template:
        return (
            ChatTemplate.compile(
                gguf_template,
                "the target GGUF (tokenizer.chat_template; override with --chat-template-file)",
                error_code=ExitCode.MODEL,
                **kw,
            ),
            None,
        )
    warning = (
        "the target GGUF has no chat template (tokenizer.chat_template): using ChatML, "
        "as llama.cpp does; pass --chat-template-file to use another"
    )
    return ChatTemplate.compile(CHATML_TEMPLATE, "ChatML (fallback)", **kw), warning

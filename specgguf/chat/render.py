"""A conversation rendered the way llama-server renders it: what the template is given besides
the messages, and the workarounds that let every template render every conversation.

Given: `tools` whenever the request has them (and, for a template that never reads `tools`,
their description as a system message, so the model knows them either way); `enable_thinking`;
today's date as `date_string` ("03 Dec 2026") and `datetime` ("Dec 03 2026"), besides the
`strftime_now` every template has; `reasoning_effort` when asked; and the chat template kwargs
(`serve --chat-template-kwargs`, then the request's `chat_template_kwargs` on top), which may
set any of these. Workarounds: an earlier call's `arguments` (a JSON string in OpenAI's API)
reach the template as an object, unless the template fails on objects (Functionary v3.2 adds
them to strings): it then gets the strings; and a template that refuses a system message (it
raises) gets it merged into the first user turn instead. A family whose template reads the
thinking switch under another name (DeepSeek V3.1: `thinking`) gets it under that name too,
and one whose template reads an earlier turn's reasoning under its own key (GPT-OSS:
`thinking`) gets the turn's `reasoning_content` there.

Pure: no model, no llama_cpp."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from specgguf.chat.tools import template_messages

if TYPE_CHECKING:  # jinja2 is imported only when a template is
    from specgguf.chat.dialects.base import Dialect
    from specgguf.chat.template import ChatTemplate

#: reasoning_effort values OpenAI's API takes; "none" turns thinking off, as llama-server does
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high")
#: serve --reasoning-effort: "default" (the template's own) or a level; llama.cpp's help also
#: names xhigh and max, which some templates know
REASONING_EFFORT_LEVELS = ("default", *REASONING_EFFORTS, "xhigh", "max")
#: the variables the reasoning-preserving templates read, each true when earlier turns keep
#: their reasoning (the template kwarg `preserve_reasoning`, serve --reasoning-preserve)
_PRESERVE_VARS = {"preserve_thinking": True, "clear_thinking": False,
                  "truncate_history_thinking": False, "drop_thinking": False}  # fmt: skip


@dataclass(frozen=True)
class RenderOptions:
    """What a request (or the server's defaults) adds to its messages."""

    enable_thinking: bool = True
    reasoning_effort: str | None = None
    #: chat template kwargs: the server's default and the request's, merged (the request wins)
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: a last assistant message is the start of the answer, continued (serve
    #: --prefill-assistant, on there by default); False: a whole message, and a new answer
    #: follows (what `run`'s conversations, which end with a user turn, never meet)
    prefill_assistant: bool = False

    def merged(
        self, request_kwargs: Mapping[str, Any] | None, reasoning_effort: str | None = None
    ) -> RenderOptions:
        """These options with a request's kwargs over the server's, and its reasoning_effort
        (when it gives one)."""
        return RenderOptions(
            self.enable_thinking,
            reasoning_effort or self.reasoning_effort,
            {**self.kwargs, **(request_kwargs or {})},
            self.prefill_assistant,
        )

    def thinking(self) -> bool:
        """Whether the model is asked to think: the kwargs' `enable_thinking` wins, then a
        reasoning_effort of "none" (off), then the option."""
        if "enable_thinking" in self.kwargs:
            return bool(self.kwargs["enable_thinking"])
        if self.reasoning_effort == "none":
            return False
        return self.enable_thinking


def render_context(options: RenderOptions, now: datetime | None = None) -> dict[str, Any]:
    """The variables a template gets besides messages, tools and the special tokens."""
    now = now or datetime.now()
    ctx: dict[str, Any] = {
        "date_string": now.strftime("%d %b %Y"),
        "datetime": now.strftime("%b %d %Y"),
    }
    if options.reasoning_effort not in (None, "none"):
        # the name most templates read, and the one some others do
        ctx["reasoning_effort"] = ctx["reasoning_strength"] = options.reasoning_effort
    ctx.update(options.kwargs)
    preserve = options.kwargs.get("preserve_reasoning")
    if isinstance(preserve, bool):
        ctx.update({name: on == preserve for name, on in _PRESERVE_VARS.items()})
    ctx["enable_thinking"] = options.thinking()
    return ctx


def render_conversation(
    template: ChatTemplate,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    options: RenderOptions | None = None,
    *,
    now: datetime | None = None,
    describe: Callable[[Sequence[Mapping[str, Any]]], str] | None = None,
    variables: Mapping[str, Any] | None = None,
) -> str:
    """The prompt for `messages` (and `tools`), with the context and workarounds above;
    `describe` writes the tools' system message for a template that does not render them,
    and `variables` are what the family's template reads besides (None, both: the family's
    own, specgguf.chat.dialects); the chat template kwargs go over them. With
    `options.prefill_assistant`, a last assistant message is the answer's beginning: the
    messages before it are rendered for a new answer, and its content follows."""
    from specgguf.chat.dialects import detect
    from specgguf.chat.template import validate_messages

    options = options or RenderOptions()
    family = detect(template.source)
    describe = describe or family.describe
    if variables is None:
        variables = family.variables(tools or [])
    extra = {**variables, **render_context(options, now)}
    for name in family.thinking_vars:  # the family's own name for the switch
        extra.setdefault(name, extra["enable_thinking"])
    given = validate_messages(messages)
    prefill = ""
    if options.prefill_assistant and given and given[-1].get("role") == "assistant":
        prefill, given = _prefilled(given), given[:-1]
    return _render(template, family, given, tools, extra, describe) + prefill


def _prefilled(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text the last (assistant) message starts the answer with; two assistant messages
    at the end, or a last one with tool calls, cannot be continued: one PROMPT error line."""
    from specgguf.chat.template import ChatTemplateError
    from specgguf.errors import ExitCode

    if len(messages) > 1 and messages[-2].get("role") == "assistant":
        raise ChatTemplateError("two assistant messages end the conversation: the last one "
                                "is continued (--prefill-assistant), so it must follow another "
                                "role's", ExitCode.PROMPT)  # fmt: skip
    if messages[-1].get("tool_calls"):
        raise ChatTemplateError("a last assistant message with tool_calls cannot be continued "
                                "(--prefill-assistant): add the tool results after it",
                                ExitCode.PROMPT)  # fmt: skip
    content = messages[-1].get("content") or ""
    return content if isinstance(content, str) else ""


def _render(
    template: ChatTemplate,
    family: Dialect,
    given: list[dict[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    extra: dict[str, Any],
    describe: Callable[[Sequence[Mapping[str, Any]]], str],
) -> str:
    """The template over `given`; past calls' arguments as objects, then (where the template
    fails on those) as OpenAI's strings; each with the system text merged into the first
    user turn where the template refuses a system role."""
    from specgguf.chat.template import ChatTemplateError

    if tools:
        extra["tools"] = list(tools)
        if "tools" not in template.source:
            given = _with_system(given, describe(tools))
    tries = [family.past_turns(template_messages(given))]
    if any(m.get("tool_calls") for m in given):
        tries.append(family.past_turns(given))  # the arguments as OpenAI's strings
    first: ChatTemplateError | None = None
    for msgs in tries:
        for attempt in (msgs, _system_into_first_user(msgs)):
            if attempt is None:
                continue
            try:
                return template.render(attempt, add_generation_prompt=True, **extra)
            except ChatTemplateError as e:
                first = first or e
    assert first is not None
    raise first


def _with_system(msgs: list[dict[str, Any]], about: str) -> list[dict[str, Any]]:
    if msgs and msgs[0].get("role") == "system":
        return [{**msgs[0], "content": f"{msgs[0]['content']}\n\n{about}"}, *msgs[1:]]
    return [{"role": "system", "content": about}, *msgs]


def _system_into_first_user(msgs: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The system messages' text put before the first user turn's (None: nothing to merge)."""
    system = [m for m in msgs if m.get("role") == "system"]
    rest = [m for m in msgs if m.get("role") != "system"]
    first = next((i for i, m in enumerate(rest) if m.get("role") == "user"), None)
    if not system or first is None:
        return None
    head = "\n\n".join(str(m.get("content") or "") for m in system)
    user = rest[first]
    rest[first] = {**user, "content": f"{head}\n\n{user.get('content') or ''}"}
    return rest

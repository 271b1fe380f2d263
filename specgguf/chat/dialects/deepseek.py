"""DeepSeek's tool-call tokens, in two generations. The calls sit in one section,
`<｜tool▁calls▁begin｜>` ... `<｜tool▁calls▁end｜>`, one `<｜tool▁call▁begin｜>` ...
`<｜tool▁call▁end｜>` each:

- R1 (and its distills): `function<｜tool▁sep｜>NAME`, a line break, then the arguments in a
  ```json fence;
- V3.1: `NAME<｜tool▁sep｜>` and the arguments' JSON right after.

Both think in `<think>`; their prompts open it (R1's always, V3.1's when thinking is on, and
its template reads `thinking` for that switch), so a forced call may first finish the thinking
the prompt opened."""

from __future__ import annotations

import re

from specgguf.chat.dialects.base import (
    BlockCallStream,
    Dialect,
    Tools,
    known_call,
    section_calls,
)
from specgguf.chat.dialects.framed import Frame, Framed, think_first
from specgguf.chat.tools import gbnf_literal

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
_NAME = r"([A-Za-z0-9_.-]{1,64})"
_R1_CALL = re.compile(r"\s*function" + SEP + _NAME + r"\s*```(?:json)?\s*(.*?)\s*```\s*", re.S)
_V31_CALL = re.compile(r"\s*" + _NAME + SEP + r"(.*)", re.S)


def _calls(pattern: re.Pattern[str]):
    """A block parser for the section whose every call matches `pattern` (name, arguments)."""

    def read(part: str, last: bool, tools: Tools) -> tuple[str, str, str | None] | None:
        inner = part.rstrip()
        if inner.endswith(CALL_END):
            inner = inner[: -len(CALL_END)]
        elif not last:
            return None
        m = pattern.fullmatch(inner)
        call = None if m is None else known_call(m.group(1), m.group(2).strip(), tools)
        return None if call is None else (*call, None)

    def parse(block: str, tools: Tools) -> list[tuple[str, str, str | None]] | None:
        return section_calls(block, tools, CALLS_BEGIN, CALLS_END, CALL_BEGIN, read)

    return parse


def _stream(pattern: re.Pattern[str]):
    parse = _calls(pattern)
    return lambda tools, new_id: BlockCallStream(
        tools, new_id, start=CALLS_BEGIN, end=CALLS_END, parse=parse
    )


def _forced(call) -> Framed:
    return Framed(
        call=call,
        between="",
        open_all=gbnf_literal(CALLS_BEGIN),
        close_all=gbnf_literal(CALLS_END),
        **think_first(),
    )


def _r1_call(frame: Frame) -> str:
    head = f"{CALL_BEGIN}function{SEP}{frame.name}\n```json\n"
    return f"{gbnf_literal(head)} {frame.args_rule} {gbnf_literal(chr(10) + '```' + CALL_END)}"


def _v31_call(frame: Frame) -> str:
    head = f"{CALL_BEGIN}{frame.name}{SEP}"
    return f"{gbnf_literal(head)} {frame.args_rule} {gbnf_literal(CALL_END)}"


CONTROL = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)

R1 = Dialect(
    name="deepseek-r1",
    family="DeepSeek R1 and its distills",
    markers=(CALLS_BEGIN, "```json"),
    stream=_stream(_R1_CALL),
    control_tokens=CONTROL,
    forced=_forced(_r1_call),
    triggers=(CALLS_BEGIN,),
    example=f"{CALLS_BEGIN}{CALL_BEGIN}function{SEP}f\\n```json\\n{{...}}\\n```{CALL_END}"
    f"{CALLS_END}",
)
V31 = Dialect(
    name="deepseek-v3.1",
    family="DeepSeek V3.1",
    markers=(CALLS_BEGIN,),
    excluded=("```json",),
    stream=_stream(_V31_CALL),
    control_tokens=CONTROL,
    forced=_forced(_v31_call),
    thinking_vars=("thinking",),
    triggers=(CALLS_BEGIN,),
    example=f"{CALLS_BEGIN}{CALL_BEGIN}f{SEP}{{...}}{CALL_END}{CALLS_END}",
)

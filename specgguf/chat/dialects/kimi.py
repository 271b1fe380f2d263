"""Kimi K2 (Instruct and Thinking): the calls sit in one section, each with the id the model
gives it, `functions.NAME:INDEX`, which its template writes back on the next turn:

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

(without the line break). K2 Thinking thinks in `<think>` first."""

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

SECTION_BEGIN, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL_BEGIN, ARGS = "<|tool_call_begin|>", "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
_CALL = re.compile(
    r"\s*(functions\.([A-Za-z0-9_.-]{1,64}):[0-9]{1,6})\s*" + re.escape(ARGS) + r"(.*?)\s*"
    + re.escape(CALL_END) + r"\s*", re.S,
)  # fmt: skip


def _read(part: str, last: bool, tools: Tools) -> tuple[str, str, str | None] | None:
    """One call with its own id (each is closed, the last too: the pattern asks for it)."""
    m = _CALL.fullmatch(part)
    if m is None:
        return None
    call = known_call(m.group(2), m.group(3), tools)
    return None if call is None else (*call, m.group(1))


def parse(block: str, tools: Tools) -> list[tuple[str, str, str | None]] | None:
    """The section's calls, each with its own id (None: not calls of the tools)."""
    return section_calls(block, tools, SECTION_BEGIN, SECTION_END, CALL_BEGIN, _read)


def _forced_call(frame: Frame) -> str:
    return (
        f"{gbnf_literal(CALL_BEGIN + 'functions.' + frame.name + ':')} [0-9] "
        f"{gbnf_literal(ARGS)} {frame.args_rule} {gbnf_literal(CALL_END)}"
    )


DIALECT = Dialect(
    name="kimi-k2",
    family="Kimi K2 (Instruct, Thinking)",
    markers=(SECTION_BEGIN, CALL_BEGIN),
    stream=lambda tools, new_id: BlockCallStream(
        tools, new_id, start=SECTION_BEGIN, end=SECTION_END, parse=parse
    ),
    control_tokens=(SECTION_BEGIN, SECTION_END, CALL_BEGIN, ARGS, CALL_END),
    forced=Framed(
        call=_forced_call,
        between="",
        open_all=gbnf_literal(SECTION_BEGIN),
        close_all=gbnf_literal(SECTION_END),
        **think_first(),
    ),
    triggers=(SECTION_BEGIN,),
    example=f"{SECTION_BEGIN}{CALL_BEGIN}functions.f:0{ARGS}{{...}}{CALL_END}{SECTION_END}",
)

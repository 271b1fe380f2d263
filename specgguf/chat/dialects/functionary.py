"""Functionary v3.1 (Llama 3.1 based): each call `<function=NAME>{...}</function>`, the
arguments a JSON object between the tags."""

from __future__ import annotations

import re

from specgguf.chat.dialects.base import (
    BlockCallStream,
    Dialect,
    PerToolForced,
    Tools,
    known_call,
    named,
)

OPEN, CLOSE = "<function=", "</function>"
_CALL = re.compile(r"<function=([A-Za-z0-9_.-]{1,64})>(.*)</function>", re.DOTALL)


def parse(block: str, tools: Tools) -> list[tuple[str, str, str | None]] | None:
    m = _CALL.fullmatch(block)
    if m is None:
        return None
    call = known_call(m.group(1), m.group(2).strip(), tools)
    return None if call is None else [(*call, None)]


DIALECT = Dialect(
    name="functionary-v3.1",
    family="Functionary v3.1",
    markers=("<|start_header_id|>", "<function="),
    stream=lambda tools, new_id: BlockCallStream(tools, new_id, start=OPEN, end=CLOSE, parse=parse),
    forced=PerToolForced(before="", after=CLOSE, between="", head=named(OPEN + "{name}>")),
    triggers=(OPEN,),
    example="<function=f>{...}</function>",
)

"""GLM 4.5 / 4.6 / 4.7: each call in <tool_call> tags, the tool's name on the first line and
then one key and value per argument (a string as its raw text, any other value as JSON):

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

GLM thinks in `<think>` first (its template writes `<think></think>` when thinking is off)."""

from __future__ import annotations

import json
import re
from typing import Any

from specgguf.chat.dialects.base import BlockCallStream, Dialect, Tools, loads_or_none
from specgguf.chat.dialects.framed import Frame, Framed, think_first, wants_string
from specgguf.chat.tools import gbnf_literal

OPEN, CLOSE, KEY, VALUE = "<tool_call>", "</tool_call>", "<arg_key>", "<arg_value>"
_HEAD = re.compile(r"\s*([A-Za-z0-9_.-]{1,64})\s*(.*)", re.S)
_PAIR = re.compile(r"\s*<arg_key>([^<]{1,128})</arg_key>\s*<arg_value>(.*?)</arg_value>\s*", re.S)


def parse(block: str, tools: Tools) -> list[tuple[str, str, str | None]] | None:
    """The call of one <tool_call> block (None: not a call of the tools)."""
    m = _HEAD.fullmatch(block[len(OPEN) :].removesuffix(CLOSE))
    if m is None:
        return None
    tool = next((t["function"] for t in tools if t["function"]["name"] == m.group(1)), None)
    if tool is None:
        return None
    props = (tool.get("parameters") or {}).get("properties") or {}
    args: dict[str, Any] = {}
    pos, inner = 0, m.group(2)
    for p in _PAIR.finditer(inner):
        if p.start() != pos:
            return None
        key, text = p.group(1).strip(), p.group(2)
        value = None if wants_string(props.get(key)) else loads_or_none(text)
        args[key] = text if value is None else value
        pos = p.end()
    if inner[pos:].strip():
        return None
    return [(m.group(1), json.dumps(args, ensure_ascii=False), None)]


def _forced_call(frame: Frame) -> str:
    parts = [gbnf_literal(f"{OPEN}{frame.name}\n")]
    for p in frame.params:
        value = "glm-text" if p.is_string else p.rule
        pair = f"{gbnf_literal(KEY + p.name + '</arg_key>' + chr(10) + VALUE)} {value} " + \
            gbnf_literal("</arg_value>\n")
        parts.append(pair if p.required else f"({pair})?")
    parts.append(gbnf_literal(CLOSE))
    return " ".join(parts)


DIALECT = Dialect(
    name="glm-4.5",
    family="GLM 4.5, 4.6, 4.7",
    markers=(OPEN, KEY, VALUE),
    stream=lambda tools, new_id: BlockCallStream(
        tools, new_id, start=OPEN, end=CLOSE, parse=parse
    ),
    forced=Framed(
        call=_forced_call,
        between=gbnf_literal("\n"),
        rules="glm-text ::= [^<]*",
        **think_first(),
    ),
    triggers=(OPEN,),
    example="<tool_call>f\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>\\n</tool_call>",
)

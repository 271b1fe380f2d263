"""Qwen3-Coder, Qwen3.5, Nemotron Nano 3: XML calls, one parameter per element, each value the
text between its tags (a JSON value where the tool's schema says the parameter is not a
string):

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from specgguf.chat.dialects.base import BlockCallStream, Dialect, Tools, loads_or_none

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_FUNCTION = re.compile(r"\s*<function=([A-Za-z0-9_.-]{1,64})>(.*?)</function>\s*", re.DOTALL)
_PARAMETER = re.compile(r"\s*<parameter=([^>\n]{1,128})>\n?(.*?)\n?</parameter>\s*", re.DOTALL)


def _is_string(schema: Any) -> bool:
    """Whether a parameter's schema wants a string (its text is then taken as it is)."""
    if not isinstance(schema, Mapping):
        return False
    kind = schema.get("type")
    return kind == "string" or isinstance(kind, list) and kind[:1] == ["string"]


def _value(text: str, schema: Any) -> Any:
    if _is_string(schema):
        return text
    value = loads_or_none(text)
    return text if value is None else value


def parse(block: str, tools: Tools) -> list[tuple[str, str, str | None]] | None:
    """The calls of one <tool_call> block, or None when it is not calls of the tools."""
    body = block[len(OPEN) :]
    body = body[: -len(CLOSE)] if body.endswith(CLOSE) else body
    m = _FUNCTION.fullmatch(body)
    if m is None:
        return None
    name, inner = m.group(1), m.group(2)
    tool = next((t["function"] for t in tools if t["function"]["name"] == name), None)
    if tool is None:
        return None
    props = (tool.get("parameters") or {}).get("properties") or {}
    args: dict[str, Any] = {}
    pos = 0
    for p in _PARAMETER.finditer(inner):
        if p.start() != pos:
            return None
        args[p.group(1)] = _value(p.group(2), props.get(p.group(1)))
        pos = p.end()
    if inner[pos:].strip():
        return None
    return [(name, json.dumps(args, ensure_ascii=False), None)]


DIALECT = Dialect(
    name="qwen3-coder",
    family="Qwen3-Coder, Qwen3.5, Nemotron Nano 3",
    markers=(OPEN, "<function=", "<parameter="),
    # templates that write no newline between the tags are another family's
    excluded=("'<tool_call><function=' ~ tool_call.name ~ '>'",),
    stream=lambda tools, new_id: BlockCallStream(
        tools, new_id, start=OPEN, end=CLOSE, parse=parse
    ),
    example="<tool_call>\\n<function=f>\\n<parameter=k>\\nv\\n</parameter>\\n</function>\\n</tool_call>",
)

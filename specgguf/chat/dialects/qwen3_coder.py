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

from specgguf.chat.dialects.base import (
    BlockCallStream,
    Dialect,
    PerToolForced,
    ToGbnf,
    Tools,
    loads_or_none,
    named,
    not_containing,
    prefixed_rules,
)
from specgguf.chat.tools import gbnf_literal

OPEN, CLOSE = "<tool_call>", "</tool_call>"
PARAM_CLOSE = "</parameter>"
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


class XmlForced(PerToolForced):
    """Each parameter in its element, in the schema's order (the required ones always, the
    others optional): a string's text as it is (up to the closing tag), any other value as
    the JSON its schema allows."""

    def args_gbnf(self, params: Mapping[str, Any], prefix: str, to_gbnf: ToGbnf) -> str:
        required = set(params.get("required") or ())
        rules, seq = [], []
        for i, (key, sub) in enumerate((params.get("properties") or {}).items()):
            head = gbnf_literal(f"<parameter={key}>\n")
            tail = gbnf_literal(f"\n{PARAM_CLOSE}\n")
            if _is_string(sub):
                value = not_containing(f"\n{PARAM_CLOSE}")
            else:
                body, root = prefixed_rules(to_gbnf(sub if sub else {}), f"{prefix}-p{i}")
                rules.append(body)
                value = root
            item = f"{head} {value} {tail}"
            seq.append(item if key in required else f"({item})?")
        rules.insert(0, f"{prefix}-root ::= {' '.join(seq) or '[ ]?'}")
        return "\n".join(rules)


DIALECT = Dialect(
    name="qwen3-coder",
    family="Qwen3-Coder, Qwen3.5, Nemotron Nano 3",
    markers=(OPEN, "<function=", "<parameter="),
    # templates that write no newline between the tags are another family's
    excluded=("'<tool_call><function=' ~ tool_call.name ~ '>'",),
    stream=lambda tools, new_id: BlockCallStream(
        tools, new_id, start=OPEN, end=CLOSE, parse=parse
    ),
    forced=XmlForced(
        before="", after=f"</function>\n{CLOSE}", between="\n",
        head=named(f"{OPEN}\n<function={{name}}>\n"),
    ),
    triggers=(OPEN,),
    example="<tool_call>\\n<function=f>\\n<parameter=k>\\nv\\n</parameter>\\n</function>\\n</tool_call>",
)

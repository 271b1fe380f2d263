"""Mistral's [TOOL_CALLS] control token, in its three generations:

- Nemo (2407): one JSON list, `[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "..."}]`;
- Small 3.2 (2506): `[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}`, once per call;
- Devstral / Ministral: `[TOOL_CALLS]name[ARGS]{...}`, once per call.

Their templates refuse call ids that are not exactly 9 letters and digits, so this family's
ids have that shape. A call runs to the end of the answer (or to the next [TOOL_CALLS])."""

from __future__ import annotations

import re

from specgguf.chat.dialects.base import (
    BlockCallStream,
    Dialect,
    Forced,
    PerToolForced,
    Tools,
    alnum9_call_id,
    json_list_parser,
    known_call,
    named,
)
from specgguf.chat.tools import gbnf_literal

TOOL_CALLS, CALL_ID, ARGS = "[TOOL_CALLS]", "[CALL_ID]", "[ARGS]"
_ID = re.compile(r"[A-Za-z0-9]{9}")
_TAGGED = re.compile(
    r"([A-Za-z0-9_.-]{1,64})(?:\[CALL_ID\]([A-Za-z0-9]{1,64}))?\[ARGS\](.*)", re.DOTALL
)


def _id(value: object) -> str | None:
    """The model's own id where it has the family's shape (else a new one is made)."""
    return value if isinstance(value, str) and _ID.fullmatch(value) else None


#: Nemo: the JSON list after [TOOL_CALLS], each call with its id
parse_list = json_list_parser(TOOL_CALLS, id_of=lambda item: _id(item.get("id")))


def parse_tagged(block: str, tools: Tools) -> list[tuple[str, str, str | None]] | None:
    """Small 3.2 and Devstral: name, [CALL_ID] id (Small 3.2), [ARGS] and the JSON object, after
    each [TOOL_CALLS]."""
    out = []
    for part in block.split(TOOL_CALLS)[1:]:
        m = _TAGGED.fullmatch(part.strip())
        if m is None:
            return None
        args = m.group(3).strip()
        call = known_call(m.group(1), args, tools)
        if call is None:
            return None
        out.append((*call, _id(m.group(2))))
    return out or None


def _stream(parse):
    return lambda tools, new_id: BlockCallStream(
        tools, new_id, start=TOOL_CALLS, end=None, parse=parse
    )


SMALL_32 = Dialect(
    name="mistral-small-3.2",
    family="Mistral Small 3.2",
    markers=(TOOL_CALLS, CALL_ID),
    stream=_stream(parse_tagged),
    new_id=alnum9_call_id,
    control_tokens=(TOOL_CALLS, CALL_ID, ARGS),
    forced=PerToolForced(
        before="", between="",
        head=lambda name: f'{gbnf_literal(TOOL_CALLS + name + CALL_ID)} [A-Za-z0-9]{{9}} "{ARGS}"',
    ),  # fmt: skip
    triggers=(TOOL_CALLS,),
    example="[TOOL_CALLS]f[CALL_ID]a1b2c3d4e[ARGS]{...}",
)
DEVSTRAL = Dialect(
    name="devstral",
    family="Devstral, Ministral 3, Magistral",
    markers=(TOOL_CALLS, ARGS),
    excluded=(CALL_ID,),
    stream=_stream(parse_tagged),
    new_id=alnum9_call_id,
    control_tokens=(TOOL_CALLS, ARGS),
    forced=PerToolForced(before="", between="", head=named(TOOL_CALLS + "{name}" + ARGS)),
    triggers=(TOOL_CALLS,),
    example="[TOOL_CALLS]f[ARGS]{...}",
)
NEMO = Dialect(
    name="mistral-nemo",
    family="Mistral Nemo, Mistral 7B v0.3 (and Mistral templates without [ARGS])",
    markers=(TOOL_CALLS,),
    excluded=(ARGS,),
    stream=_stream(parse_list),
    new_id=alnum9_call_id,
    control_tokens=(TOOL_CALLS,),
    forced=Forced(before="", between=", ", open_all=f"{TOOL_CALLS}[", close_all="]"),
    triggers=(TOOL_CALLS,),
    example='[TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "a1b2c3d4e"}]',
)

"""IBM Granite 3.x: the calls as one JSON list after the `<|tool_call|>` token,

    <|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]

and, asked to think (the `thinking` template kwarg), its thoughts in <think></think> before
the answer. Granite 4 writes Hermes' <tool_call> tags and is read as `hermes`."""

from __future__ import annotations

from specgguf.chat.dialects.base import BlockCallStream, Dialect, Forced, json_list_parser

TOOL_CALL = "<|tool_call|>"

DIALECT = Dialect(
    name="granite",
    family="Granite 3.x",
    markers=(TOOL_CALL, "<|start_of_role|>"),
    stream=lambda tools, new_id: BlockCallStream(
        tools, new_id, start=TOOL_CALL, end=None, parse=json_list_parser(TOOL_CALL)
    ),
    control_tokens=(TOOL_CALL,),
    forced=Forced(before="", between=", ", open_all=f"{TOOL_CALL}[", close_all="]"),
    triggers=(TOOL_CALL,),
    example='<|tool_call|>[{"name": "f", "arguments": {...}}]',
)

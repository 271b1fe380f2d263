"""FireFunction v2 (Llama 3 based): the calls as one JSON list after the word `functools`,

     functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]

with no closing marker (the list runs to the end of the answer). Its template reads the tools
as `functions`, their JSON text."""

from __future__ import annotations

import json

from specgguf.chat.dialects.base import BlockCallStream, Dialect, Forced, json_list_parser

FUNCTOOLS = "functools["

DIALECT = Dialect(
    name="firefunction-v2",
    family="FireFunction v2",
    markers=(" functools[",),
    stream=lambda tools, new_id: BlockCallStream(
        tools, new_id, start=FUNCTOOLS, end=None, parse=json_list_parser("functools")
    ),
    forced=Forced(before="", between=", ", open_all=" functools[", close_all="]"),
    variables=lambda tools: {"functions": json.dumps(list(tools), indent=2, ensure_ascii=False)},
    triggers=(" " + FUNCTOOLS,),  # the forced form opens with the blank
    example=' functools[{"name": "f", "arguments": {...}}]',
)

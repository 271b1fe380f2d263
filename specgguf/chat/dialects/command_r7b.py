"""Command R7B (Cohere): the answer in blocks, each between control tokens: its thinking,
then either its reply or its calls, a JSON list with Cohere's keys,

    <|START_THINKING|>I will look it up.<|END_THINKING|><|START_ACTION|>[
        {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}
    ]<|END_ACTION|>
    <|START_THINKING|>...<|END_THINKING|><|START_RESPONSE|>It is sunny.<|END_RESPONSE|>

The reply's markers are not content. Its template numbers the calls itself, so the server
hands out OpenAI's ids."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specgguf.chat.dialects.base import BlockCallStream, Dialect, Forced, Tools, json_list_parser
from specgguf.chat.markers import partial_marker
from specgguf.chat.tools import CallDelta

THINKING = ("<|START_THINKING|>", "<|END_THINKING|>")
ACTION = ("<|START_ACTION|>", "<|END_ACTION|>")
RESPONSE = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")


class ActionStream(BlockCallStream):
    """Calls in <|START_ACTION|> blocks; the reply's markers taken out of the content (a tail
    that may start one is held until the next piece)."""

    def __init__(self, tools: Tools, new_id: Callable[[], str]) -> None:
        super().__init__(
            tools, new_id, start=ACTION[0], end=ACTION[1],
            parse=json_list_parser(ACTION[0], end=ACTION[1], name_key="tool_name",
                                   args_key="parameters"),
        )  # fmt: skip
        self._tail = ""

    def feed(self, text: str) -> list[str | CallDelta]:
        return self._unmarked(super().feed(text), final=False)

    def close(self) -> list[str | CallDelta]:
        return self._unmarked(super().close(), final=True)

    def _unmarked(self, events: list[str | CallDelta], final: bool) -> list[str | CallDelta]:
        out: list[str | CallDelta] = []
        for i, e in enumerate(events):
            if not isinstance(e, str):
                if self._tail:
                    out.append(self._tail)
                    self._tail = ""
                out.append(e)
                continue
            s = self._tail + e
            for marker in RESPONSE:
                s = s.replace(marker, "")
            last = i == len(events) - 1
            keep = 0 if final or not last else max(partial_marker(s, m) for m in RESPONSE)
            self._tail = s[len(s) - keep :]
            if s[: len(s) - keep]:
                out.append(s[: len(s) - keep])
        if final and self._tail:
            out.append(self._tail)
            self._tail = ""
        return out


@dataclass(frozen=True)
class ActionForced(Forced):
    """Each call {"tool_call_id": "<n>", "tool_name": ..., "parameters": {...}}."""

    def schema(self, tools: Tools, only: str | None = None) -> dict[str, Any]:
        schema = super().schema(tools, only)
        for alt in schema.get("anyOf", [schema]):
            props = alt["properties"]
            alt["properties"] = {
                "tool_call_id": {"type": "string", "pattern": "^[0-9]{1,3}$"},
                "tool_name": props["name"],
                "parameters": props["parameters"],
            }
            alt["required"] = list(alt["properties"])
        return schema


DIALECT = Dialect(
    name="command-r7b",
    family="Command R7B",
    markers=(ACTION[0], RESPONSE[0]),
    stream=ActionStream,
    control_tokens=(*THINKING, *ACTION, *RESPONSE),
    thinking=THINKING,
    forced=ActionForced(
        before="", between=", ", open_all=f"{ACTION[0]}[", close_all=f"]{ACTION[1]}",
        args_key="parameters", think=THINKING,
    ),  # fmt: skip
    triggers=(ACTION[0],),
    example='<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {...}}]'
    "<|END_ACTION|>",
)

"""The fallback for a chat template of no known family: the answer is one JSON object, as
llama-server's generic format has it,

    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, ...]}
    {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    {"response": "It is sunny."}

The tools and these shapes are described to the model in a system message (when its template
does not render `tools` itself), and a forced call is held to the first shape (the second
without parallel_tool_calls). An answer that opens with "{" is held until it ends and read
whole; any other answer (or an object of none of these shapes) is read as Hermes'
<tool_call> JSON is, since a model that knows no tool format of its own most often writes
that, or a bare {"name": ..., "arguments": ...}.

Pure: no model, no llama_cpp."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specgguf.chat.dialects.base import (
    Dialect,
    Forced,
    StreamBase,
    ToGbnf,
    Tools,
    calls_of,
    loads_or_none,
)
from specgguf.chat.tools import CallDelta, ToolCallStream

_ID = re.compile(r"[A-Za-z0-9_-]{4,64}")


def describe(tools: Tools) -> str:
    """The system message: the tools, and the JSON the answer must be."""
    listed = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        f"You can call these tools (their JSON schemas):\n{listed}\n\n"
        "Answer with one JSON object only. To call tools: "
        '{"tool_calls": [{"name": "<tool name>", "arguments": {<its arguments>}}]}. '
        'To answer the user instead: {"response": "<your answer>"}.'
    )


def read(text: str, tools: Tools) -> tuple[str, list[tuple[str, str, str | None]]] | None:
    """A whole answer in the generic shapes -> (content, calls), or None when it is not one."""
    obj = loads_or_none(text)
    if not isinstance(obj, dict) or len(obj) != 1:
        return None
    if isinstance(obj.get("response"), str):
        return obj["response"], []
    items = obj.get("tool_calls") if "tool_calls" in obj else [obj.get("tool_call")]
    calls = calls_of(items, tools, id_of=_own_id)
    return None if calls is None else ("", calls)


def _own_id(item: dict[str, Any]) -> str | None:
    """The model's own id of a call, where it has a usable shape."""
    ident = item.get("id")
    return ident if isinstance(ident, str) and _ID.fullmatch(ident) else None


class GenericCallStream(StreamBase):
    """An answer that opens with "{" is held and read whole at the end; any other is passed to
    Hermes' parser as it arrives (see the module's docstring)."""

    def __init__(self, tools: Tools, new_id: Callable[[], str]) -> None:
        super().__init__(tools, new_id)
        self._held = ""
        self._mode: str | None = None  # "json" (held) or "hermes" (passed on), once known
        self._hermes: ToolCallStream | None = None

    def feed(self, text: str) -> list[str | CallDelta]:
        if self._mode == "hermes":
            return self._pass(text)
        self._held += text
        head = self._held.lstrip()
        if not head:
            return []
        if head.startswith("{"):
            self._mode = "json"
            return []
        held, self._held = self._held, ""
        self._mode = "hermes"
        return self._pass(held)

    def close(self) -> list[str | CallDelta]:
        if self._mode == "hermes":
            assert self._hermes is not None
            out = self._hermes.close()
            self._sync()
            return out
        text, self._held = self._held, ""
        got = read(text, self.tools)
        if got is None or self.single and len(got[1]) > 1:
            if got is None and self._mode == "json":  # a bare call, or no call: Hermes reads
                out = self._pass(text)
                assert self._hermes is not None
                out += self._hermes.close()
                self._sync()
                return out
            return [text] if text else []
        content, calls = got
        out: list[str | CallDelta] = [content] if content else []
        for name, args, ident in calls:
            self._release(out, name, args, ident)
        return out

    def _pass(self, text: str) -> list[str | CallDelta]:
        if self._hermes is None:
            self._hermes = ToolCallStream(self.tools)
            self._hermes.single = self.single
        out = self._hermes.feed(text)
        self._sync()
        return out

    def _sync(self) -> None:
        assert self._hermes is not None
        self.calls = self._hermes.calls
        self.truncated, self.invalid = self._hermes.truncated, self._hermes.invalid


@dataclass(frozen=True)
class GenericForced(Forced):
    """{"tool_calls": [call, ...]}, or {"tool_call": call} for one call at most."""

    def calls_gbnf(
        self, tools: Tools, only: str | None, *, parallel: bool, to_gbnf: ToGbnf
    ) -> str:
        call = self.schema(tools, only)
        key, value = (
            ("tool_calls", {"type": "array", "items": call, "minItems": 1})
            if parallel
            else ("tool_call", call)
        )
        defs = call.pop("$defs", None)  # the tools' shared definitions stay at the root
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {key: value},
            "required": [key],
            "additionalProperties": False,
        }
        if defs:
            schema["$defs"] = defs
        return to_gbnf(schema)


DIALECT = Dialect(
    name="generic",
    family="any template of no known family (llama-server's generic JSON)",
    markers=(),
    stream=GenericCallStream,
    forced=GenericForced(before="", between=", "),  # a list: several calls
    describe=describe,
    example='{"tool_calls": [{"name": "f", "arguments": {...}}]}',
)

"""The fallback for a chat template of no known family: the answer is one JSON object, as
llama-server's generic format has it,

    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, ...]}
    {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    {"response": "It is sunny."}

The tools and these shapes are described to the model in a system message (when its template
does not render `tools` itself), and a forced call is held to the first shape (the second
without parallel_tool_calls). The calls stream as they come (arguments in fragments); another
answer that opens with "{" is held until it ends and read whole; any other answer (or an
object of none of these shapes) is read as Hermes' <tool_call> JSON is, since a model that
knows no tool format of its own most often writes that, or a bare {"name": ..., "arguments":
...}.

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
from specgguf.chat.tools import CLOSE, OPEN, CallDelta, ToolCallStream, _Scan

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


#: how a list of calls and a single call open, blanks apart
_HEADS = {
    "list": re.compile(r'\s*\{\s*"tool_calls"\s*:\s*\[\s*'),
    "one": re.compile(r'\s*\{\s*"tool_call"\s*:\s*'),
}
_HEAD_TEXT = ('{"tool_calls":[', '{"tool_call":')
_BLANKS = re.compile(r"\s+")


class GenericCallStream(StreamBase):
    """Reads an answer by how it opens: {"tool_calls": [ or {"tool_call": streams its calls
    as they come (each call object goes to Hermes' parser, inside a <tool_call> tag, which
    streams its arguments); any other "{" is held and read whole at the end; anything else is
    passed to Hermes' parser as it arrives (see the module's docstring)."""

    def __init__(self, tools: Tools, new_id: Callable[[], str]) -> None:
        super().__init__(tools, new_id)
        self._held = ""
        #: "calls" (streamed), "json" (held), "hermes" (passed on), once known
        self._mode: str | None = None
        self._hermes: ToolCallStream | None = None
        self._list = False  # the calls are a list ({"tool_calls": [...]})
        self._scan: _Scan | None = None  # inside a call object: where it ends
        self._between = ""  # the text after the last call object, not read yet
        self._count = 0  # call objects seen

    def feed(self, text: str) -> list[str | CallDelta]:
        if self._mode == "hermes":
            return self._pass(text)
        if self._mode == "calls":
            return self._calls(text)
        self._held += text
        if self._mode == "json":
            return []
        head = self._held.lstrip()
        if not head:
            return []
        if not head.startswith("{"):
            return self._to_hermes(self._held)
        for kind, pattern in _HEADS.items():
            m = pattern.match(self._held)
            if m is not None and (kind == "list" or m.end() < len(self._held)):
                self._mode, self._list = "calls", kind == "list"
                rest, self._held = self._held[m.end() :], ""
                return self._pass(OPEN) + self._calls(rest)
        compact = _BLANKS.sub("", head)
        if not any(h.startswith(compact) or compact.startswith(h) for h in _HEAD_TEXT):
            self._mode = "json"
        return []

    def close(self) -> list[str | CallDelta]:
        if self._mode == "calls":
            out = [] if self._scan is not None else self._pass(CLOSE)
            return out + self._end()
        if self._mode == "hermes":
            return self._end()
        text, self._held = self._held, ""
        got = read(text, self.tools)
        if got is None:  # a bare call, or no call: Hermes reads it
            return self._pass(text) + self._end()
        if self.single and len(got[1]) > 1:
            return [text]
        content, calls = got
        out: list[str | CallDelta] = [content] if content else []
        for name, args, ident in calls:
            self._release(out, name, args, ident)
        return out

    def _calls(self, text: str) -> list[str | CallDelta]:
        """The text inside {"tool_calls": [...]} (or {"tool_call": ...}): each call object
        passed on as it comes; between them a comma, at the end "]}" (or "}")."""
        out: list[str | CallDelta] = []
        i = 0
        while i < len(text):
            if self._scan is not None:
                end = self._scan.run(text, i)
                out += self._pass(text[i : len(text) if end is None else end])
                if end is None:
                    return out
                self._scan, i = None, end
                continue
            self._between += text[i:]
            i = len(text)
            out += self._after_object()
        return out

    def _after_object(self) -> list[str | CallDelta]:
        """Reads _between: the next call object, the end of the calls, or (anything else)
        the rest of the answer as content."""
        gap = self._between.lstrip()
        first = self._count == 0
        if first or self._list and gap.startswith(","):
            nxt = gap if first else gap[1:].lstrip()
            if not nxt:
                return []
            if nxt.startswith("{") and not (self.single and not first):
                self._count += 1
                self._scan, self._between = _Scan(), ""
                return self._calls(nxt)
        ending = "]}" if self._list else "}"
        compact = _BLANKS.sub("", gap)
        if not first and ending.startswith(compact):
            return []  # the end may still come
        rest = self._between
        if not first and compact.startswith(ending):
            k = gap.index(ending[-1]) + 1  # past the closing brace
            rest = gap[k:]
        self._between, self._mode = "", "hermes"
        return self._pass(CLOSE) + (self._pass(rest) if rest else [])

    def _to_hermes(self, text: str) -> list[str | CallDelta]:
        self._held, self._mode = "", "hermes"
        return self._pass(text)

    def _end(self) -> list[str | CallDelta]:
        assert self._hermes is not None
        out = self._hermes.close()
        self._sync()
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

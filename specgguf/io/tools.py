"""Tool calls (OpenAI `tools`) for the model families specgguf runs: Qwen / Hermes style.

In: the request's tools, rendered by the GGUF's chat template (Qwen2.5's takes `tools` and
describes them in its system turn; for a template that ignores them, the same description is
put in a system message). Out: the model writes each call as

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

(or, some fine-tunes, the bare JSON object), which ToolCallStream turns into OpenAI
`tool_calls`, whole or as it streams. `tool_choice: "required"` or a named function asks for
a call no matter what: call_schema() is the JSON schema of one call, and wrap_call_grammar()
puts the markers around its grammar, so the output always parses.

Pure: no model, no llama_cpp; the grammar text comes from the caller's schema converter.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specgguf.io import json_input

OPEN, CLOSE = "<tool_call>", "</tool_call>"
TOOL_CHOICES = ("none", "auto", "required")


class ToolsError(ValueError):
    """What is wrong with a request's `tools` or `tool_choice` (the message names the field)."""


def validate_tools(tools: Any) -> list[dict[str, Any]]:
    """OpenAI's [{"type": "function", "function": {"name", "description"?, "parameters"?}}]."""
    if not isinstance(tools, list):
        raise ToolsError("'tools' must be a list of {type: function, function: {...}} objects")
    names: set[str] = set()
    for i, t in enumerate(tools):
        where = f"'tools[{i}]"
        if not isinstance(t, Mapping) or t.get("type") != "function":
            raise ToolsError(f"{where}.type' must be \"function\"")
        fn = t.get("function")
        if not isinstance(fn, Mapping):
            raise ToolsError(f"{where}.function' must be an object")
        name = fn.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise ToolsError(f"{where}.function.name' must be 1-64 letters, digits, _ . or -")
        if name in names:
            raise ToolsError(f"{where}.function.name': {name!r} is given twice")
        names.add(name)
        params = fn.get("parameters")
        if params is not None and not isinstance(params, Mapping):
            raise ToolsError(f"{where}.function.parameters' must be a JSON schema object")
    return [dict(t) for t in tools]


def validate_tool_choice(choice: Any, tools: Sequence[Mapping[str, Any]]) -> str | None:
    """"none", "auto" or "required" (returned as is), or a named function: its name.
    "required" and a named function need tools (OpenAI refuses them without: a call of no
    tool cannot be forced)."""
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        if choice not in TOOL_CHOICES:
            raise ToolsError("'tool_choice' must be none, auto, required or a named function")
        if choice == "required" and not tools:
            raise ToolsError("'tool_choice' \"required\" needs at least one tool in 'tools'")
        return choice
    fn = choice.get("function") if isinstance(choice, Mapping) else None
    name = fn.get("name") if isinstance(fn, Mapping) else None
    if not isinstance(name, str):
        raise ToolsError("'tool_choice.function.name' is required for a named function")
    if not tools:
        raise ToolsError(f"'tool_choice' names the function {name!r}, but no 'tools' are given")
    if name not in {t["function"]["name"] for t in tools}:
        raise ToolsError(f"'tool_choice.function.name': {name!r} is not among the tools")
    return f"function:{name}"


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as chat templates expect them: an earlier assistant call's `arguments` is a
    JSON string in OpenAI's API but an object in the templates (they `tojson` it)."""
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if isinstance(calls, list):
            fixed = []
            for c in calls:
                fn = c.get("function") if isinstance(c, Mapping) else None
                args = fn.get("arguments") if isinstance(fn, Mapping) else None
                if isinstance(args, str):
                    # not JSON (or nested past json_input's bound): the string stays
                    with contextlib.suppress(ValueError):
                        c = {**c, "function": {**fn, "arguments": json_input.loads(args)}}
                fixed.append(c)
            m = {**m, "tool_calls": fixed}
        out.append(m)
    return out


def tools_system_prompt(tools: Sequence[Mapping[str, Any]]) -> str:
    """The tools described for a template that does not render them itself (Hermes' words)."""
    listed = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "You may call one or more functions to assist with the user query.\n\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        f"{listed}\n</tools>\n\nFor each function call, return a json object with function "
        f"name and arguments within {OPEN}{CLOSE} XML tags:\n{OPEN}\n"
        f'{{"name": <function-name>, "arguments": <args-json-object>}}\n{CLOSE}'
    )


def call_schema(tools: Sequence[Mapping[str, Any]], only: str | None = None) -> dict[str, Any]:
    """The JSON schema of one call {"name": ..., "arguments": ...} of any tool (or `only`).

    A tool's parameters sit under properties.arguments here, so their references to their
    own root ("#/$defs/Location", what pydantic and OpenAI's helpers write) would point into
    this schema instead: parameters that refer to anything are kept whole in this schema's
    $defs, under the tool's name, and each of their references is rewritten to point there."""
    alts = []
    defs: dict[str, Any] = {}
    for t in tools:
        fn = t["function"]
        if only is not None and fn["name"] != only:
            continue
        params = fn.get("parameters") or {"type": "object"}
        found: list[bool] = []
        rebased = _rebased(params, f"#/$defs/{fn['name']}", found)
        if found:
            defs[fn["name"]] = rebased
            params = {"$ref": f"#/$defs/{fn['name']}"}
        alts.append(
            {
                "type": "object",
                "properties": {"name": {"const": fn["name"]}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    schema = alts[0] if len(alts) == 1 else {"anyOf": alts}
    return {**schema, "$defs": defs} if defs else schema


#: keywords whose values are data, not schemas: a "$ref" inside them is not a reference
_DATA_KEYWORDS = frozenset(("const", "enum", "default", "examples"))
#: keywords whose values map names to schemas (a property may be called "default")
_NAMED_SCHEMAS = frozenset(
    ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
)


def _rebased(schema: Any, base: str, found: list[bool] | None = None) -> Any:
    """A copy of `schema` whose references within itself ("#...") start at `base` instead;
    `found` gets a True for each one (the nesting is bounded by the request's JSON reader)."""
    if isinstance(schema, list):
        return [_rebased(v, base, found) for v in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k == "$ref" and isinstance(v, str) and v.startswith("#"):
            out[k] = base + v[1:]
            if found is not None:
                found.append(True)
        elif k in _NAMED_SCHEMAS and isinstance(v, Mapping):
            out[k] = {name: _rebased(sub, base, found) for name, sub in v.items()}
        elif k in _DATA_KEYWORDS:
            out[k] = v
        else:
            out[k] = _rebased(v, base, found)
    return out


#: the rule a call's JSON grammar is renamed to inside the wrapper
_CALL_RULE = "specgguf-tool-call"


def wrap_call_grammar(call_gbnf: str, *, parallel: bool) -> str:
    """The grammar of one call's JSON (root rule `root`) inside the markers: one call, or
    with `parallel` one or more, separated by a newline."""
    body, n = re.subn(r"(?m)^root ::= ", f"{_CALL_RULE} ::= ", call_gbnf)
    if n != 1:
        raise ValueError("the call grammar has no root rule")
    call = f'"{OPEN}\\n" {_CALL_RULE} "\\n{CLOSE}"'
    root = f'root ::= {call} ("\\n" {call})*' if parallel else f"root ::= {call}"
    return f"{root}\n{body}"


@dataclass
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def as_dict(self, index: int | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {} if index is None else {"index": index}
        d.update(id=self.id, type="function",
                 function={"name": self.name, "arguments": self.arguments})  # fmt: skip
        return d


def _as_call(text: str, names: set[str]) -> ToolCall | None:
    """A call from its JSON text (`arguments`, or `parameters` as some fine-tunes write), if
    it is one of a known tool."""
    try:
        obj = json_input.loads(text)  # bounded: the text may nest as deep as a grammar forced
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("name") not in names:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        return ToolCall(obj["name"], args)
    return ToolCall(obj["name"], json.dumps(args, ensure_ascii=False))


class ToolCallStream:
    """Splits generated text into content and tool calls as it arrives.

    Text outside <tool_call> blocks is content, released at once except a tail that may be
    the start of a marker; a block is released as a call when it closes (as content if it
    does not parse as a call of a known tool). An answer whose first non-blank character is
    "{" is held to the end and becomes a call if it is exactly one call's JSON object."""

    def __init__(self, tools: Sequence[Mapping[str, Any]]) -> None:
        self.names = {t["function"]["name"] for t in tools}
        self.calls: list[ToolCall] = []
        self._buf = ""
        self._in_call = False
        self._started = False  # some content was released
        self._bare_json = False

    def feed(self, text: str) -> tuple[str, list[ToolCall]]:
        """(content released now, calls completed now)."""
        self._buf += text
        content: list[str] = []
        calls: list[ToolCall] = []
        while True:
            if self._bare_json:
                break
            if self._in_call:
                end = self._buf.find(CLOSE)
                if end < 0:
                    break
                block, self._buf = self._buf[:end], self._buf[end + len(CLOSE) :]
                self._in_call = False
                call = _as_call(block.strip(), self.names)
                if call is None:
                    content.append(OPEN + block + CLOSE)
                else:
                    calls.append(call)
                continue
            if not self._started and not self.calls and not calls:
                head = self._buf.lstrip()
                if not head:
                    break  # only blanks so far: the answer may still start with "{"
                if head.startswith("{"):
                    self._bare_json = True
                    break
            at = self._buf.find(OPEN)
            if at >= 0:
                content.append(self._buf[:at])
                self._buf = self._buf[at + len(OPEN) :]
                self._in_call = True
                continue
            keep = next(
                (n for n in range(min(len(OPEN) - 1, len(self._buf)), 0, -1)
                 if OPEN.startswith(self._buf[-n:])), 0,
            )  # fmt: skip
            content.append(self._buf[: len(self._buf) - keep])
            self._buf = self._buf[len(self._buf) - keep :]
            break
        return self._released(content, calls)

    def close(self) -> tuple[str, list[ToolCall]]:
        """The end of the text: what was held back (an unclosed block stays content)."""
        rest, self._buf = self._buf, ""
        if self._bare_json:
            call = _as_call(rest.strip(), self.names)
            if call is not None:
                return self._released([], [call])
        elif self._in_call:
            rest = OPEN + rest
        return self._released([rest], [])

    def _released(self, content: list[str], calls: list[ToolCall]) -> tuple[str, list[ToolCall]]:
        text = "".join(content)
        if text.isspace() and (self.calls or calls):
            text = ""  # the line breaks around and between calls are not content
        if text:
            self._started = True
        self.calls.extend(calls)
        return text, calls


def split_tool_calls(text: str, tools: Sequence[Mapping[str, Any]]) -> tuple[str, list[ToolCall]]:
    """A whole answer -> (its content, its calls)."""
    s = ToolCallStream(tools)
    a, _ = s.feed(text)
    b, _ = s.close()
    content = a + b
    return (content.strip() if s.calls else content), s.calls

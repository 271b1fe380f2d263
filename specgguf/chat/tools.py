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

from specgguf.chat.markers import partial_marker
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
        if params is not None and (
            not isinstance(params, Mapping) or params.get("type", "object") != "object"
        ):
            # a call's arguments are an object of named parameters (OpenAI refuses the rest)
            raise ToolsError(
                f"{where}.function.parameters' must be a JSON schema of an object "
                '({"type": "object", ...})'
            )
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


def call_schema(
    tools: Sequence[Mapping[str, Any]], only: str | None = None, args_key: str = "arguments"
) -> dict[str, Any]:
    """The JSON schema of one call {"name": ..., args_key: ...} of any tool (or `only`).

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
        rebased = rebased_refs(params, f"#/$defs/{fn['name']}", found)
        if found:
            defs[fn["name"]] = rebased
            params = {"$ref": f"#/$defs/{fn['name']}"}
        alts.append(
            {
                "type": "object",
                "properties": {"name": {"const": fn["name"]}, args_key: params},
                "required": ["name", args_key],
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


def rebased_refs(schema: Any, base: str, found: list[bool] | None = None) -> Any:
    """A copy of `schema` whose references within itself ("#...") start at `base` instead;
    `found` gets a True for each one (the nesting is bounded by the request's JSON reader)."""
    if isinstance(schema, list):
        return [rebased_refs(v, base, found) for v in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k == "$ref" and isinstance(v, str) and v.startswith("#"):
            out[k] = base + v[1:]
            if found is not None:
                found.append(True)
        elif k in _NAMED_SCHEMAS and isinstance(v, Mapping):
            out[k] = {name: rebased_refs(sub, base, found) for name, sub in v.items()}
        elif k in _DATA_KEYWORDS:
            out[k] = v
        else:
            out[k] = rebased_refs(v, base, found)
    return out


#: the rule a call's JSON grammar is renamed to inside the wrapper
_CALL_RULE = "specgguf-tool-call"


def wrap_call_grammar(
    call_gbnf: str,
    *,
    parallel: bool,
    before: str = f"{OPEN}\n",
    after: str = f"\n{CLOSE}",
    between: str | None = "\n",
    open_all: str = "",
    close_all: str = "",
) -> str:
    """The grammar of one call's JSON (root rule `root`) inside a family's markers (Hermes'
    <tool_call> tags unless told): one call, or with `parallel` (and a `between` separator)
    one or more; `open_all` and `close_all` around them all."""
    body, n = re.subn(r"(?m)^root ::= ", f"{_CALL_RULE} ::= ", call_gbnf)
    if n != 1:
        raise ValueError("the call grammar has no root rule")
    call = " ".join(p for p in (gbnf_literal(before), _CALL_RULE, gbnf_literal(after)) if p)
    calls = call
    if parallel and between is not None:
        calls = f"{call} ({' '.join(p for p in (gbnf_literal(between), call) if p)})*"
    root = " ".join(p for p in (gbnf_literal(open_all), calls, gbnf_literal(close_all)) if p)
    return f"root ::= {root}\n{body}"


def gbnf_literal(text: str) -> str:
    """A GBNF string literal of `text` ("" for none)."""
    if not text:
        return ""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


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


@dataclass
class CallDelta:
    """A piece of the `index`-th call as it streams: the first one names the call (`id`,
    `name`, empty `arguments`), the others carry fragments of its arguments' JSON text, whose
    concatenation is the call's `arguments`."""

    index: int
    arguments: str
    name: str | None = None
    id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The OpenAI `delta.tool_calls[0]` of this piece."""
        if self.id is None:
            return {"index": self.index, "function": {"arguments": self.arguments}}
        return {"index": self.index, "id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}  # fmt: skip


def _as_call(text: str, names: set[str]) -> ToolCall | None:
    """A call from its JSON text (`arguments`, or `parameters` as some fine-tunes write), if
    it is one of a known tool and its arguments are an object (or the JSON text of one)."""
    try:
        obj = json_input.loads(text)  # bounded: the text may nest as deep as a grammar forced
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("name") not in names:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        return ToolCall(obj["name"], args) if arguments_object(args) else None
    if not isinstance(args, dict):
        return None
    return ToolCall(obj["name"], json.dumps(args, ensure_ascii=False))


def arguments_object(text: str) -> bool:
    """Whether a call's arguments text is a JSON object within json_input's bounds (depth, no
    lone surrogate): the test every call passes, whichever order its keys came in."""
    try:
        return isinstance(json_input.loads(text), dict)
    except ValueError:
        return False


FENCE = "```"
#: a fence's info strings that may hold a call (llama.cpp's Hermes parser: ```json, ```xml, ```)
FENCE_LANGS = ("", "json", "xml")
_FENCE_LINE = 16  # a fence's first line longer than this holds no call
_NAME_STRING = re.compile(r'"(?:[^"\\\n]|\\.){0,80}"')
_WAIT, _NO = -1, -2  # _lit's answers: the text may still become the literal; it cannot


def _ws(s: str, i: int) -> int:
    while i < len(s) and s[i] in " \t\r\n":
        i += 1
    return i


def _lit(s: str, i: int, lit: str) -> int:
    """The index after `lit` at s[i:], or _WAIT (s ends within it) or _NO."""
    if s.startswith(lit, i):
        return i + len(lit)
    return _WAIT if lit.startswith(s[i:]) else _NO


class _Scan:
    """Where a JSON object or array ends, fed piece by piece: its depth, whether it is in a
    string and after a backslash there."""

    def __init__(self, depth: int = 0) -> None:
        self.depth, self.in_str, self.esc = depth, False, False

    def run(self, s: str, i: int) -> int | None:
        """The index after the value's closing bracket, or None if s ends first."""
        for j in range(i, len(s)):
            c = s[j]
            if self.in_str:
                if self.esc:
                    self.esc = False
                elif c == "\\":
                    self.esc = True
                elif c == '"':
                    self.in_str = False
            elif c == '"':
                self.in_str = True
            elif c in "{[":
                self.depth += 1
            elif c in "}]":
                self.depth -= 1
                if self.depth == 0:
                    return j + 1
        return None


# the parser's states: in content; in what may open a call (a fence's first line, a tag); in a
# call's head {"name": ..., "arguments": ; in its arguments (streamed); in the rest of its
# object; in an object held whole (its keys in another order); after a call, closing its
# tag and fence
_TEXT, _PRELUDE, _HEAD, _ARGS, _REST, _WHOLE, _CLOSERS = range(7)


class ToolCallStream:
    """Splits generated text into content and tool calls as it arrives (feed, then close).

    A call is a JSON object {"name": <one of the tools>, "arguments": {...}} ("parameters"
    for "arguments" too) in one of the shapes llama.cpp's Hermes parser reads:

        <tool_call>{call}</tool_call>
        ```json {call} ```            (or ```xml, or a bare ```; each fence on its own line)
        ```json <tool_call>{call}</tool_call> ```
        <tool_call> ```json {call} ``` </tool_call>
        {call}                        (the answer's first non-blank character is "{")

    and one fence or tag may hold several calls one after another. Anything else is content:
    a fence of another language, a tag or fence whose JSON is not a call of a known tool
    (released as content once that is known). Content is released at once except a tail that
    may start a marker, and the blanks around calls are dropped. A call's arguments stream as
    they arrive when the object starts {"name": ..., "arguments": {: each fragment is the
    model's text, so that the fragments add up to the call's `arguments` exactly; a call in
    another order is released whole when its object closes."""

    def __init__(self, tools: Sequence[Mapping[str, Any]]) -> None:
        self.names = {t["function"]["name"] for t in tools}
        self.calls: list[ToolCall] = []
        self.truncated = False  # the text ended inside a call's arguments
        #: a call's arguments, once complete, were not a JSON object (`{"city": Oslo}`): the
        #: whole answer is content (its deltas may have been streamed already)
        self.invalid = False
        self._in_code = False  # a code fence that holds no call was opened in the content
        self._buf = ""
        self._state = _TEXT
        self._obj = 0  # in _HEAD and _WHOLE: where the object starts in _buf
        self._pos = 0  # in _PRELUDE and _WHOLE: how far _buf was read
        self._closers: list[str] = []  # the tag and fence to close, innermost last
        self._scan = _Scan()
        self._blank = ""  # blanks held back: content only if more content follows
        self._started = False  # some content was released
        #: one call at most (parallel_tool_calls false): the text after the first is content
        self.single = False

    # -- the caller's side ---------------------------------------------------------------------

    def feed(self, text: str) -> list[str | CallDelta]:
        """What can be released now: content text and pieces of calls, in order."""
        out: list[str | CallDelta] = []
        self._buf += text
        self._step(out)
        return out

    def close(self) -> list[str | CallDelta]:
        """The end of the text: what was held back (an unfinished marker or object is
        content; arguments cut short leave `truncated` set)."""
        out: list[str | CallDelta] = []
        if self._state == _ARGS:
            self.truncated = True
        elif self._state not in (_REST, _CLOSERS):
            self._content(out, self._buf)
        self._buf = ""
        if self._blank and not self.calls:
            self._emit(out, self._blank)
        self._blank = ""
        return out

    # -- the parser ----------------------------------------------------------------------------

    def _step(self, out: list[str | CallDelta]) -> None:
        """Run the state machine over the buffer: each state's handler (_BY_STATE) says
        whether to go on or to wait for more text."""
        while self._BY_STATE[self._state](self, out):
            pass

    def _text(self, out: list[str | CallDelta]) -> bool:
        s = self._buf
        if self.single and self.calls:
            self._content(out, s)
            self._buf = ""
            return False
        if not self._started and not self.calls:
            head = s.lstrip()
            if not head:
                self._content(out, s)  # only blanks so far: the answer may still start "{"
                self._buf = ""
                return False
            if head.startswith("{"):
                self._content(out, s[: len(s) - len(head)])
                self._open(head)
                return True
        found = [i for i in (s.find(OPEN), s.find(FENCE)) if i >= 0]
        if found:
            at = min(found)
            if self._in_code and s.startswith(FENCE, at):  # the content's own closing fence
                self._content(out, s[: at + len(FENCE)])
                self._buf, self._in_code = s[at + len(FENCE) :], False
                return True
            self._content(out, s[:at])
            self._open(s[at:])
            return True
        keep = max(partial_marker(s, OPEN), partial_marker(s, FENCE))
        self._content(out, s[: len(s) - keep])
        self._buf = s[len(s) - keep :]
        return False

    def _open(self, s: str, closers: list[str] | None = None) -> None:
        self._buf, self._pos, self._state = s, 0, _PRELUDE
        self._closers = closers if closers is not None else []

    def _reject(self, out: list[str | CallDelta]) -> None:
        """What looked like a call is not: its first marker is content, and the text after it
        is read again as content."""
        s = self._buf
        n = len(OPEN) if s.startswith(OPEN) else len(FENCE) if s.startswith(FENCE) else 1
        if s.startswith(FENCE) and FENCE not in self._closers[1:]:
            self._in_code = True  # a code block of the content: its closing fence is content
        self._content(out, s[:n])
        self._buf, self._state, self._closers = s[n:], _TEXT, []

    def _prelude(self, out: list[str | CallDelta]) -> bool:
        s = self._buf
        while True:
            j = _ws(s, self._pos)
            if j == len(s):
                return False
            r = s[j:]
            if r.startswith(FENCE) and FENCE not in self._closers:
                nl = r.find("\n")
                if nl < 0:
                    if len(r) <= _FENCE_LINE:
                        return False
                    self._reject(out)
                    return True
                if r[len(FENCE) : nl].strip().lower() not in FENCE_LANGS:
                    self._reject(out)
                    return True
                self._closers.append(FENCE)
                self._pos = j + nl + 1
            elif r.startswith(OPEN) and CLOSE not in self._closers:
                self._closers.append(CLOSE)
                self._pos = j + len(OPEN)
            elif r.startswith("{"):
                self._obj, self._state = j, _HEAD
                return True
            elif OPEN.startswith(r) or FENCE.startswith(r):
                return False
            else:
                self._reject(out)
                return True

    def _head(self, out: list[str | CallDelta]) -> bool:
        """{"name": <a tool's name>, "arguments": { starts a streamed call; another first key,
        or another key after the name, holds the object whole; another name is no call."""
        s = self._buf
        i = self._obj + 1
        for lit in ('"name"', ":"):
            i = _lit(s, _ws(s, i), lit)
            if i < 0:
                return self._held(i)
        j = _ws(s, i)
        m = _NAME_STRING.match(s, j)
        if m is None:
            if j == len(s) or s[j] == '"' and len(s) - j < 90:
                return False
            return self._held(_NO)
        try:
            name = json.loads(m.group(0))
        except ValueError:
            return self._held(_NO)
        if name not in self.names:
            self._reject(out)
            return True
        i = _lit(s, _ws(s, m.end()), ",")
        if i < 0:
            return self._held(i)
        j = _ws(s, i)
        ends = [_lit(s, j, k) for k in ('"arguments"', '"parameters"')]
        i = max(ends)
        if i < 0:
            return self._held(i)
        i = _lit(s, _ws(s, i), ":")
        if i < 0:
            return self._held(i)
        j = _ws(s, i)
        if j == len(s):
            return False
        if s[j] != "{":
            return self._held(_NO)
        self._start(out, name)
        self._buf, self._scan, self._state = s[j:], _Scan(), _ARGS
        return True

    def _held(self, why: int) -> bool:
        """The head cannot be read yet (_WAIT), or the object is held whole (_NO)."""
        if why == _WAIT:
            return False
        self._scan, self._pos, self._state = _Scan(), self._obj, _WHOLE
        return True

    def _whole(self, out: list[str | CallDelta]) -> bool:
        end = self._scan.run(self._buf, self._pos)
        if end is None:
            self._pos = len(self._buf)
            return False
        call = _as_call(self._buf[self._obj : end], self.names)
        if call is None:
            self._reject(out)
            return True
        self._start(out, call.name, call.id)
        self._args(out, call.arguments)
        self._buf, self._state = self._buf[end:], _CLOSERS
        return True

    def _arguments(self, out: list[str | CallDelta]) -> bool:
        """In a call's arguments: streamed as they come, up to the object's end."""
        end = self._scan.run(self._buf, 0)
        piece = self._buf if end is None else self._buf[:end]
        if piece:
            self._args(out, piece)
        if end is None:
            self._buf = ""
            return False
        self._buf = self._buf[end:]
        self._scan, self._state = _Scan(depth=1), _REST
        if not arguments_object(self.calls[-1].arguments):
            self.invalid = True
        return True

    def _rest(self, out: list[str | CallDelta]) -> bool:
        """Keys after the arguments: read past, not content."""
        end = self._scan.run(self._buf, 0)
        if end is None:
            self._buf = ""
            return False
        self._buf, self._state = self._buf[end:], _CLOSERS
        return True

    def _after_call(self, out: list[str | CallDelta]) -> bool:
        """After a call's object: its closing tag and fence, or the next call inside them
        (nothing is emitted here: `out` is every handler's argument)."""
        s = self._buf
        while self._closers:
            j = _ws(s, 0)
            r = s[j:]
            closer = self._closers[-1]
            if r.startswith(closer):
                self._closers.pop()
                s = r[len(closer) :]
                continue
            if closer.startswith(r) or OPEN.startswith(r) and CLOSE not in self._closers:
                self._buf = s  # the blanks stay: content, should no closer follow
                return False
            if self.single:
                self._buf, self._closers, self._state = s, [], _TEXT
                return True  # a second call, or text, where one call at most is read
            if r.startswith("{") or r.startswith(OPEN) and CLOSE not in self._closers:
                self._open(r, self._closers)
                return True
            self._closers = []  # an unclosed tag or fence: what follows is content
        self._buf, self._state = s, _TEXT
        return True

    # -- what comes out ------------------------------------------------------------------------

    def _content(self, out: list[str | CallDelta], text: str) -> None:
        body = text.rstrip()
        if not body:
            self._blank += text
            return
        self._emit(out, self._blank + body)
        self._blank = text[len(body) :]

    def _emit(self, out: list[str | CallDelta], text: str) -> None:
        self._started = True
        if out and isinstance(out[-1], str):
            out[-1] += text
        else:
            out.append(text)

    def _start(self, out: list[str | CallDelta], name: str, ident: str | None = None) -> None:
        self._blank = ""  # the blanks before a call are not content
        call = ToolCall(name, "") if ident is None else ToolCall(name, "", ident)
        self.calls.append(call)
        out.append(CallDelta(len(self.calls) - 1, "", name, call.id))

    def _args(self, out: list[str | CallDelta], piece: str) -> None:
        call = self.calls[-1]
        call.arguments += piece
        last = out[-1] if out else None
        if isinstance(last, CallDelta) and last.id is None and last.index == len(self.calls) - 1:
            last.arguments += piece
        else:
            out.append(CallDelta(len(self.calls) - 1, piece))

    #: each state's handler, by the state's number: True to go on, False to wait for text
    _BY_STATE = (_text, _prelude, _head, _arguments, _rest, _whole, _after_call)
    assert len(_BY_STATE) == _CLOSERS + 1


@dataclass
class ParsedAnswer:
    """A whole answer split: its content, its calls, and whether it ended inside a call's
    arguments (`truncated`)."""

    content: str
    calls: list[ToolCall]
    truncated: bool = False
    invalid: bool = False  # always False here: such an answer has no calls


def split_tool_calls(text: str, tools: Sequence[Mapping[str, Any]]) -> tuple[str, list[ToolCall]]:
    """A whole answer in Hermes' shapes -> (its content, its calls); an answer holding a call
    whose arguments are not a JSON object is all content (specgguf.chat.dialects'
    parse_answer is the same for every family)."""
    s = ToolCallStream(tools)
    events = s.feed(text) + s.close()
    if s.invalid:
        return text, []
    content = "".join(e for e in events if isinstance(e, str))
    return (content.strip() if s.calls else content), s.calls

"""What every dialect is made of: its row (Dialect), the parser protocol its stream follows,
and the pieces most families share (call ids, a block parser, forced-call grammars).

A dialect is the way one model family writes tool calls in its own text. Its row says how to
recognise the family from its chat template (`markers`, every one of which occurs in the
template's source, and `excluded`, none of which does), how to read its calls (`stream`: an
incremental parser; a whole answer is the same parser fed once), the shape of the call ids its
template accepts on the next turn (`new_id`), which of its markers are control tokens that must
be detokenized for the parser to see them (`control_tokens`), and how a forced call is written
(`forced`: the text around each call's JSON, or None where a forced call is not offered).

Pure: no model, no llama_cpp.
"""

from __future__ import annotations

import json
import random
import string
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from specgguf.chat.dialects.framed import Framed
from specgguf.chat.markers import partial_marker
from specgguf.chat.reasoning import ReasoningSplit
from specgguf.chat.tools import (
    CallDelta,
    ParsedAnswer,
    ToolCall,
    arguments_object,
    call_schema,
    wrap_call_grammar,
)
from specgguf.io import json_input

Tools = Sequence[Mapping[str, Any]]


class Splitter(Protocol):
    """Splits generated text into (REASONING or CONTENT, text) pieces as it arrives."""

    reasoning: str
    content: str

    def feed(self, text: str) -> list[tuple[str, str]]: ...

    def close(self) -> list[tuple[str, str]]: ...


class CallStream(Protocol):
    """Splits generated text into content and calls as it arrives: `feed` returns what can be
    released now (content text and CallDelta pieces: a call's id and name first, then
    fragments of its arguments that add up to them), `close` the rest."""

    calls: list[ToolCall]
    truncated: bool  # the text ended inside a call
    invalid: bool  # a call's arguments were not a JSON object: the answer is no call

    def feed(self, text: str) -> list[str | CallDelta]: ...

    def close(self) -> list[str | CallDelta]: ...


def openai_call_id() -> str:
    """OpenAI's shape: call_ and 24 hexadecimal digits."""
    return f"call_{uuid.uuid4().hex[:24]}"


_ALNUM = string.ascii_letters + string.digits


def alnum9_call_id() -> str:
    """Mistral's shape: exactly 9 letters and digits (its template refuses any other)."""
    return "".join(random.choice(_ALNUM) for _ in range(9))


@dataclass(frozen=True)
class Forced:
    """How a forced call is written: each call's JSON object ({name_key: ..., args_key: ...})
    between `before` and `after`; several calls separated by `between` (None: the family writes
    one call per answer)."""

    before: str
    after: str = ""
    between: str | None = None
    args_key: str = "arguments"
    #: the whole answer around the calls (Mistral Nemo's JSON list)
    open_all: str = ""
    close_all: str = ""

    def schema(self, tools: Tools, only: str | None = None) -> dict[str, Any]:
        """The JSON schema of one call's object in this family's keys."""
        return call_schema(tools, only, self.args_key)

    def grammar(self, call_gbnf: str, *, parallel: bool, **_: Any) -> str:
        """The GBNF of the forced answer, around the grammar of one call's object (the
        tools and the prompt's opened thinking, which Framed forms read, change nothing)."""
        return wrap_call_grammar(
            call_gbnf, parallel=parallel, before=self.before, after=self.after,
            between=self.between, open_all=self.open_all, close_all=self.close_all,
        )  # fmt: skip


@dataclass(frozen=True)
class Dialect:
    """One family's row in the registry (specgguf/chat/dialects/__init__.py)."""

    name: str  # what `serve` prints and /props shows
    family: str  # the models that write it, for people
    markers: tuple[str, ...]  # all occur in the template of a model of the family
    stream: Callable[[Tools, Callable[[], str]], CallStream]
    excluded: tuple[str, ...] = ()  # none occurs in it
    new_id: Callable[[], str] = openai_call_id
    control_tokens: tuple[str, ...] = ()  # markers that are special tokens of the vocabulary
    forced: Forced | Framed | None = None
    example: str = ""  # one call as the family writes it, for the docs table
    #: the family's own reader of the answer's structure (GPT-OSS' channels): (the prompt
    #: opened the thinking, reasoning is extracted, calls are read) -> a splitter like
    #: ReasoningSplit whose content holds the calls in the text `stream` reads; None: the
    #: <think> splitter. A family with one sees its control tokens in every chat answer
    split: Callable[[bool, bool, bool], Splitter] | None = None
    #: how the family's thinking opens and closes (a reasoning budget closes it so)
    thinking: tuple[str, str] = ("<think>", "</think>")
    #: template variables the family's template reads for what llama-server calls
    #: enable_thinking (DeepSeek V3.1: `thinking`)
    thinking_vars: tuple[str, ...] = ()
    #: the key the family's template reads an earlier assistant turn's reasoning from (GPT-OSS:
    #: `thinking`, and a turn with calls then has empty content beside it); "": none
    past_reasoning: str = ""

    def past_turns(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Earlier turns as the family's template reads them (see `past_reasoning`)."""
        if not self.past_reasoning:
            return messages
        out = []
        for m in messages:
            thought = m.get("reasoning_content")
            if m.get("role") == "assistant" and isinstance(thought, str) and thought:
                m = {k: v for k, v in m.items() if k != "reasoning_content"}
                m[self.past_reasoning] = thought
                if m.get("tool_calls"):
                    m["content"] = ""
            out.append(m)
        return out

    def matches(self, source: str) -> bool:
        return all(m in source for m in self.markers) and not any(
            m in source for m in self.excluded
        )

    def parser(self, tools: Tools) -> CallStream:
        return self.stream(tools, self.new_id)

    def splitter(self, *, opened: bool, extract: bool, calls: bool) -> Splitter | None:
        """What splits a chat answer into reasoning and content (None: nothing to split)."""
        if self.split is not None:
            return self.split(opened, extract, calls)
        return ReasoningSplit(opened=opened) if extract else None

    def forcing(self, fallback: Dialect) -> Dialect:
        """The dialect a forced call is written (and read) in: this one where the family has
        a forced form, else `fallback` (its tags are described to the model in the prompt)."""
        return self if self.forced is not None else fallback


def parse_answer(text: str, tools: Tools, dialect: Dialect) -> ParsedAnswer:
    """A whole answer in `dialect` -> its content and calls. An answer holding a call whose
    arguments are not a JSON object is all content, untouched: no call of it is returned."""
    s = dialect.parser(tools)
    events = s.feed(text) + s.close()
    if s.invalid:
        return ParsedAnswer(text, [])
    content = "".join(e for e in events if isinstance(e, str))
    return ParsedAnswer(content.strip() if s.calls else content, s.calls, s.truncated)


def known_call(name: Any, args: Any, tools: Tools) -> tuple[str, str] | None:
    """(name, arguments JSON text) when `name` is one of the tools and `args` an object or
    the JSON text of one; else None (the text is then content)."""
    if name not in {t["function"]["name"] for t in tools}:
        return None
    if isinstance(args, str):
        return (name, args) if arguments_object(args) else None
    if not isinstance(args, dict):
        return None
    return name, json.dumps(args, ensure_ascii=False)


def loads_or_none(text: str) -> Any:
    """JSON within json_input's bounds, or None."""
    try:
        return json_input.loads(text)
    except ValueError:
        return None


def section_parts(block: str, begin: str, end: str, call_begin: str) -> list[str] | None:
    """The text of each call in a section `begin` ... `end` (the end may be missing: the answer
    stopped there) where every call opens with `call_begin`; None when the section holds
    anything before its first call, or no call."""
    parts = block[len(begin) :].removesuffix(end).split(call_begin)
    if parts[0].strip() or len(parts) < 2:
        return None
    return parts[1:]


#: a block parser: the block's text (opening marker included) -> its calls as (name,
#: arguments text, id or None), or None when the block is not calls of the tools
BlockParser = Callable[[str, Tools], "list[tuple[str, str, str | None]] | None"]


class BlockCallStream:
    """A parser for families whose calls sit in a block that opens with a marker and closes
    with another (or runs to the end of the answer: `end` None). Content is released as it
    arrives, except a tail that may start the marker; a block is held until it closes and is
    then read whole by `parse`: its calls are released (id and name, then the arguments in one
    piece), or, when it holds none, it is content. Each feed costs what it brought (the search
    restarts only within the marker's length)."""

    def __init__(
        self,
        tools: Tools,
        new_id: Callable[[], str],
        *,
        start: str,
        end: str | None,
        parse: BlockParser,
        start_anywhere: bool = True,
    ) -> None:
        self.tools = tools
        self.calls: list[ToolCall] = []
        self.truncated = False
        self.invalid = False
        self._new_id = new_id
        self._start, self._end, self._parse = start, end, parse
        self._anywhere = start_anywhere  # False: only an answer that begins with it
        self._buf = ""
        self._in_block = False
        self._seen = 0  # how far _buf was searched for the end marker
        self._started = False  # content was released (for start_anywhere False)

    def feed(self, text: str) -> list[str | CallDelta]:
        out: list[str | CallDelta] = []
        self._buf += text
        self._step(out, final=False)
        return out

    def close(self) -> list[str | CallDelta]:
        out: list[str | CallDelta] = []
        self._step(out, final=True)
        if self._buf:
            self._content(out, self._buf)
            self._buf = ""
        return out

    def _step(self, out: list[str | CallDelta], final: bool) -> None:
        while self._buf:
            if not self._in_block:
                if not self._open(out, final):
                    return
                continue
            if self._end is None:
                if not final:
                    return
                block, self._buf = self._buf, ""
            else:
                j = self._buf.find(self._end, max(len(self._start), self._seen))
                if j < 0:
                    if not final:
                        self._seen = max(len(self._start), len(self._buf) - len(self._end))
                        return
                    block, self._buf = self._buf, ""
                    self.truncated = True
                else:
                    block = self._buf[: j + len(self._end)]
                    self._buf = self._buf[j + len(self._end) :]
            self._in_block, self._seen = False, 0
            self._block(out, block)

    def _open(self, out: list[str | CallDelta], final: bool) -> bool:
        s = self._buf
        if not self._anywhere:
            head = s.lstrip()
            if self._started or (head and not self._start.startswith(head[: len(self._start)])):
                self._content(out, s)
                self._buf = ""
                return False
            if len(head) < len(self._start):
                if final:
                    self._content(out, s)
                    self._buf = ""
                return False
            self._buf, self._in_block = head, True
            return True
        i = s.find(self._start)
        if i < 0:
            keep = 0 if final else partial_marker(s, self._start)
            self._content(out, s[: len(s) - keep])
            self._buf = s[len(s) - keep :]
            return False
        self._content(out, s[:i])
        self._buf, self._in_block = s[i:], True
        return True

    def _block(self, out: list[str | CallDelta], block: str) -> None:
        calls = self._parse(block, self.tools)
        if not calls:
            self.truncated = False
            self._content(out, block)
            return
        for name, args, ident in calls:
            call = ToolCall(name, args, ident or self._new_id())
            self.calls.append(call)
            index = len(self.calls) - 1
            out.append(CallDelta(index, "", name, call.id))
            out.append(CallDelta(index, args))

    def _content(self, out: list[str | CallDelta], text: str) -> None:
        if not text:
            return
        self._started = True
        if out and isinstance(out[-1], str):
            out[-1] += text
        else:
            out.append(text)


"""What every dialect is made of: its row (Dialect), the parser protocol its stream follows,
and the pieces most families share (call ids, a block parser, forced-call grammars).

A dialect is the way one model family writes tool calls in its own text. Its row says how to
recognise the family from its chat template (`markers`, every one of which occurs in the
template's source, and `excluded`, none of which does), how to read its calls (`stream`: an
incremental parser; a whole answer is the same parser fed once), the shape of the call ids its
template accepts on the next turn (`new_id`), which of its markers are control tokens that must
be detokenized for the parser to see them (`control_tokens`), how it marks its thinking
(`thinking`), how the server describes the tools to it when its template does not
(`describe`), and how a forced call is written (`forced`: the text around each call's JSON, or
a grammar of its own; None where a forced call is not offered).

Pure: no model, no llama_cpp.
"""

from __future__ import annotations

import json
import random
import re
import string
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from specgguf.chat.dialects.framed import Framed
from specgguf.chat.markers import partial_marker
from specgguf.chat.reasoning import THINK, ReasoningSplit
from specgguf.chat.tools import (
    CallDelta,
    ParsedAnswer,
    ToolCall,
    arguments_object,
    call_schema,
    gbnf_literal,
    tools_system_prompt,
    wrap_call_grammar,
)
from specgguf.io import json_input

Tools = Sequence[Mapping[str, Any]]
#: a JSON schema -> the GBNF of its values (root rule `root`): the caller's converter
ToGbnf = Callable[[Any], str]


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
    #: a thinking block (its opening and closing markers) the model may write first
    think: tuple[str, str] | None = None

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

    def gbnf(
        self, tools: Tools, only: str | None, *, parallel: bool, to_gbnf: ToGbnf,
        think: bool = True,
    ) -> str:  # fmt: skip
        """The whole forced answer's GBNF: the calls (of any tool, or `only`; one, or with
        `parallel` one or more), after the family's thinking where it thinks (and `think`:
        the request lets it)."""
        answer = self.calls_gbnf(tools, only, parallel=parallel, to_gbnf=to_gbnf)
        return answer if self.think is None or not think else thinking_first(answer, *self.think)

    def calls_gbnf(
        self, tools: Tools, only: str | None, *, parallel: bool, to_gbnf: ToGbnf
    ) -> str:
        """The calls' GBNF (a family whose calls are not one JSON object each overrides it)."""
        return self.grammar(to_gbnf(self.schema(tools, only)), parallel=parallel)


def not_containing(marker: str) -> str:
    """A GBNF expression of any text that does not contain `marker`, for a place the marker
    follows: at each character, either not the marker's first character, or the marker's
    first k characters followed by anything but its next one; and at the end, optionally,
    the start of the marker (the text "a\n" before "\n</x>"). A marker that overlaps itself
    may so be passed over once: the model then goes on."""
    alts = []
    for k in range(len(marker)):
        head = gbnf_literal(marker[:k]) + " " if k else ""
        alts.append(f"{head}[^{_class_char(marker[k])}]")
    tails = [gbnf_literal(marker[:k]) for k in range(1, len(marker))]
    tail = f" ({' | '.join(tails)})?" if tails else ""
    return "(" + " | ".join(alts) + ")*" + tail


def _class_char(c: str) -> str:
    return "\\" + c if c in "\\]^-[" else ("\\n" if c == "\n" else c)


_ROOT = re.compile(r"(?m)^root ::= ")


def thinking_first(gbnf: str, open_: str, close: str) -> str:
    """`gbnf` (root rule `root`) after an optional thinking block open_ ... close."""
    body, n = _ROOT.subn("specgguf-answer ::= ", gbnf)
    if n != 1:
        raise ValueError("the answer grammar has no root rule")
    think = f"{gbnf_literal(open_)} {not_containing(close)} {gbnf_literal(close)}"
    return f'root ::= ({think} [ \\t\\n]*)? specgguf-answer\n{body}'


_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|[A-Za-z][A-Za-z0-9-]*|\s+|.')
_RULE = re.compile(r"(?m)^([A-Za-z][A-Za-z0-9-]*) ::= ")


def prefixed_rules(gbnf: str, prefix: str) -> tuple[str, str]:
    """`gbnf` with every rule renamed `prefix`-name (so that several converted schemas live in
    one grammar), and the name its root rule now has."""
    names = set(_RULE.findall(gbnf))
    out = [
        f"{prefix}-{t}" if t in names else t for t in _TOKEN.findall(gbnf)
    ]
    return "".join(out), f"{prefix}-root"



def named(fmt: str) -> Callable[[str], str]:
    """A call's head as a GBNF literal: `fmt` with the tool's name for {name}."""
    return lambda name: gbnf_literal(fmt.format(name=name))


@dataclass(frozen=True)
class PerToolForced(Forced):
    """A forced form for families that write the tool's name outside the arguments' JSON
    (`head` of the name, as GBNF, then the arguments, then `after`): one alternative per tool,
    each with its own parameters' grammar."""

    head: Callable[[str], str] = named("{name}")

    def args_gbnf(self, params: Mapping[str, Any], prefix: str, to_gbnf: ToGbnf) -> str:
        """The grammar of one tool's arguments, its rules renamed under `prefix` (root rule
        `prefix`-root)."""
        return prefixed_rules(to_gbnf(params), prefix)[0]

    def calls_gbnf(
        self, tools: Tools, only: str | None, *, parallel: bool, to_gbnf: ToGbnf
    ) -> str:
        rules, alts = [], []
        for i, t in enumerate(tools):
            fn = t["function"]
            if only is not None and fn["name"] != only:
                continue
            prefix = f"specgguf-tool{i}"
            rules.append(self.args_gbnf(fn.get("parameters") or {"type": "object"}, prefix,
                                        to_gbnf))  # fmt: skip
            parts = (self.head(fn["name"]), f"{prefix}-root", gbnf_literal(self.after))
            alts.append(" ".join(p for p in parts if p))
        call = "(" + " | ".join(alts) + ")"
        calls = call
        if parallel and self.between is not None:
            calls = f"{call} ({' '.join(p for p in (gbnf_literal(self.between), call) if p)})*"
        root = " ".join(
            p for p in (gbnf_literal(self.open_all), calls, gbnf_literal(self.close_all)) if p
        )
        return "\n".join([f"root ::= {root}", *rules])


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
    #: how the family's thinking opens and closes (reasoning_content; a reasoning budget
    #: closes it so)
    thinking: tuple[str, str] = THINK
    #: template variables the family's template reads for what llama-server calls
    #: enable_thinking (DeepSeek V3.1: `thinking`)
    thinking_vars: tuple[str, ...] = ()
    #: the openings of its calls (the lazy grammar's triggers): with tools and tool_choice
    #: auto the answer is free until one of them appears outside the thinking, and from its
    #: first character on it is held to the family's forced form without the thinking, which
    #: each trigger must begin; (): auto stays unconstrained
    triggers: tuple[str, ...] = ()
    #: the triggers count only as the answer's first text (Llama 3's bare JSON object: the
    #: same opening later in an answer is text)
    triggers_at_start: bool = False
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
    #: the system message that describes the tools where the template does not render them
    describe: Callable[[Tools], str] = tools_system_prompt
    #: variables its template reads besides llama-server's usual ones (FireFunction's
    #: `functions`), from the request's tools (none: an empty list)
    variables: Callable[[Tools], dict[str, Any]] = lambda tools: {}

    def matches(self, source: str) -> bool:
        return all(m in source for m in self.markers) and not any(
            m in source for m in self.excluded
        )

    def parser(self, tools: Tools, *, parallel: bool = True) -> CallStream:
        """A parser of one answer; without `parallel` it reads one call at most (the text
        after the first call is content)."""
        s = self.stream(tools, self.new_id)
        if not parallel:
            s.single = True  # type: ignore[attr-defined]
        return s

    def splitter(self, *, opened: bool, extract: bool, calls: bool) -> Splitter | None:
        """What splits a chat answer into reasoning and content (None: nothing to split)."""
        if self.split is not None:
            return self.split(opened, extract, calls)
        return ReasoningSplit(opened=opened, markers=self.thinking) if extract else None

    def forcing(self, fallback: Dialect) -> Dialect:
        """The dialect a forced call is written (and read) in: this one where the family has
        a forced form, else `fallback` (its tags are described to the model in the prompt)."""
        return self if self.forced is not None else fallback


def parse_answer(
    text: str, tools: Tools, dialect: Dialect, *, parallel: bool = True
) -> ParsedAnswer:
    """A whole answer in `dialect` -> its content and calls (one at most without `parallel`).
    An answer holding a call whose arguments are not a JSON object is all content, untouched:
    no call of it is returned."""
    s = dialect.parser(tools, parallel=parallel)
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


#: one call's text in a section, whether it is the section's last (which may stop unclosed),
#: and the tools -> the call as (name, arguments text, id or None), or None: not a call of them
CallReader = Callable[[str, bool, Tools], "tuple[str, str, str | None] | None"]


def section_calls(
    block: str, tools: Tools, begin: str, end: str, call_begin: str, read: CallReader
) -> list[tuple[str, str, str | None]] | None:
    """The calls of a section `begin` ... `end` (the end may be missing: the answer stopped
    there) where every call opens with `call_begin`, each read by `read`; None when the
    section holds anything before its first call, no call, or a part that is not a call."""
    parts = block[len(begin) :].removesuffix(end).split(call_begin)
    if parts[0].strip() or len(parts) < 2:
        return None
    out = []
    for i in range(1, len(parts)):
        call = read(parts[i], i == len(parts) - 1, tools)
        if call is None:
            return None
        out.append(call)
    return out


#: a block parser: the block's text (opening marker included) -> its calls as (name,
#: arguments text, id or None), or None when the block is not calls of the tools
BlockParser = Callable[[str, Tools], "list[tuple[str, str, str | None]] | None"]


class StreamBase:
    """What every call parser keeps (the CallStream protocol's fields) and how it releases:
    content pieces merged, a call as its id and name, then its arguments in one piece."""

    def __init__(self, tools: Tools, new_id: Callable[[], str]) -> None:
        self.tools = tools
        self.calls: list[ToolCall] = []
        self.truncated = False
        self.invalid = False
        self.single = False  # one call at most: after the first, what follows is content
        self._new_id = new_id
        self._buf = ""  # what was fed and not released yet

    def feed(self, text: str) -> list[str | CallDelta]:
        out: list[str | CallDelta] = []
        self._buf += text
        self._step(out, final=False)
        return out

    def close(self) -> list[str | CallDelta]:
        out: list[str | CallDelta] = []
        self._step(out, final=True)
        self._rest(out, self._buf)
        self._buf = ""
        return out

    def _step(self, out: list[str | CallDelta], final: bool) -> None:
        """Release what can be released from _buf (all of it that can be read, if final)."""
        raise NotImplementedError

    def _rest(self, out: list[str | CallDelta], text: str) -> None:
        """What is left at the end: content, unless the family reads it otherwise."""
        self._content(out, text)

    def _release(
        self, out: list[str | CallDelta], name: str, args: str, ident: str | None
    ) -> None:
        self.calls.append(ToolCall(name, args, ident or self._new_id()))
        index = len(self.calls) - 1
        out += [CallDelta(index, "", name, self.calls[-1].id), CallDelta(index, args)]

    def _content(self, out: list[str | CallDelta], text: str) -> None:
        if not text:
            return
        if out and isinstance(out[-1], str):
            out[-1] += text
        else:
            out.append(text)


class BlockCallStream(StreamBase):
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
        super().__init__(tools, new_id)
        self._start, self._end, self._parse = start, end, parse
        self._anywhere = start_anywhere  # False: only an answer that begins with it
        self._in_block = False
        self._seen = 0  # how far _buf was searched for the end marker
        self._started = False  # content was released (for start_anywhere False)

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
        if self.single and self.calls:
            self._content(out, s)
            self._buf = ""
            return False
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
        if not calls or self.single and len(calls) > 1:
            self.truncated = False
            self._content(out, block)
            return
        for name, args, ident in calls:
            self._release(out, name, args, ident)

    def _content(self, out: list[str | CallDelta], text: str) -> None:
        if text:
            self._started = True
        super()._content(out, text)



def json_list_parser(
    marker: str,
    *,
    end: str = "",
    name_key: str = "name",
    args_key: str = "arguments",
    id_of: Callable[[Any], str | None] = lambda _: None,
) -> BlockParser:
    """A block parser for families that write all their calls as one JSON list after a marker
    (and before `end`): [{name_key: ..., args_key: {...}}, ...]; `id_of` reads a call's own
    id from its object where the family writes one."""

    def parse(block: str, tools: Tools) -> list[tuple[str, str, str | None]] | None:
        body = block[len(marker) :]
        if end and body.endswith(end):
            body = body[: -len(end)]
        return calls_of(loads_or_none(body.strip()), tools, name_key, args_key, id_of)

    return parse


def calls_of(
    items: Any,
    tools: Tools,
    name_key: str = "name",
    args_key: str = "arguments",
    id_of: Callable[[Any], str | None] = lambda _: None,
) -> list[tuple[str, str, str | None]] | None:
    """A JSON list of call objects -> its calls, or None unless every item is a call of one
    of the tools."""
    if not isinstance(items, list) or not items:
        return None
    out = []
    for item in items:
        if not isinstance(item, dict):
            return None
        call = known_call(item.get(name_key), item.get(args_key, {}), tools)
        if call is None:
            return None
        out.append((*call, id_of(item)))
    return out

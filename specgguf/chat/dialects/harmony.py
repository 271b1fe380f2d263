"""GPT-OSS' harmony format: the answer is a sequence of messages, each a header naming its
channel (and, for a call, its recipient) and a body:

    <|channel|>analysis<|message|>The user wants the weather.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json
    <|message|>{"city": "Paris"}

(the call's header and body on one line). The prompt ends with `<|start|>assistant`, so the
first header starts at `<|channel|>`; a recipient may also sit in the role part
(`<|start|>assistant to=functions.f<|channel|>...`).
The `analysis` channel is reasoning; `final` (and `commentary` without a recipient, the
preamble before calls) is content; a body sent `to=functions.NAME` is a call of NAME, its body
the arguments' JSON; a body sent to any other recipient (a built-in tool the server does not
run) is dropped, as llama-server drops it. `<|call|>` and `<|return|>` end the generation.

These markers are control tokens: the generator shows them to this parser in every chat
answer, and the parser never lets one through to the user. `HarmonySplit` is the family's
splitter: it hands reasoning and content on, and each call as one canonical block that
`CALL_START` opens and `CALL_END` closes, which the family's call stream reads.
"""

from __future__ import annotations

import re

from specgguf.chat.dialects.base import (
    BlockCallStream,
    Dialect,
    Tools,
    known_call,
)
from specgguf.chat.dialects.framed import Frame, Framed
from specgguf.chat.markers import partial_marker
from specgguf.chat.reasoning import CONTENT, REASONING, Pieces
from specgguf.chat.tools import gbnf_literal

CHANNEL, MESSAGE, START, END = "<|channel|>", "<|message|>", "<|start|>", "<|end|>"
CALL, RETURN, CONSTRAIN = "<|call|>", "<|return|>", "<|constrain|>"
#: what ends a message's body (<|start|> begins the next one without an <|end|>)
_BODY_ENDS = (END, CALL, RETURN, START)
#: the canonical block a call is handed to the call stream in
CALL_START, CALL_END = f"{CHANNEL}commentary to=functions.", CALL
#: a header longer than this is not a header: the text is content
MAX_HEADER = 512
_RECIPIENT = re.compile(r"\bto=([^\s<]{1,128})")
_CHANNEL = re.compile(r"<\|channel\|>([A-Za-z0-9_-]{1,32})")
_CALL = re.compile(
    re.escape(CALL_START) + r"([A-Za-z0-9_.-]{1,64})" + re.escape(MESSAGE) + r"(.*)"
    + re.escape(CALL_END), re.DOTALL,
)  # fmt: skip

# what a message's body is
_REASON, _SAY, _CALL_BODY, _DROP = range(4)


class HarmonySplit(Pieces):
    """Feed the generated harmony text; get (REASONING or CONTENT, text) pieces in order.
    `extract` False (reasoning_format none): the analysis messages stay in the content with
    their markers, as llama-server leaves them. `calls` False: no tools were given, so a call
    is dropped like any unsolicited recipient's message."""

    def __init__(self, opened: bool = False, extract: bool = True, calls: bool = True) -> None:
        del opened  # the prompt ends before the first header, never inside a body
        super().__init__()
        self._extract, self._calls = extract, calls
        self._body: int | None = None  # None: reading a header
        self._first = True  # before the answer's first header (plain text is content)
        self._call_name = ""
        self._call_args = ""

    def _rest(self, out: list[tuple[str, str]]) -> None:
        if self._body is not None:
            self._end_body(out)
        self._buf = ""  # a header cut short says nothing

    def _step(self, out: list[tuple[str, str]], final: bool) -> None:
        while self._buf:
            if self._body is None:
                if not self._header(out, final):
                    return
                continue
            ends = [(i, m) for m in _BODY_ENDS if (i := self._buf.find(m)) >= 0]
            if not ends:
                keep = 0 if final else max(partial_marker(self._buf, m) for m in _BODY_ENDS)
                self._body_text(out, self._buf[: len(self._buf) - keep])
                self._buf = self._buf[len(self._buf) - keep :]
                return
            i, marker = min(ends)
            self._body_text(out, self._buf[:i])
            self._buf = self._buf[i if marker == START else i + len(marker) :]
            self._end_body(out)

    def _header(self, out: list[tuple[str, str]], final: bool) -> bool:
        """Reads a header when it is whole; False: wait for more."""
        s = self._buf
        if self._first:
            head = s.lstrip()
            markers = (CHANNEL, START, " to=")
            if not final and any(m.startswith(s) or m.startswith(head) for m in markers):
                return False
            if not any(s.startswith(m) or head.startswith(m) for m in markers):
                self._first, self._body = False, _SAY  # no header: all of it is content
                return True
            self._first = False
        i = s.find(MESSAGE)
        if i < 0:
            if len(s) > MAX_HEADER:
                self._body = _SAY
                return True
            return False
        header, self._buf = s[:i], s[i + len(MESSAGE) :]
        recipient = _RECIPIENT.search(header)
        channel = _CHANNEL.search(header)
        if recipient is not None:
            name = recipient.group(1)
            if name.startswith("functions.") and self._calls:
                self._body, self._call_name, self._call_args = _CALL_BODY, name[10:], ""
            else:
                self._body = _DROP
        elif channel is not None and channel.group(1) == "analysis":
            self._body = _REASON
            if not self._extract:
                self._emit(out, CONTENT, f"{CHANNEL}analysis{MESSAGE}")
        else:
            self._body = _SAY
        return True

    def _body_text(self, out: list[tuple[str, str]], text: str) -> None:
        if not text:
            return
        if self._body == _REASON:
            self._emit(out, REASONING if self._extract else CONTENT, text)
        elif self._body == _SAY:
            self._emit(out, CONTENT, text)
        elif self._body == _CALL_BODY:
            self._call_args += text

    def _end_body(self, out: list[tuple[str, str]]) -> None:
        if self._body == _REASON and not self._extract:
            self._emit(out, CONTENT, END)
        elif self._body == _CALL_BODY:
            block = f"{CALL_START}{self._call_name}{MESSAGE}{self._call_args.strip()}{CALL_END}"
            self._emit(out, CONTENT, block)
        self._body = None


def parse(block: str, tools: Tools) -> list[tuple[str, str, str | None]] | None:
    """One canonical call block -> its call (None: not a call of the tools)."""
    m = _CALL.fullmatch(block)
    if m is None:
        return None
    call = known_call(m.group(1), m.group(2), tools)
    return None if call is None else [(*call, None)]


class HarmonyCalls(BlockCallStream):
    """The family's call stream: reads the splitter's canonical call blocks; one that is not
    a call of the tools (its arguments cut short, or not an object) is content without the
    canonical markers, which are no text of the model's."""

    def __init__(self, tools: Tools, new_id) -> None:
        super().__init__(tools, new_id, start=CALL_START, end=CALL_END, parse=parse)

    def _block(self, out, block: str) -> None:
        if parse(block, self.tools) is None:
            head = block.find(MESSAGE)
            block = block[head + len(MESSAGE) :].removesuffix(CALL_END) if head >= 0 else block
        super()._block(out, block)


def _forced_call(frame: Frame) -> str:
    head = f"{CHANNEL}commentary to=functions.{frame.name} {CONSTRAIN}json{MESSAGE}"
    return f"{gbnf_literal(head)} {frame.args_rule}"


#: thinking first: one analysis message (its text without '<', so no marker starts in it)
_THINK = f'({gbnf_literal(CHANNEL + "analysis" + MESSAGE)} [^<]* {gbnf_literal(END + START)} ' \
    f'{gbnf_literal("assistant")})?'

DIALECT = Dialect(
    name="gpt-oss",
    family="GPT-OSS (harmony)",
    markers=(CHANNEL,),
    stream=HarmonyCalls,
    control_tokens=(CHANNEL, MESSAGE, START, END, CONSTRAIN),
    forced=Framed(call=_forced_call, think=_THINK, think_opened=_THINK),
    split=lambda opened, extract, calls: HarmonySplit(opened, extract, calls),
    past_reasoning="thinking",
    thinking=(f"{CHANNEL}analysis{MESSAGE}", END),
    triggers=(f"{CHANNEL}commentary to=functions.",),
    example="<|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}",
)

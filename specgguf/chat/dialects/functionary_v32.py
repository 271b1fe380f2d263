"""Functionary v3.2 (Llama 3.1 based): the answer is a list of messages, each to a recipient,
each opened by `>>>` (the prompt ends with the first one): `all` is the user,

    >>>all
    Let me look.>>>get_weather
    {"city": "Paris"}>>>get_time
    {"city": "Paris"}

and any other recipient is the tool of that name, the message its arguments' JSON. Its
template adds earlier calls' arguments to strings, so they reach it as OpenAI's strings."""

from __future__ import annotations

from collections.abc import Callable

from specgguf.chat.dialects.base import (
    Dialect,
    PerToolForced,
    StreamBase,
    Tools,
    known_call,
    named,
)
from specgguf.chat.markers import partial_marker
from specgguf.chat.tools import CallDelta

SEP, ALL = ">>>", "all"
_HEAD = 80  # a recipient line longer than this is no recipient: the text is content


class RecipientStream(StreamBase):
    """Reads the messages one by one: a message to `all` is content as it arrives; a message to
    a tool is held until the next `>>>` (or the end) and is then a call when its text is a
    JSON object, content otherwise, as is a message to no known recipient."""

    def __init__(self, tools: Tools, new_id: Callable[[], str]) -> None:
        super().__init__(tools, new_id)
        self._to: str | None = None  # the recipient of the message being read; None: its head
        self._seen = False  # a message ended (the next one was opened by a >>>)

    def _rest(self, out: list[str | CallDelta], text: str) -> None:
        if self._to is None and text:
            self._content(out, (SEP if self._seen else "") + text)
        elif self._to is not None and self._to != ALL:
            self._message(out, text)

    def _step(self, out: list[str | CallDelta], final: bool) -> None:
        while self._buf:
            if self._to is None:
                nl = self._buf.find("\n")
                if nl < 0:
                    if len(self._buf) > _HEAD:
                        self._unknown(out)
                        continue
                    return
                name = self._buf[:nl].strip()
                known = name == ALL or name in {t["function"]["name"] for t in self.tools}
                if self.single and self.calls and name != ALL:
                    known = False
                if known:
                    self._to, self._buf = name, self._buf[nl + 1 :]
                else:
                    self._unknown(out)
                continue
            i = self._buf.find(SEP)
            if i < 0:
                if self._to == ALL:
                    keep = 0 if final else partial_marker(self._buf, SEP)
                    self._content(out, self._buf[: len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep :]
                return
            body, self._buf = self._buf[:i], self._buf[i + len(SEP) :]
            if self._to == ALL:
                self._content(out, body)
            else:
                self._message(out, body)
            self._to, self._seen = None, True

    def _unknown(self, out: list[str | CallDelta]) -> None:
        """A message to no known recipient: content, head and all."""
        self._to = ALL
        if self._seen:
            self._content(out, SEP)

    def _message(self, out: list[str | CallDelta], body: str) -> None:
        """A message to the tool `_to`: a call, or content (the recipient line and the body)."""
        assert self._to is not None
        call = known_call(self._to, body.strip(), self.tools)
        if call is None:
            self._content(out, (SEP if self._seen else "") + f"{self._to}\n{body}")
            return
        self._release(out, *call, None)


DIALECT = Dialect(
    name="functionary-v3.2",
    family="Functionary v3.2",
    markers=(">>>all", ">>>${recipient}"),
    stream=RecipientStream,
    # the prompt ends with the first >>>; each further call opens with its own
    forced=PerToolForced(before="", between=SEP, head=named("{name}\n")),
    example='get_weather\\n{...}>>>get_time\\n{...} (after the prompt\'s >>>)',
)

"""The server's wire formats: one class per shape an answer takes, chosen once per request.

OpenAI's chat completions and (legacy) completions, and llama-server's native /completion,
answer the same generation in three shapes, whole or streamed. Each shape is a class here with
the same four parts: the whole answer (`final`), what a stream opens with (`opening`), one
chunk of text (`content`), and how a stream ends (`closing`, then `terminator`). The handlers
in app.py pick the format by the request's kind (FORMATS) and never compare kinds themselves.
The figures every shape carries (timings, usage, the native tail) are the App's, passed in as
an `Answer`. Where the request asked for token probabilities, each shape carries them in its
own dialect (`probs`: the whole answer's; `attach_probs`: a streamed chunk's), from
specgguf.io.token_probs_json.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specgguf.chat.dialects.base import CallStream, parse_answer
from specgguf.chat.tools import CallDelta, ParsedAnswer
from specgguf.core.token_probs import TokenProbs
from specgguf.io import token_probs_json as tpj
from specgguf.server import protocol as p


@dataclass
class Answer:
    """One request's answer as the formats need it: the request, the model id, the text so
    far, its tokens, and the App's figures (computed when asked: timings, usage, and the
    native tail of llama-server's final object)."""

    req: p.Request
    model: str
    timings: Callable[[], dict[str, Any]]
    usage: Callable[[], dict[str, Any]]
    native_tail: Callable[[], dict[str, Any]]
    stop_reason: Callable[[], str]  # the generation's, once it has ended
    ident: str = ""  # a stream's id and creation time, the same in every chunk
    created: int = 0
    #: a token's bytes (token probabilities' texts)
    piece: Callable[[int], bytes] = bytes
    #: the whole answer's token probabilities (where asked: `req.params.probs`)
    probs: Sequence[TokenProbs] = ()
    index: int = 0  # the choice's index (OpenAI's `n`)
    #: characters of text streamed so far (legacy logprobs' `text_offset`)
    offset: list[int] = field(default_factory=lambda: [0])

    @property
    def asked_probs(self) -> bool:
        return self.req.params.probs is not None


class WireFormat:
    """A shape of answer; see the module docstring."""

    terminator: bytes = b""

    def final(self, a: Answer, text: str, tokens: list[int]) -> dict[str, Any]:
        raise NotImplementedError

    def opening(self, a: Answer) -> list[dict[str, Any]]:
        return []

    def content(self, a: Answer, text: str, tokens: list[int], slot: Any, extra: dict) -> dict:
        raise NotImplementedError

    def calls(self, a: Answer, events: list[str | CallDelta]) -> list[dict]:
        """Chunks for a stream parsed for tool calls (chat only): content and calls' pieces."""
        return []

    def reasoning(self, a: Answer, text: str) -> list[dict]:
        """Chunks of a thinking model's reasoning (chat only)."""
        return []

    def closing(self, a: Answer, finish: str, extra: dict) -> list[dict[str, Any]]:
        raise NotImplementedError

    def attach_probs(self, a: Answer, obj: dict[str, Any], probs: Sequence[TokenProbs]) -> None:
        """A streamed chunk `obj` carries the probabilities of the tokens it releases."""
        raise NotImplementedError


class _OpenAI(WireFormat):
    """What chat completions and completions share: ids, `choices`, `usage`, `[DONE]`."""

    object_name = ""
    chunk_name = ""
    terminator = b"data: [DONE]\n\n"

    def choice(self, delta_or_text: Any, finish: str | None) -> dict[str, Any]:
        raise NotImplementedError

    def chunk(self, a: Answer, delta_or_text: Any, finish: str | None) -> dict[str, Any]:
        choice = self.choice(delta_or_text, finish)
        choice["index"] = a.index
        return {
            "id": a.ident,
            "object": self.chunk_name,
            "created": a.created,
            "model": a.model,
            "choices": [choice],
        }

    def logprobs(self, a: Answer, probs: Sequence[TokenProbs]) -> dict[str, Any]:
        raise NotImplementedError

    def attach_probs(self, a: Answer, obj: dict[str, Any], probs: Sequence[TokenProbs]) -> None:
        obj["choices"][0]["logprobs"] = self.logprobs(a, probs)

    def text_delta(self, text: str) -> Any:
        raise NotImplementedError

    def content(self, a: Answer, text: str, tokens: list[int], slot: Any, extra: dict) -> dict:
        obj = self.chunk(a, self.text_delta(text), None)
        obj["specgguf"] = extra
        return obj

    #: the delta of the chunk that carries finish_reason (and of the usage chunk)
    end_delta: Any = ""

    def closing(self, a: Answer, finish: str, extra: dict) -> list[dict[str, Any]]:
        last = self.chunk(a, self.end_delta, finish)
        last["timings"] = a.timings()
        if not a.req.include_usage:
            last["usage"] = a.usage()
        last["specgguf"] = extra
        out = [last]
        if a.req.include_usage:  # stream_options.include_usage: a last chunk with usage only
            u = self.chunk(a, self.end_delta, None)
            u["choices"] = []
            u["usage"] = a.usage()
            out.append(u)
        return out

    def whole(self, a: Answer, choice: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": p.new_id(a.req.kind),
            "object": self.object_name,
            "created": p.now(),
            "choices": [choice],
            "usage": a.usage(),
            "model": a.model,
            "timings": a.timings(),
        }


class Chat(_OpenAI):
    """/v1/chat/completions: a message, or deltas opened by the assistant's role; tool calls
    parsed from the text into `tool_calls` (finish_reason `tool_calls`)."""

    object_name = "chat.completion"
    chunk_name = "chat.completion.chunk"
    end_delta: Any = {}

    def choice(self, delta: Any, finish: str | None) -> dict[str, Any]:
        return {"index": 0, "delta": delta, "finish_reason": finish}

    def text_delta(self, text: str) -> Any:
        return {"content": text}

    def final(self, a: Answer, text: str, tokens: list[int]) -> dict[str, Any]:
        finish = p.finish_reason(a.stop_reason())
        reasoning = ""
        split = a.req.splitter()
        if split is not None:
            split.feed(text)
            split.close()
            reasoning, text = split.reasoning.rstrip(), split.content
        message: dict[str, Any] = {"role": "assistant", "content": text}
        dialect = a.req.call_dialect()
        if dialect is not None:
            parsed = parse_answer(text, a.req.tools or [], dialect, parallel=a.req.parallel_calls)
            message["content"] = parsed.content  # the family's markers out, as streamed
            if parsed.calls:
                message = {
                    "role": "assistant",
                    "content": parsed.content or None,
                    "tool_calls": [c.as_dict() for c in parsed.calls],
                }
                finish = tools_finish(parsed, finish)
        if reasoning:
            message["reasoning_content"] = reasoning
        choice = {"index": 0, "message": message, "finish_reason": finish}
        if a.asked_probs:
            choice["logprobs"] = self.logprobs(a, a.probs)
        return self.whole(a, choice)

    def logprobs(self, a: Answer, probs: Sequence[TokenProbs]) -> dict[str, Any]:
        return tpj.chat_logprobs(probs, a.piece)

    def opening(self, a: Answer) -> list[dict[str, Any]]:
        return [self.chunk(a, {"role": "assistant", "content": ""}, None)]

    def reasoning(self, a: Answer, text: str) -> list[dict]:
        return [self.chunk(a, {"reasoning_content": text}, None)]

    def calls(self, a: Answer, events: list[str | CallDelta]) -> list[dict]:
        """One chunk per event: {"content": ...}, or one call's piece in `tool_calls` (its
        first names it with empty arguments, the next carry fragments of the arguments)."""
        return [
            self.chunk(a, {"content": e} if isinstance(e, str) else {"tool_calls": [e.as_dict()]},
                       None)
            for e in events
        ]  # fmt: skip


def tools_finish(parsed: CallStream | ParsedAnswer, finish: str) -> str:
    """The finish_reason of an answer with calls: "tool_calls", unless the text was cut
    (max_tokens) inside a call's arguments: "length", as OpenAI says of a call cut short; or
    a streamed call's arguments turned out not to be JSON: the answer is no call."""
    if not parsed.calls or parsed.invalid:
        return finish
    if parsed.truncated and finish == "length":
        return finish
    return "tool_calls"


class Completion(_OpenAI):
    """/v1/completions: `text` choices."""

    object_name = "text_completion"
    chunk_name = "text_completion"

    def choice(self, text: Any, finish: str | None) -> dict[str, Any]:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}

    def text_delta(self, text: str) -> Any:
        return text

    def final(self, a: Answer, text: str, tokens: list[int]) -> dict[str, Any]:
        choice = self.choice(text, p.finish_reason(a.stop_reason()))
        if a.asked_probs:
            choice["logprobs"] = tpj.legacy_logprobs(a.probs, a.piece)
        return self.whole(a, choice)

    def logprobs(self, a: Answer, probs: Sequence[TokenProbs]) -> dict[str, Any]:
        """A streamed chunk's: `text_offset` continues from the chunks before."""
        out = tpj.legacy_logprobs(probs, a.piece, a.offset[0])
        a.offset[0] += tpj.text_length(probs, a.piece)
        return out


class Native(WireFormat):
    """llama-server's /completion: `content`, its tokens when asked, the final object's tail
    (stop type, settings, timings); streamed chunks with `stop: false`, no [DONE]."""

    def final(self, a: Answer, text: str, tokens: list[int]) -> dict[str, Any]:
        out = {
            "index": 0,
            "content": text,
            "tokens": tokens if a.req.return_tokens else [],
            **a.native_tail(),
        }
        if a.asked_probs:
            out["completion_probabilities"] = self.probabilities(a, a.probs)
        return out

    def probabilities(self, a: Answer, probs: Sequence[TokenProbs]) -> list[dict[str, Any]]:
        asked = a.req.params.probs
        post = asked is not None and asked.post_sampling
        return tpj.completion_probabilities(probs, a.piece, post_sampling=post)

    def attach_probs(self, a: Answer, obj: dict[str, Any], probs: Sequence[TokenProbs]) -> None:
        obj["completion_probabilities"] = self.probabilities(a, probs)

    def content(self, a: Answer, text: str, tokens: list[int], slot: Any, extra: dict) -> dict:
        return {
            "index": 0,
            "content": text,
            "tokens": tokens,
            "stop": False,
            "id_slot": slot,
            "specgguf": extra,
        }

    def closing(self, a: Answer, finish: str, extra: dict) -> list[dict[str, Any]]:
        return [{"index": 0, "content": "", "tokens": [], **a.native_tail()}]


#: the request kinds (specgguf.server.protocol.Request.kind) and their formats
#: (/infill answers as /completion does)
FORMATS: dict[str, WireFormat] = {
    "chat": Chat(), "completion": Completion(), "native": Native(), "infill": Native(),
}  # fmt: skip


def merged_choices(finals: list[dict[str, Any]], usage: dict[str, Any]) -> dict[str, Any]:
    """One OpenAI answer of several choices (`n`): the first answer's envelope, every
    answer's choice with its index, and the usage of them all."""
    out = dict(finals[0])
    choices = []
    for i, whole in enumerate(finals):
        choice = dict(whole["choices"][0])
        choice["index"] = i
        choices.append(choice)
    out["choices"] = choices
    out["usage"] = usage
    return out

"""Request validation and response shapes of `specgguf serve`: OpenAI's and llama-server's.

Pure (no HTTP framework, no model: a JSON schema is converted by llama-cpp-python's
pure-Python converter, a GBNF grammar is parsed later, on the worker thread): a request body
(already parsed JSON) goes in, a validated `Request` or an `ApiError` comes out; results go
in, the JSON objects a client expects come out. Unknown fields are ignored, as
OpenAI-compatible servers do (clients send `user`, `logprobs: false`, ...), but a feature that
would change the answer and that specgguf does not implement (best_of, echo) is
refused with 400 rather than silently ignored. Constrained output (`grammar`, `json_schema`,
`response_format`, a required tool call) becomes the request's OutputGrammar; `tools` are for
the chat endpoints.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specgguf.chat.dialects import FALLBACK, FORCED_FALLBACK, Dialect
from specgguf.chat.dialects.base import Splitter
from specgguf.chat.reasoning import REASONING_FORMATS, THINK
from specgguf.chat.render import REASONING_EFFORTS, RenderOptions
from specgguf.core.sampling import SamplerParams
from specgguf.core.token_probs import ProbsRequest
from specgguf.drafters.draft_lengths import DRAFT_SAMPLING_MODES, N_MAX_LIMIT, in_range
from specgguf.errors import SpecggufError
from specgguf.generator import GenParams, OutputGrammar
from specgguf.io import sampler_table
from specgguf.io.fim import DEFAULT_FILENAME, ExtraChunk
from specgguf.io.sampling_fields import FIELDS, is_int, is_number
from specgguf.io.token_probs_json import N_PROBS_MAX
from specgguf.spec_plan import SpecOverrides

MAX_STOP = 16  # stop strings per request
MAX_STOP_LEN = 256
MAX_EXTRA_CHUNKS = 1024  # input_extra's chunks per request (the body's size bounds their text)
MAX_RESPONSE_FIELDS = 64
MAX_INDENT = 1024  # n_indent, in columns
#: the most choices (`n`) one OpenAI request may ask for
N_CHOICES_MAX = 16


class ApiError(Exception):
    """An error answer: HTTP status plus OpenAI's error object."""

    TYPES = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        405: "invalid_request_error",
        408: "invalid_request_error",
        413: "invalid_request_error",
        500: "server_error",
        501: "not_supported_error",
        503: "unavailable_error",
    }

    def __init__(
        self, status: int, message: str, code: str | None = None, *, retry_after: int = 0
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        """OpenAI's four fields; `param` is null: the message names the field (OpenAI's
        clients read `param` from every error object, so it is always there)."""
        return {
            "error": {
                "message": self.message,
                "type": self.TYPES.get(self.status, "server_error"),
                "param": None,
                "code": self.code if self.code is not None else self.status,
            }
        }


def bad(message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, code)


# -- field readers ------------------------------------------------------------------------------


def _get(body: dict, key: str, ok, what: str, default: Any = None) -> Any:
    v = body.get(key)
    if v is None:
        return default
    if not ok(v):
        raise bad(f"'{key}' must be {what}")
    return v


def _field(body: dict, name: str, key: str | None = None) -> Any:
    """A sampling, length or seed field, checked as everywhere else (sampling_fields.FIELDS);
    `key` is the name it came under when that differs (max_tokens for n_predict)."""
    f = FIELDS[name]
    return _get(body, key or name, f.ok, f.what)


def _bool(body: dict, key: str, default: bool) -> bool:
    return _get(body, key, lambda v: isinstance(v, bool), "true or false", default)


@dataclass(frozen=True)
class InfillInput:
    """The text around an editor's cursor: before it, after it, other files' chunks, and
    the text that follows the prefix inside the hole (`prompt`)."""

    prefix: str
    suffix: str
    extra: tuple[ExtraChunk, ...] = ()
    prompt: str = ""


@dataclass
class Request:
    """One validated generation request, whatever endpoint it came through."""

    #: "chat", "completion" (OpenAI /v1/completions), "native" (/completion) or "infill"
    kind: str
    stream: bool
    params: GenParams  # without the sampler: see params_for
    sampler: SamplerPatch
    messages: list[dict] | None = None
    prompt: str | None = None
    prompt_tokens: list[Any] | None = None  # token ids (native: may mix in strings)
    include_usage: bool = False
    return_tokens: bool = False
    #: OpenAI's tools (validated; None: none, or tool_choice "none"): rendered into the
    #: prompt, and the answer's <tool_call> blocks returned as tool_calls
    tools: list[dict] | None = None
    #: the dialect the answer's calls are read in (the server's, or the fallback's where a
    #: forced call is written in it); None: not a chat request with tools, or whose format
    #: tokens are shown (a family whose thinking markers are control tokens: its parser keeps
    #: its other markers out of the content)
    dialect: Dialect | None = None
    #: `parallel_tool_calls`: several calls in one answer (False: one at most, the grammar of
    #: a forced call writes one and the parser reads one)
    parallel_calls: bool = True
    #: the markers of the model's thinking (its family's: specgguf.chat.dialects)
    thinking: tuple[str, str] = THINK
    #: the request's `chat_template_kwargs` and `reasoning_effort` (over the server's)
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    reasoning_effort: str | None = None
    #: how thinking is returned (specgguf.chat.reasoning: none, deepseek, auto)
    reasoning_format: str = "none"
    #: the rendered prompt ended inside an opened <think> (set when it is rendered)
    thinking_opened: bool = False
    #: the server's dialect, whose family's splitter reads every chat answer (GPT-OSS'
    #: channels carry its reasoning whether or not tools are given)
    family: Dialect | None = None
    #: a forced call's tools, the one function named (or None) and parallel_tool_calls: its
    #: grammar is made again once the prompt is rendered if that prompt opened the thinking
    forced: tuple[list[dict], str | None, bool] | None = None
    #: serve --skip-chat-parsing: the answer is all content (no reasoning or tool calls read)
    pure_content: bool = False

    def call_dialect(self) -> Dialect | None:
        """The dialect the answer is read in: its tool calls, and the family's markers taken
        out of the content (None: the answer is content as written)."""
        return None if self.pure_content else self.dialect

    def splitter(self) -> Splitter | None:
        """What splits this chat answer into reasoning and content (None: nothing to)."""
        if self.kind != "chat" or self.pure_content:
            return None
        return (self.family or FALLBACK).splitter(
            opened=self.thinking_opened,
            extract=self.reasoning_format != "none",
            calls=bool(self.tools),
        )

    def prompt_rendered(self, opened: bool) -> None:
        """The prompt is rendered and `opened` says whether it opened the thinking: a forced
        call's grammar then starts inside the thinking, which it must close first."""
        self.thinking_opened = opened
        if opened and self.forced is not None and self.dialect is not None:
            tools, only, parallel = self.forced
            grammar = OutputGrammar.for_tools(
                tools, only, parallel=parallel, forced=self.dialect.forced, opened=True
            )
            self.params = replace(self.params, grammar=grammar)
    #: fill-in-the-middle (/infill, or /v1/completions with a suffix): the text around the
    #: hole, laid out in the model's FIM tokens when the request starts
    infill: InfillInput | None = None
    #: llama-server's `response_fields`: the answer keeps only these paths ("a/b": b in a)
    response_fields: tuple[str, ...] | None = None
    #: OpenAI's `n`: choices, each its own generation (choice i with the seed + i)
    n: int = 1
    #: llama-server's `sse_ping_interval`: seconds of silence in a stream after which a comment
    #: line is sent (-1 or 0: none; None: the server's --sse-ping-interval)
    sse_ping_interval: int | None = None

    def params_for(self, base: SamplerParams) -> GenParams:
        """The generation parameters, with the sampler fields given over the server's."""
        from dataclasses import replace

        return replace(self.params, sampler=self.sampler.over(base))


#: a request's `speculative.*` fields (flat, or as an object)
SPECULATIVE_FIELDS = ("n_max", "n_min", "p_min", "draft_sampling")


def parse_speculative(body: dict) -> SpecOverrides:
    """llama-server's flat `speculative.n_max` / `speculative.n_min` / `speculative.p_min`, the
    same as an object `"speculative": {"n_max": ...}`, or `"speculative": false` (off); and
    `speculative.draft_sampling`, one of --spec-draft-sampling's values."""
    spec = body.get("speculative")
    fields: dict[str, Any] = {}
    enabled = True
    names = ", ".join(SPECULATIVE_FIELDS)
    if isinstance(spec, bool):
        enabled = spec
    elif isinstance(spec, dict):
        unknown = sorted(set(spec) - set(SPECULATIVE_FIELDS))
        if unknown:
            raise bad(f"unknown field 'speculative.{unknown[0]}' ({names})")
        fields.update(spec)
    elif spec is not None:
        raise bad(f"'speculative' must be false, true or an object {{{names}}}")
    for name in SPECULATIVE_FIELDS:
        key = f"speculative.{name}"
        if key in body and body[key] is not None:
            fields[name] = body[key]
    n_max = fields.get("n_max")
    if n_max is not None and not (is_int(n_max) and in_range(n_max)):
        raise bad(f"'speculative.n_max' must be an integer in 0..{N_MAX_LIMIT} (0: no speculation)")
    n_min = fields.get("n_min")
    if n_min is not None and not (is_int(n_min) and in_range(n_min)):
        raise bad(f"'speculative.n_min' must be an integer in 0..{N_MAX_LIMIT}")
    p_min = fields.get("p_min")
    if p_min is not None and not (is_number(p_min) and 0 <= p_min <= 1):
        raise bad("'speculative.p_min' must be a number in [0, 1]")
    sampling = fields.get("draft_sampling")
    if sampling is not None and sampling not in DRAFT_SAMPLING_MODES:
        modes = ", ".join(DRAFT_SAMPLING_MODES)
        raise bad(f"'speculative.draft_sampling' must be one of {modes}")
    return SpecOverrides(
        enabled=enabled,
        n_max=n_max,
        n_min=n_min,
        p_min=float(p_min) if p_min is not None else None,
        draft_sampling=sampling,
    )


def _stop(body: dict) -> tuple[str, ...]:
    v = body.get("stop")
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise bad("'stop' must be a string or a list of strings")
    if len(v) > MAX_STOP:
        raise bad(f"'stop' has {len(v)} strings (at most {MAX_STOP})")
    if any(len(s) > MAX_STOP_LEN for s in v):
        raise bad(f"a 'stop' string is longer than {MAX_STOP_LEN} characters")
    return tuple(s for s in v if s)


INFILL_SAMPLER = "infill"  # (core.sampling.InfillStage) accepted as the last stage


def _without_infill(v: Any) -> tuple[Any, bool]:
    """`samplers` without a last `infill` stage (llama.cpp's, which the App gives the
    vocabulary), and whether it was there (a list; the letter codes have none)."""
    if isinstance(v, list) and v and v[-1] == INFILL_SAMPLER:
        return v[:-1], True
    return v, False


#: Request fields whose feature specgguf does not implement: (field, the values that mean
#: "not asked for", the message of the 400 `unsupported` answer). Ignoring such a field would
#: answer something other than what was asked (the default sampler chain for `samplers`, a
#: shifted context for `n_keep`), so it is refused. One row per field: implementing a feature
#: removes its row.
UNSUPPORTED: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("best_of", lambda v: v == 1, "only best_of = 1 is supported"),
    ("grammar_file", lambda v: not v, "grammar_file is not supported"),
    ("echo", lambda v: v is False, "echo is not supported"),
    ("lora", lambda v: v == [], "per-request lora scales are not supported: the adapters of "
     "serve --lora apply to every request at the scales POST /lora-adapters sets"),
    ("n_keep", lambda v: v == 0, "n_keep is not supported (the context is never shifted)"),
    ("slot_save_path", lambda v: not v, "slot_save_path (saving slots) is not supported"),
    (
        "chat_template_file",
        lambda v: not v,
        "chat_template_file per request is not supported (serve --chat-template-file sets it)",
    ),
)


def lora_list(adapters: Sequence[tuple[Any, float]]) -> list[dict[str, Any]]:
    """GET /lora-adapters' answer: each adapter's index, file and scale now."""
    return [{"id": i, "path": str(path), "scale": scale}
            for i, (path, scale) in enumerate(adapters)]  # fmt: skip


def lora_scales(body: Any, n_adapters: int) -> dict[int, float]:
    """POST /lora-adapters' body, [{"id": N, "scale": S}, ...], as {index: scale}; an id
    that names no adapter, a repeated id or a scale that is not a finite number is a 400
    (never dropped)."""
    if not isinstance(body, list):
        raise bad("Request body must be an array of {\"id\", \"scale\"} objects")
    scales: dict[int, float] = {}
    for entry in body:
        if not isinstance(entry, dict) or set(entry) - {"id", "scale"}:
            raise bad("each entry must be an object with 'id' and 'scale'")
        i, scale = entry.get("id"), entry.get("scale", 0.0)
        if not is_int(i) or not 0 <= i < n_adapters:
            raise bad(f"no LoRA adapter has id {i!r} (this server has {n_adapters}: "
                      "see GET /lora-adapters)", "invalid_adapter")  # fmt: skip
        if i in scales:
            raise bad(f"adapter id {i} is given twice")
        if not is_number(scale):
            raise bad(f"the scale of adapter {i} must be a number")
        scales[i] = float(scale)
    return scales


def _refuse_unsupported(body: dict) -> None:
    for key, ok, message in UNSUPPORTED:
        if key in body and body[key] is not None and not ok(body[key]):
            raise bad(message, "unsupported")


def _count(body: dict, key: str, low: int, high: int) -> int | None:
    return _get(body, key, lambda v: is_int(v) and low <= v <= high,
                f"an integer in {low}..{high}")  # fmt: skip


def _probs(body: dict, kind: str) -> ProbsRequest | None:
    """What the request asks to be told of each token (None: nothing). Chat: OpenAI's
    `logprobs` (true/false) and `top_logprobs`; completions: OpenAI's `logprobs` (how many
    alternatives, 0 included); every endpoint: llama-server's `n_probs`, and on /completion
    and /infill `post_sampling_probs` (its shape has a key for probabilities, OpenAI's has
    not). A field of another endpoint's dialect is refused, not ignored."""
    n_probs = _count(body, "n_probs", 0, N_PROBS_MAX) or 0
    post = _bool(body, "post_sampling_probs", False)
    openai = kind in ("chat", "completion")
    if post and openai:
        raise bad("'post_sampling_probs' is for /completion and /infill (OpenAI's logprobs "
                  "are before the sampler chain)", "unsupported")  # fmt: skip
    logprobs = body.get("logprobs")
    top = _count(body, "top_logprobs", 0, N_PROBS_MAX)
    if kind == "chat":
        asked = _bool(body, "logprobs", False)
        if top is not None and not asked:
            raise bad("'top_logprobs' needs 'logprobs': true")
        if asked or n_probs:
            return ProbsRequest(max(top or 0, n_probs))
        return None
    if top is not None:
        raise bad("'top_logprobs' is for /v1/chat/completions ('logprobs' here: how many)")
    if kind == "completion":
        if logprobs is not None and logprobs is not False:
            n = _count(body, "logprobs", 0, N_PROBS_MAX)
            return ProbsRequest(max(n or 0, n_probs))
        return ProbsRequest(n_probs) if n_probs else None
    if logprobs is not None and logprobs is not False and logprobs != 0:
        raise bad("'logprobs' is for the OpenAI endpoints: /completion reports 'n_probs'")
    return ProbsRequest(n_probs, post_sampling=post) if n_probs else None


def _choices(body: dict, kind: str) -> int:
    """OpenAI's `n` (llama-server's alias `n_cmpl`): how many choices."""
    keys = [k for k in ("n", "n_cmpl") if body.get(k) is not None]
    if not keys:
        return 1
    n = _count(body, keys[0], 1, N_CHOICES_MAX)
    assert n is not None
    if n > 1 and kind not in ("chat", "completion"):
        raise bad(f"'{keys[0]}' > 1 is for /v1/chat/completions and /v1/completions",
                  "unsupported")  # fmt: skip
    return n


def _params(
    body: dict, *, n_predict_keys: tuple[str, ...], kind: str
) -> tuple[GenParams, SamplerPatch]:
    """Sampling, length, seed, stop and speculative fields shared by every endpoint."""
    _refuse_unsupported(body)
    n_predict = None
    for key in n_predict_keys:
        v = _field(body, "n_predict", key)
        if v is not None:
            n_predict = v
            break
    samplers, infill = _without_infill(body.get("samplers"))
    try:
        sampling = sampler_table.from_request({**body, "samplers": samplers})
    except sampler_table.SettingError as e:
        raise bad(str(e)) from None
    params = GenParams(
        n_predict=n_predict,
        seed=_field(body, "seed"),
        stop=_stop(body),
        ignore_eos=_get(body, "ignore_eos", lambda v: isinstance(v, bool), "true or false"),
        spec=parse_speculative(body),
        cache_prompt=_bool(body, "cache_prompt", True),
        grammar=output_grammar(body),
        n_indent=_get(body, "n_indent", lambda v: is_int(v) and 0 <= v <= MAX_INDENT,
                      f"an integer in 0..{MAX_INDENT}", 0),
        t_max_predict_ms=_milliseconds(body, "t_max_predict_ms"),
        probs=_probs(body, kind),
        id_slot=_get(body, "id_slot", lambda v: is_int(v) and v >= -1,
                     "a slot's index, or -1 for any free slot", -1),
    )
    # llama-server reads t_max_prompt_ms and does not enforce it; neither does specgguf
    # (docs/server.md says so), but a bad value is refused
    _milliseconds(body, "t_max_prompt_ms")
    return params, SamplerPatch(sampling, infill=infill)


def _milliseconds(body: dict, key: str) -> int:
    """A time limit in ms (<= 0 or absent: none)."""
    v = _get(body, key, lambda v: is_number(v) and abs(v) < 1e12, "a number of milliseconds", 0)
    return max(0, int(v))


#: what OpenAI's `response_format: {"type": "json_object"}` asks for: a JSON object
JSON_OBJECT_SCHEMA = {"type": "object"}


def output_grammar(body: dict) -> OutputGrammar | None:
    """The request's constraint on its output: llama-server's `grammar` (GBNF) or
    `json_schema`, or OpenAI's `response_format` (`text`, `json_object` with an optional
    `schema`, `json_schema` with `json_schema.schema`); at most one of them. A schema that is
    not an object or cannot be converted is a 400 naming its field; a GBNF grammar is parsed
    when the request starts (it needs the model's vocabulary)."""
    given = [k for k in ("grammar", "json_schema", "response_format") if body.get(k) is not None]
    rf = body.get("response_format")
    if rf is not None:
        if not isinstance(rf, dict) or rf.get("type") not in ("text", "json_object", "json_schema"):
            raise bad("'response_format.type' must be text, json_object or json_schema")
        if rf["type"] == "text":
            given.remove("response_format")
    if len(given) > 1:
        raise bad(f"'{given[0]}' and '{given[1]}' cannot be combined: give one")
    if not given:
        return None
    field = given[0]
    if field == "grammar":
        if not isinstance(body["grammar"], str):
            raise bad("'grammar' must be a string (GBNF)")
        return OutputGrammar(body["grammar"], "'grammar'")
    if field == "json_schema":
        schema, where = body["json_schema"], "'json_schema'"
    elif rf["type"] == "json_object":
        schema, where = rf.get("schema", JSON_OBJECT_SCHEMA), "'response_format.schema'"
    else:
        spec = rf.get("json_schema")
        if not isinstance(spec, dict) or spec.get("schema") is None:
            raise bad("'response_format.json_schema.schema' is required", "missing_field")
        schema, where = spec["schema"], "'response_format.json_schema.schema'"
    if not isinstance(schema, dict | bool):
        raise bad(f"{where} must be a JSON schema object")
    try:
        return OutputGrammar.from_schema(schema, where)
    except SpecggufError as e:
        raise bad(str(e), "invalid_schema") from None


@dataclass(frozen=True)
class SamplerPatch:
    """The sampler settings a request gave (SamplerParams' fields, checked by
    specgguf.io.sampler_table); the rest come from the server's defaults."""

    given: dict[str, Any]
    infill: bool = False  # llama.cpp's infill stage last (the App gives it the vocabulary)

    def over(self, base: SamplerParams) -> SamplerParams:
        return sampler_table.params(base, self.given)


def _object(body: Any) -> dict:
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object", "invalid_request")
    return body


#: the longest --sse-ping-interval a request may ask (a day)
MAX_PING_INTERVAL = 86400


def _ping_interval(body: dict) -> int | None:
    """A request's `sse_ping_interval` (None: the server's)."""
    return _get(body, "sse_ping_interval", lambda v: is_int(v) and -1 <= v <= MAX_PING_INTERVAL,
                f"an integer in -1..{MAX_PING_INTERVAL} (seconds; -1: no pings)")  # fmt: skip


def _stream(body: dict) -> tuple[bool, bool]:
    stream = _bool(body, "stream", False)
    opts = body.get("stream_options")
    include_usage = False
    if opts is not None:
        if not isinstance(opts, dict):
            raise bad("'stream_options' must be an object")
        include_usage = _bool(opts, "include_usage", False)
    return stream, include_usage


#: the most chat_template_kwargs a request may set (each value is JSON of the bounded body)
MAX_TEMPLATE_KWARGS = 64


def parse_chat(
    body: Any,
    dialect: Dialect | None = None,
    reasoning_format: str = "auto",
    budget: tuple[int, str] = (-1, ""),
    options: RenderOptions | None = None,
    pure_content: bool = False,
) -> Request:
    """/v1/chat/completions (and /apply-template): `dialect` is the server's (FALLBACK when
    not given), in which the answer's calls are read and a forced call is written (with
    `pure_content`, serve --skip-chat-parsing, nothing is read: the answer is content);
    `reasoning_format` the server's, which the request's `reasoning_format` overrides;
    `budget` the server's --reasoning-budget and its message, which the request's
    `reasoning_budget_tokens` and `reasoning_budget_message` override; `options` the
    server's rendering defaults (whether the model thinks: a forced call's grammar lets a
    thinking family think first only then)."""
    from specgguf.chat.template import validate_messages

    body = _object(body)
    if "messages" not in body:
        raise bad("'messages' is required", "missing_field")
    try:
        messages = validate_messages(_flatten_content(body["messages"]))
    except SpecggufError as e:
        raise bad(str(e)) from None
    stream, include_usage = _stream(body)
    params, sampler = _params(
        body, n_predict_keys=("max_completion_tokens", "max_tokens", "n_predict"), kind="chat"
    )
    params = _thinking_budget(body, params, *budget)
    family = dialect = dialect or FALLBACK
    if family.split is not None and not pure_content:  # its splitter reads the control
        params = replace(params, format_tokens=True)  # tokens of every answer
    if params.probs is not None and stream and body.get("tools"):
        raise bad("'logprobs' with 'tools' cannot be streamed (the text is parsed for calls)",
                  "unsupported")  # fmt: skip
    thinking = dialect.thinking
    # a family whose thinking markers are control tokens: the splitter must see them
    shows_thinking = any(m in dialect.control_tokens for m in thinking)
    kwargs = _get(body, "chat_template_kwargs", lambda v: isinstance(v, dict), "an object", {})
    if len(kwargs) > MAX_TEMPLATE_KWARGS:
        raise bad(f"'chat_template_kwargs' has more than {MAX_TEMPLATE_KWARGS} keys")
    if "enable_thinking" in kwargs and not isinstance(kwargs["enable_thinking"], bool):
        raise bad("'chat_template_kwargs.enable_thinking' must be true or false")
    effort = _get(
        body, "reasoning_effort", lambda v: v in REASONING_EFFORTS,
        "one of " + ", ".join(REASONING_EFFORTS),
    )  # fmt: skip
    thinks = (options or RenderOptions()).merged(kwargs, effort).thinking()
    parallel = _bool(body, "parallel_tool_calls", True)
    tools, params, dialect = _tools(body, params, dialect, parallel, thinks)
    reasoning = _get(
        body, "reasoning_format", lambda v: v in REASONING_FORMATS,
        "one of " + ", ".join(REASONING_FORMATS), reasoning_format,
    )  # fmt: skip
    reads_markers = shows_thinking and reasoning != "none"
    if reads_markers:
        params = replace(params, format_tokens=True)
    return Request(
        "chat", stream, params, sampler, messages=messages, include_usage=include_usage,
        tools=tools, dialect=dialect if tools or reads_markers else None,
        template_kwargs=kwargs,
        reasoning_effort=effort, reasoning_format=reasoning, parallel_calls=parallel,
        thinking=thinking, family=family, forced=_forced(body, tools, params),
        n=_choices(body, "chat"), pure_content=pure_content,
        sse_ping_interval=_ping_interval(body),
    )  # fmt: skip


#: the longest reasoning_budget_message a request may give
MAX_BUDGET_MESSAGE = 1024


def _thinking_budget(body: dict, params: GenParams, budget: int, message: str) -> GenParams:
    """The request's `reasoning_budget_tokens` (llama-server also reads it as
    `thinking_budget_tokens`; -1: the server's --reasoning-budget) and
    `reasoning_budget_message` over the server's."""
    key = "thinking_budget_tokens" if "reasoning_budget_tokens" not in body else (
        "reasoning_budget_tokens"
    )
    asked = _get(body, key, lambda v: is_int(v) and -1 <= v <= 2**31 - 1,
                 "an integer >= -1 (-1: the server's --reasoning-budget)", -1)  # fmt: skip
    message = _get(body, "reasoning_budget_message",
                   lambda v: isinstance(v, str) and len(v) <= MAX_BUDGET_MESSAGE,
                   f"a string of at most {MAX_BUDGET_MESSAGE} characters", message)  # fmt: skip
    tokens = budget if asked == -1 else asked
    if tokens < 0:
        return params
    return replace(params, reasoning_budget=tokens, reasoning_budget_message=message)


def _forced(body: dict, tools: list[dict] | None, params: GenParams):
    """(tools, the function named or None, parallel_tool_calls) of a forced call, else None."""
    grammar = params.grammar
    if tools is None or grammar is None or grammar.origin != "'tools'":
        return None
    if grammar.lazy is not None:  # tool_choice auto: nothing is forced
        return None
    choice = body.get("tool_choice")
    only = choice["function"]["name"] if isinstance(choice, dict) else None
    return tools, only, _bool(body, "parallel_tool_calls", True)


def _tools(
    body: dict, params: GenParams, dialect: Dialect, parallel: bool, thinks: bool
) -> tuple[list[dict] | None, GenParams, Dialect]:
    """`tools`, `tool_choice` and `parallel_tool_calls`: the tools to render (None for none
    or tool_choice "none"), the params, with the grammar of a call in the family's forced form
    when one is required ("required" or a named function), or its lazy grammar under "auto"
    (free text until the family's call opens: specgguf.core.lazy_grammar), and the dialect
    the answer is read in (the fallback's where the family has no forced form)."""
    from dataclasses import replace

    from specgguf.chat.tools import ToolsError, validate_tool_choice, validate_tools

    try:
        if not body.get("tools"):
            # none to call: "none" and "auto" mean no call, "required" or a name are refused
            validate_tool_choice(body.get("tool_choice"), [])
            return None, params, dialect
        tools = validate_tools(body["tools"])
        choice = validate_tool_choice(body.get("tool_choice"), tools)
    except ToolsError as e:
        raise bad(str(e)) from None
    if choice == "none":
        return None, params, dialect
    params = replace(params, format_tokens=True)
    if choice == "auto":
        if params.grammar is None:  # the family's lazy grammar, where it declares one
            try:
                lazy = OutputGrammar.lazy_for_tools(tools, dialect, parallel=parallel)
            except SpecggufError as e:
                raise bad(str(e), "invalid_schema") from None
            params = replace(params, grammar=lazy)
        return tools, params, dialect
    if params.grammar is not None:
        raise bad(f"'tool_choice' {choice!r} and {params.grammar.origin} cannot be combined")
    only = choice.removeprefix("function:") if choice.startswith("function:") else None
    dialect = dialect.forcing(FORCED_FALLBACK)
    try:
        grammar = OutputGrammar.for_tools(
            tools, only, parallel=parallel, forced=dialect.forced, think=thinks
        )
    except SpecggufError as e:
        raise bad(str(e), "invalid_schema") from None
    return tools, replace(params, grammar=grammar), dialect


def _flatten_content(messages: Any) -> Any:
    """OpenAI's content parts [{"type": "text", "text": ...}] -> one string (text only)."""
    if not isinstance(messages, list):
        return messages
    out = []
    for m in messages:
        if isinstance(m, dict) and isinstance(m.get("content"), list):
            parts = m["content"]
            if not all(isinstance(p, dict) and p.get("type") == "text" for p in parts):
                raise bad("only text content parts are supported", "unsupported")
            if not all(isinstance(p.get("text"), str) for p in parts):
                raise bad("a text content part needs a string 'text'")
            m = {**m, "content": "".join(p["text"] for p in parts)}
        elif isinstance(m, dict) and m.get("content") is None and m.get("role") == "assistant":
            m = {**m, "content": ""}
        out.append(m)
    return out


def parse_completion(body: Any, *, native: bool) -> Request:
    """OpenAI /v1/completions (`native=False`) or llama-server's /completion."""
    body = _object(body)
    if "prompt" not in body:
        raise bad("'prompt' is required", "missing_field")
    if body.get("tools"):
        raise bad("'tools' are supported on /v1/chat/completions only", "unsupported")
    prompt = body["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # one prompt given as a list of one
    text: str | None = None
    tokens: list[Any] | None = None
    if isinstance(prompt, str):
        text = prompt
    elif isinstance(prompt, list) and all(
        is_int(t) or (native and isinstance(t, str)) for t in prompt
    ):
        tokens = prompt
    elif isinstance(prompt, list) and len(prompt) > 1 and all(
        isinstance(t, str | list) for t in prompt
    ):
        raise bad("only one prompt per request is supported", "unsupported")
    else:  # a float, a bool or an object among token ids is no prompt at all
        raise bad("'prompt' must be a string or a list of token ids")
    stream, include_usage = _stream(body)
    keys = ("n_predict", "max_tokens") if native else ("max_tokens", "n_predict")
    kind = "native" if native else "completion"
    params, sampler = _params(body, n_predict_keys=keys, kind=kind)
    infill = None
    suffix = body.get("suffix") if not native else None
    if suffix is not None and suffix != "":  # OpenAI's fill-in-the-middle: prompt, hole, suffix
        if not isinstance(suffix, str):
            raise bad("'suffix' must be a string")
        if text is None:
            raise bad("'suffix' needs the prompt as a string (the text before the hole)")
        infill = InfillInput(prefix=text, suffix=suffix)
    return Request(
        kind,
        stream,
        params,
        sampler,
        prompt=text,
        prompt_tokens=tokens,
        include_usage=include_usage,
        return_tokens=native and _bool(body, "return_tokens", False),
        infill=infill,
        response_fields=_response_fields(body) if native else None,
        n=_choices(body, kind),
        sse_ping_interval=_ping_interval(body),
    )


def _string(body: dict, key: str) -> str:
    """A required string field."""
    if key not in body:
        raise bad(f"'{key}' is required", "missing_field")
    if not isinstance(body[key], str):
        raise bad(f"'{key}' must be a string")
    return body[key]


def _extra_chunks(body: dict) -> tuple[ExtraChunk, ...]:
    """`input_extra`: [{"filename": ..., "text": ...}] (filename optional)."""
    v = body.get("input_extra")
    if v is None:
        return ()
    what = 'an array of {"filename": string, "text": string}'
    if not isinstance(v, list):
        raise bad(f"'input_extra' must be {what}")
    if len(v) > MAX_EXTRA_CHUNKS:
        raise bad(f"'input_extra' has {len(v)} chunks (at most {MAX_EXTRA_CHUNKS})")
    out = []
    for i, chunk in enumerate(v):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise bad(f"'input_extra[{i}]' must be {{\"filename\": string, \"text\": string}}")
        name = chunk.get("filename", DEFAULT_FILENAME)
        if not isinstance(name, str):
            raise bad(f"'input_extra[{i}].filename' must be a string")
        out.append(ExtraChunk(name, chunk["text"]))
    return tuple(out)


def _response_fields(body: dict) -> tuple[str, ...] | None:
    v = body.get("response_fields")
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise bad("'response_fields' must be a list of strings (paths such as 'timings/prompt_n')")
    if len(v) > MAX_RESPONSE_FIELDS:
        raise bad(f"'response_fields' has {len(v)} paths (at most {MAX_RESPONSE_FIELDS})")
    return tuple(v)


def parse_infill(body: Any) -> Request:
    """llama-server's /infill: the text before and after the cursor, other files' chunks,
    and the sampling and stopping fields of /completion; answered as /completion is."""
    body = _object(body)
    prompt = body.get("prompt", "")
    if prompt is None:
        prompt = ""
    if not isinstance(prompt, str):
        raise bad("'prompt' must be a string (the text after the prefix, in the hole)")
    infill = InfillInput(
        prefix=_string(body, "input_prefix"),
        suffix=_string(body, "input_suffix"),
        extra=_extra_chunks(body),
        prompt=prompt,
    )
    stream, _ = _stream(body)
    params, sampler = _params(body, n_predict_keys=("n_predict", "max_tokens"), kind="infill")
    _choices(body, "infill")
    return Request(
        "infill",
        stream,
        params,
        sampler,
        infill=infill,
        return_tokens=_bool(body, "return_tokens", False),
        response_fields=_response_fields(body),
        sse_ping_interval=_ping_interval(body),
    )


def select_fields(paths: tuple[str, ...], answer: dict[str, Any]) -> dict[str, Any]:
    """llama-server's `response_fields`: the answer with only these paths, each a key of the
    result ("timings/prompt_n" -> {"timings/prompt_n": 12}); a path that is not there is
    left out."""
    out: dict[str, Any] = {}
    for path in paths:
        node: Any = answer
        for key in path.split("/"):
            if not isinstance(node, dict) or key not in node:
                break
            node = node[key]
        else:
            out[path] = node
    return out


# -- responses ----------------------------------------------------------------------------------

FINISH = {"eos": "stop", "stop": "stop", "limit": "length", "context": "length"}
STOP_TYPE = {"eos": "eos", "stop": "word", "limit": "limit", "context": "limit"}


def finish_reason(stop_reason: str) -> str:
    """OpenAI's finish_reason: `stop` (end of text or a stop string), else `length` (the
    limit, the context end, or a generation cut short by a server shutdown)."""
    return FINISH.get(stop_reason, "length")


def new_id(kind: str) -> str:
    prefix = "chatcmpl" if kind == "chat" else "cmpl"
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def usage(prompt_n_total: int, predicted_n: int, cache_n: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_n_total,
        "completion_tokens": predicted_n,
        "total_tokens": prompt_n_total + predicted_n,
        "prompt_tokens_details": {"cached_tokens": cache_n},
    }


def choice_seed(seed: int | None, index: int) -> int | None:
    """The seed of choice `index` of a request with several (OpenAI's `n`): the request's
    seed + index, so that each choice is its own reproducible stream and choice 0 is what
    the same request with n = 1 answers; a random seed (-1, or none) stays random, drawn
    anew for each choice. (Wraps below 0xFFFFFFFF, llama.cpp's "random".)"""
    if seed is None or seed < 0 or index == 0:
        return seed
    return (seed + index) % 0xFFFFFFFF

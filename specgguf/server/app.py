"""The HTTP side of `specgguf serve`: Starlette routes over the Scheduler, run by uvicorn.

Handlers read the body on the event loop and nothing slower: parsing it and preparing the
request (a JSON schema or tools turned into a grammar: seconds of pure Python for a schema
near the body's 8 MiB) run on PREPARE_THREADS threads of their own, everything that touches
llama.cpp (chat template, prompt -> tokens, grammar compile, detokenizing, generating) on the
scheduler's thread, so one heavy request never holds up /health or another client's stream.
Events stream out as server-sent events. Shapes follow OpenAI (/v1/...) and llama-server
(/completion, /tokenize, /detokenize, /apply-template, /props, /slots, /metrics, /health);
every error is OpenAI's error object with the right status, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.requests import Request as HttpRequest
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

from specgguf.binding.embedder import InputTooLong
from specgguf.chat.reasoning import CONTENT, REASONING, prompt_opens_thinking
from specgguf.chat.render import RenderOptions
from specgguf.chat.tools import CallDelta
from specgguf.core.sampling import INFILL_MAX_CANDIDATES, SamplerParams
from specgguf.core.token_probs import TokenProbs
from specgguf.errors import SpecggufError
from specgguf.generator import Generator, GenParams
from specgguf.io import json_input
from specgguf.server import embeddings as emb
from specgguf.server import protocol as p
from specgguf.server import rerank as ranking
from specgguf.server.http_settings import HttpSettings
from specgguf.server.protocol import ApiError, choice_seed
from specgguf.server.scheduler import ALL_SLOTS, Event, Job, Scheduler
from specgguf.server.sleep import Loaded, Models
from specgguf.server.wire import FORMATS, Answer, merged_choices, tools_finish

#: requests parsed and prepared at once, off the event loop (more wait their turn, each held by
#: its connection, which --max-connections bounds): two keep one huge schema from delaying
#: every small request behind it, without letting many of them take the CPU from generation
PREPARE_THREADS = 2


@dataclass(frozen=True)
class Endpoint:
    """One endpoint: its method and path, the paths that answer the same (llama-server's and
    OpenAI's spellings of it), the App method that answers, and whether it answers without
    --api-key (llama-server's public endpoints, and the page)."""

    method: str
    path: str
    handler: str
    aliases: tuple[str, ...] = ()
    public: bool = False

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.path, *self.aliases)


#: every endpoint the server answers: the one table of routes (docs/server.md's endpoint list and
#: `serve --help` are checked against it)
ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("POST", "/v1/chat/completions", "chat", ("/chat/completions",)),
    Endpoint("POST", "/v1/completions", "completions", ("/completions",)),
    Endpoint("GET", "/v1/models", "models", ("/models",), public=True),
    Endpoint("POST", "/completion", "native"),
    Endpoint("POST", "/infill", "infill"),
    Endpoint("POST", "/tokenize", "tokenize"),
    Endpoint("POST", "/detokenize", "detokenize"),
    Endpoint("POST", "/v1/embeddings", "embeddings"),
    Endpoint("POST", "/embedding", "embedding", ("/embeddings",)),
    Endpoint("POST", "/rerank", "rerank", ("/reranking", "/v1/rerank", "/v1/reranking")),
    Endpoint("POST", "/apply-template", "apply_template"),
    Endpoint("GET", "/health", "health", ("/v1/health",), public=True),
    Endpoint("GET", "/props", "props"),
    Endpoint("GET", "/slots", "slots"),
    Endpoint("POST", "/slots/{id_slot}", "slot_action"),
    Endpoint("GET", "/lora-adapters", "lora_adapters"),
    Endpoint("POST", "/lora-adapters", "set_lora_adapters"),
    Endpoint("GET", "/metrics", "metrics"),
    Endpoint("GET", "/", "page", public=True),
)
#: the API key of the request being handled, where the server has several (set by the key
#: check, read when the request's generation is planned: its namespace)
_API_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("api_key", default=None)



def _namespace() -> tuple[str, str] | None:
    """The request's API key as GenParams.namespace: whose drafters, earlier outputs and KV
    prefixes it may use (None: a server without keys, where every request shares them)."""
    key = _API_KEY.get()
    return None if key is None else ("api-key", key)


#: what a stream sends after --sse-ping-interval seconds of silence: an SSE comment
SSE_PING = b":\n\n"

#: paths that answer without the API key
PUBLIC = frozenset(path for e in ENDPOINTS if e.public for path in e.paths)

#: slot_states' figures that /slots shows only to the API key whose request made them
_PRIVATE_SLOT_FIGURES = ("n_cached", "n_drafted", "n_accepted", "n_decoded")


@dataclass
class ServerConfig:
    model_id: str  # -a/--alias, else the model file name (what /v1/models lists)
    model_path: str
    #: --tags: informational labels /v1/models lists with the model (sorted, each once)
    model_tags: tuple[str, ...] = ()
    api_keys: tuple[str, ...] = ()
    max_body: int = 8 << 20  # bytes; larger bodies get 413
    read_timeout: float = 600.0  # seconds to receive a request body (--timeout)
    draft_path: str | None = None
    spec_types: list[str] = field(default_factory=list)
    auto: bool = False
    n_parallel: int = 1
    seed: int = -1  # -s: a request without a seed gets this one (-1: a fresh random seed)
    #: --reasoning-format: how a chat answer's thinking is returned (a request may ask another)
    reasoning_format: str = "auto"
    #: --reasoning-budget and --reasoning-budget-message: a chat answer's thinking budget
    #: (-1: unlimited) and the text forced before its closing (a request may ask another)
    reasoning_budget: int = -1
    reasoning_budget_message: str = ""
    #: the handlers of ENDPOINTS switched off (--no-webui: "page", --no-slots: "slots")
    disabled: frozenset[str] = frozenset()
    #: --embeddings: the target's embeddings context (binding.embedder.Embedder; None: the
    #: embeddings endpoints answer 501) and --embd-normalize, a request's default
    embedder: Any = None
    embd_normalize: int = 2
    #: --rerank: /rerank scores pairs in the embeddings context (which then pools by rank),
    #: each laid out by `rerank_format` (binding.rerank_prompt.RerankFormat); off: 501
    rerank: bool = False
    rerank_format: Any = None
    #: --spm-infill: fill-in-the-middle prompts suffix first (specgguf.io.fim)
    spm_infill: bool = False
    #: --skip-chat-parsing: chat answers are returned as content, no reasoning or tool calls
    skip_chat_parsing: bool = False
    #: --threads-http, --ssl-key-file, --ssl-cert-file (the runner's part of the server)
    http: HttpSettings = HttpSettings()
    #: --slot-save-path: the directory of POST /slots/{id}'s files (None: 501)
    slot_save_path: Path | None = None


def served(cfg: ServerConfig) -> tuple[Endpoint, ...]:
    """The endpoints this configuration answers (a switched-off one is a 404, as in
    llama-server)."""
    return tuple(e for e in ENDPOINTS if e.handler not in cfg.disabled)


class App:
    """The routes, bound to one generator, scheduler and configuration."""

    def __init__(self, gen: Generator, sched: Scheduler, cfg: ServerConfig) -> None:
        self.gen = gen
        self.sched = sched
        self.cfg = cfg
        self.started = int(time.time())
        #: set on the event loop by the first SIGTERM/SIGINT (see begin_shutdown)
        self.closing = asyncio.Event()
        self.preparing = ThreadPoolExecutor(PREPARE_THREADS, thread_name_prefix="specgguf-prep")
        #: the owner of the models when they may sleep (--sleep-idle-seconds; see attach)
        self.owner: Models | None = None
        #: what /props and /v1/models answer while the models sleep (remembered before)
        self._asleep_answers: dict[str, Any] = {}
        static = cfg.http.static_path if "page" not in cfg.disabled else None
        routes: list[Any] = [
            Route(path, getattr(self, e.handler), methods=[e.method])
            for e in served(cfg) if not (static and e.handler == "page")
            for path in e.paths
        ]  # fmt: skip
        if static is not None:  # --path: its files at /, index.html in the page's place
            from starlette.routing import Mount
            from starlette.staticfiles import StaticFiles

            routes.append(Mount("/", StaticFiles(directory=static, html=True)))
        self.asgi = Starlette(
            routes=routes,
            exception_handlers={
                ApiError: _api_error,
                HTTPException: _http_error,
                Exception: _internal_error,
            },
        )

    async def __call__(self, scope, receive, send) -> None:
        prefix = self.cfg.http.api_prefix
        if prefix and scope["type"] == "http":  # --api-prefix: nothing is served outside it
            path = scope["path"]
            if path != prefix and not path.startswith(prefix + "/"):
                err = ApiError(404, f"no such endpoint: {path}", "not_found")
                await _api_error(None, err)(scope, receive, send)
                return
            scope = {**scope, "path": path[len(prefix):] or "/"}
        if scope["type"] == "http" and self.cfg.api_keys and scope["path"] not in PUBLIC:
            headers = dict(scope.get("headers") or [])
            auth = headers.get(b"authorization", b"").decode("latin-1")
            key = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
            key = key or headers.get(b"x-api-key", b"").decode("latin-1").strip()
            if key not in self.cfg.api_keys:
                err = ApiError(401, "invalid or missing API key", "invalid_api_key")
                await _api_error(None, err)(scope, receive, send)
                return
            if len(self.cfg.api_keys) > 1:  # each key drafts only from its own requests
                _API_KEY.set(key)
        try:
            await self.asgi(scope, receive, send)
        except asyncio.CancelledError:
            # uvicorn cancels what is still running once its graceful shutdown has waited
            # long enough (a client that reads nothing): the end of that request, not a bug
            if not self.closing.is_set():
                raise

    def attach(self, models: Models) -> None:
        """Answer from `models`, which may sleep: /props and /v1/models are remembered before
        they do, and the generator and embeddings context are taken anew once they are back.
        A generation request holds them awake from its body to its answer's last byte."""
        self.owner = models

        def remember() -> None:
            self._asleep_answers = {"props": self.props_body(), "models": self.models_body()}

        def woke(loaded: Loaded) -> None:
            self.gen = loaded.gen
            self.cfg.embedder = loaded.embedder

        models.listen(remember, woke)

    @property
    def sleeping(self) -> bool:
        return self.owner is not None and self.owner.asleep

    def hold(self) -> Callable[[], None]:
        """Keep the models awake until the returned release() (called once or more)."""
        if self.owner is None:
            return lambda: None
        return self.owner.hold()

    def begin_shutdown(self) -> None:
        """On the event loop, at the first SIGTERM/SIGINT: requests still receiving their
        body are answered 503 at once, so no client can hold the shutdown up."""
        self.closing.set()

    def close(self) -> None:
        """Once the server has stopped: preparations still waiting are dropped (their
        clients are gone); one running ends on its own, within the schema bounds."""
        self.preparing.shutdown(wait=False, cancel_futures=True)

    async def prepare(self, fn: Callable[[], Any]) -> Any:
        """fn() on a preparation thread (see PREPARE_THREADS): its result, or its exception
        (an ApiError reaches the client as usual)."""
        return await asyncio.get_running_loop().run_in_executor(self.preparing, fn)

    # -- plumbing ----------------------------------------------------------------------------

    async def body(
        self, request: HttpRequest, parse: Callable[[Any], Any] | None = None
    ) -> Any:
        """The JSON body, or what `parse` makes of it (decoded and parsed in one go on a
        preparation thread): 413 past max_body (without keeping more than that in memory), 400
        when it is not JSON, nests too deep or holds a lone surrogate (io.json_input), 408 past
        --timeout, 503 as soon as the server is stopping; a client gone mid-body gets a 499
        that nobody reads."""
        limit = self.cfg.max_body
        declared = request.headers.get("content-length")
        too_big = declared is not None and declared.isdigit() and int(declared) > limit
        data = bytearray()

        async def read() -> None:
            nonlocal too_big
            drained = 0
            async for chunk in request.stream():
                if too_big:  # drain (bounded) so that the client reads our answer
                    drained += len(chunk)
                    if drained > 16 * limit:
                        break
                    continue
                data.extend(chunk)
                if len(data) > limit:
                    too_big = True
                    data.clear()

        reading = asyncio.ensure_future(read())
        closing = asyncio.ensure_future(self.closing.wait())
        try:
            await asyncio.wait(
                (reading, closing),
                timeout=self.cfg.read_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            for task in (reading, closing):
                task.cancel()
            await asyncio.gather(reading, closing, return_exceptions=True)
        if not reading.done() or reading.cancelled():
            if self.closing.is_set():
                raise ApiError(503, "the server is shutting down", "shutting_down")
            raise ApiError(408, "timed out reading the request body", "timeout")
        if isinstance(reading.exception(), ClientDisconnect):
            # the client went away mid-body: nobody reads this answer, and nothing is logged
            raise ApiError(499, "the client disconnected before the body ended", "disconnected")
        reading.result()  # anything else is a bug: the 500 handler reports it
        if too_big:
            raise ApiError(
                413, f"the request body is larger than {limit} bytes", "request_too_large"
            )
        raw = bytes(data)
        return await self.prepare(lambda: _decode(raw) if parse is None else parse(_decode(raw)))

    def prompt_tokens(self, req: p.Request) -> list[int]:
        """On the worker thread: the request's prompt as tokens, within the context."""
        gen = self.gen
        try:
            if req.infill is not None:
                i = req.infill
                tokens = gen.infill_tokens(
                    i.prefix, i.suffix, i.extra, i.prompt, spm=self.cfg.spm_infill
                )
            elif req.kind == "chat":
                assert req.messages is not None
                prompt = gen.chat_prompt(req.messages, req.tools, self.render_options(req))
                req.prompt_rendered(prompt_opens_thinking(prompt, req.thinking[0]))
                tokens = gen.encode(prompt)
            elif req.prompt is not None:
                tokens = gen.encode(req.prompt)
            else:
                tokens = []
                for i, t in enumerate(req.prompt_tokens or []):
                    if isinstance(t, str):
                        tokens.extend(gen.encode(t, add_special=i == 0))
                    else:
                        tokens.append(t)
                gen.check_ids(tokens)
        except SpecggufError as e:
            raise ApiError(400, str(e), "invalid_prompt") from None
        if not tokens:
            raise ApiError(400, "the prompt is empty", "invalid_prompt")
        if len(tokens) >= gen.n_ctx:
            raise ApiError(
                400,
                f"the prompt is {len(tokens)} tokens; the context of a slot is {gen.n_ctx} "
                "(-c / -np, at most --kv-unified-per-slot), and at least one token must fit "
                "after it",
                "context_length_exceeded",
            )
        return tokens

    def with_infill_stage(self, sampler: SamplerParams | None) -> SamplerParams:
        """The request's sampler with llama.cpp's infill stage last; 400 unless top-k
        bounds what that stage compares pairwise."""
        assert sampler is not None
        if "top_k" not in sampler.samplers or not 0 < sampler.top_k <= INFILL_MAX_CANDIDATES:
            raise p.bad(
                f"the infill sampler needs top_k in 1..{INFILL_MAX_CANDIDATES} before it "
                f"(top_k is {sampler.top_k}"
                f"{'' if 'top_k' in sampler.samplers else ', not in samplers'})",
                "unsupported",
            )
        return replace(sampler, infill=self.gen.infill_stage())

    def check_grammar(self, grammar) -> None:
        """On the worker thread: 400 naming the request's field when llama.cpp cannot use its
        grammar (compiled once; the generation reuses it)."""
        try:
            self.gen.constraint(grammar)
        except SpecggufError as e:
            raise ApiError(400, str(e), "invalid_grammar") from None

    async def start(self, req: p.Request) -> list[Job]:
        """The request's jobs, submitted: one per choice (OpenAI's `n`), the prompt read once;
        choice i runs with the seed + i (each draws its own random seed where none is set)."""
        tokens = await self.sched.call(lambda: self.prompt_tokens(req))
        if req.params.grammar is not None:
            await self.sched.call(lambda: self.check_grammar(req.params.grammar))
        params = req.params_for(self.gen.sampler)
        if req.sampler.infill:
            params = replace(params, sampler=self.with_infill_stage(params.sampler))
        if params.seed is None:
            params = replace(params, seed=self.cfg.seed)
        ns = _namespace()
        if ns is not None:
            params = replace(params, namespace=ns)
        return [
            self.sched.submit(tokens, replace(params, seed=choice_seed(params.seed, i)))
            for i in range(req.n)
        ]

    async def events(
        self, job: Job, request: HttpRequest | None = None, ping: int = 0
    ) -> AsyncIterator[Event]:
        """The job's events up to "done" or "error". When `request` is given (a non-streamed
        answer), a client that disconnects cancels the job; a streamed answer is cancelled by
        the response being torn down (the finally below). `ping` > 0 (a streamed answer):
        after that many seconds without an event, a "ping" event (--sse-ping-interval)."""
        finished = False
        try:
            while True:
                if request is None:
                    try:
                        ev = await asyncio.wait_for(job.events.get(), ping if ping > 0 else None)
                    except asyncio.TimeoutError:
                        yield Event("ping")
                        continue
                else:
                    try:
                        ev = await asyncio.wait_for(job.events.get(), 0.25)
                    except asyncio.TimeoutError:
                        if await request.is_disconnected():
                            return
                        continue
                if ev.kind in ("done", "error"):
                    finished = True
                yield ev
                if finished:
                    return
        finally:
            if not finished:
                self.sched.cancel(job, "disconnected")

    def timings(self, job: Job) -> dict[str, Any]:
        assert job.generation is not None
        t = job.generation.stats.timings()
        t.setdefault("cache_n", job.cache_n)
        return {"cache_n": t.pop("cache_n"), **t}

    def usage(self, job: Job) -> dict[str, Any]:
        assert job.generation is not None
        return p.usage(len(job.tokens), job.generation.stats.predicted_n, job.cache_n)

    # -- generation endpoints ------------------------------------------------------------------

    async def chat(self, request: HttpRequest):
        return await self.generate(request, self.parse_chat)

    async def completions(self, request: HttpRequest):
        return await self.generate(request, lambda b: p.parse_completion(b, native=False))

    async def native(self, request: HttpRequest):
        return await self.generate(request, lambda b: p.parse_completion(b, native=True))

    async def infill(self, request: HttpRequest):
        return await self.generate(request, p.parse_infill)

    async def generate(self, request: HttpRequest, parse: Callable[[Any], p.Request]):
        """A generation endpoint: the body parsed, the jobs started, the answer given; the
        models are held awake all along (the answer's pieces are read in the vocabulary)."""
        release = self.hold()
        try:
            req = await self.body(request, parse)
            jobs = await self.start(req)
            return await self.answer(req, jobs, request, release)
        except BaseException:
            release()
            raise

    async def answer(
        self, req: p.Request, jobs: list[Job], request: HttpRequest,
        release: Callable[[], None] = lambda: None,
    ):  # fmt: skip
        """The whole answer, or its stream; `release` once it is sent."""
        if req.stream:
            return StreamingResponse(
                self.sse_choices(req, jobs, release),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        finals = []
        try:
            for i, job in enumerate(jobs):
                parts: list[str] = []
                tokens: list[int] = []
                probs: list[TokenProbs] = []
                async for ev in self.events(job, request):
                    if ev.kind == "error":
                        assert ev.error is not None
                        raise ev.error
                    if ev.kind == "chunk" and ev.chunk is not None:
                        parts.append(ev.chunk.text)
                        tokens.extend(ev.tokens)
                        probs.extend(ev.chunk.probs)
                if job.generation is None:  # the client went away before the answer
                    return PlainTextResponse("", status_code=499)
                finals.append(self.final_object(req, job, "".join(parts), tokens, probs, i))
        finally:
            for job in jobs:  # a choice that failed or lost its client ends the others
                if not job.ended:
                    self.sched.cancel(job, "disconnected")
            release()
        if len(finals) == 1:
            return JSONResponse(finals[0])
        return JSONResponse(merged_choices(finals, self.usage_of(jobs)))

    def final_object(
        self, req: p.Request, job: Job, text: str, tokens: list[int],
        probs: list[TokenProbs] | None = None, index: int = 0,
    ) -> dict:  # fmt: skip
        a = self.answer_of(req, job, probs or (), index)
        whole = FORMATS[req.kind].final(a, text, tokens)
        if req.response_fields is not None:
            return p.select_fields(req.response_fields, whole)
        return whole

    def parse_chat(self, body: Any) -> p.Request:
        """A chat request, its calls read in the template's dialect, its reasoning split in
        the server's --reasoning-format and budgeted by its --reasoning-budget unless it asks
        for others; a forced call lets the model think first unless the request or the server
        turns thinking off."""
        budget = (self.cfg.reasoning_budget, self.cfg.reasoning_budget_message)
        return p.parse_chat(
            body, self.gen.dialect(), self.cfg.reasoning_format, budget, self.gen.render_options,
            pure_content=self.cfg.skip_chat_parsing,
        )

    def render_options(self, req: p.Request) -> RenderOptions:
        """The server's rendering options with the request's kwargs and effort on top."""
        return self.gen.render_options.merged(req.template_kwargs, req.reasoning_effort)

    def answer_of(
        self, req: p.Request, job: Job, probs: Sequence[TokenProbs] = (), index: int = 0
    ) -> Answer:
        """What the wire formats read of this request's answer (figures computed on demand)."""
        return Answer(
            req=req,
            model=self.cfg.model_id,
            timings=lambda: self.timings(job),
            usage=lambda: self.usage(job),
            native_tail=lambda: self.native_tail(req, job),
            stop_reason=lambda: job.generation.stop_reason if job.generation else "",
            ident=p.new_id(req.kind),
            created=p.now(),
            piece=self.gen.format_piece if job.params.format_tokens else self.gen.piece,
            probs=probs,
            index=index,
        )

    def usage_of(self, jobs: list[Job]) -> dict[str, Any]:
        """OpenAI's usage of several choices: the prompt once (its cached part as the first
        choice found it), the completions' tokens summed."""
        first = jobs[0]
        assert first.generation is not None
        predicted = sum(j.generation.stats.predicted_n for j in jobs if j.generation is not None)
        return p.usage(len(first.tokens), predicted, first.cache_n)

    def native_tail(self, req: p.Request, job: Job) -> dict[str, Any]:
        g = job.generation
        assert g is not None
        s = g.stats
        return {
            "id_slot": job.slot,
            "stop": True,
            "model": self.cfg.model_id,
            "tokens_predicted": s.predicted_n,
            "tokens_evaluated": len(job.tokens),
            "generation_settings": self.settings(job),
            "has_new_line": "\n" in g.text,
            "truncated": g.stop_reason == "context",
            "stop_type": p.STOP_TYPE.get(g.stop_reason, "limit"),
            "stopping_word": g.stopping_word,
            # what the slot's cache holds after the answer: the prompt and every token but
            # the last one (not evaluated), as llama-server counts it; a client such as
            # llama.vim shows it as the context in use
            "tokens_cached": len(job.tokens) + max(0, s.predicted_n - 1),
            "timings": self.timings(job),
        }

    def settings(self, job: Job | None = None) -> dict[str, Any]:
        """llama-server's generation_settings / params (the fields specgguf has)."""
        gen = self.gen
        params = job.params if job is not None else None
        sampler = (params.sampler if params is not None else None) or gen.sampler
        spec = gen.session.spec
        o = params.spec if params is not None else None
        return {
            "n_predict": params.n_predict
            if params is not None and params.n_predict is not None
            else gen.n_predict,
            "seed": job.generation.seed if job is not None and job.generation else gen.seed,
            "temperature": sampler.temp,
            "top_k": sampler.top_k,
            "top_p": sampler.top_p,
            "min_p": sampler.min_p,
            "samplers": [*sampler.samplers, *(["infill"] if sampler.infill is not None else [])],
            "stop": list(params.stop) if params is not None else [],
            "ignore_eos": gen.ignore_eos,
            "n_ctx": gen.n_ctx,
            "speculative": bool(spec.types) and (o is None or (o.enabled and o.n_max != 0)),
            "speculative.n_max": (o.n_max if o is not None and o.n_max is not None else spec.n_max),
            "speculative.n_min": (o.n_min if o is not None and o.n_min is not None else spec.n_min),
            "speculative.p_min": (o.p_min if o is not None and o.p_min is not None else spec.p_min),
            "speculative.auto": self.cfg.auto and (o is None or o.n_max is None),
            "speculative.types": list(spec.types),
            # how a draft model's drafts are drawn for this request (n-gram drafts are one-hot)
            "speculative.draft_sampling": "probabilistic"
            if gen.plan(params or GenParams()).spec.drafts_probabilistically(sampler)
            else "greedy",
        }

    async def sse_choices(
        self, req: p.Request, jobs: list[Job], release: Callable[[], None] = lambda: None
    ) -> AsyncIterator[bytes]:
        """The choices' streams one after the other (each chunk names its choice's index),
        one terminator at the end; the usage (where sent) is the last choice's closing's,
        summed over all. A client that goes away ends every choice. `release` at the end."""
        try:
            for i, job in enumerate(jobs):
                last = i == len(jobs) - 1
                usage = (lambda: self.usage_of(jobs)) if last and len(jobs) > 1 else None
                async for data in self.sse(req, job, index=i, last=last, usage=usage):
                    yield data
        finally:
            for job in jobs:
                if not job.ended:
                    self.sched.cancel(job, "disconnected")
            release()

    async def sse(
        self, req: p.Request, job: Job, *, index: int = 0, last: bool = True,
        usage: Callable[[], dict[str, Any]] | None = None,
    ) -> AsyncIterator[bytes]:  # fmt: skip
        """Server-sent events in the request's wire format (specgguf.server.wire): OpenAI
        chunks ending in `data: [DONE]`, or llama-server's /completion chunks (no [DONE]);
        each content chunk carries a `specgguf` field with the text's origin (accepted draft
        or target) and the round's figures, and the probabilities of the tokens it releases
        where the request asked for them. `index`: the choice it is (OpenAI's `n`); only the
        `last` choice ends the stream, and sends the usage (`usage`: of all choices)."""
        fmt = FORMATS[req.kind]
        a = self.answer_of(req, job, index=index)
        if usage is not None:
            a.usage = usage

        def data(obj: dict) -> bytes:
            return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"

        for obj in fmt.opening(a):
            yield data(obj)
        # with tools, the text goes through the call parser: content as it comes, a call's
        # id and name once its head is read, then its arguments as they are decoded
        dialect = req.call_dialect()
        calls = (
            dialect.parser(req.tools or [], parallel=req.parallel_calls)
            if dialect is not None
            else None
        )

        # and a thinking model's reasoning apart: reasoning_content deltas, never content
        split = req.splitter()

        def call_chunks(events: list[str | CallDelta]) -> list[bytes]:
            return [data(obj) for obj in fmt.calls(a, events)]

        def answer_chunks(
            pieces: list[tuple[str, str]], tokens, extra, probs: Sequence[TokenProbs] = ()
        ) -> list[bytes]:
            objs: list[dict] = []
            for kind, text in pieces:
                if kind == REASONING:
                    objs += fmt.reasoning(a, text)
                elif calls is not None:
                    objs += fmt.calls(a, calls.feed(text))
                else:
                    objs.append(fmt.content(a, text, tokens, job.slot, extra))
            if probs:  # with the round's first chunk (an empty one if its text is held)
                if not objs:
                    objs.append(fmt.content(a, "", tokens, job.slot, extra))
                fmt.attach_probs(a, objs[0], probs)
            return [data(obj) for obj in objs]

        ping = req.sse_ping_interval
        if ping is None:
            ping = self.cfg.http.sse_ping_interval
        async for ev in self.events(job, ping=ping):
            if ev.kind == "ping":  # a comment line: clients skip it, the connection lives
                yield SSE_PING
                continue
            if ev.kind == "error":
                assert ev.error is not None
                yield data(ev.error.body())
                break
            if ev.kind == "chunk":
                assert ev.chunk is not None
                extra = {
                    "spans": _spans(ev.chunk.pieces),
                    **(ev.info.as_dict() if ev.info is not None else {}),
                    "slot": job.slot,
                }
                text = ev.chunk.text
                pieces = split.feed(text) if split is not None else [(CONTENT, text)]
                for chunk in answer_chunks(pieces, ev.tokens, extra, ev.chunk.probs):
                    yield chunk
                continue
            # done
            g = job.generation
            assert g is not None
            finish = p.finish_reason(g.stop_reason)
            if split is not None:
                for chunk in answer_chunks(split.close(), [], {}):
                    yield chunk
            if calls is not None:
                for chunk in call_chunks(calls.close()):
                    yield chunk
                finish = tools_finish(calls, finish)
            extra = {"stop_reason": g.stop_reason, "auto": self.auto_state(job)}
            for obj in fmt.closing(a, finish, extra):
                if last or obj.get("choices") != []:  # a usage-only chunk ends the stream
                    yield data(obj)
        if fmt.terminator and last:
            yield fmt.terminator

    def auto_state(self, job: Job) -> dict[str, Any] | None:
        """auto's current figures for the page (None without auto)."""
        policy = self.gen.policy(job.slot or 0)
        used = job.generation is not None and job.generation.decoder.policy is policy
        if policy is None or not used or not policy.chosen:
            return None
        chosen = policy.chosen[-64:]
        return {"k": chosen[-1], "mean_k_recent": round(sum(chosen) / len(chosen), 3)}

    # -- the rest of llama-server's API -------------------------------------------------------

    async def tokenize(self, request: HttpRequest):
        body = await self.body(request)
        if not isinstance(body, dict) or not isinstance(body.get("content"), str):
            raise p.bad("'content' must be a string", "missing_field")
        add_special = p._get(body, "add_special", lambda v: isinstance(v, bool), "a bool", False)
        parse_special = p._get(body, "parse_special", lambda v: isinstance(v, bool), "a bool", True)
        with_pieces = p._get(body, "with_pieces", lambda v: isinstance(v, bool), "a bool", False)
        text = body["content"]

        def work():
            toks = self.gen.encode(text, add_special=add_special, parse_special=parse_special)
            if not with_pieces:
                return toks
            out = []
            for t in toks:
                raw = self.gen.piece(t)
                try:
                    piece: Any = raw.decode("utf-8")
                except UnicodeDecodeError:
                    piece = list(raw)
                out.append({"id": t, "piece": piece})
            return out

        tokens = await self.sched.call(work)
        # a body near max_body is millions of tokens: their JSON is written off the loop too
        return await self.prepare(lambda: JSONResponse({"tokens": tokens}))

    async def detokenize(self, request: HttpRequest):
        body = await self.body(request)
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(tokens, list):
            raise p.bad("'tokens' must be a list of token ids", "missing_field")

        def work():
            try:
                self.gen.check_ids(tokens)
            except SpecggufError as e:
                raise p.bad(str(e)) from None
            return self.gen.detokenize(tokens)

        return JSONResponse({"content": await self.sched.call(work)})

    async def embeddings(self, request: HttpRequest):
        """/v1/embeddings: OpenAI's shape (llama-server's when the body says `content`)."""
        return await self._embed(request, oai=True)

    async def embedding(self, request: HttpRequest):
        """/embedding: llama-server's shape, one vector per token where nothing pools."""
        return await self._embed(request, oai=False)

    async def _embed(self, request: HttpRequest, oai: bool):
        embedder = self.cfg.embedder
        if embedder is None:
            raise emb.not_enabled()
        req = await self.body(request, lambda b: emb.parse(b, self.cfg.embd_normalize,
                                                           embedder.n_embd))  # fmt: skip
        oai = oai and req.oai
        if oai and not embedder.pooled:
            raise p.bad(emb.NOT_OAI)

        def work():
            try:
                # (the models may have slept and woken since: their embeddings context now)
                return emb.embed_all(req, self.gen.encode, self.gen.check_ids, self.cfg.embedder)
            except (SpecggufError, InputTooLong) as e:
                raise p.bad(str(e), "invalid_prompt") from None

        results = await self.sched.call(work)
        answer = emb.oai_answer(req, self.cfg.model_id, results) if oai else emb.native_answer(
            results)
        return await self.prepare(lambda: JSONResponse(answer))

    async def rerank(self, request: HttpRequest):
        """/rerank: each document's score against the query, highest first (llama-server's
        shapes: Jina's, or TEI's when the body names `texts`)."""
        if not self.cfg.rerank or self.cfg.embedder is None:
            raise ranking.not_enabled()
        req = await self.body(request, ranking.parse)
        fmt = self.cfg.rerank_format

        def work() -> list[ranking.Scored]:
            def tokenize(text: str, special: bool) -> list[int]:
                return self.gen.encode(text, add_special=False, parse_special=special)

            out = []
            try:
                for doc in req.documents:
                    tokens = fmt.tokens(req.query, doc, tokenize)
                    if not tokens:
                        raise p.bad("Input content cannot be empty", "invalid_prompt")
                    # (the models may have slept and woken since: their context now)
                    score = float(self.cfg.embedder.embed(tokens)[0][0])
                    out.append(ranking.Scored(score, len(tokens)))
            except (SpecggufError, InputTooLong) as e:
                raise p.bad(str(e), "invalid_prompt") from None
            return out

        scored = await self.sched.call(work)
        return JSONResponse(ranking.answer(req, self.cfg.model_id, scored))

    async def apply_template(self, request: HttpRequest):
        req = await self.body(request, self.parse_chat)

        def work():
            try:
                return self.gen.chat_prompt(req.messages or [], req.tools, self.render_options(req))
            except SpecggufError as e:
                raise p.bad(str(e), "invalid_prompt") from None

        return JSONResponse({"prompt": await self.sched.call(work)})

    async def health(self, request: HttpRequest):
        """ok, as llama-server answers, asleep or not (a sleeping server serves: its next
        request loads the models); while they sleep, is_sleeping says so."""
        return JSONResponse({"status": "ok", "is_sleeping": True} if self.sleeping
                            else {"status": "ok"})  # fmt: skip

    async def models(self, request: HttpRequest):
        if self.sleeping:
            return JSONResponse(self._asleep_answers["models"])
        return JSONResponse(self.models_body())

    def models_body(self) -> dict[str, Any]:
        """llama-server's answer: OpenAI's `data` (with llama.cpp's `meta` of the model) and,
        beside it, the Ollama-style `models` list that llama-server writes too (its fields
        that llama.cpp does not know are empty, as llama-server leaves them)."""
        m = self.gen.session.target_model
        name = self.cfg.model_id
        return (
            {
                "models": [
                    {
                        "name": name,
                        "model": name,
                        "modified_at": "",
                        "size": "",
                        "digest": "",
                        "type": "model",
                        "description": "",
                        "tags": [""],
                        "capabilities": ["completion"],
                        "parameters": "",
                        "details": {
                            "parent_model": "",
                            "format": "gguf",
                            "family": "",
                            "families": [""],
                            "parameter_size": "",
                            "quantization_level": "",
                        },
                    }
                ],
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "aliases": [],
                        "tags": list(self.cfg.model_tags),
                        "object": "model",
                        "created": self.started,
                        "owned_by": "specgguf",
                        "meta": {
                            "vocab_type": m.vocab_type,
                            "n_vocab": m.n_vocab,
                            "n_ctx": self.gen.n_ctx,
                            "n_ctx_train": m.n_ctx_train,
                            "n_embd": m.n_embd,
                            "n_params": m.n_params,
                            "size": m.size,
                            "ftype": m.ftype,
                        },
                    }
                ],
            }
        )

    async def props(self, request: HttpRequest):
        """llama-server's /props; while the models sleep, what it said before they did, with
        is_sleeping true (it does not wake them)."""
        if self.sleeping:
            return JSONResponse({**self._asleep_answers["props"], "is_sleeping": True})
        return JSONResponse(self.props_body())

    def props_body(self) -> dict[str, Any]:
        from specgguf import __version__

        settings = self.settings()
        return (
            {
                "default_generation_settings": {
                    "id": 0,
                    "id_task": -1,
                    "n_ctx": self.gen.n_ctx,
                    "speculative": settings["speculative"],
                    "is_processing": self.sched.processing > 0,
                    "params": settings,
                },
                "total_slots": self.gen.n_slots,
                "model_path": self.cfg.model_path,
                "draft_model_path": self.cfg.draft_path,
                "model_alias": self.cfg.model_id,
                "chat_template": self.gen.template().source,
                "chat_dialect": self.gen.dialect().name,
                "modalities": {"vision": False, "audio": False},
                "build_info": f"specgguf {__version__}",
                "is_sleeping": False,
            }
        )

    async def slots(self, request: HttpRequest):
        """Every slot; under --api-key the figures of a slot another key's request runs in
        or last wrote (its prompt's length, its drafts) are null: they are that key's. Asks
        for the models: sleeping ones are loaded again first (as llama-server's task does)."""
        release = self.hold()
        try:
            if self.sleeping:
                await self.sched.call(lambda: None)
            return self.slots_answer(request)
        finally:
            release()

    async def slot_action(self, request: HttpRequest):
        """POST /slots/{id}?action=save|restore|erase (specgguf.server.slot_files): once no
        request runs in the slot, on the worker thread."""
        from specgguf.server import slot_files as sf

        if self.cfg.slot_save_path is None:
            raise ApiError(501, "This server does not support slots action. Start it with "
                           "`--slot-save-path`", "not_supported")  # fmt: skip
        files = sf.SlotFiles(self.cfg.slot_save_path)
        action = sf.check_action(request.query_params.get("action"))
        name, path = "", None
        if action != "erase":
            name, path = files.path_of(await self.body(request))
        release = self.hold()
        try:
            if self.sleeping:
                await self.sched.call(lambda: None)
            slot = sf.check_slot(self.gen, request.path_params["id_slot"])
            work = files.action(self.gen, slot, action, name, path, _namespace())
            return JSONResponse(await self.sched.call(work, idle_slot=slot))
        finally:
            release()

    async def lora_adapters(self, request: HttpRequest):
        """GET /lora-adapters: [{id, path, scale}] of the target's LoRA adapters."""
        release = self.hold()
        try:
            if self.sleeping:
                await self.sched.call(lambda: None)
            return JSONResponse(p.lora_list(self.gen.lora_adapters()))
        finally:
            release()

    async def set_lora_adapters(self, request: HttpRequest):
        """POST /lora-adapters [{id, scale}, ...]: new scales (an adapter not named: 0), set
        once every running request has ended under the old ones (none starts meanwhile);
        every cached prefix is dropped with them."""
        body = await self.body(request)
        release = self.hold()
        try:
            if self.sleeping:
                await self.sched.call(lambda: None)
            scales = p.lora_scales(body, len(self.gen.lora_adapters()))
            gen = self.gen
            await self.sched.call(lambda: gen.set_lora_scales(scales), idle_slot=ALL_SLOTS)
            return JSONResponse({"success": True})
        finally:
            release()

    def slots_answer(self, request: HttpRequest) -> JSONResponse:
        out = []
        for s in self.sched.slot_states(_namespace()):
            params = self.settings()
            if s["params"] is not None and s["visible"]:
                params["n_predict"] = s["params"].n_predict
            if not s["visible"]:
                s = {**s, **dict.fromkeys(_PRIVATE_SLOT_FIGURES)}
            out.append(
                {
                    "id": s["id"],
                    "id_task": s["id_task"],
                    "n_ctx": self.gen.n_ctx,
                    "speculative": params["speculative"],
                    "is_processing": s["is_processing"],
                    "params": params,
                    "n_cached": s["n_cached"],
                    # this request's drafts so far, and the shared passes (-np > 1)
                    "speculative_stats": {"n_drafted": s["n_drafted"],
                                          "n_accepted": s["n_accepted"]},
                    "batch": s["batch"],
                    "next_token": {
                        "has_next_token": s["is_processing"],
                        "has_new_line": False,
                        "n_remain": -1,
                        "n_decoded": s["n_decoded"],
                    },
                }
            )
        if request.query_params.get("fail_on_no_slot") in ("1", "true") and all(
            s["is_processing"] for s in out
        ):
            raise ApiError(503, "no slot available", "no_slot_available")
        return JSONResponse(out)

    async def metrics(self, request: HttpRequest):
        return PlainTextResponse(
            prometheus(self.sched), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    async def page(self, request: HttpRequest):
        from specgguf.server.page import PAGE

        return HTMLResponse(PAGE)


def _decode(data: bytes) -> Any:
    """On a preparation thread: the body as JSON, or a 400 saying why not."""
    try:
        return json_input.loads(data)
    except json_input.JsonInputError as e:
        if e.code == "invalid_json":
            raise ApiError(400, f"the request body is not valid JSON: {e}", e.code) from None
        raise ApiError(400, f"the request body: {e}", e.code) from None


def _spans(pieces: list[tuple[str, bool]]) -> list[list[int]]:
    """[[n, 1|0], ...]: runs of the chunk's text, n code points each, 1 when they came from
    accepted draft tokens (adjacent fragments of the same origin merged)."""
    out: list[list[int]] = []
    for text, drafted in pieces:
        if not text:
            continue
        flag = int(drafted)
        if out and out[-1][1] == flag:
            out[-1][0] += len(text)
        else:
            out.append([len(text), flag])
    return out


def prometheus(sched: Scheduler) -> str:
    """llama-server's metric names (and a few of specgguf's own), Prometheus text format."""
    with sched._lock:
        m = sched.metrics
        pps = 1e3 * m.prompt_tokens / m.prompt_ms if m.prompt_ms else 0.0
        tps = 1e3 * m.predicted_tokens / m.predicted_ms if m.predicted_ms else 0.0
        rows: list[tuple[str, str, Any, str]] = [
            ("prompt_tokens_total", "counter", m.prompt_tokens,
             "Number of prompt tokens processed."),
            ("prompt_seconds_total", "counter", m.prompt_ms / 1e3,
             "Prompt process time in seconds."),
            ("tokens_predicted_total", "counter", m.predicted_tokens,
             "Number of generation tokens processed."),
            ("tokens_predicted_seconds_total", "counter", m.predicted_ms / 1e3,
             "Predict process time in seconds."),
            ("prompt_tokens_seconds", "gauge", pps, "Average prompt throughput in tokens/s."),
            ("predicted_tokens_seconds", "gauge", tps,
             "Average generation throughput in tokens/s."),
            ("requests_processing", "gauge", sched.processing, "Number of requests processing."),
            ("requests_deferred", "gauge", sched.deferred, "Number of requests deferred."),
            ("n_tokens_max", "counter", m.n_tokens_max,
             "High watermark of the context size observed."),
            ("n_decode_total", "counter", m.n_decode, "Total number of target decode calls."),
            ("spec_decode_num_draft_tokens_total", "counter", m.draft_tokens,
             "Total draft tokens generated."),
            ("spec_decode_num_accepted_tokens_total", "counter", m.accepted_tokens,
             "Total draft tokens accepted by the target model."),
            ("spec_decode_num_drafts_total", "counter", m.drafts,
             "Total speculative decoding verification steps."),
            ("prompt_tokens_cached_total", "counter", m.cached_tokens,
             "Prompt tokens reused from a slot's KV cache (not evaluated)."),
            ("requests_total", "counter", m.requests, "Generation requests accepted."),
            ("requests_rejected_total", "counter", m.rejected,
             "Requests refused with 503 (queue full)."),
            ("tokens_generated_total", "counter", m.generated,
             "Tokens streamed so far, requests still running included."),
        ]  # fmt: skip
        rows += sched.batch_metrics()  # -np > 1: the shared passes
        per_pos = list(m.accepted_per_pos)
    lines: list[str] = []
    for name, kind, value, help_ in rows:
        lines += [
            f"# HELP llamacpp:{name} {help_}",
            f"# TYPE llamacpp:{name} {kind}",
            f"llamacpp:{name} {_num(value)}",
        ]
    if per_pos:
        name = "spec_decode_num_accepted_tokens_per_pos_total"
        lines += [
            f"# HELP llamacpp:{name} Accepted tokens per draft position.",
            f"# TYPE llamacpp:{name} counter",
        ]
        lines += [f'llamacpp:{name}{{position="{i}"}} {n}' for i, n in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


def _num(v: Any) -> str:
    return str(v) if isinstance(v, int) else f"{float(v):.6f}"


def _api_error(request, exc: Exception):
    assert isinstance(exc, ApiError)
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


def _http_error(request, exc: Exception):
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        err = ApiError(404, f"no such endpoint: {request.url.path}", "not_found")
    elif exc.status_code == 405:
        err = ApiError(405, f"method {request.method} is not allowed here", "method_not_allowed")
    else:
        err = ApiError(exc.status_code, str(exc.detail), None)
    return _api_error(request, err)


def _internal_error(request, exc: Exception):
    err = ApiError(500, f"internal error: {type(exc).__name__}: {exc}", None)
    return _api_error(request, err)

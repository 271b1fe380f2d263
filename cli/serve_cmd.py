"""`specgguf serve`: an OpenAI- and llama-server-compatible HTTP server that speculates.

Flags are llama-server's (model, loading, speculative and sampling flags are `run`'s); the
sampling flags set the defaults a request may override. Everything is checked before any
weight is read; then the models load once and the server listens until SIGTERM/SIGINT.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import typer
from specgguf_cli import chat_flags
from specgguf_cli import options as o
from specgguf_cli.table_flags import own_option, with_table_flags

from specgguf.chat.reasoning import REASONING_FORMATS
from specgguf.chat.render import REASONING_EFFORT_LEVELS, RenderOptions
from specgguf.errors import UsageError
from specgguf.flag_table.values import POOLING
from specgguf.io import json_input
from specgguf.server import connections as cn
from specgguf.server.api_keys import api_keys
from specgguf.server.http_settings import HttpSettings

Host = typer.Option("127.0.0.1", "--host", envvar="LLAMA_ARG_HOST", help="Address to listen on.")
Port = typer.Option(
    8080, "--port", envvar="LLAMA_ARG_PORT", help="Port to listen on (0: any free port)."
)
ApiKey = typer.Option(
    None,
    "--api-key",
    envvar="LLAMA_API_KEY",
    help="Require this key (Authorization: Bearer KEY, or X-Api-Key) on every endpoint but "
    "/, /health and /v1/models; a comma list allows several keys.",
)
Parallel = typer.Option(
    1,
    "-np",
    "--parallel",
    envvar="LLAMA_ARG_N_PARALLEL",
    help="Slots: requests generated at once (interleaved round by round); -c is divided "
    "between them, as llama-server does.",
)
CacheReuse = typer.Option(
    0,
    "--cache-reuse",
    metavar="N",
    envvar="LLAMA_ARG_CACHE_REUSE",
    help="Keep the cached chunks of at least N tokens that a new prompt repeats further "
    "along, shifted to their new positions, not only the common prefix (an editor's prompt "
    "changes in the middle as one types); 0: prefix only. One slot (-np 1).",
)
SpmInfill = typer.Option(
    False,
    "--spm-infill",
    help="Lay fill-in-the-middle prompts (/infill, a suffix) out suffix first: "
    "suffix/prefix/middle, for the models trained so (default: prefix/suffix/middle).",
)
#: the most requests --max-queue lets wait: each holds a connection and its prompt's tokens,
#: so "unbounded" (a huge number) would leave memory to the clients
MAX_QUEUE = 4096
MaxQueue = typer.Option(
    64,
    "--max-queue",
    help=f"Requests that may wait for a slot (0..{MAX_QUEUE}); more get 503 with Retry-After.",
)
MaxConnections = typer.Option(
    None,
    "--max-connections",
    help="HTTP connections open at once; one more is answered 503 and closed (default: "
    f"-np + --max-queue + {cn.CONNECTION_HEADROOM}; at least -np + --max-queue).",
    show_default=False,
)
ChatTemplateKwargs = typer.Option(
    None,
    "--chat-template-kwargs",
    envvar="LLAMA_ARG_CHAT_TEMPLATE_KWARGS",
    help="JSON object of extra variables for the chat template (enable_thinking, ...): every "
    "request's default; a request's chat_template_kwargs go over it.",
    show_default=False,
)
ReasoningFormat = typer.Option(
    "auto",
    "--reasoning-format",
    envvar="LLAMA_ARG_THINK",
    help="How a chat answer's thinking (<think>...</think>) is returned: none (left in the "
    "content), deepseek or auto (in message.reasoning_content); a request's reasoning_format "
    "overrides it.",
)
Reasoning = typer.Option(
    "auto",
    "-rea",
    "--reasoning",
    envvar="LLAMA_ARG_REASONING",
    help="Whether thinking models are asked to think (the template's enable_thinking): on, "
    "off or auto (the template's default: on).",
)
ReasoningEffort = typer.Option(
    "default",
    "--reasoning-effort",
    metavar="LEVEL",
    envvar="LLAMA_ARG_REASONING_EFFORT",
    help="The reasoning_effort the chat template is given: default (the template's own), or "
    f"one of {', '.join(REASONING_EFFORT_LEVELS[1:])} (none: no thinking); a request's "
    "reasoning_effort overrides it.",
)
ReasoningPreserve = typer.Option(
    None,
    "--reasoning-preserve/--no-reasoning-preserve",
    envvar="LLAMA_ARG_REASONING_PRESERVE",
    help="Earlier assistant turns keep their reasoning in the prompt, for the templates that "
    "can (they read preserve_thinking, clear_thinking...): the template kwarg "
    "preserve_reasoning (default: on, unless --chat-template-kwargs sets it).",
    show_default=False,
)
SkipChatParsing = typer.Option(
    False,
    "--skip-chat-parsing/--no-skip-chat-parsing",
    envvar="LLAMA_ARG_SKIP_CHAT_PARSING",
    help="Return a chat answer as it was generated, all in message.content: no reasoning or "
    "tool calls are read out of it.",
)
PrefillAssistant = typer.Option(
    True,
    "--prefill-assistant/--no-prefill-assistant",
    envvar="LLAMA_ARG_PREFILL_ASSISTANT",
    help="A chat request whose last message is the assistant's continues it (the answer "
    "starts with its text); --no-prefill-assistant: it is a whole message, a new answer "
    "follows.",
)
Alias = typer.Option(
    None, "-a", "--alias", envvar="LLAMA_ARG_ALIAS", help="Model name in /v1/models and answers."
)
Tags = typer.Option(
    None, "--tags", envvar="LLAMA_ARG_TAGS", metavar="STRING",
    help="Model tags, comma-separated, listed in /v1/models (informational, not used for "
    "routing).",
)
Timeout = typer.Option(
    600,
    "-to",
    "--timeout",
    envvar="LLAMA_ARG_TIMEOUT",
    help="Seconds allowed to receive a request body, and for a new connection to send its "
    "first request.",
)
SystemPrompt = typer.Option(
    None, "-sys", "--system-prompt", help="System message for chat requests that have none."
)
Escape = own_option("--escape")  # accepted as llama-server accepts it: no effect here


@with_table_flags("serve")
@o.with_generation_flags
@o.with_session_flags
def serve(
    gen_flags: o.GenerationFlags = None,  # every flag of o.GENERATION_FLAGS
    flags: o.SessionFlags = None,  # every flag of o.SESSION_FLAGS and the n-gram options
    host: str = Host,
    port: int = Port,
    api_key: str | None = ApiKey,
    parallel: int = Parallel,
    cache_reuse: int = CacheReuse,
    spm_infill: bool = SpmInfill,
    max_queue: int = MaxQueue,
    max_connections: int | None = MaxConnections,
    chat_template: str | None = chat_flags.ChatTemplate,
    chat_template_file: Path | None = chat_flags.ChatTemplateFile,
    chat_template_kwargs: str | None = ChatTemplateKwargs,
    reasoning_format: str = ReasoningFormat,
    reasoning: str = Reasoning,
    reasoning_effort: str = ReasoningEffort,
    reasoning_preserve: bool | None = ReasoningPreserve,
    skip_chat_parsing: bool = SkipChatParsing,
    prefill_assistant: bool = PrefillAssistant,
    alias: str | None = Alias,
    tags: str | None = Tags,
    timeout: int = Timeout,
    system_prompt: str | None = SystemPrompt,
    escape: bool = Escape,
    quiet: bool = o.Quiet,
) -> int:
    """Serve the model over HTTP: OpenAI's /v1/chat/completions, /v1/completions and
    /v1/models, llama-server's /completion, /infill, /tokenize, /detokenize, /apply-template,
    /props, /slots, /health and /metrics (with --slot-save-path, POST /slots/{id_slot} saves,
    restores or erases a slot), GET and POST /lora-adapters (the --lora adapters' scales),
    and a chat page at / that shows the speculation;
    with --embeddings, /v1/embeddings and /embedding; with --rerank, /rerank (also
    /reranking, /v1/rerank, /v1/reranking).

    With no -m, serves the pulled default pair (Qwen2.5-Coder 1.5B + 0.5B draft).
    llama-server's code-completion presets (--fim-qwen-1.5b-default, --fim-qwen-7b-spec, ...)
    set port 8012, -b 1024, -ub 1024, -c 0 and --cache-reuse 64 for an editor plugin.
    """
    from specgguf.drafters.registry import needs_draft_model
    from specgguf.errors import ExitCode, SpecggufError, UsageError

    n_max = gen_flags.check(flags)
    if escape:  # llama-server takes -e too and reads no escapes: its prompts are requests'
        print("note: -e/--escape has no effect on serve: prompts come in requests, where no "
              "escapes are processed (as in llama-server)", file=sys.stderr)
    if not 1 <= parallel <= 64:
        raise UsageError(f"invalid value for -np/--parallel: {parallel} (must be 1..64)")
    if cache_reuse < 0:
        raise UsageError(f"invalid value for --cache-reuse: {cache_reuse} (0 or more tokens)")
    if cache_reuse and parallel > 1:
        raise UsageError("--cache-reuse works with one slot: drop -np or --cache-reuse")
    if not 0 <= port <= 65535:
        raise UsageError(f"invalid value for --port: {port} (must be 0..65535)")
    if not 0 <= max_queue <= MAX_QUEUE:
        raise UsageError(f"invalid value for --max-queue: {max_queue} (must be 0..{MAX_QUEUE})")
    if timeout <= 0:
        raise UsageError(f"invalid value for --timeout: {timeout} (must be > 0)")
    needed = cn.needed_connections(parallel, max_queue)
    if max_connections is None:
        max_connections = cn.default_max_connections(parallel, max_queue)
    elif not needed <= max_connections <= cn.MAX_CONNECTIONS:
        raise UsageError(
            f"invalid value for --max-connections: {max_connections} (must be "
            f"{needed}..{cn.MAX_CONNECTIONS}: -np + --max-queue requests each hold one)"
        )
    http = HttpSettings.of(flags.tuning.http if flags.tuning is not None else ())
    keys = api_keys(api_key, http.api_key_file)
    http.check()
    http.check_paths()
    cache_ram = dict(flags.tuning.load).get("cache_ram") if flags.tuning is not None else None
    if cache_ram and len(keys) > 1:  # its sequences carry no key: one key's text would leak
        raise UsageError("-cram/--cache-ram keeps one prompt cache for every request, which "
                         "several --api-key keys must not share: give one key, or drop "
                         "--cache-ram")  # fmt: skip
    idle_saves = dict(flags.tuning.slots).get("cache_idle_slots") if flags.tuning else None
    if idle_saves and not cache_ram and not quiet:  # as llama-server warns
        print("warning: --cache-idle-slots needs --cache-ram: no idle slot is saved",
              file=sys.stderr)
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise SpecggufError(
            f"serve needs the HTTP packages ({e.name} is missing): pip install 'specgguf[serve]'",
            ExitCode.SERVER,
        ) from None

    render_options = template_kwargs_option(
        chat_template_kwargs, reasoning, reasoning_format,
        ChatDefaults(reasoning_effort, reasoning_preserve, prefill_assistant),
    )
    routing = dict(flags.tuning.router) if flags.tuning is not None else {}
    if "dir" in routing or "preset" in routing:  # router mode: one serve per model
        return serve_models_dir(routing, flags, host, port, keys, quiet, http.reuse_port)
    if routing and not quiet:
        from specgguf.server.runner import say as say_now

        say_now("warning: --models-max and --models-autoload are for router mode "
                "(--models-dir, --models-preset): they do nothing with one model")  # fmt: skip
    model, model_draft, types = flags.resolve(gen_flags.spec_type, n_max)
    template_src, template_origin = chat_flags.template_source(chat_template, chat_template_file)
    from specgguf.server.runner import bind

    # the default constraint of every request that brings none (llama-server's meaning)
    output_grammar = gen_flags.output_grammar()

    bind(host, port, http.reuse_port).close()  # a port in use fails now, not after the load

    from specgguf.binding.devices import is_loopback
    from specgguf.generator import Generator
    from specgguf.server.app import ServerConfig
    from specgguf.server.runner import say
    from specgguf.server.runner import serve as run_server
    from specgguf.server.scheduler import SlotSettings
    from specgguf.server.sleep import Loaded, Models

    if not keys and not is_loopback(host):  # said even with -q: it is about who gets in
        say(
            f"warning: --host {host} without --api-key: anyone who can reach this port can use "
            "every endpoint (generate, tokenize, read /props and /slots)"
        )

    embeddings = embedding_settings(dict(flags.tuning.embeddings) if flags.tuning is not None
                                    else {})  # fmt: skip
    slots = SlotSettings(**dict(flags.tuning.slots if flags.tuning is not None else ()))
    check_slot_save_path(slots.save_path, keys)
    loads = 0

    def load() -> Loaded:
        """The models, loaded as at start (again after a sleep: quietly)."""
        nonlocal loads
        loads += 1
        tell = say if not quiet and loads == 1 else (lambda _line: None)
        tell(f"specgguf serve: loading {model}" + (f" + draft {model_draft}" if model_draft
                                                   else ""))  # fmt: skip
        session = flags.open_session(
            model, model_draft, types, n_max, parallel=parallel, cache_reuse=cache_reuse
        )
        try:
            if embeddings.get("rank"):
                require_reranker(session.info.target, model.name)
            for warning in session.warnings:
                tell(f"warning: {warning}")
            tell(f"offload: {session.offload()}")
            gen = Generator(
                session,
                **gen_flags.generator_args(n_max),
                warmup=session.load.warmup,
                system_prompt=system_prompt,
                template_src=template_src,
                template_origin=template_origin,
                warn=None if quiet else (lambda m: say(f"warning: {m}")),
                grammar=output_grammar,
                render_options=render_options,
            )
            gen.template()  # a template that does not compile fails now, with its line
            dialect = gen.dialect()
            tell(f"chat dialect: {dialect.name} ({dialect.family}): tool calls are read in it")
            if output_grammar is not None:  # and so does a grammar llama.cpp refuses
                gen.constraint(output_grammar)
            embedder = None
            if embeddings.get("on"):
                embedder = embeddings_context(session, gen.n_ctx, embeddings.get("pooling"))
                tell(f"embeddings: /v1/embeddings and /embedding"
                     f"{', /rerank' if embeddings.get('rank') else ''}, {embedder.n_ctx} "
                     f"tokens an input, pooling {POOLING_NAMES[embedder.pooling]}")  # fmt: skip
            return Loaded(gen, embedder)
        except BaseException:
            session.close()
            raise

    models = Models(load, slots.sleep_idle_seconds)
    try:
        assert models.loaded is not None
        cfg = ServerConfig(
            model_id=alias or model.name,  # public in /v1/models: never the whole path
            model_tags=model_tags(tags),
            model_path=str(model),
            api_keys=keys,
            read_timeout=float(timeout),
            draft_path=str(model_draft) if needs_draft_model(types) else None,
            spec_types=types,
            auto=n_max is None,
            n_parallel=parallel,
            seed=gen_flags.seed,
            reasoning_format=reasoning_format,
            reasoning_budget=gen_flags.reasoning_budget,
            reasoning_budget_message=gen_flags.reasoning_budget_message,
            disabled=flags.switched_off(),
            embedder=models.loaded.embedder,
            embd_normalize=embeddings.get("normalize", 2),
            rerank=bool(embeddings.get("rank")),
            rerank_format=rerank_format(models.loaded.gen) if embeddings.get("rank") else None,
            spm_infill=spm_infill,
            skip_chat_parsing=skip_chat_parsing,
            http=http,
            slot_save_path=slots.save_path,
        )
        return run_server(
            models,
            cfg,
            host=host,
            port=port,
            max_queue=max_queue,
            max_connections=max_connections,
            verbose=flags.verbose,
            announce=None if quiet else say,
            slots=slots,
        )
    finally:
        models.close()
        sys.stderr.flush()


def serve_models_dir(routing: dict, flags: o.SessionFlags, host: str, port: int,
                     keys: tuple[str, ...], quiet: bool, reuse_port: bool) -> int:  # fmt: skip
    """Router mode: --models-dir's models and --models-preset's by name, each in a serve of
    its own started with this command line's other flags (specgguf.server.router) and its
    preset's (specgguf.server.presets)."""
    from specgguf.server.router import Router, directory_entries, directory_models
    from specgguf.server.runner import say, serve_router

    if flags.given["model"] is not None or flags.given["hf_repo"] or flags.given["model_url"]:
        raise UsageError("router mode (--models-dir, --models-preset) serves models by name: "
                         "drop -m/-hf/-mu (or drop the router flags to serve one model)")
    directory = directory_models(routing["dir"]) if "dir" in routing else {}
    if "preset" in routing:
        from specgguf.server import presets

        glob, sections = presets.read_presets(routing["preset"])
        models = presets.router_models(directory, glob, sections, presets.spelled(sys.argv[1:]))
        if not models:
            raise UsageError(f"--models-preset {routing['preset']}: no model in it")
    else:
        models = directory_entries(directory)
    router = Router(models, sys.argv[1:], models_max=routing.get("max", 4),
                    autoload=routing.get("autoload", True), api_keys=keys)  # fmt: skip
    return serve_router(router, host=host, port=port, verbose=flags.verbose,
                        announce=None if quiet else say, reuse_port=reuse_port)  # fmt: skip


def check_slot_save_path(path: Path | None, keys: tuple[str, ...]) -> None:
    """--slot-save-path names an existing directory; its files carry no key, so one key's
    saved conversation must not be restorable under another: one --api-key at most."""
    if path is None:
        return
    if not path.is_dir():
        raise UsageError(f"--slot-save-path: not a directory: {path}")
    if len(keys) > 1:
        raise UsageError("--slot-save-path keeps one set of slot files for every request, "
                         "which several --api-key keys must not share: give one key, or "
                         "drop --slot-save-path")  # fmt: skip


#: --tags: at most this many tags of at most this many characters each
MAX_TAGS, MAX_TAG_LEN = 64, 256


def model_tags(value: str | None) -> tuple[str, ...]:
    """--tags as llama-server keeps them: split at commas, stripped, empty ones dropped, each
    once, in sorted order (what /v1/models lists)."""
    tags = sorted({t.strip() for t in (value or "").split(",")} - {""})
    if len(tags) > MAX_TAGS or any(len(t) > MAX_TAG_LEN for t in tags):
        raise UsageError(f"--tags: at most {MAX_TAGS} tags of at most {MAX_TAG_LEN} characters")
    return tuple(tags)


def embedding_settings(given: dict) -> dict:
    """--embedding, --pooling, --rerank as llama-server reads them: --rerank is --embedding
    with rank pooling, and --embedding --pooling rank reranks too ("rank" set in both cases);
    --rerank with another --pooling is one line, exit 1."""
    pooling = given.get("pooling")
    if given.get("rank"):
        if pooling is not None and pooling != POOLING["rank"]:
            raise UsageError(f"--rerank pools by rank: drop --pooling {POOLING_NAMES[pooling]}")
        return {**given, "on": True, "pooling": POOLING["rank"]}
    if given.get("on") and pooling == POOLING["rank"]:
        return {**given, "rank": True}
    return given


def require_reranker(info, name: str) -> None:  # noqa: ANN001 - modelfiles.gguf_info.GGUFInfo
    """--rerank reads a classifier head's output: a model without one (a chat or embedding
    model) would score every pair with a meaningless number, so it is refused (one line),
    from the header the session read."""
    from specgguf.binding.rerank_prompt import CLASSIFIER_TENSORS, has_classifier

    if not has_classifier(info.tensor_names):
        raise UsageError(f"--rerank: {name} is not a reranker: it has no classifier head "
                         f"({' or '.join(CLASSIFIER_TENSORS)}), which llama.cpp scores pairs "
                         "with; serve a reranker model (e.g. a Qwen3 or BGE reranker GGUF)")


def rerank_format(gen):
    """The target's layout of a (query, document) pair (binding.rerank_prompt)."""
    from specgguf.binding.rerank_prompt import rerank_format as read

    return read(gen.session.target_model)


#: llama.h's pooling numbers by name, for the start-up line
POOLING_NAMES = {n: name for name, n in POOLING.items()}


def embeddings_context(session, n_ctx_slot: int, pooling: int | None):
    """serve --embeddings: the target's embeddings context. Its KV cache holds one input of
    up to min(a slot's context, -b) tokens, evaluated in one batch (llama.cpp pools within
    one), with -t's threads: a few MiB of cache beside the generation's, the weights shared."""
    from specgguf.binding.embedder import Embedder

    load = session.load
    embedder = Embedder(session.target_model, min(n_ctx_slot, load.n_batch),
                        threads=load.threads, pooling=pooling)  # fmt: skip
    session.adapt(embedder.ctx)  # --lora, --control-vector: as the generation's contexts
    return embedder


@dataclass(frozen=True)
class ChatDefaults:
    """The chat flags that set every request's rendering defaults besides the kwargs."""

    reasoning_effort: str = "default"  # --reasoning-effort
    reasoning_preserve: bool | None = None  # --reasoning-preserve (None: not given)
    prefill_assistant: bool = True  # --prefill-assistant


def template_kwargs_option(
    text: str | None, reasoning: str = "auto", reasoning_format: str = "auto",
    chat: ChatDefaults = ChatDefaults(),
) -> RenderOptions:  # fmt: skip
    """--chat-template-kwargs (a JSON object, bounded like a request body), -rea (on, off,
    auto), --reasoning-format and --reasoning-effort checked, else one UsageError line; the
    kwarg preserve_reasoning is on unless the kwargs or --[no-]reasoning-preserve say."""
    if reasoning_format not in REASONING_FORMATS:
        raise UsageError(
            f"--reasoning-format must be one of {', '.join(REASONING_FORMATS)}, "
            f"not {reasoning_format!r}"
        )
    if reasoning not in ("on", "off", "auto"):
        raise UsageError(f"-rea/--reasoning must be on, off or auto, not {reasoning!r}")
    if chat.reasoning_effort not in REASONING_EFFORT_LEVELS:
        raise UsageError(f"--reasoning-effort must be one of "
                         f"{', '.join(REASONING_EFFORT_LEVELS)}, not {chat.reasoning_effort!r}")
    thinking = reasoning != "off"
    kwargs = {} if text is None else _template_kwargs(text)
    if chat.reasoning_preserve is not None:
        kwargs["preserve_reasoning"] = chat.reasoning_preserve
    kwargs.setdefault("preserve_reasoning", True)
    effort = None if chat.reasoning_effort == "default" else chat.reasoning_effort
    return RenderOptions(enable_thinking=thinking, reasoning_effort=effort, kwargs=kwargs,
                         prefill_assistant=chat.prefill_assistant)  # fmt: skip


def _template_kwargs(text: str) -> dict:
    try:
        kwargs = json_input.loads(text)
    except ValueError as e:
        raise UsageError(f"--chat-template-kwargs: not JSON: {e}") from None
    if not isinstance(kwargs, dict):
        raise UsageError("--chat-template-kwargs must be a JSON object")
    if "enable_thinking" in kwargs and not isinstance(kwargs["enable_thinking"], bool):
        raise UsageError("--chat-template-kwargs: enable_thinking must be true or false")
    return kwargs

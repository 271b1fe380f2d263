"""`specgguf run`: generate from one prompt, streaming text to stdout and statistics to stderr.

Three ways in, one loaded Session:

* one prompt (-p, -f or stdin): text on stdout (or one --json object), llama.cpp's report on
  stderr. With --chat (default with the pulled instruct pair) it is sent as one user message
  through the target's chat template.
* --jsonl: JSON Lines from -f or stdin, one JSON object out per line, in order (specgguf.io.batch).
* -cnv/--conversation: an interactive chat, one user turn per stdin line (a line ending in "\\"
  continues on the next). Each turn re-renders the whole conversation; the decoder's prefill
  keeps what the KV caches already hold of it, so a turn evaluates only its new tokens.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

import typer
from specgguf_cli import chat_flags
from specgguf_cli import options as o
from specgguf_cli.interactive import InteractiveOptions, read_input, run_interactive, turn_summary
from specgguf_cli.table_flags import own_option, with_table_flags

from specgguf import interrupts
from specgguf.io.escapes import unescape  # -e on the prompt (tests import it from here)
from specgguf.io.output import write_stdout

Color = typer.Option(
    "auto",
    "-co",
    "--color",
    "--colour",
    help="Colour tokens that came from accepted drafts: auto (when stdout is a terminal and "
    "NO_COLOR is unset), always, never.",
)
Jsonl = typer.Option(
    False,
    "--jsonl",
    help='Batch mode: read JSON Lines ({"prompt": ...} or {"messages": [...]}, optional '
    "n_predict, temperature, top_k, top_p, min_p, seed, id, grammar or json_schema) from -f or "
    "stdin; write one JSON object per line, in order. Exit 8 when any line failed.",
)
Chat = typer.Option(
    None,
    "--chat/--no-chat",
    help="Send the prompt as one user message through the target's chat template. "
    'Default: on with the pulled default (instruct) pair, off with -m; --jsonl "prompt" '
    'lines are plain text unless --chat is given ("messages" lines always use the template).',
)
Conversation = own_option("--conversation")
SystemPrompt = typer.Option(
    None, "-sys", "--system-prompt", help="System message for --chat, -cnv and --jsonl prompts."
)
SystemPromptFile = typer.Option(
    None, "-sysf", "--system-prompt-file",
    help="Read the system message from a UTF-8 file (one trailing newline dropped).",
)  # fmt: skip
ReversePrompt = typer.Option(
    None,
    "-r",
    "--reverse-prompt",
    help="Stop an answer where its text would contain PROMPT (repeatable); with -cnv the "
    "next turn follows. PROMPT itself is not printed.",
)
SingleTurn = own_option("--single-turn")
ReasoningFormat = typer.Option(
    "auto", "--reasoning-format", envvar="LLAMA_ARG_THINK",
    help="With -cnv, a thinking model's thinking: none prints it as the model writes it; "
    "deepseek or auto (default) print it apart (dimmed in colour, else between [thinking] "
    "lines) and keep it out of the answer the next turn sees.",
)  # fmt: skip
HideReasoning = typer.Option(
    False, "--hide-reasoning", help="With -cnv: print the answer without the thinking before it.",
)  # fmt: skip
# llama-completion's interactive mode (the options made from their flag-table rows)
Interactive = own_option("--interactive")
InteractiveFirst = own_option("--interactive-first")
InPrefix = own_option("--in-prefix")
InSuffix = own_option("--in-suffix")
InPrefixBos = own_option("--in-prefix-bos")
MultilineInput = own_option("--multiline-input")
Escape = own_option("--escape")
PrintTokenCount = own_option("--print-token-count")
PromptCache = own_option("--prompt-cache")
PromptCacheAll = own_option("--prompt-cache-all")
PromptCacheRo = own_option("--prompt-cache-ro")
FimSuffix = typer.Option(
    None,
    "--fim-suffix",
    metavar="TEXT",
    help="Fill in the middle: the prompt (-p, -f) is the text before the hole and TEXT the "
    "text after it, laid out in the model's FIM tokens as /infill lays them out; prints the "
    "middle. (llama-cli's --in-prefix/--in-suffix wrap interactive input, so they keep that "
    "meaning elsewhere and are not used for this.)",
)
Trace = typer.Option(
    None,
    "--trace",
    help="Write one JSON object per speculative round to this file (drafter, proposed tokens, "
    "accepted count, emitted tokens, the target's probability of each proposal, timings).",
)

NProbs = typer.Option(
    0,
    "--n-probs",
    metavar="N",
    help="With --json or --jsonl: each generated token's log probability and the N most "
    "likely tokens at its position (the target's, before the sampler chain), as "
    "llama-server's completion_probabilities.",
)

COLOR_CHOICES = {
    "auto": "auto",
    "always": "always",
    "never": "never",
    "on": "always",
    "off": "never",
}


@with_table_flags("run")
@o.with_generation_flags
@o.with_session_flags
def run(
    gen_flags: o.GenerationFlags = None,  # every flag of o.GENERATION_FLAGS
    prompt: str | None = o.Prompt,
    file: Path | None = o.File,
    flags: o.SessionFlags = None,  # every flag of o.SESSION_FLAGS and the n-gram options
    json_out: bool = o.Json,
    jsonl: bool = Jsonl,
    chat: bool | None = Chat,
    conversation: bool = Conversation,
    system_prompt: str | None = SystemPrompt,
    system_prompt_file: Path | None = SystemPromptFile,
    reverse_prompt: list[str] | None = ReversePrompt,
    single_turn: bool = SingleTurn,
    reasoning_format: str = ReasoningFormat,
    hide_reasoning: bool = HideReasoning,
    interactive: bool = Interactive,
    interactive_first: bool = InteractiveFirst,
    in_prefix: str | None = InPrefix,
    in_suffix: str | None = InSuffix,
    in_prefix_bos: bool = InPrefixBos,
    multiline_input: bool = MultilineInput,
    chat_template: str | None = chat_flags.ChatTemplate,
    chat_template_file: Path | None = chat_flags.ChatTemplateFile,
    color: str = Color,
    trace: Path | None = Trace,
    escape: bool = Escape,
    print_token_count: int | None = PrintTokenCount,
    prompt_cache: Path | None = PromptCache,
    prompt_cache_all: bool = PromptCacheAll,
    prompt_cache_ro: bool = PromptCacheRo,
    quiet: bool = o.Quiet,
    fim_suffix: str | None = FimSuffix,
    n_probs: int = NProbs,
) -> int:
    """Generate text with speculative decoding (or plain decoding with --spec-type none).

    With no -m, uses the pulled default pair (Qwen2.5-Coder 1.5B target, 0.5B draft) and
    draft-simple. A draft model given with -md and no --spec-type selects draft-simple.
    """
    from specgguf.drafters.draft_lengths import AUTO_N_MAX_CAP
    from specgguf.drafters.registry import needs_draft_model
    from specgguf.errors import UsageError

    # Everything that can be checked without a model is checked first: a typo costs nothing.
    n_max = gen_flags.check(flags)
    if escape and prompt is not None:
        prompt = unescape(prompt)
    if system_prompt_file is not None:
        if system_prompt is not None:
            raise UsageError("-sys and -sysf both give the system message: give one")
        system_prompt = o.read_prompt(None, system_prompt_file, "-sysf").removesuffix("\n")
    reasoning = _reasoning_view(reasoning_format, hide_reasoning, conversation)
    if (prompt_cache_all or prompt_cache_ro) and prompt_cache is None:
        raise UsageError("--prompt-cache-all and --prompt-cache-ro need --prompt-cache FNAME")
    if prompt_cache is not None and (conversation or interactive or interactive_first
                                     or single_turn or jsonl):  # fmt: skip
        raise UsageError("--prompt-cache keeps one prompt: not with -cnv, -st, -i, -if or "
                         "--jsonl")
    # llama-cli is a conversation whatever its flags: -st is one turn of it, as -cnv -st
    conversation = conversation or single_turn
    interactive = interactive or interactive_first
    _check_interactive(interactive, conversation, multiline_input, in_prefix, in_suffix,
                       in_prefix_bos, jsonl or json_out or fim_suffix is not None or bool(chat))
    seed = gen_flags.seed
    color_mode = COLOR_CHOICES.get(color.strip().lower())
    if color_mode is None:
        raise UsageError(f"invalid value for -co/--color: {color!r} (auto, always or never)")
    if jsonl and conversation:
        raise UsageError("--jsonl and -cnv/--conversation cannot be combined")
    if jsonl and prompt is not None:
        raise UsageError("--jsonl reads its lines from -f FILE or stdin, not -p")
    if fim_suffix is not None and (jsonl or conversation or chat or system_prompt is not None):
        raise UsageError(
            "--fim-suffix fills in one plain prompt: it cannot be combined with --jsonl, "
            "-cnv, --chat or -sys"
        )
    if conversation and json_out:
        raise UsageError("--json cannot be combined with -cnv/--conversation")
    probs = _probs_request(n_probs, json_out or jsonl)
    if chat is False and (conversation or system_prompt is not None):
        what = "-cnv/--conversation" if conversation else "-sys/--system-prompt"
        raise UsageError(f"{what} needs the chat template: drop --no-chat")
    # -hf and -mu name a model
    default_pair = flags.model is None and not (flags.given["hf_repo"] or flags.given["model_url"])
    if jsonl:  # each line says what it is: "messages" is chat, "prompt" is text unless --chat
        use_chat = chat if chat is not None else system_prompt is not None
    else:
        use_chat = chat if chat is not None else (default_pair or system_prompt is not None)
        use_chat = (use_chat or conversation) and fim_suffix is None and not interactive
    transcript_path = dict(flags.tuning.load).get("transcript")
    if transcript_path is not None and (jsonl or not use_chat):
        raise UsageError("-o/--output writes a conversation's transcript, as llama-cli does: "
                         "use it with -cnv or a chat prompt (not --jsonl, -i or plain text)")

    # From here on a signal (Ctrl-C while stdin is read, during the imports, the load...) still
    # ends a single run in its report and --json object: nothing generated yet.
    given = flags.model  # -m as given (None: the pulled pair, resolved below)
    meta: dict = {"model": str(given) if given is not None else None, "draft_model": None,
                  "spec_type": None}  # fmt: skip
    types: list[str] = []
    lines = text = tracer = transcript = None
    try:
        try:
            # the lookup caches, input, template file and trace file: all checked before any
            # weight is read
            model, model_draft, types = flags.resolve(gen_flags.spec_type, n_max)
            recheck_draft = False
            # auto may leave a hopeless draft out
            if n_max is None and not gen_flags.no_auto_profile:
                from specgguf.draft_plan import draft_load_plan

                plan = draft_load_plan(flags.load_options(model, model_draft), types)
                recheck_draft = plan.recheck
                if plan.skip is not None:
                    types = [t for t in types if t != plan.skip.name]
                    meta["draft_model_skipped"] = plan.skip.notice().removeprefix("note: ")
                    if not quiet:
                        print(plan.skip.notice(), file=sys.stderr)
            draft_shown = model_draft if needs_draft_model(types) else None
            meta.update(
                model=str(model),
                draft_model=str(draft_shown) if draft_shown is not None else None,
                spec_type=types or ["none"],
            )
            if jsonl:
                lines = _jsonl_source(file)
            elif interactive:  # stdin is the user's: the prompt is -p/-f's, or none
                text = o.read_prompt(prompt, file) if prompt or file else ""
            elif not conversation or prompt is not None or file is not None:
                text = o.read_prompt(prompt, file)
            template_src, template_origin = chat_flags.template_source(
                chat_template, chat_template_file
            )
            if trace is not None:
                from specgguf.io.trace import TraceWriter

                tracer = TraceWriter.open(trace)
            if transcript_path is not None:
                from specgguf_cli.transcript import Transcript

                transcript = Transcript(transcript_path)

            # imports llama_cpp: not before
            from specgguf.generator import Generator
            from specgguf.loading.session import CROSS_VOCAB_NOTICE

            output_grammar = gen_flags.output_grammar()

            with _loading(model, draft_shown, quiet, flags.verbose):
                session = flags.open_session(model, model_draft, types, n_max)
            if session.cross_vocab and not quiet:
                print(CROSS_VOCAB_NOTICE, file=sys.stderr)
        except KeyboardInterrupt:
            # Stopped before anything was generated: a single run still reports (empty
            # statistics, the --json object) as it would have mid-generation.
            if not jsonl and not conversation:
                from specgguf.core.stats import RunStats

                n_max_shown = n_max if n_max is not None else AUTO_N_MAX_CAP
                stats = RunStats(n_max=n_max_shown if types else 0)
                with interrupts.deferred():
                    _report(GenerationResult("", "interrupted"), stats, None, meta,
                            seed=None if seed < 0 or seed == 0xFFFFFFFF else seed,  # random
                            quiet=quiet, json_out=json_out)
            raise
        ctx = None
        try:
            if not quiet:
                for warning in session.warnings:
                    print(f"warning: {warning}", file=sys.stderr)
            _print_placement(session, quiet)
            if session.placement:  # --rpc/-dev/-devd: where the layers are, in --json too
                meta["placement"] = {k: v.as_dict() for k, v in session.placement.items()}
            # what each model's memory can drop, as probed at load (check predicts it)
            meta["kv_rollback"] = session.memory_report()
            if tracer is not None:
                tracer.piece = session.target_model.piece
            ctx = _Run(
                Generator(
                    session,
                    **gen_flags.generator_args(n_max),
                warmup=session.load.warmup,
                    system_prompt=system_prompt,
                    template_src=template_src,
                    template_origin=template_origin,
                    warn=None if quiet else _warn,
                    recheck_draft=recheck_draft,
                    grammar=output_grammar,
                ),
                tracer=tracer,
                quiet=quiet,
                meta=meta,
                stop=tuple(reverse_prompt or ()),
                thinking=gen_flags.thinking_budget,
                probs=probs,
                transcript=transcript,
                count_every=print_token_count or 0,
                cache_file=prompt_cache,
                cache_saves=None if prompt_cache_ro else "all" if prompt_cache_all else "prompt",
            )
            if output_grammar is not None:  # a grammar llama.cpp refuses: its line, now
                ctx.gen.constraint(output_grammar)
            ctx.attach_prompt_cache()
            if jsonl:
                assert lines is not None
                return _run_batch(ctx, lines, use_chat=use_chat)
            colored = _color_enabled(color_mode, json_out)
            if colored and not quiet:
                from specgguf.io.output import LEGEND

                print(LEGEND, file=sys.stderr)
            if conversation:
                return _run_conversation(ctx, text, color=colored, reasoning=reasoning,
                                         turns=1 if single_turn else 0,
                                         multiline=multiline_input)  # fmt: skip
            if interactive:
                assert text is not None
                opts = InteractiveOptions(interactive_first, in_prefix or "", in_suffix or "",
                                          in_prefix_bos, multiline_input,
                                          unescape if escape else None)  # fmt: skip
                return run_interactive(ctx, text, opts, stream_generation, color=colored)
            assert text is not None
            return _run_single(ctx, text, use_chat=use_chat, json_out=json_out, color=colored,
                               fim_suffix=fim_suffix)  # fmt: skip
        finally:
            # Saving the -lcd cache (Session.close) and the profile is not cut short by a
            # signal that arrives now: it is raised once they are written.
            with interrupts.deferred():
                if ctx is not None:
                    ctx.gen.save_profile()
                session.close()
    finally:
        with interrupts.deferred():
            if lines is not None:
                lines.close()
            if tracer is not None:
                tracer.close()
            if transcript is not None:
                transcript.close()


# -- setup ------------------------------------------------------------------------------------


def _check_interactive(interactive: bool, conversation: bool, multiline: bool,
                       in_prefix: str | None, in_suffix: str | None, prefix_bos: bool,
                       other_mode: bool) -> None:  # fmt: skip
    """-i/-if and the flags that only mean something with them: one line when they cannot."""
    from specgguf.errors import UsageError

    if interactive and (conversation or other_mode):
        raise UsageError("-i/-if is llama-completion's interactive mode on plain text: it "
                         "cannot be combined with -cnv, --chat, --json, --jsonl or --fim-suffix")
    wraps = [f for f, on in (("--in-prefix", in_prefix is not None),
                             ("--in-suffix", in_suffix is not None),
                             ("--in-prefix-bos", prefix_bos)) if on]  # fmt: skip
    if wraps and conversation:
        # llama-completion reads them and leaves them out of a conversation's turns
        print(f"warning: {wraps[0]} has no effect with -cnv/--conversation: the chat template "
              "wraps each turn", file=sys.stderr)
    elif wraps and not interactive:
        raise UsageError(f"{wraps[0]} wraps the input of interactive mode: add -i or -if")
    if multiline and not (interactive or conversation):
        raise UsageError("--multiline-input reads interactive input: add -i, -if or -cnv")


def _print_placement(session, quiet: bool) -> None:
    """With --rpc/-dev/-devd: one "rpc: ..." line saying where each model's layers are."""
    from specgguf.binding.devices import placement_line

    line = placement_line(session.placement)
    if line and not quiet:
        print(line, file=sys.stderr)


def _loading(model: Path, model_draft: Path | None, quiet: bool, verbose: bool):
    """A spinner on stderr while the weights load; nothing when stderr is not a terminal, with
    -q, or with -v (llama.cpp's own log is then on stderr)."""
    if quiet or verbose:
        return nullcontext()
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        return nullcontext()
    what = Path(model).name + (f" + draft {Path(model_draft).name}" if model_draft else "")
    return console.status(f"loading {what}", spinner="dots")


def _color_enabled(mode: str, json_out: bool) -> bool:
    if json_out or mode == "never":
        return False
    if mode == "always":
        return True
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _jsonl_source(file: Path | None):
    """The byte lines of -f FILE, else of stdin (not a terminal). Opened before any load."""
    from specgguf.errors import PromptError, open_user_file

    if file is not None:
        return open_user_file(file, "-f")  # closed by run()
    if sys.stdin is None or sys.stdin.isatty():
        raise PromptError("no input: --jsonl reads JSON Lines from -f FILE or stdin")
    stdin = getattr(sys.stdin, "buffer", sys.stdin)

    class _Borrowed:  # read stdin without closing it
        def __iter__(self):
            return iter(stdin)

        def readline(self, limit: int = -1) -> bytes:
            return stdin.readline(limit)

        def close(self):
            pass

    return _Borrowed()


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


@dataclass(eq=False)
class _Run:
    """What the command line adds around the library's Generator (specgguf.generator: the
    session, auto and its profile, the chat template, the defaults): the trace file, -q and
    the fields every --json object carries."""

    gen: Any
    _: KW_ONLY
    tracer: Any
    quiet: bool
    meta: dict
    #: -r/--reverse-prompt: stop strings of every answer (a --jsonl line's own come first)
    stop: tuple[str, ...] = ()
    #: GenParams -> GenParams with --reasoning-budget, for a chat answer
    thinking: Callable[[Any], Any] | None = None
    #: --n-probs: every generation's token probabilities (core.token_probs.ProbsRequest)
    probs: Any = None
    #: -o/--output: the conversation's transcript (specgguf_cli.transcript.Transcript)
    transcript: Any = None
    #: -ptc N: the context's tokens printed at each multiple of N (0: never)
    count_every: int = 0
    #: --prompt-cache FNAME: the file, and what is saved to it (None: only read; "prompt",
    #: "all": with the generated tokens)
    cache_file: Path | None = None
    cache_saves: str | None = None
    _offload_shown: bool = field(default=False, init=False)

    @property
    def auto(self):
        """The generator when it runs auto (report_lines, summary), else None."""
        return self.gen if self.gen.auto else None

    def generate(self, tokens, params=None, *, chat: bool = False):
        """`chat`: the prompt is a chat template's, so --reasoning-budget applies."""
        if chat and self.thinking is not None:
            params = self.thinking(params)
        if not self.quiet and not self._offload_shown:
            # where -ngl / -ngld put the layers (llama.cpp's load log says it too); only once
            # a prompt is accepted, so that an error stays the one line on stderr
            self._offload_shown = True
            print(f"offload: {self.gen.session.offload()}", file=sys.stderr)
        from dataclasses import replace

        from specgguf.generator import GenParams

        if self.stop:
            params = params or GenParams()
            params = replace(params, stop=tuple(dict.fromkeys((*params.stop, *self.stop))))
        if self.probs is not None:
            params = replace(params or GenParams(), probs=self.probs)
        if self.gen.session.load.verbose_prompt:
            print(prompt_listing(self.gen.session.target_model.piece_special, tokens),
                  file=sys.stderr)  # fmt: skip
        generation = self.gen.generate(tokens, params, trace_probs=self.tracer is not None)
        if self.count_every > 0:
            from specgguf.io.token_count import TokenCount

            generation.token_count = TokenCount(self.count_every, self.gen.session.target.n_ctx,
                                                len(tokens))  # fmt: skip
        return generation

    def attach_prompt_cache(self) -> None:
        """--prompt-cache: the file's prompt, for the first generation to start from."""
        if self.cache_file is not None:
            from specgguf.binding import prompt_cache_file

            session = self.gen.session
            prompt_cache_file.attach(session.target, self.cache_file, session.load.model)

    def save_prompt_cache(self, n_prompt: int) -> None:
        from specgguf.binding import prompt_cache_file

        session = self.gen.session
        keep = None if self.cache_saves == "all" else n_prompt
        if not prompt_cache_file.save(session.target, self.cache_file, session.load.model, keep):
            _warn(f"--prompt-cache {self.cache_file}: not written (the cache was not whole)")

    def result_fields(self, result, stats, seed: int) -> dict:
        """The --json object (a --jsonl line adds id and line)."""
        return result_object(result, stats, self.meta, seed)


def prompt_listing(piece: Callable[[int], bytes], tokens: Sequence[int]) -> str:
    """--verbose-prompt: the prompt's text, its length in tokens, then one line per token (its
    id right-aligned in six columns, an arrow, its text in quotes), as llama.cpp lists it."""
    texts = [piece(t).decode("utf-8", "replace") for t in tokens]
    lines = [f"prompt: '{''.join(texts)}'", f"number of tokens in prompt = {len(tokens)}"]
    lines += [f"{t:6d} -> '{text}'" for t, text in zip(tokens, texts, strict=True)]
    return "\n".join(lines) + "\n"


# -- the three modes --------------------------------------------------------------------------


def _run_single(
    run: _Run, text: str, *, use_chat: bool, json_out: bool, color: bool,
    fim_suffix: str | None = None,
) -> int:  # fmt: skip
    """One prompt (with `fim_suffix`: the text before a hole, filled in). A signal at any
    point (template, prompt evaluation, generation) still ends in the statistics and the
    --json object, with what was generated so far."""
    from specgguf.core.stats import RunStats

    gen = run.gen
    generation = None
    result = GenerationResult("", "interrupted")
    try:
        if use_chat:
            if run.transcript is not None:
                run.transcript.user(text)
            text = gen.chat_prompt([{"role": "user", "content": text}])
        if fim_suffix is not None:
            tokens = gen.infill_tokens(text, fim_suffix)
            gen.session.check_prompt_length(tokens)
        else:
            tokens = gen.tokenize(text)
        generation = run.generate(tokens, chat=use_chat)
        if run.tracer is not None:
            run.tracer.begin()
        result = stream_generation(generation, json_out=json_out, color=color, trace=run.tracer)
        if run.cache_file is not None and run.cache_saves is not None:
            run.save_prompt_cache(len(tokens))
    except KeyboardInterrupt:
        pass  # before generation started: nothing to keep, the report still follows
    stats = generation.stats if generation is not None else RunStats(n_max=gen.session.spec.n_max)
    with interrupts.deferred():
        if run.transcript is not None and generation is not None:
            run.transcript.assistant(result.text)
        if not json_out and result.text and not result.text.endswith("\n"):
            write_stdout("\n")  # the text ends before the report starts on a terminal
        _report(result, stats, run.auto, run.meta, seed=gen.seed, quiet=run.quiet,
                json_out=json_out)
    return interrupts.exit_code() if result.stop_reason == "interrupted" else 0


def _report(result, stats, policy, meta, *, seed, quiet: bool, json_out: bool) -> None:
    """llama.cpp's statistics on stderr (unless -q), then the --json object on stdout.
    `policy`: what reports auto's choices (report_lines, summary), or None."""
    if not quiet:
        for line in stats.report_lines():
            print(line, file=sys.stderr)
        if policy is not None:
            for line in policy.report_lines():
                print(line, file=sys.stderr)
    if json_out:
        obj = result_object(result, stats, meta, seed)
        if policy is not None:
            obj["auto"] = policy.summary()
        write_stdout(json.dumps(obj, ensure_ascii=False) + "\n")


def result_object(result, stats, meta: dict, seed: int | None) -> dict:
    """The --json object (a --jsonl line adds id and line)."""
    return {
        "text": result.text,
        "stop_reason": result.stop_reason,
        "tokens_predicted": stats.predicted_n,
        "tokens_evaluated": stats.prompt_n,
        **meta,
        "seed": seed,
        "timings": stats.timings(),
        **({"completion_probabilities": result.probabilities}
           if result.probabilities is not None else {}),
    }  # fmt: skip


def _run_batch(run: _Run, lines, *, use_chat: bool) -> int:
    """--jsonl: `messages` lines always go through the chat template; `prompt` lines are plain
    text completion (llama-server's /completion), wrapped as one user message only with an
    explicit --chat or -sys (the default pair's implicit --chat is for -p). Per-line settings
    override the command line's."""
    from specgguf.core.stats import RunStats, format_rate
    from specgguf.generator import GenParams
    from specgguf.io import sampler_table
    from specgguf.io.batch import BatchCounts, run_batch

    gen = run.gen
    total = RunStats(n_max=gen.session.spec.n_max)
    counts = BatchCounts()

    def answer(item) -> dict:
        if item.messages is not None:
            text = gen.chat_prompt(item.messages)
        elif use_chat:
            text = gen.chat_prompt([{"role": "user", "content": item.prompt}])
        else:
            text = item.prompt
        tokens = gen.tokenize(text)
        ov = item.overrides()
        sampler = sampler_table.params(gen.sampler, item.sampling)
        generation = run.generate(
            tokens,
            GenParams(
                sampler=sampler,
                n_predict=ov.get("n_predict"),
                seed=item.seed,
                grammar=line_grammar(item),
            ),
            chat=item.messages is not None or use_chat,
        )
        if run.tracer is not None:
            run.tracer.begin(request=counts.lines - 1, line=item.line, id=item.id)
        result = stream_generation(generation, json_out=True, trace=run.tracer)
        s = generation.stats
        total.prompt_n += s.prompt_n
        total.predicted_n += s.predicted_n
        total.predicted_ms += s.predicted_ms
        total.n_drafted += s.n_drafted
        total.n_accept += s.n_accept
        return run.result_fields(result, s, generation.seed)

    code = run_batch(lines, answer, sys.stdout, counts=counts)
    if counts.interrupted:
        code = interrupts.exit_code()
    if not run.quiet:
        print(
            f"batch: {counts.lines} lines, {counts.answered} answered, {counts.failed} failed"
            + (" (interrupted)" if counts.interrupted else ""),
            file=sys.stderr,
        )
        print(
            f"decoded {total.predicted_n:4d} tokens in {total.predicted_ms / 1e3:8.3f} seconds, "
            f"speed: {format_rate(total.predicted_speed)}; n_drafted = {total.n_drafted}, "
            f"n_accept = {total.n_accept}, accept = {100 * total.accept_rate:.3f}%",
            file=sys.stderr,
        )
    return code


def line_grammar(item):
    """A --jsonl line's own `grammar` (GBNF) or `json_schema`, as an OutputGrammar (None:
    the command line's, if any); a bad one fails that line alone."""
    from specgguf.generator import OutputGrammar

    if item.grammar is not None:
        return OutputGrammar(item.grammar, '"grammar"')
    if item.json_schema is not None:
        return OutputGrammar.from_schema(item.json_schema, '"json_schema"')
    return None


def _read_turn(interactive: bool) -> str | None:
    """One user turn from stdin: a line, continued while it ends in a backslash. None at EOF."""
    parts: list[str] = []
    while True:
        if interactive:
            sys.stdout.write("\n> " if not parts else "  ")
            sys.stdout.flush()
        line = sys.stdin.readline()
        if not line:
            return "\n".join(parts) if parts else None
        line = line.rstrip("\r\n")
        if line.endswith("\\"):
            parts.append(line[:-1])
            continue
        parts.append(line)
        return "\n".join(parts)


def _reasoning_view(reasoning_format: str, hide: bool, conversation: bool) -> str:
    """How -cnv prints a thinking model's thinking: "raw" (as written), "apart" or "hidden";
    one UsageError line for a bad value, or for these flags without -cnv."""
    from specgguf.chat.reasoning import REASONING_FORMATS
    from specgguf.errors import UsageError

    if reasoning_format not in REASONING_FORMATS:
        raise UsageError(
            f"--reasoning-format must be one of {', '.join(REASONING_FORMATS)}, "
            f"not {reasoning_format!r}"
        )
    if not conversation and (hide or reasoning_format != "auto"):
        raise UsageError("--reasoning-format and --hide-reasoning apply to -cnv: add -cnv")
    if hide and reasoning_format == "none":
        raise UsageError("--hide-reasoning needs the thinking found: drop --reasoning-format none")
    return "hidden" if hide else "raw" if reasoning_format == "none" else "apart"


def _run_conversation(
    run: _Run, first: str | None, *, color: bool, reasoning: str = "apart", turns: int = 0,
    multiline: bool = False,
) -> int:  # fmt: skip
    """-cnv: one user turn per stdin line until EOF, /exit or `turns` answers (0: no limit,
    -st: 1; --multiline-input: turns read as -i reads its input), a thinking model's thinking
    printed as `reasoning` says (_reasoning_view) and
    kept out of the answer the next turns see; the whole conversation is
    re-rendered every turn, and only what the KV cache does not hold yet is evaluated (the
    new turn, plus the assistant's last tokens). Ctrl-C stops the current answer (kept, as
    said so far); Ctrl-C at the prompt ends the conversation with exit status 130."""
    from specgguf.errors import PromptError

    interactive = bool(sys.stdin) and sys.stdin.isatty() and sys.stdout.isatty()
    gen = run.gen
    messages: list[dict] = []  # the turns; chat_prompt puts -sys first, as for the server
    turn = 0
    while True:
        if first is not None:
            user, first = first, None
        else:
            try:
                user = read_input(sys.stdin, True) if multiline else _read_turn(interactive)
            except KeyboardInterrupt:
                write_stdout("\n")
                return interrupts.exit_code()
            if user is None or user.strip() in ("/exit", "/quit"):
                return 0
        if not user.strip():
            continue
        messages.append({"role": "user", "content": user})
        if run.transcript is not None:
            run.transcript.user(user)
        text = gen.chat_prompt(messages)
        try:
            tokens = gen.tokenize(text)
        except PromptError as e:
            raise PromptError(f"turn {turn + 1}: the conversation no longer fits: {e}") from None
        generation = run.generate(tokens, chat=True)
        if run.tracer is not None:
            run.tracer.begin(turn=turn)
        split = None
        if reasoning != "raw":
            from specgguf.chat.reasoning import ReasoningSplit, prompt_opens_thinking

            markers = gen.dialect().thinking
            split = ReasoningView(
                ReasoningSplit(opened=prompt_opens_thinking(text, markers[0]), markers=markers),
                show=reasoning == "apart", color=color,
            )  # fmt: skip
        result = stream_generation(
            generation, json_out=False, color=color, trace=run.tracer, reasoning=split
        )
        answer = result.text if split is None else split.content
        if not (split.shown if split is not None else result.text).endswith("\n"):
            write_stdout("\n")
        messages.append({"role": "assistant", "content": answer})
        if run.transcript is not None:
            run.transcript.assistant(answer, split.split.reasoning if split is not None else "")
        if not run.quiet:
            print(turn_summary(generation.stats, result.stop_reason), file=sys.stderr)
        if result.stop_reason == "interrupted":
            if interrupts.received() not in (None, signal.SIGINT):
                return interrupts.exit_code()  # SIGTERM / SIGHUP end the conversation
            interrupts.reset()  # Ctrl-C stopped this answer; the next one may be stopped too
        turn += 1
        if turn == turns:
            return 0


# -- streaming --------------------------------------------------------------------------------


class GenerationResult:
    def __init__(self, text: str, stop_reason: str, probabilities: list | None = None) -> None:
        self.text = text
        self.stop_reason = stop_reason
        #: --n-probs: llama-server's completion_probabilities of the text (None: not asked)
        self.probabilities = probabilities


def _probs_request(n_probs: int, json_out: bool):
    """--n-probs N as the generations' ProbsRequest (None for 0); a usage error where it
    is out of range or has no JSON to go to."""
    from specgguf.core.token_probs import ProbsRequest
    from specgguf.errors import UsageError
    from specgguf.io.token_probs_json import N_PROBS_MAX

    if not 0 <= n_probs <= N_PROBS_MAX:
        raise UsageError(f"--n-probs must be in 0..{N_PROBS_MAX} (got {n_probs})")
    if n_probs and not json_out:
        raise UsageError("--n-probs reports in the JSON output: add --json (or use --jsonl)")
    return ProbsRequest(n_probs) if n_probs else None


class ReasoningView:
    """A -cnv answer's text split into thinking and answer as it streams: the thinking
    written dimmed (in colour; else between [thinking] lines), or not at all (`show` False);
    the answer through the TextStream (draft colours kept)."""

    DIM = "\x1b[2m"

    def __init__(self, split, *, show: bool, color: bool) -> None:
        self.split, self.show, self.color = split, show, color
        self.shown = ""  # what was written, for the line end after the answer
        self._open = False  # a thinking block is being written

    @property
    def content(self) -> str:
        return self.split.content

    def write(self, stream, pieces: list[tuple[str, bool]], final: bool = False) -> None:
        from specgguf.chat.reasoning import REASONING
        from specgguf.io.output import RESET

        for text, drafted in pieces:
            for kind, part in self.split.feed(text):
                self._part(stream, kind == REASONING, part, drafted, RESET)
        if final:
            for kind, part in self.split.close():
                self._part(stream, kind == REASONING, part, False, RESET)
            self._end_thinking(stream, RESET)

    def _part(self, stream, thinking: bool, text: str, drafted: bool, reset: str) -> None:
        if thinking:
            if not self.show:
                return
            head = "" if self._open or self.color else "[thinking]\n"
            self._open = True
            out = f"{self.DIM}{text}{reset}" if self.color else head + text
            write_stdout(out)
            self.shown += out
            return
        self._end_thinking(stream, reset)
        stream.write_fragments([(text, drafted)])
        self.shown += text

    def _end_thinking(self, stream, reset: str) -> None:
        if self._open:
            write_stdout("\n" if self.color else "\n[end of thinking]\n")
            self._open = False


def stream_generation(
    generation, *, json_out: bool, color: bool = False, trace=None, reasoning=None
):
    """Step the Generation, writing each round's text as soon as it is accepted (and each round
    to `trace`, a specgguf.io.trace.TraceWriter, when given); `reasoning` (a ReasoningView)
    writes a thinking model's thinking apart.

    Ctrl-C stops generation, keeps what was already written, and reports "interrupted".
    """
    from specgguf.io.output import TextStream

    stream = TextStream(None if json_out else sys.stdout, color=color)
    probs: list = []

    def write(pieces, final: bool = False) -> None:
        if reasoning is None:
            stream.write_fragments(pieces)
        else:
            reasoning.write(stream, pieces, final)

    count = getattr(generation, "token_count", None)  # -ptc
    try:
        for chunk in generation:
            if trace is not None and chunk.round is not None:
                trace.write(chunk.round)
            if count is not None and chunk.round is not None:
                count.add(len(chunk.round.emitted))
            write(chunk.pieces)
            probs += chunk.probs
    except KeyboardInterrupt:
        tail = generation.finish("interrupted")
        write(tail.pieces)
        probs += tail.probs
    finally:
        if reasoning is not None:
            write([], final=True)
        stream.finish()
    shown = None
    if generation.probs_asked:
        from specgguf.io.token_probs_json import completion_probabilities

        shown = completion_probabilities(probs, generation.piece)
    return GenerationResult(generation.text, generation.stop_reason, shown)

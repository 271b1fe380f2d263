"""The generation service every front end uses: `run` (one prompt, --jsonl, -cnv) and `serve`.

A Generator owns what outlives one prompt: the loaded Session and its slots, the `auto` cost
policy of each slot seeded from (and saved back to) this machine's profile, the chat template,
and the defaults of the command line. `generate()` returns a Generation that advances one
speculative round per `next()`: a CLI loops over it, a server with several slots runs each
slot's Generation on a thread of its own, their decodes sharing passes (the `rendezvous`,
specgguf.binding.rendezvous). Each step yields the text released by that round, split into
fragments that came from accepted drafts and fragments the target produced itself, with `stop`
strings cut out and UTF-8 never split.

Why one `auto` policy per slot rather than one shared policy: a policy keeps per-sequence state
(shadow drafts waiting for the next tokens of THIS text, the round in flight, per-drafter
budgets written into the slot's own drafters), so two concurrent sequences would corrupt each
other's acceptance estimates. The costs it learns are machine-wide: every slot starts from the
same machine profile, and what each slot measured is merged back into it at the end.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specgguf.auto.policy import AdaptivePolicy
from specgguf.auto.preload import without_draft_cost
from specgguf.auto.profile import CostProfile
from specgguf.binding.batched import SequenceView
from specgguf.binding.grammar import (
    GrammarError,
    byte_speller,
    compile_grammar,
    schema_to_gbnf,
)
from specgguf.binding.rendezvous import Rendezvous
from specgguf.chat.dialects.base import Dialect, Forced
from specgguf.chat.dialects.framed import Framed
from specgguf.chat.render import RenderOptions
from specgguf.core.constraint import NoTokenAllowed
from specgguf.core.draft import Drafter
from specgguf.core.lazy_grammar import LazyGrammar, LazyRules, Trigger, TriggerVocab
from specgguf.core.loop import SpeculativeDecoder
from specgguf.core.rounds import Round
from specgguf.core.sampler_vocab import SamplerVocab
from specgguf.core.sampling import InfillStage, SamplerParams
from specgguf.core.stats import RunStats
from specgguf.core.token_probs import ProbsRequest, TokenProbs
from specgguf.draft_plan import DRAFT_MODEL_TYPE
from specgguf.drafters.draft_lengths import AUTO_N_MAX_CAP
from specgguf.errors import PromptError
from specgguf.io.edit_stops import EditStops
from specgguf.io.fim import Budget, ExtraChunk, FimTokens, infill_prompt
from specgguf.loading.session import Session, Slot, SpecOptions, TimingContexts, resolve_seed
from specgguf.spec_plan import CappedLengths, SpecOverrides, SpecPlan


def spec_options(types: list[str], n_max: int | None, **kw: Any) -> SpecOptions:
    """SpecOptions for `--spec-draft-n-max N|auto` (None: auto, with its cap as n_max)."""
    return SpecOptions(
        types=types,
        n_max=n_max if n_max is not None else AUTO_N_MAX_CAP,
        adaptive=n_max is None,
        **kw,
    )


@dataclass(frozen=True)
class OutputGrammar:
    """What the output must match: GBNF text (root rule `root`), and where it came from (the
    flag or request field an error names)."""

    gbnf: str
    origin: str = "--grammar"
    #: a lazy grammar (tool_choice auto): free text until one of these triggers, `gbnf` from
    #: the trigger on (specgguf.core.lazy_grammar); None: `gbnf` holds from the first token
    lazy: LazyRules | None = None

    @classmethod
    def from_schema(cls, schema: Any, origin: str = "--json-schema") -> OutputGrammar:
        """The grammar of a JSON schema (a dict or its JSON text); GrammarError naming
        `origin` when it is not JSON or cannot be converted."""
        return cls(schema_to_gbnf(schema, origin), origin)

    @classmethod
    def for_tools(
        cls,
        tools: Sequence[Mapping[str, Any]],
        only: str | None = None,
        *,
        parallel: bool = True,
        forced: Forced | Framed | None = None,
        opened: bool = False,
        think: bool = True,
    ) -> OutputGrammar:
        """Tool calls in a family's forced form (`forced`; Hermes' <tool_call> tags when None)
        whose arguments match the tools' schemas: of any tool, or of `only`; one call, or with
        `parallel` one or more; after the thinking the family writes first (`opened`: the
        prompt opened it; `think` False: the request turned thinking off, for the forms that
        read it)."""
        from specgguf.chat.dialects import FORCED_FALLBACK

        forced = forced or FORCED_FALLBACK.forced
        assert forced is not None
        if isinstance(forced, Framed):
            rules = schema_to_gbnf(forced.schema(tools, only), "'tools'")
            gbnf = forced.grammar(rules, parallel=parallel, tools=tools, only=only, opened=opened)
        else:
            gbnf = forced.gbnf(
                tools, only, parallel=parallel, think=think,
                to_gbnf=lambda s: schema_to_gbnf(s, "'tools'"),
            )  # fmt: skip
        return cls(gbnf, "'tools'")

    @classmethod
    def lazy_for_tools(
        cls, tools: Sequence[Mapping[str, Any]], dialect: Dialect, *, parallel: bool = True
    ) -> OutputGrammar | None:
        """tool_choice auto: the answer is free until one of the family's triggers (outside
        its thinking), then held to its calls in its forced form (without the thinking,
        which comes before any trigger); None where the family declares no trigger or has no
        forced form of its own (the answer is then not constrained)."""
        forced = dialect.forced
        if forced is None or not dialect.triggers:
            return None
        if isinstance(forced, Framed):
            forced = replace(forced, think="", think_opened="")
        grammar = cls.for_tools(tools, parallel=parallel, forced=forced, think=False)
        at_start = dialect.triggers_at_start
        rules = LazyRules(
            tuple(Trigger(t.encode(), at_start) for t in dialect.triggers),
            (dialect.thinking[0].encode(), dialect.thinking[1].encode()),
        )
        return replace(grammar, lazy=rules)


@dataclass(frozen=True)
class GenParams:
    """What one call may set; None means the generator's default (the command line's)."""

    sampler: SamplerParams | None = None
    n_predict: int | None = None
    seed: int | None = None  # -1: a fresh random seed for this call
    stop: tuple[str, ...] = ()
    ignore_eos: bool | None = None
    spec: SpecOverrides = field(default_factory=SpecOverrides)
    cache_prompt: bool = True  # reuse the slot's KV prefix (False: evaluate the whole prompt)
    #: the call's whole speculation, resolved by its caller (bench: a configuration as `run`'s
    #: flags would set it, its own n-gram drafters, a fresh auto policy); None: the session's
    #: (the command line's). `spec` applies on top of either
    plan: SpecPlan | None = None
    #: constrained decoding: every token the target emits obeys this grammar (drafts it
    #: forbids are rejected); None: the generator's (the command line's), if any
    grammar: OutputGrammar | None = None
    #: whose n-gram drafters and earlier outputs (`suffix`) this call drafts from, and whose
    #: KV prefix it may reuse: a server's API key, so that nothing one key's requests wrote is
    #: drafted into or reused by another's (a slot last written under another namespace starts
    #: from an empty cache); None: the plan's drafters (the process's own)
    namespace: Hashable | None = None
    #: the answer is read for tool calls: the control tokens that carry the dialect's format
    #: ([TOOL_CALLS], ...) are detokenized for the parser, which keeps them from the user
    #: (elsewhere every special token is nothing, as before)
    format_tokens: bool = False
    #: an editor's stops (specgguf.io.edit_stops): end before a line indented less than this
    #: many columns (0: never) ...
    n_indent: int = 0
    #: ... and at the first line break after this many ms of generating (0: never)
    t_max_predict_ms: int = 0
    #: a chat answer's thinking budget (--reasoning-budget, reasoning_budget_tokens): the
    #: thinking is closed after this many tokens (0: at once), as the template's family
    #: closes it, after `reasoning_budget_message`; None (or -1): unlimited
    reasoning_budget: int | None = None
    reasoning_budget_message: str = ""
    #: each emitted token's probabilities to report (logprobs, n_probs: Chunk.probs);
    #: None: none, and no work per token for them
    probs: ProbsRequest | None = None
    #: a server's slot this call must run in (llama-server's `id_slot`; it waits for that
    #: slot), -1: whichever free slot the scheduler picks
    id_slot: int = -1


@dataclass
class Chunk:
    """What one step released: text fragments (text, came from an accepted draft) in order,
    and the round that produced them (None for the final flush)."""

    pieces: list[tuple[str, bool]]
    round: Round | None = None
    #: with GenParams.probs: the figures of the tokens whose text this chunk releases (a
    #: token's once all its text is out; at the end, every token whose text shows at all:
    #: the tokens of a stop string cut away are not reported); else empty
    probs: list[TokenProbs] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(t for t, _ in self.pieces)


#: the owner of a slot's caches while a call of another namespace replaces them: equal to no
#: namespace, so nobody reuses what they hold
_NOBODY = object()


class _SlotState:
    def __init__(self, slot: Slot, policy: AdaptivePolicy | None) -> None:
        self.slot = slot
        self.policy = policy
        self.policy_used = False
        #: SpecPlan.namespace -> that key's n-gram drafters on this slot
        self.ngram_caches: dict[Hashable, dict[str, Drafter]] = {}
        #: GenParams.namespace of the call that last wrote the slot's KV caches: only a call
        #: of the same namespace may reuse their prefix (another key's cache_n and timings
        #: would reveal that prompt a token at a time)
        self.owner: Hashable | None = None

    def reusable_by(self, namespace: Hashable | None) -> bool:
        """Whether a call under `namespace` may keep the prefix the slot's caches hold."""
        return self.owner == namespace

    def claim(self, namespace: Hashable | None) -> Callable[[], None] | None:
        """A call under `namespace` starts here: where another namespace wrote the caches
        they belong to nobody until the call's prompt has replaced them (a call ended before
        its prefill leaves the other's tokens in place); the callable returned, run after the
        prefill, makes `namespace` their owner (None: the owner is already `namespace`)."""
        if self.reusable_by(namespace):
            return None
        self.owner = _NOBODY

        def own() -> None:
            self.owner = namespace

        return own

    def slot_for(self, key: Hashable | None) -> Slot:
        """The slot, with the n-gram drafters kept under `key` (None: its own)."""
        if key is None:
            return self.slot
        return replace(self.slot, ngram=self.ngram_caches.setdefault(key, {}))


class Generation:
    """One prompt's generation, one round per `next()`; iterate it to the end, or `finish()` it
    early (a cancelled request, Ctrl-C): what was released stays released."""

    def __init__(
        self,
        decoder: SpeculativeDecoder,
        tokens: Sequence[int],
        piece: Callable[[int], bytes],
        *,
        seed: int,
        stop: Sequence[str] = (),
        slot: int = 0,
        policy: AdaptivePolicy | None = None,
        own_policy: bool = False,
        grammar_origin: str = "",
        on_prefilled: Callable[[], None] | None = None,
        edit_stops: EditStops | None = None,
    ) -> None:
        self.decoder = decoder
        #: called once, when the first round shows the prompt is in the KV cache
        self._on_prefilled = on_prefilled
        self._edit_stops = edit_stops if edit_stops is not None and edit_stops.active else None
        self._grammar_origin = grammar_origin
        self.prompt_tokens = list(tokens)
        self.seed = seed
        self.slot = slot
        #: the auto policy steering this generation (None: fixed draft lengths or plain)
        self.policy = policy
        self._own_policy = own_policy  # a call's fresh policy: detached when this one ends
        self._piece = piece
        self._rounds: Iterator[Round] = decoder.generate(self.prompt_tokens)
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = tuple(s for s in stop if s)
        self._hold = max((len(s) for s in self._stops), default=1) - 1
        self._pending: list[tuple[str, bool]] = []  # held back: may be the start of a stop
        self._parts: list[str] = []
        self.stop_reason = ""  # eos, limit, context, stop (a stop string), or finish()'s reason
        self.stopping_word = ""
        self.done = False
        #: asked-for token figures not released yet, with where each token's text starts and
        #: ends in the decoded text; characters decoded and released so far (the released
        #: text is always a start of the decoded text: stops only cut its end)
        self._probs: list[tuple[TokenProbs, int, int]] = []
        self._decoded = 0
        self._released = 0
        self._late: list[TokenProbs] = []  # released by a finish() inside this round

    # -- results -------------------------------------------------------------------------------

    @property
    def text(self) -> str:
        return "".join(self._parts)

    @property
    def stats(self) -> RunStats:
        return self.decoder.stats

    @property
    def piece(self) -> Callable[[int], bytes]:
        """A token's bytes, as this generation's text is made of them."""
        return self._piece

    @property
    def probs_asked(self) -> bool:
        """Whether each token's probabilities are reported (Chunk.probs)."""
        return self.decoder.config.probs is not None

    @property
    def auto_summary(self) -> dict[str, Any] | None:
        """What auto chose and measured (AdaptivePolicy.summary; None without auto). With a
        fresh policy (SpecPlan.fresh_policy) that is this generation alone; with the slot's
        own policy, everything it has run since the generator started."""
        return self.policy.summary() if self.policy is not None else None

    # -- stepping ------------------------------------------------------------------------------

    def __iter__(self) -> Generation:
        return self

    def __next__(self) -> Chunk:
        if self.done:
            raise StopIteration
        try:
            rnd = next(self._rounds)
        except StopIteration:
            return self.finish(self.decoder.stop_reason)
        except NoTokenAllowed:
            self.finish("grammar")
            raise GrammarError(
                f"{self._grammar_origin}: the grammar allows no token after "
                f"{self.stats.predicted_n} generated tokens"
            ) from None
        if self._on_prefilled is not None:
            self._on_prefilled()
            self._on_prefilled = None
        pieces = []
        for i, t in enumerate(rnd.emitted):
            text = self._utf8.decode(self._piece(t))
            if rnd.probs is not None:
                self._probs.append((rnd.probs[i], self._decoded, self._decoded + len(text)))
                self._decoded += len(text)
            if text:
                pieces.append((text, i < rnd.n_accepted))
        if self._edit_stops is not None:
            pieces, ends = self._edit_cut(pieces)
            if ends:
                released = self._release(pieces)
                probs = self._released_probs()
                if not self.done:
                    self.stop_reason = "limit"
                    tail = self.finish("limit")
                    released += tail.pieces
                    probs += tail.probs
                return Chunk(released, rnd, probs)
        return Chunk(self._release(pieces), rnd, self._released_probs())

    def _released_probs(self, *, final: bool = False) -> list[TokenProbs]:
        """The held token figures whose text is now out (`final`: every one whose text
        shows at all, and the empty ones before that point; the rest are dropped)."""
        out, self._late = self._late, []
        if not self._probs:
            return out
        n = self._released
        while self._probs:
            entry, start, end = self._probs[0]
            if end > n and not (final and start < n):
                break
            out.append(entry)
            self._probs.pop(0)
        if final:
            self._probs = []
        return out

    def _edit_cut(self, pieces: list[tuple[str, bool]]) -> tuple[list[tuple[str, bool]], bool]:
        """The round's fragments up to where an editor's stop ends the text, and whether
        one does (specgguf.io.edit_stops)."""
        assert self._edit_stops is not None
        keep, ends = self._edit_stops.cut("".join(t for t, _ in pieces))
        out: list[tuple[str, bool]] = []
        for text, drafted in pieces:
            if keep <= 0:
                break
            out.append((text[:keep], drafted))
            keep -= len(text)
        return out, ends

    def finish(self, reason: str) -> Chunk:
        """End now (if not ended): stop the decoder, release what was held back (no stop string
        can complete any more) and the UTF-8 decoder's tail."""
        if self.done:
            return Chunk([])
        self.done = True
        self._rounds.close()  # runs the loop's finally: predicted_ms is final
        if self._own_policy and self.policy is not None:
            self.policy.detach()
        if not self.stop_reason:
            self.stop_reason = reason
        tail = self._utf8.decode(b"", final=True)
        pieces = self._pending + ([(tail, False)] if tail else [])
        self._pending = []
        self._keep(pieces)
        return Chunk(pieces, probs=self._released_probs(final=True))

    def _keep(self, pieces: list[tuple[str, bool]]) -> None:
        """`pieces` are released: part of the text for good."""
        self._parts.extend(t for t, _ in pieces)
        self._released += sum(len(t) for t, _ in pieces)

    def _release(self, pieces: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
        """Text that can no longer turn out to be part of a stop string. Only the held-back
        tail (shorter than the longest stop) and this round's text are searched."""
        if not self._stops:
            self._keep(pieces)
            return pieces
        self._pending.extend(pieces)
        pending = "".join(t for t, _ in self._pending)
        found = min(((i, s) for s in self._stops if (i := pending.find(s)) >= 0), default=None)
        if found is not None:
            at, word = found
            out = self._take(at)
            self._pending = []
            self.stopping_word = word
            self.stop_reason = "stop"
            self._late = self.finish("stop").probs  # released with this round's chunk
            return out
        keep = 0
        for n in range(min(self._hold, len(pending)), 0, -1):
            tail = pending[-n:]
            if any(s.startswith(tail) for s in self._stops):
                keep = n
                break
        return self._take(len(pending) - keep)

    def _take(self, n: int) -> list[tuple[str, bool]]:
        out: list[tuple[str, bool]] = []
        while n > 0 and self._pending:
            text, drafted = self._pending[0]
            if len(text) <= n:
                out.append(self._pending.pop(0))
                n -= len(text)
            else:
                out.append((text[:n], drafted))
                self._pending[0] = (text[n:], drafted)
                n = 0
        self._keep(out)
        return out


class Generator:
    """The loaded models plus everything that carries over from one prompt to the next."""

    def __init__(
        self,
        session: Session,
        *,
        sampler: SamplerParams | None = None,
        n_predict: int = -1,
        seed: int = -1,
        ignore_eos: bool = False,
        auto: bool = False,
        profile: bool = False,
        system_prompt: str | None = None,
        template_src: str | None = None,
        template_origin: str | None = None,
        warn: Callable[[str], None] | None = None,
        recheck_draft: bool = False,
        grammar: OutputGrammar | None = None,
        render_options: RenderOptions | None = None,
        warmup: bool = False,
    ) -> None:
        self.session = session
        self.grammar = grammar  # every call's, unless GenParams.grammar gives its own
        self.sampler = sampler or SamplerParams()
        self.n_predict = n_predict
        self.seed = resolve_seed(seed)  # one seed for every call that gives none
        self.ignore_eos = ignore_eos
        self.system_prompt = system_prompt
        self.template_src = template_src
        self.template_origin = template_origin
        self.warn = warn
        self._template = None
        self._dialect = None
        self._shown: frozenset[int] | None = None  # see _format_tokens
        self._sampler_vocab: SamplerVocab | None = None  # see sampler_ready
        #: the reasoning budget's markers, by (start, end, message)
        self._budget_markers: dict[tuple[str, str, str], Any] = {}
        #: a lazy grammar's rules -> what its states share over the target's vocabulary
        self._trigger_vocabs: dict[LazyRules, TriggerVocab] = {}
        #: what every chat prompt is rendered with unless a call gives its own
        self.render_options = render_options or RenderOptions()
        # --spec-draft-n-max auto: one cost model per slot for the generator's life; what it
        # learned on one prompt (costs, acceptance) carries over to the next
        self.auto = auto and bool(session.spec.types)
        self.profile_file: Path | None = None
        #: the warm-up's timings, merged into the profile file with the run's own at the end
        self._warm_measured: CostProfile | None = None
        prior = None
        if self.auto and profile:
            from specgguf.auto.profile import load_profile, profile_path

            self.profile_file = profile_path(session.load)
            prior = load_profile(self.profile_file)
            if recheck_draft:  # (draft_load_plan's recheck: measure the draft's cost again)
                prior = without_draft_cost(prior, DRAFT_MODEL_TYPE)
        if warmup:  # (specgguf.warmup: under auto, it also times what the profile lacks)
            prior = self._warm_up(prior)
        self._slots: list[_SlotState] = []
        for slot in session.slots:
            policy = None
            if self.auto:
                policy = AdaptivePolicy(n_max_cap=session.spec.n_max)
                policy.seed(prior)
            self._slots.append(_SlotState(slot, policy))

    def _warm_up(self, prior: CostProfile | None) -> CostProfile | None:
        """Run the warm-up passes; what they timed joins `prior` now, and the profile file
        with the rest of what this process measured (save_profile: at the end only)."""
        from specgguf.warmup import warm_up

        measured = warm_up(self.session, auto=self.auto, prior=prior)
        if measured is None:
            return prior
        self._warm_measured = measured
        return measured if prior is None else prior.merged(measured)

    # -- slots -----------------------------------------------------------------------------

    @property
    def n_slots(self) -> int:
        return len(self._slots)

    @property
    def n_ctx(self) -> int:
        """Context size of each slot."""
        return self.session.target.n_ctx

    def cached_tokens(self, slot: int) -> int:
        """Prompt + generated tokens the slot's target KV cache holds now."""
        return self._slots[slot].slot.target.n_past

    def cache_owned_by(self, slot: int, namespace: Hashable | None) -> bool:
        """Whether the slot's KV caches hold what calls under `namespace` wrote (only those
        may reuse or see them)."""
        return self._slots[slot].reusable_by(namespace)

    def shared_prefix(
        self, slot: int, tokens: Sequence[int], namespace: Hashable | None = None
    ) -> int:
        """How many leading tokens of `tokens` the slot's KV cache holds that a call under
        `namespace` (GenParams.namespace) would not evaluate again: 0 where another namespace
        wrote the cache, whatever it holds."""
        from specgguf.binding.engine import common_prefix_len

        if not self.cache_owned_by(slot, namespace):
            return 0
        return common_prefix_len(self._slots[slot].slot.target.tokens, tokens)

    def slot_target(self, slot: int) -> Any:
        """The slot's target context (its KV sequence), for serve's slot files, while no
        request runs in the slot; llama.cpp's state of it is read and set in `exclusive`."""
        return self._slots[slot].slot.target

    def slot_written(self, slot: int, namespace: Hashable | None) -> None:
        """The slot's target cache was replaced from outside a call (a slot file restored):
        it is `namespace`'s now, as after that namespace's own prefill."""
        self._slots[slot].owner = namespace

    def exclusive(self, fn: Callable[[], Any]) -> Any:
        """fn() while no pass of the slots' contexts runs: at once with one slot (the
        caller, the server's worker, runs its passes); with several, under the lock every
        shared step takes (fn must not take it again: no rollback inside)."""
        rv = self.rendezvous
        if rv is None:
            return fn()
        out: list[Any] = []
        rv.run_locked(lambda: out.append(fn()))
        return out[0]

    def cache_idle_slots(self, idle: Sequence[int]) -> int:
        """--cache-idle-slots, as a request starts: the `idle` slots' target sequences saved
        into --cache-ram's prompt cache (while no pass runs), as llama-server saves its idle
        slots; returns how many were saved. Their KV cells stay: each slot here holds a fixed
        share of the cache, so emptying one would free nothing another slot could use."""
        cache = getattr(self._slots[0].slot.target, "prompt_cache", None)
        if cache is None or not idle:
            return 0
        return self.exclusive(lambda: sum(cache.save(self._slots[i].slot.target) for i in idle))

    def lora_adapters(self) -> list[tuple[Path, float]]:
        """The target's LoRA adapters (--lora, --lora-scaled), each (file, scale now)."""
        adapters = self.session.adapters
        return [] if adapters is None else [(a.path, a.scale) for a in adapters.loras]

    def set_lora_scales(self, scales: dict[int, float]) -> None:
        """New LoRA scales by index (others: 0) while no request runs; every slot's cached
        target prefix is dropped with them (Session.set_lora_scales)."""
        self.session.set_lora_scales(scales, self.exclusive)

    def policy(self, slot: int = 0) -> AdaptivePolicy | None:
        return self._slots[slot].policy

    @property
    def rendezvous(self) -> Rendezvous | None:
        """With several slots, the lockstep their decodes share: each slot's Generation runs
        on a thread that is a member of it (None: one slot, stepped by its caller)."""
        return self.session.rendezvous

    # -- prompts ---------------------------------------------------------------------------

    def template(self):
        """The chat template (--chat-template-file, else the GGUF's, else ChatML), compiled
        on first use."""
        if self._template is None:
            from specgguf.chat.template import ChatTemplate, template_for

            info = self.session.info.target
            vocab = info.vocab

            def tok(i):
                return vocab.tokens[i] if i is not None and 0 <= i < len(vocab.tokens) else ""

            from specgguf.chat.template_bounds import TemplateLimits

            # rendering is bounded in time and size; the size cap follows the context (-c)
            kw = dict(
                bos_token=tok(vocab.bos_id),
                eos_token=tok(vocab.eos_id),
                limits=TemplateLimits.for_context(self.session.target.n_ctx),
            )
            if self.template_src is not None:
                self._template = ChatTemplate.compile(
                    self.template_src,
                    self.template_origin or "--chat-template-file",
                    strip_bos=vocab.add_bos,
                    **kw,
                )
            else:
                self._template, warning = template_for(
                    info.chat_template, add_bos=vocab.add_bos, **kw
                )
                if warning and self.warn is not None:
                    self.warn(warning)
        return self._template

    def chat_prompt(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        options: RenderOptions | None = None,
    ) -> str:
        """The messages rendered for generation, after specgguf.chat.template.conversation() puts
        the default system prompt (-sys) first unless the messages bring their own.

        `tools` (OpenAI's, validated) and `options` (thinking, the template kwargs; None: the
        generator's `render_options`) are rendered as specgguf.chat.render describes."""
        from specgguf.chat.render import render_conversation
        from specgguf.chat.template import conversation

        msgs = conversation(self.system_prompt, messages)
        dialect = self.dialect()
        return render_conversation(
            self.template(), msgs, tools, options or self.render_options,
            describe=dialect.describe, variables=dialect.variables(tools or []),
        )  # fmt: skip

    def dialect(self):
        """The tool-call dialect of the template's family (specgguf.chat.dialects)."""
        if self._dialect is None:
            from specgguf.chat.dialects import detect

            self._dialect = detect(self.template().source)
        return self._dialect

    def _format_tokens(self) -> frozenset[int]:
        """The control tokens that carry the dialect's format ([TOOL_CALLS], ...): rendered as
        text for the parser (it removes them from what the user sees); every other special
        token stays nothing."""
        if self._shown is None:
            if self._template is None:  # no chat prompt yet: a raw prompt shows no markers
                return frozenset()
            shown = set()
            for text in self.dialect().control_tokens:
                ids = self.encode(text, add_special=False, parse_special=True)
                if len(ids) == 1:
                    shown.add(ids[0])
            self._shown = frozenset(shown)
        return self._shown

    def tokenize(self, text: str) -> list[int]:
        """Prompt text -> tokens; PromptError when empty or too long for a slot's context."""
        return self.session.tokenize(text)

    def encode(self, text: str, *, add_special: bool = True, parse_special: bool = True):
        """Text -> token ids, unchecked (tokenize() checks what a prompt must satisfy)."""
        return self.session.target_model.tokenize(
            text, add_special=add_special, parse_special=parse_special
        )

    def check_ids(self, tokens: Sequence[Any]) -> None:
        """PromptError unless every element is a token id of the target's vocabulary."""
        n_vocab = self.session.target_model.n_vocab
        for t in tokens:
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < n_vocab:
                raise PromptError(f"invalid token id {t!r} (the vocabulary has {n_vocab})")

    def piece(self, token: int) -> bytes:
        """A token's bytes in the output: a special token is nothing, unless -sp/--special
        asks for its text."""
        if self.session.load.special:
            return self.session.target_model.piece_special(token)
        return self.session.target_model.piece(token)

    def format_piece(self, token: int) -> bytes:
        """A token's bytes for a tool-call parser: the dialect's control tokens as text."""
        if token in self._format_tokens():
            return self.session.target_model.piece_special(token)
        return self.piece(token)

    def fim_tokens(self) -> FimTokens:
        """The target's fill-in-the-middle tokens (specgguf.io.fim), BOS where it adds one."""
        model = self.session.target_model
        return FimTokens(**model.fim, bos=model.bos if model.add_bos else None)

    def infill_tokens(
        self,
        prefix: str,
        suffix: str,
        extra: Sequence[ExtraChunk] = (),
        prompt: str = "",
        *,
        spm: bool = False,
    ) -> list[int]:
        """A fill-in-the-middle prompt (specgguf.io.fim): `extra` files' chunks, the text
        before the hole and `prompt` (the hole's start), the text after it, in the target's
        FIM tokens (suffix first with `spm`: --spm-infill) and within llama-server's budget
        (-b, -n, -c). PromptError when the target has no FIM tokens."""
        fim = self.fim_tokens()
        missing = fim.missing()
        if missing:
            raise PromptError(
                "fill-in-the-middle is not supported by this model: it has no FIM "
                f"{', '.join(missing)} token"
            )

        def plain(text: str) -> list[int]:
            return self.encode(text, add_special=False, parse_special=False)

        return infill_prompt(
            fim,
            plain,
            prefix,
            suffix,
            extra=extra,
            prompt=self.encode(prompt, add_special=False) if prompt else [],
            budget=Budget(self.n_batch, self.n_predict, self.n_ctx),
            spm=spm,
        )

    def infill_stage(self) -> InfillStage:
        """llama.cpp's infill sampling stage over the target's vocabulary (ending with its
        end-of-turn token, else its end of text)."""
        model = self.session.target_model
        eot = self.session.info.target.vocab.eot_id
        return InfillStage(model.piece, model.is_eog, eot if eot is not None else model.eos)

    def sampler_ready(self, sampler: SamplerParams) -> SamplerParams:
        """`sampler` with what names text resolved in the target's vocabulary: DRY's
        sequence breakers, a logit bias given as text (core.sampler_vocab)."""
        if self._sampler_vocab is None:
            model = self.session.target_model

            def plain(text: str) -> list[int]:
                return model.tokenize(text, add_special=False, parse_special=False)

            self._sampler_vocab = SamplerVocab(model.n_vocab, model.piece_special, plain)
        return self._sampler_vocab.ready(sampler)

    @property
    def n_batch(self) -> int:
        """-b: the most prompt tokens one pass evaluates (an infill prompt's budget)."""
        return self.session.load.n_batch

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.session.detokenize(tokens)

    # -- generation ------------------------------------------------------------------------

    def generate(
        self,
        tokens: Sequence[int],
        params: GenParams | None = None,
        *,
        slot: int = 0,
        trace_probs: bool = False,
    ) -> Generation:
        """A Generation of `tokens` on `slot`; nothing is evaluated until the first next()."""
        p = params or GenParams()
        st = self._slots[slot]
        sampler = self.sampler_ready(p.sampler or self.sampler)
        n_predict = self.n_predict if p.n_predict is None else p.n_predict
        seed = self.seed if p.seed is None else resolve_seed(p.seed)
        grammar = p.grammar if p.grammar is not None else self.grammar
        plan = self.plan(p, constrained=grammar is not None)
        spec = plan.spec
        if "draft-simple" in spec.types and self.session.draft_model is None:
            raise ValueError("draft-simple needs a session loaded with a draft model")
        runs_auto = plan.lengths == "auto" and plan.speculates
        fresh = None
        if runs_auto and plan.fresh_policy:
            fresh = AdaptivePolicy(n_max_cap=spec.n_max)
            fresh.seed(plan.profile)
        policy = fresh if fresh is not None else (st.policy if self.auto and runs_auto else None)
        capped = plan.lengths == "capped" and plan.speculates
        cap = CappedLengths(plan.cap) if capped and plan.cap is not None else None
        # compiled before anything else changes: a bad grammar is refused here
        constraint = self.constraint(grammar) if grammar is not None else None
        if grammar is not None and grammar.lazy is not None:
            constraint = self.lazy_grammar(grammar.lazy, constraint, tokens)
        if p.reasoning_budget is not None and p.reasoning_budget >= 0:
            constraint = self.thinking_budget(p, tokens, constraint)
        if st.policy is not None:
            if policy is not st.policy:
                st.policy.detach()  # a call without the slot's auto: not its drafters now
            elif st.policy_used:
                st.policy.new_sequence()
        decoder = self.session.decoder(
            sampler,
            n_predict,
            seed,
            ignore_eos=self.ignore_eos if p.ignore_eos is None else p.ignore_eos,
            trace_probs=trace_probs,
            budget_policy=policy if policy is not None else cap,
            reuse_prefix=p.cache_prompt and st.reusable_by(p.namespace),
            spec=spec,
            slot=st.slot_for(plan.namespace),
            constraint=constraint,
            namespace=plan.namespace,
            probs=p.probs,
        )
        if policy is not None:
            # per-drafter budgets and the per-token question go through the policy; attach
            # first restores whatever a previous decoder's drafters had (cached n-gram ones)
            policy.attach(decoder.drafters)
            # n_draft in the statistics: the longest draft auto may send, not the model's cap
            decoder.stats.n_max = policy.longest_draft()
            # several slots: the slot's passes are shared, priced and learned as such
            target = st.slot.target
            policy.shared_pass = target if isinstance(target, SequenceView) else None
            if policy is st.policy:
                st.policy_used = True
        return Generation(
            decoder,
            tokens,
            self.format_piece if p.format_tokens else self.piece,
            seed=seed,
            stop=p.stop,
            slot=slot,
            policy=policy,
            own_policy=fresh is not None,
            grammar_origin=grammar.origin if grammar is not None else "",
            on_prefilled=st.claim(p.namespace),
            edit_stops=EditStops(p.n_indent, p.t_max_predict_ms),
        )

    def thinking_budget(self, p: GenParams, prompt: Sequence[int], inner):
        """The reasoning budget's state (specgguf.core.reasoning_budget) over `inner` (the
        grammar's state, or None), in the template family's thinking markers, primed with the
        prompt's last tokens (a prompt that opened the thinking starts it counting)."""
        from specgguf.core.reasoning_budget import BudgetMarkers, ReasoningBudget

        start, end = self.dialect().thinking
        key = (start, end, p.reasoning_budget_message)
        markers = self._budget_markers.get(key)
        if markers is None:
            closing = self.encode(p.reasoning_budget_message + end, add_special=False)
            markers = BudgetMarkers(start.encode(), end.encode(), tuple(closing))
            self._budget_markers[key] = markers
        assert p.reasoning_budget is not None
        piece = self.session.target_model.piece_special
        budget = ReasoningBudget(markers, p.reasoning_budget, piece, inner)
        budget.prime(prompt[-16:])
        return budget

    def lazy_grammar(self, rules: LazyRules, grammar, prompt: Sequence[int]) -> LazyGrammar:
        """The lazy grammar's state (specgguf.core.lazy_grammar) over `grammar`'s fresh state,
        primed with the prompt's last tokens (a prompt that opened the thinking starts in
        it, where nothing is a trigger)."""
        vocab = self._trigger_vocabs.get(rules)
        if vocab is None:
            model = self.session.target_model
            vocab = TriggerVocab(rules, model.piece_special, byte_speller(model), model.n_vocab)
            self._trigger_vocabs[rules] = vocab
        lazy = LazyGrammar(vocab, grammar)
        lazy.prime(prompt[-16:])
        return lazy

    def constraint(self, grammar: OutputGrammar):
        """A fresh state of `grammar` over the target's vocabulary; GrammarError (one line,
        naming grammar.origin) when llama.cpp cannot use it. A front end calls it once up
        front to refuse a bad grammar before any prompt (compiled grammars are cached)."""
        return compile_grammar(self.session.target_model, grammar.gbnf, grammar.origin)

    def plan(self, params: GenParams, *, constrained: bool = False) -> SpecPlan:
        """The call's speculation, resolved once: its own plan or the session's (the command
        line's), with the request's overrides on top and, under a grammar, the grammar
        drafter where the options ask for it."""
        plan = params.plan if params.plan is not None else SpecPlan(self.session.spec)
        plan = plan.overridden(params.spec)
        if params.namespace is not None:
            plan = replace(plan, namespace=params.namespace)
        return plan.constrained() if constrained else plan

    # -- measuring and closing -------------------------------------------------------------

    @property
    def spec(self) -> SpecOptions:
        """The speculative options the session was loaded with (a bench plan's spec is
        usually a replace() of these)."""
        return self.session.spec

    def timing_contexts(self, tokens: Sequence[int]) -> TimingContexts:
        """Slot 0's contexts for timing raw target and draft passes (bench's cost curve); the
        caller leaves both KV caches empty, so the next prompt is evaluated in full."""
        return self.session.timing_contexts(tokens)

    def forget_outputs(self) -> None:
        """Every slot's lookups forget what earlier sequences taught them (Drafter.forget):
        the next generation drafts as the first of a new process would."""
        for st in self._slots:
            for drafters in (st.slot.ngram, *st.ngram_caches.values()):
                for d in drafters.values():
                    d.forget()

    def close(self) -> None:
        """Close the n-gram drafters kept per SpecPlan.namespace (an -lcd cache is saved
        then). The session is not closed: it belongs to whoever loaded it."""
        for st in self._slots:
            for drafters in st.ngram_caches.values():
                for d in drafters.values():
                    d.close()
            st.ngram_caches.clear()

    # -- what auto learned -----------------------------------------------------------------

    def report_lines(self, slot: int = 0) -> list[str]:
        """auto's lines for stderr (none without auto)."""
        policy = self._slots[slot].policy
        return policy.report_lines() if policy is not None else []

    def summary(self, slot: int = 0) -> dict[str, Any] | None:
        """auto's choices and costs as JSON (None without auto)."""
        policy = self._slots[slot].policy
        return policy.summary() if policy is not None else None

    def save_profile(self) -> None:
        """Merge what auto measured into the machine profile (also after Ctrl-C: the costs
        measured so far are as true as after a full run). Failing to write is not an error."""
        if self.profile_file is None:
            return
        from specgguf.auto.profile import save_profile

        warm, self._warm_measured = self._warm_measured, None  # (merged once)
        for st in [None, *self._slots]:  # None: the warm-up's timings, then each slot's
            if st is not None and st.policy is None:
                continue
            try:
                measured = warm if st is None else st.policy.export_profile()
                if measured is not None:
                    save_profile(self.profile_file, measured)
            except Exception:  # a lost profile costs the next run its probes; never mask
                pass

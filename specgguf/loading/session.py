"""A loaded target (and optional draft) plus everything needed to generate from a prompt.

`run`, `bench` and batch mode all need the same thing: models loaded ONCE, a pre-flight that
refuses bad input before any weight is read, and a fresh speculative decoder per prompt.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from specgguf.binding import devices, engine, exact_rows, kv_overrides, memory_caps
from specgguf.binding.adapters import AdapterFiles, TargetAdapters
from specgguf.binding.batched import BatchedContext, SequenceView
from specgguf.binding.checkpoints import PROMPT_CHECKPOINTS, ModelContext, with_rollback
from specgguf.binding.grammar import draft_source
from specgguf.binding.llama_ext import require_ext
from specgguf.binding.prompt_cache import PromptCache
from specgguf.binding.rendezvous import Rendezvous
from specgguf.core.constraint import Constraint
from specgguf.core.draft import Drafter
from specgguf.core.loop import SpeculativeDecoder
from specgguf.core.rounds import BudgetPolicy, GenerationConfig
from specgguf.core.sampling import PositionRandom, SamplerParams
from specgguf.core.token_probs import ProbsRequest
from specgguf.core.tree import CHAIN, NODES_MAX, TreeShape
from specgguf.drafters.mtp import HeadState
from specgguf.drafters.registry import SPEC_TYPES, BuildContext, needs_draft_model
from specgguf.drafters.suffix import SuffixCorpus
from specgguf.drafters.text_views import TextViews
from specgguf.errors import ExitCode, PromptError, SpecggufError
from specgguf.heads import dflash_head, eagle3_head
from specgguf.heads.eagle3_info import check_draft_role
from specgguf.heads.mtp_head import PURPOSE as MTP_PURPOSE
from specgguf.heads.mtp_head import MtpHead, load_with_mtp_layers
from specgguf.heads.mtp_info import require_mtp
from specgguf.loading import memory_budget
from specgguf.loading.preflight import preflight, resolve_n_ctx, slot_pool
from specgguf.loading.tuning import LlamaTuning, Overrides

#: the one line `run` prints when the draft drafts through text
CROSS_VOCAB_NOTICE = (
    "note: the draft model's vocabulary differs from the target's: draft-simple drafts "
    "through text (cross-vocabulary mode; --spec-vocab-strict refuses such a pair)"
)


@dataclass
class LoadOptions:
    model: Path
    model_draft: Path | None = None
    n_gpu_layers: str = "auto"
    n_gpu_layers_draft: str = "auto"
    n_ctx: int | None = None  # None: preflight.DEFAULT_N_CTX capped at training; 0: training
    n_batch: int = 2048
    n_ubatch: int = 512
    threads: int = 0
    threads_draft: int = 0  # 0: same as threads
    flash_attn: str = "auto"
    repack: bool = True
    verbose: bool = False
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    cache_type_k_draft: str = "f16"
    cache_type_v_draft: str = "f16"
    rpc: str | None = None  # --rpc HOST:PORT,...: ggml RPC workers become devices
    device: str | None = None  # -dev: target devices (None: all, "none": no offload)
    device_draft: str | None = None  # -devd: draft devices (None: follows -dev)
    #: --spec-vocab-strict: refuse a draft with another vocabulary (llama.cpp's rule, exit 4)
    strict_vocab: bool = False
    #: llama.cpp model and context parameters the command line sets (specgguf.flag_table)
    tuning: LlamaTuning = LlamaTuning()
    #: serve --cache-reuse N: a prompt also keeps cached chunks of >= N tokens it repeats
    #: further along (specgguf.core.cache_reuse; one slot); 0: its common prefix only
    cache_reuse: int = 0
    #: --cache-ram MiB: the target's host-memory prompt cache across requests and slots
    #: (binding.prompt_cache); 0: none, -1: unbounded
    cache_ram: int = 0
    #: serve --kv-unified-per-slot N: no slot holds more than N tokens; without -c the pool
    #: is -np x N (preflight.slot_pool); 0: unset
    kv_unified_per_slot: int = 0
    #: --ctx-checkpoints, --checkpoint-min-step: the prompt checkpoints a recurrent or hybrid
    #: model keeps per context for the next prompt's reuse (binding.checkpoints)
    ctx_checkpoints: int = PROMPT_CHECKPOINTS
    checkpoint_min_step: int = 0
    #: --warmup (default) / --no-warmup: a first pass of each model at load (specgguf.warmup)
    warmup: bool = True
    #: -sp/--special: the output's special tokens as their text (otherwise nothing)
    special: bool = False
    #: run --verbose-prompt: each prompt's tokens printed on stderr before it is generated from
    verbose_prompt: bool = False
    #: run -o/--output FILE: the conversation's transcript (the command writes it)
    transcript: Path | None = None



def with_placements(overrides: Overrides) -> Overrides:
    """Model overrides with -ot's (pattern, buffer type) pairs and --override-kv's (key, type,
    value) triples as the arrays llama.cpp reads (an unknown buffer type: one line, exit 1)."""
    from specgguf.binding import tensor_placement

    arrays = {"tensor_buft_overrides": tensor_placement.override_array,
              "kv_overrides": kv_overrides.override_array}  # fmt: skip
    return tuple((k, arrays[k](v) if k in arrays else v) for k, v in overrides)


@dataclass
class SpecOptions:
    types: list[str] = field(default_factory=list)  # in priority order
    n_max: int = 3
    n_min: int = 0
    p_min: float = 0.0
    # one of drafters.draft_lengths.DRAFT_SAMPLING_MODES. auto: probabilistic when --temp > 0
    # and the draft length is fixed; greedy (one-hot) otherwise, so that under
    # --spec-draft-n-max auto a seed still fixes the text
    draft_sampling: str = "auto"
    adaptive: bool = False  # --spec-draft-n-max auto (n_max is then auto's cap)
    #: a generation under a grammar also drafts the text the grammar forces ("grammar" joins
    #: the types, first); off by default: on JSON schemas' grammars, which allow optional
    #: whitespace nearly everywhere, it found almost nothing to force and cost ~6% (measured),
    #: so the command line offers it as `--spec-type grammar` only
    grammar_draft: bool = False
    ngram: Any = None  # specgguf.drafters.ngram_options.NgramOptions
    #: the n-gram lookups also read each prompt JSON-escaped and unescaped
    #: (specgguf.drafters.text_views): a file in the prompt is found while the output writes
    #: it inside a JSON string (a tool call's arguments), and the other way round
    text_views: bool = True
    #: how wide a tree a drafter may propose each round (specgguf.core.tree.TreeShape:
    #: --spec-tree-topk, --spec-tree-nodes, --spec-draft-p-split); CHAIN: chains only,
    #: UNSET: as the flags' defaults (TreeShape.resolved)
    tree: TreeShape = CHAIN
    #: the widest tree the session's contexts must hold (bench: every configuration's), as
    #: (the most branches at once, the most nodes verified); None: this spec's own
    tree_room: TreeShape | None = None

    @property
    def tree_shape(self) -> TreeShape:
        """The shape this spec drafts with (`tree` resolved for auto or a fixed n_max)."""
        return self.tree.resolved(adaptive=self.adaptive)

    def drafts_probabilistically(self, sampler: SamplerParams) -> bool:
        """Whether a model drafter samples its drafts (checked by rejection sampling) rather
        than proposing its argmax: `draft_sampling` resolved for this sampler (auto: when
        sampling with a fixed draft length)."""
        if self.draft_sampling == "auto":
            return not sampler.greedy and not self.adaptive
        return self.draft_sampling == "probabilistic"


@dataclass
class Slot:
    """One sequence's private state over the loaded models: its own target KV cache, its own
    draft-model KV cache and its own n-gram indexes. A server gives each concurrent request a
    slot; the weights are loaded once and shared (llama.cpp allows several contexts per model).
    """

    id: int
    target: ModelContext | SequenceView
    draft_ctx: ModelContext | SequenceView | None = None
    ngram: dict[str, Drafter] = field(default_factory=dict)
    #: draft-mtp: the MTP context beside this slot's target context (its own KV cache) and
    #: the target's hidden states kept for it
    mtp: HeadState | None = None

    def close(self) -> None:
        for d in self.ngram.values():
            d.close()
        for ctx in (self.mtp, self.draft_ctx, self.target):
            if ctx is not None:
                ctx.close()


class TimingContexts(NamedTuple):
    """What a cost measurement times directly, bypassing the decoder."""

    target: ModelContext
    draft: ModelContext | None
    #: the prompt in the draft's tokens when its vocabulary differs (None: the target's ids)
    draft_tokens: list[int] | None
    #: the --spec-type the draft context drafts for (what its measured step is stored as)
    draft_type: str = "draft-simple"


class Session:
    """Models loaded once, plus `parallel` slots (slot 0 is the session's own `target`,
    `draft_ctx` and n-gram drafters; more exist only for a server's -np). With several slots,
    -c is the total, divided between them as llama-server divides it."""

    def __init__(self, load: LoadOptions, spec: SpecOptions, *, parallel: int = 1) -> None:
        engine.init_backend(load.verbose)
        engine.require_gpu_if_built_for_one()  # a CUDA build without a GPU: one line, exit 7
        need_draft = needs_draft_model(spec.types)
        #: draft-mtp: each slot gets an MTP context over the target's own NextN layer, or over
        #: a separate MTP drafter file (-md, a Gemma-4 assistant) sharing the target's cache
        self.uses_mtp = "draft-mtp" in spec.types
        if self.uses_mtp:
            require_ext(MTP_PURPOSE)  # a libllama without the calls: exit 10, nothing loaded
        read_draft = need_draft or self.uses_mtp  # (-md may be draft-mtp's drafter file)
        self.info = preflight(
            load.model, load.model_draft if read_draft else None, strict_vocab=load.strict_vocab
        )
        check_draft_role(spec.types, self.info.draft)
        if self.uses_mtp and self.info.mtp_drafter is None:
            require_mtp(self.info.target)  # no usable NextN layer: exit 4, nothing loaded
        if self.info.eagle3 is not None:  # the head's calls, before any weight is read
            require_ext(eagle3_head.FEATURE)
        if self.info.dflash is not None:
            require_ext(f"--spec-type {self.info.dflash.spec_type}")
        #: the draft drafts through text (another vocabulary); the caller prints the notice
        self.cross_vocab = self.info.cross_vocab
        self.load = load
        self.spec = spec
        #: namespace -> the earlier outputs `suffix` drafts from (suffix_corpus)
        self._suffix_corpora: dict[Hashable | None, SuffixCorpus] = {}
        n_ctx, ctx_warning = resolve_n_ctx(load.n_ctx, self.info.target.context_length)
        n_ctx = slot_pool(load.n_ctx, n_ctx, parallel, load.kv_unified_per_slot)
        #: one-line warnings for the caller to print (this module never writes to stderr)
        self.warnings: list[str] = [ctx_warning] if ctx_warning else []
        self.ngl = engine.parse_gpu_layers(load.n_gpu_layers)
        self.ngl_draft = engine.parse_gpu_layers(load.n_gpu_layers_draft)
        # --rpc before -dev/-devd: the workers' devices must exist before they are named.
        placed = devices.prepare(load)
        # -c bounded by memory: refused in one line before llama.cpp commits to the allocation
        own_layers = self.uses_mtp and self.info.mtp_drafter is None
        memory_budget.check_session(
            self.info,
            n_ctx,
            parallel,
            load,
            offload=bool(self.ngl or self.ngl_draft),
            mtp_head=own_layers,
        )
        #: where each model's layers went, read from llama.cpp's load log (--rpc, -dev)
        self.placement: dict[str, devices.Placement] = {}
        load_target = load_with_mtp_layers if own_layers else engine.Model
        self.warnings += kv_overrides.check(dict(load.tuning.target_model).get("kv_overrides", ()),
                                            self.info.target.metadata, load.model.name)
        with devices.recording(self.placement, "target", placed.record):
            self.target_model = load_target(
                load.model, n_gpu_layers=self.ngl, repack=load.repack, devices=placed.target,
                overrides=with_placements(load.tuning.target_model),
            )
        #: --lora, --control-vector: set on each of the target's contexts as it is made
        self.adapters = self._target_adapters()
        md: engine.Model | None = None  # the -md file, when a type uses it
        assistant = self.info.mtp_drafter is not None
        if (need_draft or assistant) and load.model_draft is not None:
            with devices.recording(self.placement, "draft", placed.record):
                md = engine.Model(
                    load.model_draft,
                    n_gpu_layers=self.ngl_draft,
                    repack=load.repack,
                    devices=placed.draft,
                    overrides=with_placements(load.tuning.draft_model),
                )
        #: the draft model (draft-simple), EAGLE-3 head (draft-eagle3) or block drafter
        #: (draft-dflash, draft-dspark) of -md
        self.draft_model: engine.Model | None = None if assistant else md
        #: a separate MTP drafter's model (-md for draft-mtp; None: the target's own layers)
        self.mtp_model: engine.Model | None = md if assistant else None
        #: what each model's memory can forget ("target", "draft": memory_caps.PARTIAL, FULL
        #: or NONE), probed on the first slot's contexts; FULL ones roll back by checkpoints
        self.memory: dict[str, str] = {}
        #: -np > 1: the lockstep the slots' threads decode in (None: one slot, or slots of
        #: their own contexts stepped in turn by the caller)
        self.rendezvous: Rendezvous | None = None
        self._batched: list[BatchedContext] = []
        self._ngram_drafters: dict[str, Drafter] = {}
        self.extra_slots: list[Slot] = []
        self.mtp: HeadState | None = None
        self._make_slots(n_ctx, parallel)
        self._cap_slots(load.kv_unified_per_slot)

    def _make_slots(self, n_ctx: int, parallel: int) -> None:
        """The slots' contexts over a pool of `n_ctx` (0: the training context): one slot's
        own, each slot's own where sequences cannot share a context, else one shared context
        per model holding the slots as sequences."""
        if parallel == 1:
            self.target, self.draft_ctx = self._contexts(n_ctx)
            self._check_prompt_cache()
            self.mtp = self._mtp_head(self.target)
            return
        n_ctx = (n_ctx or self.target_model.n_ctx_train) // parallel
        if not self._sequences_roll_back() or self.uses_mtp:
            # a recurrent or hybrid model, or MTP heads (a head hears its own slot's target
            # passes): each slot its own contexts, decoded one slot at a time (no shared passes)
            self.target, self.draft_ctx = self._contexts(n_ctx)
            self._check_prompt_cache()
            self.mtp = self._mtp_head(self.target)
            try:
                for i in range(1, parallel):
                    target, draft_ctx = self._contexts(self.target.n_ctx)
                    self.extra_slots.append(Slot(i, target, draft_ctx))
                    self.extra_slots[-1].mtp = self._mtp_head(target)
            except BaseException:
                self.close()
                raise
            return
        # -np N: one context per model holding the N slots as sequences, decoded together
        self.rendezvous = Rendezvous()
        try:
            target = BatchedContext(
                self.target_model,
                self._params(n_ctx, draft=False),
                parallel,
                self.rendezvous,
                **self._batched_tree(draft=False),
            )
            self._batched.append(target)
            self.adapt(target.ctx)
            drafts: list[SequenceView | None] = [None] * parallel
            if self.draft_model is not None:
                draft = BatchedContext(
                    self.draft_model,
                    self._params(target.n_ctx_seq, draft=True),
                    parallel,
                    self.rendezvous,
                    role="draft",
                    holds_others=True,
                    **self._batched_tree(draft=True),
                )
                self._batched.append(draft)
                drafts = list(draft.views)
                # both models' passes by width, before any request: what a draft costs in a
                # shared pass (auto.policy.SharedPass.draft_pass_cost)
                widths = sorted({1, 2, 3, 4, 6, 8, 12, 16, parallel} & set(range(1, parallel + 1)))
                for batched in self._batched:  # (where every later decode runs)
                    self.rendezvous.on_step_thread(lambda b=batched: b.time_widths(widths))
        except BaseException:
            self.close()
            raise
        self.target, self.draft_ctx = target.views[0], drafts[0]
        self.extra_slots = [Slot(i, target.views[i], drafts[i]) for i in range(1, parallel)]
        cache = self.prompt_cache()
        for view in target.views:  # one cache across the slots: a prompt may move between them
            view.prompt_cache = cache

    def _cap_slots(self, per_slot: int) -> None:
        """--kv-unified-per-slot N (0: unset): no slot's target holds more than N tokens, as
        llama-server caps a slot (llama.cpp pads a context's size, so the pool made for N can
        be larger: the cap is the slot's own bound, exact). N above a slot's share of -c
        cannot bind: a warning, as llama-server's."""
        share = self.target.n_ctx
        train = self.target_model.n_ctx_train
        if 0 < train < min(per_slot, share):  # as -c past it is said (resolve_n_ctx)
            self.warnings.append(f"--kv-unified-per-slot {per_slot} is larger than the model's "
                                 f"training context ({train} tokens): text past position "
                                 f"{train} may degrade")  # fmt: skip
        if per_slot <= 0 or per_slot == share:
            return
        if per_slot > share:
            self.warnings.append(f"--kv-unified-per-slot ({per_slot}) exceeds a slot's share of "
                                 f"the KV pool ({share}): it has no effect, slots hold {share} "
                                 "tokens (raise -c, or drop -c to size the pool to -np x N)")
            return
        for slot in self.slots:
            ctx = slot.target
            getattr(ctx, "inner", ctx).n_ctx = per_slot  # (a checkpointed context wraps one)

    def _target_adapters(self) -> TargetAdapters | None:
        """The target's LoRA adapters and control vectors, loaded (None: none given)."""
        files = AdapterFiles.of(self.load.tuning.adapters)
        if files.control_vector_layers != (-1, -1) and not files.control_vectors:
            self.warnings.append("--control-vector-layer-range: no control vector is given, "
                                 "so it changes nothing")  # fmt: skip
        if files.init_without_apply and not files.loras:
            self.warnings.append("--lora-init-without-apply: no --lora is given, so it "
                                 "changes nothing")  # fmt: skip
        if not files.loras and not files.control_vectors:
            return None
        return TargetAdapters(self.target_model, files)

    def adapt(self, ctx: engine.Context) -> None:
        """Set the target's adapters (if any) on `ctx`, a context of the target's weights: the
        generation's, or serve's embeddings context."""
        if self.adapters is not None:
            self.adapters.apply(ctx)

    def set_lora_scales(self, scales: dict[int, float], exclusive) -> None:
        """serve's POST /lora-adapters, while no request runs: the adapters' new scales on
        every target context (through `exclusive`: where no pass runs), then every cached
        target sequence dropped, the slots' and --cache-ram's: a prefix computed under the
        old scales is not what the new ones would compute. The draft keeps its cache (it
        drafts without adapters)."""
        if self.adapters is None:
            return
        adapters = self.adapters
        exclusive(lambda: adapters.set_scales(scales))
        for slot in self.slots:
            slot.target.truncate(0)
            cache = getattr(slot.target, "prompt_cache", None)
            if cache is not None:
                cache.clear()

    def _check_prompt_cache(self) -> None:
        """--cache-ram where the target rolls back by checkpoints (its memory cannot drop
        positions: a recurrent or hybrid model): the prompt cache is not consulted, say so."""
        if self.load.cache_ram and not isinstance(self.target, engine.Context):
            self.warnings.append("--cache-ram: this target's memory cannot drop positions (a "
                                 "recurrent or hybrid model), so no prompt is cached")  # fmt: skip

    def prompt_cache(self) -> PromptCache | None:
        """--cache-ram's host-memory prompt cache for the target's slots (None: 0, off)."""
        return PromptCache(self.load.cache_ram) if self.load.cache_ram else None

    def _params(self, n_ctx: int, *, draft: bool) -> engine.ContextParams:
        """The context parameters of the target or of the draft model (its own threads and KV
        cache types; llama.cpp: no separate draft context size, it follows the target's)."""
        load = self.load
        threads = load.threads_draft if draft and load.threads_draft > 0 else load.threads
        return engine.ContextParams(
            n_ctx,
            load.n_batch,
            load.n_ubatch,
            threads,
            load.flash_attn,
            load.cache_type_k_draft if draft else load.cache_type_k,
            load.cache_type_v_draft if draft else load.cache_type_v,
            overrides=load.tuning.draft_context if draft else load.tuning.target_context,
        )

    def _tree_sequences(self, *, draft: bool) -> int:
        """The KV sequences a slot's tree rounds need: the target's, one per leaf of the
        widest tree verified; the draft's, one per branch it grows at once
        (--spec-tree-topk). Chains: one."""
        room = self.spec.tree_room
        shape = room or self.spec.tree_shape
        if not shape.branches:
            return 1
        leaves = room.nodes if room is not None else shape.node_cap(self.spec.n_max)
        return max(1, min(shape.topk if draft else leaves, NODES_MAX))

    def _branching(self, params: engine.ContextParams, *, draft: bool) -> engine.ContextParams:
        """`params` with the sequences a slot's own context needs for tree rounds, and a
        second one for --cache-reuse (the holes between moved chunks are evaluated there:
        engine.Context.keep_prefix)."""
        n_seq = max(self._tree_sequences(draft=draft), 2 if self.load.cache_reuse > 0 else 1)
        return params if n_seq == 1 else replace(params, n_seq_max=n_seq)

    def _batched_tree(self, *, draft: bool) -> dict[str, int]:
        """A shared context's tree room per slot (BatchedContext's branches, branch_cells):
        its sequences, and the cells a round's nodes hold until it is settled (a target's
        tree; the draft's branches, depth x width)."""
        n_seq = self._tree_sequences(draft=draft)
        if n_seq == 1:
            return {}
        cells = n_seq * self.spec.n_max if draft else n_seq + 1
        return {"branches": n_seq, "branch_cells": cells}

    def _contexts(self, n_ctx: int) -> tuple[ModelContext, ModelContext | None]:
        """A target context (and a draft context, when there is a draft model) of n_ctx,
        each able to roll back (specgguf.binding.checkpoints.with_rollback)."""
        target, draft_ctx = self._engine_contexts(n_ctx)
        try:
            target = self._rollback_capable(target, "target")
            if draft_ctx is not None:
                draft_ctx = self._rollback_capable(draft_ctx, "draft")
        except BaseException:
            for ctx in (draft_ctx, target):
                if ctx is not None:
                    ctx.close()
            raise
        return target, draft_ctx

    def _mtp_head(self, target: ModelContext) -> HeadState | None:
        """draft-mtp's MTP context beside `target` (its size; the draft's threads and KV cache
        types, as llama.cpp makes it), over the target's own NextN layers or over the drafter
        file's model reading `target`'s cache; None without draft-mtp."""
        if not self.uses_mtp:
            return None
        params = self._params(target.n_ctx, draft=True)
        if self.mtp_model is not None:
            head = MtpHead(self.mtp_model, target.ptr, params, target=self.target_model)
        else:
            head = MtpHead(self.target_model, target.ptr, params)
        return HeadState(head)

    def _rollback_capable(self, ctx: engine.Context, role: str) -> ModelContext:
        """`ctx` probed and, where needed, wrapped; a memory that cannot forget anything
        refuses speculation in one line. An EAGLE-3 head or a block drafter rolls itself back
        with the target (specgguf.heads.eagle3_head, dflash_head) and is returned as it is."""
        if isinstance(ctx, (eagle3_head.Eagle3Context, dflash_head.DflashContext)):
            return ctx  # type: ignore[return-value]
        draft = role == "draft"
        keep = self.spec.n_max + 1 if draft else 1
        # (the probe decodes: on a thread of its own, so that no second team of llama.cpp's
        # CPU workers outlives it: engine.on_passing_thread)
        load = self.load
        out, removal = engine.on_passing_thread(lambda: with_rollback(
            ctx, draft=draft, keep=keep, prompt_keep=load.ctx_checkpoints,
            min_step=load.checkpoint_min_step))  # fmt: skip
        self.memory.setdefault(role, removal)
        if removal == memory_caps.NONE and self.spec.types:
            raise SpecggufError(
                f"{ctx.model.path}: the {role} model's memory {memory_caps.REMOVAL[removal][1]} "
                "(use --spec-type none)",
                ExitCode.RUNTIME,
            )
        return out

    def _sequences_roll_back(self) -> bool:
        """Whether every loaded model can drop the tail of one sequence of a shared context
        (an attention KV cache can; a recurrent or hybrid memory cannot), read from the
        architecture as `check` reads it: what -np > 1 needs to decode the slots as sequences
        of one context, in shared passes. An EAGLE-3 head or a block drafter hears its own
        slot's target passes, so its slots get contexts of their own too."""
        if self.info.eagle3 is not None or self.info.dflash is not None:
            return False
        infos = [self.info.target] + ([self.info.draft] if self.draft_model is not None else [])
        removal = memory_caps.expected_removal
        return all(i is not None and removal(i.architecture) == memory_caps.PARTIAL for i in infos)

    def memory_report(self) -> dict[str, dict[str, str]]:
        """Each loaded model's memory (memory_caps.describe): run --json's "kv_rollback"."""
        infos = {"target": self.info.target, "draft": self.info.draft}
        return {
            role: memory_caps.describe(removal, infos[role].architecture)
            for role, removal in self.memory.items()
        }

    def _engine_contexts(self, n_ctx: int) -> tuple[engine.Context, engine.Context | None]:
        """The engine contexts behind `_contexts` (the draft's follows the target's size)."""
        target = engine.Context(
            self.target_model, self._branching(self._params(n_ctx, draft=False), draft=False)
        )
        target.prompt_cache = self.prompt_cache()
        self.adapt(target)
        draft_ctx = None
        try:
            self._reuse_chunks(target)
            if self.draft_model is not None:
                params = self._params(target.n_ctx, draft=True)
                draft_ctx = self._draft_context(target, params)
                if isinstance(draft_ctx, engine.Context):  # a draft model's own cache
                    self._reuse_chunks(draft_ctx)
        except BaseException:
            for ctx in (draft_ctx, target):
                if ctx is not None:
                    ctx.close()
            raise
        return target, draft_ctx

    def _reuse_chunks(self, ctx: engine.Context) -> None:
        """--cache-reuse on `ctx`, with the break-even of its shift pass measured (a pass
        over the whole cache: what chunks shorter than that cost to evaluate again is less;
        core.cache_reuse.ReusePlan.worth_shifting), on a thread of its own as every decode
        at load."""
        ctx.cache_reuse = self.load.cache_reuse
        if ctx.cache_reuse > 0 and ctx.can_shift:
            ctx.shift_break_even = engine.on_passing_thread(ctx.time_shift)

    def _draft_context(self, target: engine.Context, params: engine.ContextParams):  # noqa: ANN202
        """The -md file's context beside `target`: a draft model's own, or a head's over the
        target's (an EAGLE-3 head, a DFlash or DSpark drafter)."""
        assert self.draft_model is not None
        if self.info.eagle3 is not None:
            return eagle3_head.Eagle3Context(self.draft_model, target, params, self.info.eagle3)
        if self.info.dflash is not None:
            return dflash_head.DflashContext(self.draft_model, target, params, self.info.dflash)
        return engine.Context(self.draft_model, self._branching(params, draft=True))

    @property
    def slots(self) -> list[Slot]:
        """Every slot, slot 0 (a view of the session's own contexts and drafters) first."""
        own = Slot(0, self.target, self.draft_ctx, self._ngram_drafters, self.mtp)
        return [own, *self.extra_slots]

    def offload(self) -> str:
        """Where -ngl / -ngld put each model's layers: "target: 28/29 layers on CUDA0
        (1 on CPU), draft: all 25 layers on CPU"."""
        line = "target: " + engine.offload_summary(self.target_model, self.ngl)
        draft = self.draft_model or self.mtp_model
        if draft is not None:
            line += ", draft: " + engine.offload_summary(draft, self.ngl_draft)
        return line

    # -- prompts ------------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        if not text:
            raise PromptError("the prompt is empty")
        tokens = self.target_model.tokenize(text)
        if not tokens:
            raise PromptError("the prompt is empty after tokenization")
        self.check_prompt_length(tokens)
        return tokens

    def check_prompt_length(self, tokens: Sequence[int]) -> None:
        """PromptError when nothing would fit in the context after `tokens`."""
        if len(tokens) >= self.target.n_ctx:
            raise PromptError(
                f"the prompt is {len(tokens)} tokens, the context is {self.target.n_ctx} "
                "(-c): nothing would fit after it"
            )

    def draft_tokens(self, tokens: list[int]) -> list[int]:
        """The draft's tokens for the text of target `tokens` (the same ids when the two
        vocabularies agree): what a cross-vocabulary draft reads for that sequence."""
        if not self.cross_vocab or self.draft_model is None:
            return list(tokens)
        tm = self.target_model
        body = tokens[1:] if tokens and tm.add_bos and tokens[0] == tm.bos else tokens
        text = b"".join(tm.piece_special(t) for t in body).decode("utf-8", "replace")
        return self.draft_model.tokenize(text, add_special=True, parse_special=True)

    # -- drafters -----------------------------------------------------------------------------

    def suffix_corpus(self, spec: SpecOptions, namespace: Hashable | None) -> SuffixCorpus:
        """The earlier outputs `suffix` drafts from under `namespace` (a server's API key;
        None: the process's own): one corpus per namespace, shared by every slot, never
        read under another one."""
        corpus = self._suffix_corpora.get(namespace)
        if corpus is None:  # setdefault: two slots' threads asking at once get one corpus
            params = SPEC_TYPES["suffix"].params_from(spec.ngram)
            corpus = self._suffix_corpora.setdefault(namespace, SuffixCorpus(params.cache_tokens))
        return corpus

    @functools.cached_property
    def text_views(self) -> TextViews:
        """The prompts' escape-aware views in the target's tokens, for the n-gram lookups: the
        text as the target spells it (special tokens as nothing), tokenized as the target
        tokenizes text it writes (no BOS, no special tokens parsed)."""
        tm = self.target_model

        def tokenize(text: str) -> list[int]:
            return tm.tokenize(text, add_special=False, parse_special=False)

        return TextViews(tokenize, self.detokenize)

    def detokenize(self, tokens: Sequence[int]) -> str:
        """The target's text of `tokens` (special tokens as nothing; bytes that do not form
        UTF-8 as U+FFFD)."""
        return b"".join(self.target_model.piece(t) for t in tokens).decode("utf-8", "replace")

    def _drafters(
        self,
        sampler: SamplerParams,
        random: PositionRandom,
        spec: SpecOptions,
        slot: Slot | None,
        reuse_prefix: bool = True,
        constraint: Constraint | None = None,
        namespace: Hashable | None = None,
    ) -> list[Drafter]:
        """The drafters of spec.types over `slot`, built by the registry. A model-free drafter
        is built once per slot and keeps its indexes across the slot's sequences; a drafter over
        the draft model is built per generation (it takes the generation's sampler and seed),
        and so is the grammar drafter (it reads the generation's `constraint`)."""
        slot = slot if slot is not None else self.slots[0]
        ngram = slot.ngram
        draft_ctx = slot.draft_ctx
        ctx = BuildContext(
            ngram=spec.ngram,
            draft_ctx=draft_ctx,
            sampler=sampler,
            random=random,
            n_max=spec.n_max,
            n_min=spec.n_min,
            p_min=spec.p_min,
            probabilistic=spec.drafts_probabilistically(sampler),
            reuse_prefix=reuse_prefix,
            cross_vocab=(draft_ctx.model, self.target_model)
            if self.cross_vocab and draft_ctx is not None
            else None,
            grammar=draft_source(self.target_model, constraint)
            if constraint is not None and "grammar" in spec.types
            else None,
            constraint=constraint,
            mtp=slot.mtp,
            head=draft_ctx if self.info.eagle3 is not None else None,
            block_head=draft_ctx if self.info.dflash is not None else None,
            views=self.text_views if spec.text_views else None,
            tree=spec.tree_shape,
            suffix_corpus=self.suffix_corpus(spec, namespace) if "suffix" in spec.types else None,
        )
        out: list[Drafter] = []
        for t in spec.types:
            row = SPEC_TYPES[t]
            if row.built_per_sequence:
                out.append(row.build(ctx))
                continue
            d = ngram.get(t)
            if d is None:
                d = ngram[t] = row.build(ctx)
            out.append(d)
        return out

    def decoder(
        self,
        sampler: SamplerParams,
        n_predict: int,
        seed: int,
        *,
        ignore_eos: bool = False,
        trace_probs: bool = False,
        budget_policy: BudgetPolicy | None = None,
        reuse_prefix: bool = True,
        spec: SpecOptions | None = None,
        slot: Slot | None = None,
        constraint: Constraint | None = None,
        namespace: Hashable | None = None,
        probs: ProbsRequest | None = None,
    ) -> SpeculativeDecoder:
        """A decoder for one sequence over `slot` (default: the session's own contexts), with
        `spec` replacing the session's speculative options for this one generation. With
        `reuse_prefix` its prefill keeps whatever start of the prompt the slot's KV caches
        still hold from the previous sequence (same output as a fresh context, fewer tokens
        evaluated). The n-gram drafters are the slot's `ngram` ones: a caller that wants
        separate n-gram state (bench: one per configuration) passes a copy of the slot with
        its own dict. `namespace` chooses the corpus of earlier outputs `suffix` reads (a
        server's API key). `constraint` (a grammar's fresh state, specgguf.binding.grammar) masks
        every row the target's tokens are drawn from. `probs`: each emitted token's probabilities
        to report (specgguf.core.token_probs; None: none)."""
        spec = spec if spec is not None else self.spec
        slot = slot if slot is not None else self.slots[0]
        if probs is not None:  # exact figures: verify passes only as wide as plain rows stay
            probs = replace(probs, max_rows=self.exact_rows())
        random = PositionRandom(seed)
        config = GenerationConfig(
            n_predict=n_predict, n_max=spec.n_max, sampler=sampler, ignore_eos=ignore_eos,
            probs=probs,
        )
        return SpeculativeDecoder(
            slot.target,
            self._drafters(sampler, random, spec, slot, reuse_prefix, constraint, namespace),
            config,
            random,
            is_eog=self.target_model.is_eog,
            trace_probs=trace_probs,
            budget_policy=budget_policy,
            reuse_prefix=reuse_prefix,
            constraint=constraint,
        )

    def exact_rows(self) -> int | None:
        """The widest verify pass whose rows are the target's 1-token rows here (measured once
        per process, specgguf.binding.exact_rows); None: no cap."""
        return exact_rows.max_rows(self.target_model, self._params(0, draft=False))

    # -- timing -------------------------------------------------------------------------------

    def timing_contexts(self, tokens: Sequence[int]) -> TimingContexts:
        """Slot 0's contexts for timing raw passes (bench's cost curve), and `tokens` as the
        draft reads them. Whoever times on them leaves both KV caches empty afterwards: the
        next generation then evaluates its prompt in full, as after any other sequence."""
        cross = self.cross_vocab and self.draft_ctx is not None
        if self.draft_ctx is None and self.mtp is not None:  # the MTP head's own step
            return TimingContexts(self.target, self.mtp.head, None, "draft-mtp")
        return TimingContexts(
            self.target,
            self.draft_ctx,
            self.draft_tokens(list(tokens)) if cross else None,
            self.draft_type,
        )

    @property
    def draft_type(self) -> str:
        """The --spec-type the -md file drafts as (what its measured step is stored as)."""
        if self.info.eagle3 is not None:
            return "draft-eagle3"
        if self.info.dflash is not None:
            return self.info.dflash.spec_type
        return "draft-simple"

    def close(self) -> None:
        for slot in getattr(self, "extra_slots", []):
            slot.close()
        for d in getattr(self, "_ngram_drafters", {}).values():
            d.close()
        for name in ("mtp", "draft_ctx", "target"):
            obj = getattr(self, name, None)
            if obj is not None:
                obj.close()
        for batched in getattr(self, "_batched", []):
            batched.close()
        for name in ("mtp_model", "draft_model", "target_model"):
            obj = getattr(self, name, None)
            if obj is not None:
                obj.close()


def resolve_seed(seed: int) -> int:
    """llama.cpp's -s -1 (LLAMA_DEFAULT_SEED) means a random seed; we report the one used."""
    return random.SystemRandom().randrange(2**32) if seed < 0 or seed == 0xFFFFFFFF else seed

"""Every --spec-type llama.cpp knows, in one table: what configures it, what builds it, what it
needs.

One row per name, in llama.cpp's fixed priority order (a round tries the chosen types in this
order and the first non-empty draft wins), after specgguf's own `grammar` (the text a grammar
forces: tried first, since it is nearly always accepted). Parsing
(`specgguf.drafters.spec_types`), the n-gram flags and options
(`specgguf.drafters.ngram_options`), the session that builds drafters over its loaded models
and bench all read this table, so adding or changing a type is one row here (plus its
builder, and for an n-gram type its params class in specgguf.drafters.ngram_params); a
drafter's `name` and `free` are set from its row.

Builders import their drafter module when called: parsing a --spec-type (before any model is
loaded, so that a typo costs nothing) must not pull in numpy and every drafter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Protocol, Union, runtime_checkable

from specgguf.core.tree import CHAIN, TreeShape
from specgguf.drafters.ngram_params import (
    NgramCacheParams,
    NgramMapK4VParams,
    NgramMapKParams,
    NgramModParams,
    NgramSimpleParams,
    SuffixParams,
)
from specgguf.errors import UsageError

if TYPE_CHECKING:
    from specgguf.core.constraint import Constraint
    from specgguf.core.context import KVContext
    from specgguf.core.draft import Drafter
    from specgguf.core.sampling import PositionRandom, SamplerParams
    from specgguf.drafters.cross_vocab import Vocabulary
    from specgguf.drafters.dflash import BlockHead
    from specgguf.drafters.draft_steps import DraftRules
    from specgguf.drafters.eagle3 import HiddenStateHead
    from specgguf.drafters.grammar_draft import GrammarDraftSource
    from specgguf.drafters.mtp import HeadState
    from specgguf.drafters.text_views import TextViews


@runtime_checkable
class OptionsByType(Protocol):
    """The options of every n-gram type at once (specgguf.drafters.ngram_options.NgramOptions,
    which builds on this table and so cannot be imported by it)."""

    def for_type(self, spec_type: str) -> Any: ...


@dataclass(frozen=True)
class BuildContext:
    """What a builder may need. The n-gram types read `ngram` only; draft-simple reads the
    loaded draft context and the generation's sampler, seed and draft lengths (it is built per
    generation, the n-gram drafters once per slot)."""

    ngram: ParamsArg = None
    draft_ctx: KVContext | None = None
    sampler: SamplerParams | None = None
    random: PositionRandom | None = None
    n_max: int = 3
    n_min: int = 0
    p_min: float = 0.0
    probabilistic: bool = False
    reuse_prefix: bool = True
    #: (draft, target) vocabularies when they differ: draft-simple then drafts through text
    cross_vocab: tuple[Vocabulary, Vocabulary] | None = None
    #: the generation's grammar, for the grammar drafter (None: the generation has none)
    grammar: GrammarDraftSource | None = None
    #: the generation's grammar in its state before the output (a state of the drafter's own):
    #: a model drafter proposes nothing it forbids (None: no grammar)
    constraint: Constraint | None = None
    #: the slot's MTP head over the target's own NextN layer, with what it keeps across
    #: generations, for draft-mtp (None: the session was not started with draft-mtp)
    mtp: HeadState | None = None
    #: the slot's EAGLE-3 head over its target context, for draft-eagle3
    head: HiddenStateHead | None = None
    #: the slot's DFlash or DSpark drafter over its target context, for draft-dflash and
    #: draft-dspark
    block_head: BlockHead | None = None
    #: a prompt's escape-aware views in the target's tokens (specgguf.drafters.text_views),
    #: read by the types whose row says `reads_views`; None: the prompt alone
    views: TextViews | None = None
    #: the earlier outputs `suffix` drafts from (specgguf.drafters.suffix.SuffixCorpus: one
    #: per model and API key, shared by the slots); None: a corpus of the drafter's own
    suffix_corpus: Any = None
    #: how wide a tree each drafter may propose (--spec-tree-topk, --spec-tree-nodes,
    #: --spec-draft-p-split); CHAIN: chains only
    tree: TreeShape = CHAIN

    def draft_rules(self) -> DraftRules:
        """The rules a drafter that drafts token by token from a model's logits follows
        (draft-simple, draft-eagle3, draft-mtp)."""
        from specgguf.drafters.draft_steps import DraftRules

        if self.sampler is None:
            raise ValueError("a model drafter drafts with the generation's sampler")
        rules = DraftRules(
            self.sampler,
            self.n_max,
            self.p_min,
            self.n_min,
            self.probabilistic,
            grammar=self.constraint.clone() if self.constraint is not None else None,
        )
        return rules if self.random is None else replace(rules, random=self.random)


#: (the type's params object, or None for types without one; the build context) -> drafter
Builder = Callable[[Any, BuildContext], "Drafter"]


@dataclass(frozen=True)
class SpecType:
    """One --spec-type name and what it takes."""

    name: str
    #: None: not supported here (see `unsupported`)
    builder: Builder | None
    #: the n-gram types' options dataclass (specgguf.drafters.ngram_params); None: configured
    #: by the --spec-draft-* flags
    params: type | None = None
    #: needs a draft model (-md), hence a loaded draft context to be built
    needs_model: bool = False
    #: built for each generation (it reads the generation's sampler, seed or grammar), not
    #: once per slot; every type that needs a model is
    per_sequence: bool = False
    #: proposing is a lookup that costs next to nothing; `build` hands it to the drafter as its
    #: `free` (what the auto policy reads), so it is declared here only
    free: bool = False
    #: what the type needs that llama-cpp-python does not hand to Python (None: supported)
    unsupported: str | None = None
    #: --spec-draft-n-max bounds its drafts (a model drafting token by token; the n-gram
    #: types have their own sizes); every type that needs a model does
    drafts_to_n_max: bool = False
    #: an n-gram lookup over the sequence that also reads the prompt's escaped and unescaped
    #: views (specgguf.drafters.text_views) when the build context has them: "apart" (a
    #: lookup of the most recent match: one per spelling) or "together" (a longest-match
    #: lookup: one over all); None: the prompt only (ngram-cache: its -lcd file keeps what
    #: was generated, nothing made up)
    reads_views: str | None = None
    #: grows tree drafts where the shape asks for them (BuildContext.tree); the other types
    #: propose chains, and are built with CHAIN
    grows_trees: bool = False

    @property
    def bounded_by_n_max(self) -> bool:
        return self.drafts_to_n_max or self.needs_model

    @property
    def built_per_sequence(self) -> bool:
        return self.per_sequence or self.needs_model

    def check_supported(self) -> None:
        """A UsageError naming what is missing, for a type this package cannot run."""
        if self.unsupported is not None:
            raise UsageError(
                f"--spec-type {self.name} needs {self.unsupported}, which llama-cpp-python does "
                "not expose to Python; use draft-simple or an ngram-* type"
            )

    def params_from(self, params: ParamsArg = None) -> Any:
        """Coerce None / the options of every type / a mapping of field names / a params
        object into this type's validated params dataclass."""
        cls = self.params
        if cls is None:
            raise TypeError(f"{self.name} takes no n-gram params")
        if params is None:
            return cls()
        if isinstance(params, cls):
            return params
        if isinstance(params, OptionsByType):
            return params.for_type(self.name)
        if isinstance(params, Mapping):
            names = {f.name for f in fields(cls)}
            unknown = sorted(set(params) - names)
            if unknown:
                raise TypeError(f"{cls.__name__} has no field(s) {', '.join(unknown)}")
            return cls(**params)
        raise TypeError(f"{self.name} needs {cls.__name__}, got {type(params).__name__}")

    def build(self, ctx: BuildContext) -> Drafter:
        """The drafter for this type over `ctx`, named and marked free from this row (the
        drafter classes do not restate either)."""
        self.check_supported()
        assert self.builder is not None
        params = self.params_from(ctx.ngram) if self.params is not None else None
        builder = self.builder
        if self.reads_views and ctx.views is not None:
            from specgguf.drafters.text_views import WithTextViews

            drafter: Drafter = WithTextViews(
                lambda: builder(params, ctx), ctx.views, per_spelling=self.reads_views == "apart"
            )
        else:
            drafter = builder(params, ctx)
        drafter.name = self.name
        drafter.free = self.free
        drafter.tree = ctx.tree if self.grows_trees else CHAIN
        return drafter


# -- builders ---------------------------------------------------------------------------------


def _ngram_simple(p: NgramSimpleParams, _: BuildContext) -> Drafter:
    from specgguf.drafters.ngram_simple import NgramSimple

    return NgramSimple(p.size_n, p.size_m, p.min_hits)


def _ngram_map_k(p: NgramMapKParams, _: BuildContext) -> Drafter:
    from specgguf.drafters.ngram_map import NgramMapK

    return NgramMapK(p.size_n, p.size_m, p.min_hits)


def _ngram_map_k4v(p: NgramMapK4VParams, _: BuildContext) -> Drafter:
    from specgguf.drafters.ngram_map import NgramMapK4V

    return NgramMapK4V(p.size_n, p.size_m, p.min_hits)


def _ngram_mod(p: NgramModParams, _: BuildContext) -> Drafter:
    from specgguf.drafters.ngram_mod import NgramMod

    return NgramMod(p.n_match, p.n_min, p.n_max)


def _ngram_cache(p: NgramCacheParams, _: BuildContext) -> Drafter:
    from specgguf.drafters.ngram_cache import NgramCache

    return NgramCache(p.lookup_cache_static, p.lookup_cache_dynamic)


def _suffix(p: SuffixParams, ctx: BuildContext) -> Drafter:
    from specgguf.drafters.suffix import SuffixDrafter

    return SuffixDrafter(p, ctx.suffix_corpus)


def _draft_simple(_: None, ctx: BuildContext) -> Drafter:
    """Over a draft model of the target's vocabulary, or through text over another one."""
    if ctx.draft_ctx is None:
        raise ValueError("draft-simple is built over a loaded draft model (BuildContext.draft_ctx)")
    if ctx.cross_vocab is not None:
        from specgguf.drafters.cross_vocab import CrossVocabDrafter

        draft, target = ctx.cross_vocab
        return CrossVocabDrafter(
            ctx.draft_ctx,
            draft,
            target,
            n_max=ctx.n_max,
            p_min=ctx.p_min,
            n_min=ctx.n_min,
            reuse_prefix=ctx.reuse_prefix,
        )
    if ctx.sampler is None:
        raise ValueError("draft-simple drafts with the generation's sampler (BuildContext.sampler)")
    from specgguf.drafters.draft_model import DraftModelDrafter

    return DraftModelDrafter(ctx.draft_ctx, ctx.draft_rules(), reuse_prefix=ctx.reuse_prefix)


def _draft_eagle3(_: None, ctx: BuildContext) -> Drafter:
    """Over the slot's EAGLE-3 head, with the generation's sampler and draft lengths."""
    if ctx.head is None or ctx.sampler is None:
        raise ValueError("draft-eagle3 is built over a loaded head (BuildContext.head, sampler)")
    from specgguf.drafters.eagle3 import Eagle3Drafter

    return Eagle3Drafter(ctx.head, ctx.draft_rules(), reuse_prefix=ctx.reuse_prefix)


def _block_drafter(dspark: bool) -> Builder:
    """draft-dflash's or draft-dspark's builder: over the slot's block drafter, with the
    generation's sampler and draft lengths."""

    def build(_: None, ctx: BuildContext) -> Drafter:
        if ctx.block_head is None or ctx.sampler is None:
            raise ValueError("a block drafter is built over a loaded head (block_head, sampler)")
        from specgguf.drafters.dflash import BlockDrafter

        return BlockDrafter(
            ctx.block_head, ctx.draft_rules(), dspark=dspark, reuse_prefix=ctx.reuse_prefix
        )

    return build


def _draft_mtp(_: None, ctx: BuildContext) -> Drafter:
    """Over the target's own NextN layer (an MTP context over the loaded target)."""
    if ctx.mtp is None or ctx.sampler is None:
        raise UsageError(
            "--spec-type draft-mtp drafts with the MTP head the session makes when it is "
            "started with that type"
        )
    from specgguf.drafters.mtp import MtpDrafter

    return MtpDrafter(ctx.mtp, ctx.draft_rules())


def _grammar(_: None, ctx: BuildContext) -> Drafter:
    """The text the generation's grammar forces (without a grammar it never proposes)."""
    from specgguf.drafters.grammar_draft import GrammarDrafter

    return GrammarDrafter(ctx.grammar)


# -- the table --------------------------------------------------------------------------------

#: specgguf's grammar type, then every name llama.cpp accepts, in the order a round tries them
#: (first non-empty draft wins), with vLLM's `suffix` (earlier requests' outputs too) after
#: the n-gram types; draft-eagle3 drafts with an EAGLE-3 head (-md) that hears
#: three of the target's layers, draft-mtp with the target's own NextN layer (an MTP context
#: over the loaded target, no -md) or a separate MTP drafter file (-md, an MTP context over
#: it that reads the target's cache), draft-dflash and draft-dspark with a block drafter (-md)
#: that hears the target's layers and drafts a whole block in one pass
REGISTRY: tuple[SpecType, ...] = (
    SpecType("grammar", _grammar, free=True, per_sequence=True),
    SpecType("ngram-simple", _ngram_simple, NgramSimpleParams, free=True, reads_views="apart"),
    SpecType("ngram-map-k", _ngram_map_k, NgramMapKParams, free=True, reads_views="apart"),
    SpecType(
        "ngram-map-k4v",
        _ngram_map_k4v,
        NgramMapK4VParams,
        free=True,
        reads_views="apart",
        grows_trees=True,
    ),
    SpecType("ngram-mod", _ngram_mod, NgramModParams, free=True, reads_views="apart"),
    SpecType("ngram-cache", _ngram_cache, NgramCacheParams, free=True),
    SpecType("suffix", _suffix, SuffixParams, free=True, reads_views="together"),
    SpecType("draft-simple", _draft_simple, needs_model=True, grows_trees=True),
    SpecType("draft-eagle3", _draft_eagle3, needs_model=True),
    SpecType("draft-mtp", _draft_mtp, per_sequence=True, drafts_to_n_max=True),
    SpecType("draft-dflash", _block_drafter(False), needs_model=True),
    SpecType("draft-dspark", _block_drafter(True), needs_model=True),
)

#: every n-gram type's params class, derived from the rows (a new type's class joins by its row)
NgramParams = Union[tuple(t.params for t in REGISTRY if t.params is not None)]  # noqa: UP007
#: what an n-gram builder accepts as its options: None (the defaults), the options of every
#: type, a mapping of field names, or the type's own params object
ParamsArg = Union[NgramParams, OptionsByType, Mapping[str, Any], None]  # noqa: UP007

#: name -> row, in priority order
SPEC_TYPES: Mapping[str, SpecType] = {t.name: t for t in REGISTRY}
#: the names in priority order (sort chosen types with `key=PRIORITY.index`)
PRIORITY: tuple[str, ...] = tuple(SPEC_TYPES)


def needs_draft_model(types: Iterable[str]) -> bool:
    """Whether any of `types` drafts with a draft model (so -md must be loaded)."""
    return any(SPEC_TYPES[t].needs_model for t in types)


def bounded_by_n_max(types: Iterable[str]) -> bool:
    """Whether --spec-draft-n-max bounds any of `types` (draft-simple, draft-eagle3,
    draft-mtp)."""
    return any(SPEC_TYPES[t].bounded_by_n_max for t in types)


def ngram_drafter(spec_type: str, params: ParamsArg = None) -> Drafter:
    """A model-free drafter from its options alone (defaults when None): what a script or a
    test builds without a session."""
    row = SPEC_TYPES.get(spec_type)
    if row is None or row.params is None:
        known = ", ".join(t.name for t in REGISTRY if t.params is not None)
        raise UsageError(f"unknown n-gram speculative type {spec_type!r} (expected: {known})")
    return row.build(BuildContext(ngram=params))

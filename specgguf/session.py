"""A loaded target (and optional draft) plus everything needed to generate from a prompt.

`run`, `bench` and batch mode all need the same thing: models loaded ONCE, a pre-flight that
refuses bad input before any weight is read, and a fresh speculative decoder per prompt.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgguf import engine
from specgguf.drafters.base import Drafter
from specgguf.drafters.cross_vocab import CrossVocabDrafter
from specgguf.drafters.draft_model import DraftModelDrafter
from specgguf.errors import PromptError
from specgguf.preflight import preflight
from specgguf.sampling import PositionRandom, SamplerParams
from specgguf.spec_types import NGRAM_TYPES
from specgguf.speculative import BudgetPolicy, GenerationConfig, SpeculativeDecoder

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
    n_ctx: int = 0
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
    #: --spec-vocab-strict: refuse a draft with another vocabulary (llama.cpp's rule, exit 4)
    strict_vocab: bool = False


@dataclass
class SpecOptions:
    types: list[str] = field(default_factory=list)  # in priority order
    n_max: int = 3
    n_min: int = 0
    p_min: float = 0.0
    # auto: probabilistic when --temp > 0 and the draft length is fixed; greedy (one-hot)
    # otherwise, so that under --spec-draft-n-max auto a seed still fixes the text
    draft_sampling: str = "auto"
    adaptive: bool = False  # --spec-draft-n-max auto (n_max is then auto's cap)
    ngram: Any = None  # specgguf.drafters.ngram_params.NgramOptions


class Session:
    def __init__(self, load: LoadOptions, spec: SpecOptions) -> None:
        engine.init_backend(load.verbose)
        need_draft = "draft-simple" in spec.types
        self.info = preflight(
            load.model,
            load.model_draft if need_draft else None,
            load.n_ctx,
            strict_vocab=load.strict_vocab,
        )
        #: the draft drafts through text (another vocabulary); the caller prints the notice
        self.cross_vocab = self.info.cross_vocab
        self.load = load
        self.spec = spec
        self.target_model = engine.Model(
            load.model, n_gpu_layers=engine.parse_gpu_layers(load.n_gpu_layers), repack=load.repack
        )
        self.target = engine.Context(
            self.target_model,
            engine.ContextParams(
                load.n_ctx,
                load.n_batch,
                load.n_ubatch,
                load.threads,
                load.flash_attn,
                load.cache_type_k,
                load.cache_type_v,
            ),
        )
        self.draft_model: engine.Model | None = None
        self.draft_ctx: engine.Context | None = None
        if need_draft and load.model_draft is not None:
            self.draft_model = engine.Model(
                load.model_draft,
                n_gpu_layers=engine.parse_gpu_layers(load.n_gpu_layers_draft),
                repack=load.repack,
            )
            # llama.cpp: no separate draft context size any more, it follows the target's.
            self.draft_ctx = engine.Context(
                self.draft_model,
                engine.ContextParams(
                    self.target.n_ctx,
                    load.n_batch,
                    load.n_ubatch,
                    load.threads_draft or load.threads,
                    load.flash_attn,
                    load.cache_type_k_draft,
                    load.cache_type_v_draft,
                ),
            )
        self._ngram_drafters: dict[str, Drafter] = {}

    # -- prompts ------------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        if not text:
            raise PromptError("the prompt is empty")
        tokens = self.target_model.tokenize(text)
        if not tokens:
            raise PromptError("the prompt is empty after tokenization")
        if len(tokens) >= self.target.n_ctx:
            raise PromptError(
                f"the prompt is {len(tokens)} tokens, the context is {self.target.n_ctx} "
                "(-c): nothing would fit after it"
            )
        return tokens

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

    def _drafters(
        self, sampler: SamplerParams, random: PositionRandom, reuse_prefix: bool = True
    ) -> list[Drafter]:
        out: list[Drafter] = []
        for t in self.spec.types:
            if t in NGRAM_TYPES:
                d = self._ngram_drafters.get(t)
                if d is None:
                    from specgguf.drafters.ngram_params import make_ngram_drafter

                    d = self._ngram_drafters[t] = make_ngram_drafter(t, self.spec.ngram)
                out.append(d)
            elif t == "draft-simple" and self.cross_vocab:
                assert self.draft_ctx is not None
                out.append(
                    CrossVocabDrafter(
                        self.draft_ctx,
                        self.target_model,
                        n_max=self.spec.n_max,
                        p_min=self.spec.p_min,
                        n_min=self.spec.n_min,
                        reuse_prefix=reuse_prefix,
                    )
                )
            elif t == "draft-simple":
                assert self.draft_ctx is not None
                probabilistic = self.spec.draft_sampling == "probabilistic" or (
                    self.spec.draft_sampling == "auto"
                    and not sampler.greedy
                    and not self.spec.adaptive
                )
                out.append(
                    DraftModelDrafter(
                        self.draft_ctx,
                        sampler,
                        n_max=self.spec.n_max,
                        p_min=self.spec.p_min,
                        n_min=self.spec.n_min,
                        probabilistic=probabilistic,
                        random=random,
                        reuse_prefix=reuse_prefix,
                    )
                )
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
    ) -> SpeculativeDecoder:
        """A decoder for one sequence. With `reuse_prefix` its prefill keeps whatever start of
        the prompt the KV caches still hold from the previous sequence (same output as a
        fresh context, fewer tokens evaluated)."""
        random = PositionRandom(seed)
        config = GenerationConfig(
            n_predict=n_predict, n_max=self.spec.n_max, sampler=sampler, ignore_eos=ignore_eos
        )
        return SpeculativeDecoder(
            self.target,
            self._drafters(sampler, random, reuse_prefix),
            config,
            random,
            is_eog=self.target_model.is_eog,
            trace_probs=trace_probs,
            budget_policy=budget_policy,
            reuse_prefix=reuse_prefix,
        )

    def close(self) -> None:
        for d in self._ngram_drafters.values():
            d.close()
        for obj in (self.draft_ctx, self.draft_model, self.target, self.target_model):
            if obj is not None:
                obj.close()


def resolve_seed(seed: int) -> int:
    """llama.cpp's -s -1 (LLAMA_DEFAULT_SEED) means a random seed; we report the one used."""
    return random.SystemRandom().randrange(2**32) if seed < 0 or seed == 0xFFFFFFFF else seed

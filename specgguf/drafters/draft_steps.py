"""Drafting token by token from a model's logits: the rule every model drafter shares.

A draft model (draft-simple), an EAGLE-3 head and an MTP layer differ in how they get the next
row of logits; what they do with it is the same, llama.cpp's draft-simple rule: take the row's
best token, stop where its confidence (top probability among the 10 best logits at temperature
1) is below --spec-draft-p-min (that token is not added) or where the auto policy's gate says it
is not worth its cost, stop at the budget, and throw a draft shorter than --spec-draft-n-min
away. Probabilistic drafting samples the token from q, the user's sampler chain over the row,
and keeps q for rejection sampling.

Under a grammar (the generation's constraint) the draft proposes nothing the grammar forbids:
the drafter follows the grammar over the emitted output, walks a clone of it over its own
draft, and takes the row's best token the grammar allows (greedy; one question in the common
case that the best is allowed) or samples q over the allowed tokens only (probabilistic: the
target's p is masked the same way, so rejection sampling stays exact). A forbidden guess
would be rejected anyway; not proposing it saves its verify row and the draft steps after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from specgguf.core.constraint import Constraint, NoTokenAllowed, constrained_distribution
from specgguf.core.draft import Draft, Drafter, DraftGate, DraftTiming
from specgguf.core.sampling import (
    DRAFT,
    PositionRandom,
    SamplerParams,
    SparseDist,
    confidence_of,
    distribution,
    top_k_confidence,
)


@dataclass(frozen=True)
class DraftRules:
    """How a drafter over a model's logits drafts (--spec-draft-n-max/-n-min/-p-min and
    --spec-draft-sampling, the generation's sampler and seed): one object for every model
    drafter, built by the registry (BuildContext.draft_rules)."""

    sampler: SamplerParams
    n_max: int = 3
    p_min: float = 0.0
    n_min: int = 0
    #: sample from q and keep it for rejection sampling (never under greedy sampling)
    probabilistic: bool = False
    random: PositionRandom = field(default_factory=lambda: PositionRandom(0))
    #: the generation's grammar in its state before the first output token (a state of the
    #: rules' own: the drafter advances it over the output); None: no grammar
    grammar: Constraint | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "probabilistic", self.probabilistic and not self.sampler.greedy)


def draft_steps(
    first: np.ndarray,
    step: Callable[[int], np.ndarray],
    budget: int,
    gate: DraftGate | None,
    rules: DraftRules,
    *,
    pos_first: int,
    timing: DraftTiming,
    grammar: Constraint | None = None,
) -> Draft:
    """Up to `budget` tokens under `rules`, from `first` (the logits row of the first draft
    token) and `step(token)` (feeds the chosen token, returns the next row; timed into
    `timing`).

    `pos_first` is the sequence position the first token would take: a sampled draft token's
    uniform is keyed by its position, like the target's samples, so a seeded run draws the
    same whatever was drafted before. `grammar` (a state after the emitted output, walked
    over the draft here) masks every row: nothing it forbids is proposed.
    """
    sampler, p_min, n_min, random = rules.sampler, rules.p_min, rules.n_min, rules.random
    probabilistic = rules.probabilistic
    tokens: list[int] = []
    probs: list[SparseDist] = []
    row = first
    while True:
        q: SparseDist | None = None
        # One meaning of "confidence" in both modes (what --spec-draft-p-min and auto
        # compare): the draft's top probability among its 10 best logits at temperature 1,
        # as llama.cpp's draft sampler measures it, not the user's sampler chain's.
        if p_min > 0.0 or gate is not None:
            tok, confidence = top_k_confidence(row)
        else:  # no threshold to test: a plain argmax, 20x cheaper than a partition
            tok, confidence = int(np.argmax(row)), 1.0
        if grammar is not None:
            try:
                q, tok, confidence = _allowed_choice(
                    row, sampler, grammar, tok, confidence, probabilistic
                )
            except NoTokenAllowed:
                break
        elif probabilistic:
            q = distribution(row, sampler)
        if confidence < p_min:
            break  # llama.cpp: a low-confidence token is not added
        if gate is not None and not gate(len(tokens), confidence):
            break  # auto: a token at this confidence is not worth its cost here
        if q is not None:
            tok = q.sample_at(random.uniform(pos_first + len(tokens), DRAFT))
            probs.append(q)
        tokens.append(tok)
        if grammar is not None:
            grammar.accept(tok)
        if len(tokens) >= budget:
            break
        t0 = time.perf_counter()
        row = step(tok)
        timing.steps_ms += (time.perf_counter() - t0) * 1e3
        timing.steps += 1
    if len(tokens) < n_min:
        return Draft()
    timing.proposed = len(tokens)
    return Draft(tokens, probs if probabilistic else None)


#: the draft's argmax under a grammar (greedy drafting needs only the best allowed token)
_ARGMAX = SamplerParams(temp=0.0)


def _allowed_choice(
    row: np.ndarray,
    sampler: SamplerParams,
    grammar: Constraint,
    tok: int,
    confidence: float,
    probabilistic: bool,
) -> tuple[SparseDist | None, int, float]:
    """(q, the token, its confidence) with what `grammar` forbids removed from `row`:
    probabilistic, q is the sampler chain over the masked row (the token is drawn from it
    later); greedy, the row's own choice when the grammar allows it (one question), else the
    best token it allows, with that token's confidence on the same scale (confidence_of)."""
    if probabilistic:
        return constrained_distribution(row, sampler, grammar), tok, confidence
    if bool(grammar.allowed(np.array([tok], dtype=np.int64))[0]):
        return None, tok, confidence
    best = int(constrained_distribution(row, _ARGMAX, grammar).ids[0])
    return None, best, confidence_of(row, best)


class ModelDrafter(Drafter):
    """What every drafter over a model's logits shares (draft-simple, draft-eagle3,
    draft-mtp): it drafts token by token under `rules`, at most --spec-draft-n-max, asks
    auto's gate before each token, and times each proposal for auto's cost model."""

    asks_per_token = True  # auto asks before each further token (a DraftGate)

    def __init__(self, rules: DraftRules) -> None:
        self.rules = rules
        self.max_draft = rules.n_max  # --spec-draft-n-max
        self.timing: DraftTiming | None = None  # of the last propose that decoded anything
        #: every token of the sequence, prompted or emitted, in order
        self.history: list[int] = []
        #: under a grammar: its state after history[:self._grammar_at] (the output so far),
        #: and where the output starts in history (set by `begin`)
        self._grammar = rules.grammar
        self._grammar_at = 0

    def output_starts(self) -> None:
        """Called by `begin` once `history` holds the prompt: the grammar reads what follows."""
        self._grammar_at = len(self.history)

    def _grammar_now(self) -> Constraint | None:
        """A clone of the grammar's state after everything emitted, for one draft to walk."""
        g = self._grammar
        if g is None:
            return None
        for t in self.history[self._grammar_at :]:
            g.accept(t)  # emitted tokens: the target's, which the grammar allowed
        self._grammar_at = len(self.history)
        return g.clone()

    def draft(
        self,
        first: np.ndarray,
        step: Callable[[int], np.ndarray],
        budget: int,
        gate: DraftGate | None,
        timing: DraftTiming,
    ) -> Draft:
        """draft_steps under this drafter's rules, from the position after its history;
        `timing` (this proposal's, already holding its first decode) becomes `self.timing`."""
        self.timing = timing
        return draft_steps(
            first,
            step,
            budget,
            gate,
            self.rules,
            pos_first=len(self.history),
            timing=timing,
            grammar=self._grammar_now(),
        )

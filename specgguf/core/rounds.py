"""What a generation is asked to do, what one round did, and what may limit a round's draft.

Kept apart from the loop so that statistics, traces and auto can read rounds without importing
the loop (and the loop can report to statistics without a cycle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from specgguf.core.draft import DraftGate
from specgguf.core.sampling import SamplerParams
from specgguf.core.token_probs import ProbsRequest, TokenProbs
from specgguf.core.tree import children, depth_of


@dataclass(frozen=True)
class GenerationConfig:
    n_predict: int = -1  # -1: until EOS or the context is full (llama.cpp's default)
    n_max: int = 3  # --spec-draft-n-max
    sampler: SamplerParams = field(default_factory=SamplerParams)
    ignore_eos: bool = False
    #: each emitted token's probabilities to report (logprobs, n_probs); None: none, and no
    #: work per token for them
    probs: ProbsRequest | None = None


@dataclass
class Round:
    """What one round did; the stats, the --trace file and the colouring all read it."""

    drafter: str | None  # None: no drafter proposed anything, a plain step
    proposed: list[int]
    n_accepted: int
    emitted: list[int]  # accepted proposals + the target's token, cut before an EOS
    draft_ms: float
    verify_ms: float
    target_probs: list[float] | None = None  # p(proposal) per position, only when traced
    # a cross-vocabulary draft's translation this round (draft tokens, their text, the target
    # tokens, translate_ms): specgguf.drafters.cross_vocab
    translation: dict | None = None
    eos: bool = False  # an end-of-generation token ended the text in this round
    #: the target's rollback after a rejection: ~0 where its memory drops positions itself, a
    #: restore and a re-decode of the accepted tokens on a recurrent or hybrid model
    #: (specgguf.binding.checkpoints); auto prices rejections with it
    rollback_ms: float = 0.0
    #: the first round: its token was sampled from the prompt's pass (no pass of its own,
    #: nothing drafted), so it is no sample of what a step costs
    from_prompt: bool = False
    #: of verify_ms, the time the grammar's questions took (which tokens of a row it allows,
    #: its state after each accepted proposal); 0 without a grammar
    grammar_ms: float = 0.0
    #: a tree round: the parent of each proposal (specgguf.core.draft.Draft.parents), and the
    #: accepted nodes (one branch, root down); None / (): a chain, whose accepted nodes are
    #: its first n_accepted proposals
    parents: list[int] | None = None
    path: tuple[int, ...] = ()
    #: with GenerationConfig.probs: one entry per emitted token (cut where `emitted` is), read
    #: from the row of the pass that decided it (specgguf.core.token_probs); else None
    probs: list[TokenProbs] | None = None
    #: what the budget policy decided before this round, where it says (AdaptivePolicy's
    #: `last_decision`: the k it allowed and why), for --trace; None without one
    decision: dict[str, Any] | None = None

    @property
    def depth(self) -> int:
        """Positions drafted: a chain's length, a tree's deepest branch."""
        return depth_of(self.parents, len(self.proposed))

    @property
    def off_chain(self) -> bool:
        """A tree round that kept some node other than its parent's first child: a branch
        off the drafter's own best chain, which a chain of that alone would have lost."""
        if not self.parents or not self.path:
            return False
        first = {c[0] for c in children(self.parents).values()}
        return any(node not in first for node in self.path)


class BudgetPolicy(Protocol):
    """Decides how much to draft each round (specgguf.auto.policy.AdaptivePolicy): it may lower
    the round's limit and each drafter's, never raise them, and learns from every finished
    round. It never changes what is accepted, so the output stays the target's."""

    def budget(self, limit: int) -> int:
        """The most tokens any drafter may propose this round (0: a plain step)."""
        ...

    def allowance(self, name: str) -> int:
        """The most tokens drafter `name` may propose this round (after `budget`)."""
        ...

    def trim(self, name: str, n: int) -> int:
        """How many of the n tokens drafter `name` proposed to verify (0: none)."""
        ...

    def gate(self, name: str) -> DraftGate | None:
        """What a drafter that `asks_per_token` should ask before each further token this
        round (None: nothing, it drafts up to its allowance)."""
        ...

    def allows_tree(self, name: str) -> bool:
        """Whether drafter `name`, whose shape branches, may propose a tree this round
        (False: its chain)."""
        ...

    def observe(self, rnd: Round) -> None: ...

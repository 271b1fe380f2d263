"""The contract every draft source honours, so the speculative loop can treat them alike.

A drafter sees the same token sequence as the target: the prompt once (`begin`), then every
token the loop emits (`observe`, accepted drafts and the target's own token). It never sees
rejected proposals. Its only job is to guess; correctness is the verifier's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specgguf.core.sampling import SparseDist


@dataclass
class Draft:
    """Proposed tokens and, for stochastic drafters, the distribution each was drawn from.

    `probs[i]` is q(. | prefix + tokens[:i]) after the SAME sampler chain as the target's p;
    `probs is None` means a deterministic proposal (q is one-hot on the token), which is what
    every n-gram lookup and a greedy draft model produce.
    """

    tokens: list[int] = field(default_factory=list)
    probs: list[SparseDist] | None = None

    def __len__(self) -> int:
        return len(self.tokens)


#: asked by a drafter before each further draft token: (position in this draft, the draft's
#: confidence in the token) -> is it still worth proposing? (the `auto` policy's question)
DraftGate = Callable[[int, float], bool]


class Drafter(ABC):
    """Base class of all draft sources. Subclasses keep whatever index they need incrementally:
    `observe` must cost O(len(tokens)), never O(len(history))."""

    #: the --spec-type name, e.g. "ngram-simple" or "draft-simple" (set from the type's row of
    #: specgguf.drafters.registry when it builds the drafter)
    name: str = ""
    #: the longest draft this source makes on its own (llama.cpp: --spec-draft-n-max for model
    #: drafters, size_m / n_max for the n-gram types); the loop never asks for more
    max_draft: int = 8
    #: proposing costs next to nothing (a table lookup), so a cost model may ask for drafts it
    #: will not send to the target, just to keep measuring this source's acceptance for free
    #: (set from the row's `free` when the registry builds the drafter)
    free: bool = False
    #: proposes token by token and can ask a DraftGate before each one (a draft model); the
    #: loop then passes one to `propose`
    asks_per_token: bool = False

    @abstractmethod
    def begin(self, prompt: Sequence[int]) -> None:
        """Start a new sequence whose first tokens are `prompt` (forget any previous one)."""

    @abstractmethod
    def observe(self, tokens: Sequence[int]) -> None:
        """Append tokens the loop emitted (in order) to the sequence."""

    @abstractmethod
    def propose(self, budget: int, gate: DraftGate | None = None) -> Draft:
        """Guess up to `budget` tokens that continue the sequence; an empty Draft means no guess.
        A drafter that `asks_per_token` stops where `gate` says a token is not worth it."""

    def peek(self, budget: int) -> Draft:
        """What `propose` would return now, without changing any state (a shadow draft: the
        policy measures a free drafter's acceptance on rounds it sits out). Drafters whose
        proposals cost real work (a model) peek nothing."""
        return Draft()

    def feedback(self, n_drafted: int, n_accepted: int) -> None:  # noqa: B027 - optional hook
        """Told after verification how many of this drafter's `n_drafted` tokens were accepted."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources and persist state (e.g. a dynamic n-gram cache file)."""

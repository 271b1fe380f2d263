"""The contract every draft source honours, so the speculative loop can treat them alike.

A drafter sees the same token sequence as the target: the prompt once (`begin`), then every
token the loop emits (`observe`, accepted drafts and the target's own token). It never sees
rejected proposals. Its only job is to guess; correctness is the verifier's.

A drafter that reads the target's hidden states (an EAGLE-3 head, an MTP layer) names the
layers it `hears`; the loop then has the target capture them and hands the drafter every target
pass (`hear`: each prompt chunk, each verify pass, rejected rows included), before the
`observe` after which the target holds every position but the last token's, as always. What
a drafter tells the loop and the cost model besides its drafts (`timing`, `translation`) is
declared here too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specgguf.core.sampling import SparseDist
from specgguf.core.tree import CHAIN, TreeShape, branches, depth_of


@dataclass
class Draft:
    """Proposed tokens and, for stochastic drafters, the distribution each was drawn from: a
    chain, or a tree of guesses (`parents`).

    A chain: `probs[i]` is q(. | prefix + tokens[:i]) after the SAME sampler chain as the
    target's p; `probs is None` means a deterministic proposal (q is one-hot on the token),
    which is what every n-gram lookup and a greedy draft model produce.

    A tree (specgguf.core.tree): `parents[i]` is the node that token i follows (-1: the
    round's last emitted token, the root), always an earlier node, so that nodes come in an
    order a pass can evaluate; siblings are distinct tokens, in the order they were drawn.
    `probs[i]` is then the distribution node i's parent drew its children from, without
    replacement (one object shared by siblings). `parents is None`: a chain.
    """

    tokens: list[int] = field(default_factory=list)
    probs: list[SparseDist] | None = None
    parents: list[int] | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def depth(self) -> int:
        """Positions drafted: a chain's length, a tree's deepest branch."""
        return depth_of(self.parents, len(self.tokens))

    @property
    def is_tree(self) -> bool:
        """Some node has a sibling (a tree that is a chain is verified as one)."""
        return branches(self.parents)


@dataclass(frozen=True)
class TargetPass:
    """The rows of one target pass, as the target computed them: a prompt chunk, or a verify
    pass `[id_last, *draft]` (in several passes if it is longer than the batch), rows of
    rejected proposals included. After the `observe` that follows a verify, the target holds
    the positions of every token of the sequence but the last one, as between all rounds: the
    rows past that were rejected."""

    tokens: Sequence[int]
    #: the position of tokens[0]
    pos0: int
    #: layer id -> (len(tokens), n_embd) float32 rows: a VIEW of the backend's buffer, valid
    #: only during `hear` (a drafter copies what it keeps)
    hidden: Mapping[int, np.ndarray]
    #: a pass of the prompt: every row is the sequence's own and no verdict follows, though
    #: the last one may be the prompt's last token (whose row predicted the first one emitted)
    prompt: bool = False


#: what the loop passes to a context's decode so that the drafters hear each pass
Hear = Callable[[TargetPass], None]


@dataclass
class DraftTiming:
    """Where a model drafter's last `propose` spent its time, so a cost model can tell a draft
    step from a catch-up batch (after rounds without drafting the draft must first read
    everything it missed, which says nothing about what one more draft token costs)."""

    catch_up_ms: float = 0.0
    catch_up_tokens: int = 0  # tokens decoded by the first (catch-up) batch
    steps_ms: float = 0.0  # single-token decodes of proposals
    steps: int = 0
    proposed: int = 0  # tokens returned (0: stopped before the first, or under n_min)


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
    #: the target layers whose hidden states this drafter reads: an id below the target's
    #: layer count is the INPUT of that layer, the layer count itself is the state the
    #: architecture hands its NextN (MTP) layers (the last layer's output, before or after
    #: the output norm as the architecture defines it). Empty (every token-only drafter): it
    #: hears nothing and the target captures nothing for it.
    hears: tuple[int, ...] = ()
    #: where the last `propose` that decoded anything spent its time (model drafters; read
    #: by the auto policy's cost model); None: nothing measured
    timing: DraftTiming | None = None
    #: a drafter across vocabularies: how its last draft was translated, for --trace (the
    #: loop reads it once per round); None: no translation
    translation: dict[str, Any] | None = None
    #: how wide a tree this drafter may propose (--spec-tree-topk, --spec-tree-nodes,
    #: --spec-draft-p-split; set by the registry); CHAIN: chains only
    tree: TreeShape = CHAIN
    #: the most leaves the loop's target verifies in one pass (set by the loop: 1 where it
    #: verifies chains only); a drafter proposes a tree only within both
    tree_leaves: int = 1

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

    @property
    def behind(self) -> int:
        """Tokens of the sequence this drafter must read before it can draft (a draft model
        that was skipped, or that has not read the prompt yet): what starting to draft costs
        on top of the draft steps. 0 for a drafter that reads every token as it comes."""
        return 0

    def hear(self, target_pass: TargetPass) -> None:  # noqa: B027 - optional hook
        """One target pass's rows, for a drafter that `hears` layers (called for every prefill
        chunk and verify pass, in order)."""

    def resume(self, kept: int) -> int:
        """The target kept `kept` prompt positions from an earlier sequence (prefix reuse):
        the position from which this drafter must hear the target again (<= kept). A drafter
        that hears keeps state per position; it says how much of it is still good."""
        return kept

    def peek(self, budget: int) -> Draft:
        """What `propose` would return now, without changing any state (a shadow draft: the
        policy measures a free drafter's acceptance on rounds it sits out). Drafters whose
        proposals cost real work (a model) peek nothing."""
        return Draft()

    def feedback(self, n_drafted: int, n_accepted: int) -> None:  # noqa: B027 - optional hook
        """Told after verification how many of this drafter's `n_drafted` tokens were accepted."""

    def forget(self) -> None:  # noqa: B027 - optional hook
        """Forget what was learned from earlier sequences (suffix's corpus of earlier
        outputs): the next sequence drafts as in a new process. bench asks this after each
        run, so that a prompt measured again does not draft its own previous answer."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources and persist state (e.g. a dynamic n-gram cache file)."""

"""Each emitted token's probability and the most likely alternatives, read from the target's
row that decided it: what `logprobs`, `top_logprobs`, `n_probs` and `run --n-probs` report.

Under speculation a drafted token is decided by the verify pass's row at its position (the
same row the acceptance rule read), so its figures are the target's there, exactly what a
plain decoding step at that position reports, never the drafter's and never a placeholder.

Two scales, as llama-server gives them:
- before the sampler chain (the default): log softmax of the row's raw logits, over the
  whole vocabulary, at temperature 1, whatever the sampling settings;
- after it (`post_sampling`): the probabilities the chain left (the distribution the token
  was drawn from: bias, penalties, truncation, temperature, a grammar), with only the tokens
  it kept (so fewer than n may be listed; a greedy chain keeps one token at 1.0).

Pure numpy, and only run when a caller asked for it: the loop does nothing per token
otherwise. The top n are found by partition on the row (specgguf.core.sampling.sorted_top_k),
never a full sort of the vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specgguf.core.sampling import SparseDist, sorted_top_k


@dataclass(frozen=True)
class TokenProbs:
    """One emitted token: its id, its value (a natural-log probability, or a probability
    when read after the chain) and the n most likely tokens of its row with theirs, most
    likely first."""

    token: int
    value: float
    top: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class ProbsRequest:
    """What a generation asked to have reported per token: the `n` most likely tokens of
    each row (0: the chosen token's value alone) and on which scale."""

    n: int = 0
    post_sampling: bool = False
    #: the widest verify pass (rows) whose rows equal a 1-token pass's on this target, which
    #: the loop then keeps to, so each figure is what plain decoding would report; None: no
    #: cap (set by whoever builds the decoder: specgguf.binding.exact_rows measures it)
    max_rows: int | None = None

    def read(self, logits: np.ndarray, dist: Callable[[], SparseDist], token: int) -> TokenProbs:
        """The figures of `token` drawn at the row `logits` (a view that is only read);
        `dist()` is the chain's distribution of that row (asked only after the chain)."""
        if self.post_sampling:
            return after_chain(dist(), token, self.n)
        return before_chain(logits, token, self.n)


def before_chain(logits: np.ndarray, token: int, n: int) -> TokenProbs:
    """Log softmax of the raw row at temperature 1: `token`'s and the n largest."""
    m = float(logits.max())
    log_z = m + float(np.log(np.exp(logits - m, dtype=np.float64).sum()))
    top: tuple[tuple[int, float], ...] = ()
    if n > 0:
        ids, vals = sorted_top_k(logits, min(n, logits.shape[0]))
        top = tuple((int(i), float(v) - log_z) for i, v in zip(ids, vals, strict=True))
    return TokenProbs(token, float(logits[token]) - log_z, top)


def after_chain(dist: SparseDist, token: int, n: int) -> TokenProbs:
    """The chain's distribution: `token`'s probability and the n most likely survivors
    (ties in the chain's own order)."""
    top: tuple[tuple[int, float], ...] = ()
    if n > 0:
        order = np.argsort(-dist.probs, kind="stable")[:n]
        top = tuple(
            (int(dist.ids[i]), float(dist.probs[i])) for i in order if dist.probs[i] > 0.0
        )
    return TokenProbs(token, dist.prob(token), top)

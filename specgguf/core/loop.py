"""The speculative decoding loop: draft, verify, accept, roll back.

Invariant between rounds: the target's KV cache holds every token of the sequence except the
last one (`id_last`). A round feeds [id_last] + K proposals to the target in ONE decode with
logits for those K+1 positions, accepts a prefix of the proposals (specgguf.core.acceptance), emits
that prefix plus one token of the target's own, and rolls the KV cache back to the accepted
prefix. K = 0 is a plain decoding step through the very same path, which is how
`--spec-type none` gives an honest baseline.

The first token comes from the prompt's own pass (as llama-server's does): the pass that reads
the prompt's last token also predicts the one after it, so the first round (`from_prompt`) is
judged on that pass's last row, with no pass and no draft of its own, and leaves the invariant
as every round does. Drafting starts with the second token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import numpy as np

from specgguf.core import tree
from specgguf.core.acceptance import verify_tree
from specgguf.core.chain_state import ChainState
from specgguf.core.constraint import Constraint, RoundStates
from specgguf.core.context import KVContext, Outputs
from specgguf.core.draft import Draft, Drafter, TargetPass
from specgguf.core.rounds import BudgetPolicy, GenerationConfig, Round
from specgguf.core.sampling import PositionRandom, SparseDist, distribution
from specgguf.core.stats import RunStats


def _cut(draft: Draft, n: int) -> Draft:
    """`draft` at most n positions deep: a chain's first n proposals, a tree's nodes at
    depth n or less (with their distributions, if any)."""
    if draft.parents is None:
        if len(draft.tokens) <= n:
            return draft
        return Draft(draft.tokens[:n], draft.probs[:n] if draft.probs is not None else None)
    depth = tree.depths(draft.parents)
    keep = [i for i, d in enumerate(depth) if d <= n]
    if len(keep) == len(depth):
        return draft
    index = {old: new for new, old in enumerate(keep)}
    probs = [draft.probs[i] for i in keep] if draft.probs is not None else None
    parents = [index.get(draft.parents[i], tree.ROOT) for i in keep]
    return Draft([draft.tokens[i] for i in keep], probs, parents)


def _first_chain(draft: Draft) -> Draft:
    """A tree's best chain alone (each node's first child, from the root)."""
    keep = tree.first_chain(draft.parents)
    probs = [draft.probs[i] for i in keep] if draft.probs is not None else None
    return Draft([draft.tokens[i] for i in keep], probs)


class SpeculativeDecoder:
    """Generates from `target`, proposing with `drafters` (already in priority order)."""

    def __init__(
        self,
        target: KVContext,
        drafters: Sequence[Drafter],
        config: GenerationConfig,
        random: PositionRandom,
        *,
        is_eog: Callable[[int], bool],
        trace_probs: bool = False,
        budget_policy: BudgetPolicy | None = None,
        reuse_prefix: bool = True,
        constraint: Constraint | None = None,
    ) -> None:
        self.target = target
        #: what the output must match (a grammar), in the state after every emitted token;
        #: None: unconstrained (specgguf.core.constraint)
        self.constraint = constraint
        self.reuse_prefix = reuse_prefix
        self.drafters = list(drafters)
        self.config = config
        self.random = random  # uniforms keyed by sequence position: see PositionRandom
        self.is_eog = is_eog
        self.trace_probs = trace_probs
        self.policy = budget_policy
        self.stats = RunStats(n_max=config.n_max)
        self.stop_reason = ""
        #: the drafters that read the target's hidden states, and the layers they read: the
        #: target captures those on every pass and each pass is handed to them (`_hear`)
        self.listeners = [d for d in self.drafters if d.hears]
        layers = sorted({layer for d in self.listeners for layer in d.hears})
        if layers:
            target.capture(layers)
        self._hear = self._tell_listeners if self.listeners else None
        #: the most leaves of a tree draft the target verifies in one pass (1: chains only).
        #: Chains where a tree cannot be verified exactly as cheaply: a target context
        #: without tree passes (a recurrent or hybrid memory), drafters that hear the
        #: target's rows (they read a chain's), a grammar (its states follow one chain of
        #: proposals).
        width = getattr(target, "tree_width", 1)
        if self.listeners or constraint is not None:
            width = 1
        self.tree_width = width
        for d in self.drafters:
            d.tree_leaves = width

    def _tell_listeners(self, target_pass: TargetPass) -> None:
        for d in self.listeners:
            d.hear(target_pass)

    def _tell_listeners_prompt(self, target_pass: TargetPass) -> None:
        self._tell_listeners(replace(target_pass, prompt=True))

    def _decode(
        self, tokens: Sequence[int], pos0: int, outputs: Outputs, *, prompt: bool = False
    ) -> np.ndarray | None:
        """A target pass, heard by the drafters that read hidden states (a context is only
        asked to capture when one does: a token-only context need not know the word); they
        are told a pass of the prompt (every row the sequence's own) from a verify pass."""
        if self._hear is None:
            return self.target.decode(tokens, pos0, outputs=outputs)
        hear = self._tell_listeners_prompt if prompt else self._hear
        return self.target.decode(tokens, pos0, outputs=outputs, hear=hear)

    # -- setup ----------------------------------------------------------------------------

    def prefill(self, prompt: Sequence[int]) -> np.ndarray:
        """Evaluate the prompt on the target and let each drafter index it; returns the logits
        of its last row (what the first token is sampled from). Its time is the "encoded" line
        of the report.

        With `reuse_prefix` (the default) the part of the prompt the target's KV cache already
        holds from an earlier sequence is kept, not evaluated again (llama-server's
        cache_prompt); `stats.cache_n` counts those tokens and `prompt_n` the evaluated rest.
        A drafter that hears the target may need some of the kept positions heard again
        (`Drafter.resume`): those are evaluated again too. The last token is always evaluated
        (its row's logits are the answer), however much is cached.
        """
        if not prompt:
            raise ValueError("empty prompt")
        t0 = time.perf_counter()
        for d in self.drafters:  # first: a hearing drafter hears the prefill's passes
            d.begin(prompt)
        tokens = list(prompt)
        keep = self.target.keep_prefix(tokens[:-1] if self.reuse_prefix else [])
        keep = min([keep, *(d.resume(keep) for d in self.listeners)])
        self.target.truncate(keep)
        logits = self._decode(tokens[keep:], keep, "last", prompt=True)
        assert logits is not None
        # (--cache-reuse may have evaluated holes among the kept positions: not cached)
        refilled = getattr(self.target, "refilled", 0)
        self.stats.cache_n = keep - refilled
        self.stats.prompt_n = len(prompt) - keep + refilled
        self.stats.prompt_ms = (time.perf_counter() - t0) * 1e3
        self._last = prompt[-1]
        # the sampler chain's memory (penalties' window, mirostat's mu) starts with the prompt
        self.chain = ChainState(self.config.sampler, prompt, self.random)
        return logits[-1]

    # -- one round --------------------------------------------------------------------------

    def _draft(self, limit: int) -> tuple[Drafter | None, Draft]:
        """Ask the drafters in priority order; the first non-empty draft wins (llama.cpp).

        `limit` is what the context, -n and the budget policy allow this round; each drafter
        is further capped by its own maximum (--spec-draft-n-max for the draft model, size_m
        / n_max for the n-gram types), as each llama.cpp implementation is.
        """
        if limit <= 0:
            return None, Draft()
        policy = self.policy
        for d in self.drafters:
            budget = min(limit, d.max_draft)
            if policy is not None:
                budget = min(budget, policy.allowance(d.name))
            if budget <= 0:
                continue
            gate = policy.gate(d.name) if policy is not None and d.asks_per_token else None
            if d.tree.branches:  # a tree this round, where the policy lets it
                allowed = policy is None or policy.allows_tree(d.name)
                d.tree_leaves = self.tree_width if allowed else 1
            draft = d.propose(budget, gate) if gate is not None else d.propose(budget)
            draft = _cut(draft, budget)  # never trust a drafter with the budget
            if draft.is_tree and len(tree.leaves(draft.parents)) > self.tree_width:
                draft = _first_chain(draft)  # ...nor with the target's width
            if draft.tokens and policy is not None:
                # a free drafter proposes all it has; the policy keeps the part that pays
                draft = _cut(draft, policy.trim(d.name, draft.depth))
            if draft.tokens:
                return d, draft
        return None, Draft()

    def step(self, remaining: int) -> Round:
        """One draft-verify-accept-rollback round emitting 1..remaining tokens."""
        n_past = self.target.n_past
        room = self.target.n_ctx - n_past - 1  # cells left after id_last
        limit = min(remaining - 1, room)
        probs = self.config.probs
        if probs is not None and probs.max_rows is not None:
            # figures to report: passes no wider than those whose rows a plain step computes
            limit = min(limit, probs.max_rows - 1)
        decision = None
        if self.policy is not None:
            limit = self.policy.budget(limit)
            decision = getattr(self.policy, "last_decision", None)

        t0 = time.perf_counter()
        drafter, draft = self._draft(limit)
        t1 = time.perf_counter()
        translation = next((x for d in self.drafters if (x := d.translation)), None)

        if draft.is_tree:
            logits = self.target.decode_tree(self._last, draft.tokens, draft.parents, n_past)
        else:
            draft.parents = None  # a "tree" of one branch is a chain, verified as one
            logits = self._decode([self._last, *draft.tokens], n_past, "all")
        assert logits is not None
        rnd = self._judge(logits, n_past, drafter, draft, t0, t1, translation)
        rnd.decision = decision
        return rnd

    def _prompt_round(self, logits: np.ndarray) -> Round:
        """The first round: its token sampled from the prompt pass's last row (`prefill`'s
        logits), under the same rule and the same position's random numbers as any round's
        own token. No draft, no pass: the policy is told nothing of it."""
        t0 = time.perf_counter()
        n_past = self.target.n_past - 1  # the prompt's last token, id_last of this round
        return self._judge(logits[None, :], n_past, None, Draft(), t0, t0, None, from_prompt=True)

    def _judge(
        self,
        logits: np.ndarray,
        n_past: int,
        drafter: Drafter | None,
        draft: Draft,
        t0: float,
        t1: float,
        translation: dict | None,
        *,
        from_prompt: bool = False,
    ) -> Round:
        """Verify `draft` on the rows `logits` (id_last's at position n_past, then one per
        proposal), emit, roll back and tell everyone: the second half of a round."""
        sampler = self.config.sampler
        cache: dict[int, SparseDist] = {}
        # under a constraint, row i is masked with the grammar's state after proposals[:i]
        states = RoundStates(self.constraint, draft.tokens) if self.constraint is not None else None

        grammar_s = 0.0  # what asking the grammar cost this round (Round.grammar_ms)
        parents = draft.parents
        # rows: the root's, then one per node; uniforms keyed by depth (a chain: its index)
        shape = parents if parents is not None else tree.chain_parents(len(draft.tokens))
        # each row sampled with the chain's state after its own prefix, drafts included
        rows = self.chain.round(draft.tokens, shape, n_past + 1)

        def p_at(i: int) -> SparseDist:
            nonlocal grammar_s
            d = cache.get(i)
            if d is None:
                if states is None:
                    d = cache[i] = distribution(logits[i], sampler, rows.state(i, p_at))
                else:
                    g0 = time.perf_counter()
                    d = cache[i] = states.distribution(i, logits[i], sampler, rows.state(i, p_at))
                    grammar_s += time.perf_counter() - g0
            return d

        def uniform(i: int, purpose: int) -> float:
            return self.random.uniform(n_past + 1 + i, purpose)  # i: position in this round

        verdict = verify_tree(draft.tokens, shape, draft.probs, p_at, uniform)
        target_probs = (
            [p_at(shape[i] + 1).prob(x) for i, x in enumerate(draft.tokens)]
            if self.trace_probs
            else None
        )
        # asked-for probabilities, read while the rows are the pass's: emitted token j was
        # decided at row 0 (the root) or below the j-th accepted node
        probs = None
        if self.config.probs is not None:
            rows_of = (0, *(i + 1 for i in verdict.path))
            tokens_out = (*(draft.tokens[i] for i in verdict.path), verdict.token)
            probs = [
                self.config.probs.read(logits[r], lambda r=r: p_at(r), t)
                for r, t in zip(rows_of, tokens_out, strict=True)
            ]
        t2 = time.perf_counter()

        n_acc = verdict.n_accepted
        self.chain.advance(rows, verdict.path, verdict.token, p_at)
        emitted = [*(draft.tokens[i] for i in verdict.path), verdict.token]
        if states is not None:  # the grammar advances over what is emitted, nothing else
            g0 = time.perf_counter()
            self.constraint = states.advance(n_acc, verdict.token)
            grammar_s += time.perf_counter() - g0
        # Roll back: keep id_last and the accepted proposals; the new token is not in KV yet.
        # (Timed apart from the verify pass: on a recurrent target this is a checkpoint
        # restore plus a re-decode, a cost only rejections pay. A tree keeps its accepted
        # branch and drops the others.)
        if parents is None:
            self.target.truncate(n_past + 1 + n_acc)
        else:
            self.target.keep_path(verdict.path)
        t3 = time.perf_counter()
        for d in self.drafters:
            d.observe(emitted)
        if drafter is not None:
            drafter.feedback(len(draft.tokens), n_acc)
        self._last = emitted[-1]

        # EOS ends the text, it is not part of it; everyone downstream (the policy too) sees
        # the round as the user does
        eos_at = (
            None
            if self.config.ignore_eos
            else next((i for i, t in enumerate(emitted) if self.is_eog(t)), None)
        )
        rnd = Round(
            drafter=drafter.name if drafter else None,
            proposed=list(draft.tokens),
            n_accepted=n_acc,
            emitted=emitted if eos_at is None else emitted[:eos_at],
            draft_ms=(t1 - t0) * 1e3,
            verify_ms=(t2 - t1) * 1e3,
            rollback_ms=(t3 - t2) * 1e3,
            grammar_ms=grammar_s * 1e3,
            target_probs=target_probs,
            translation=translation,
            eos=eos_at is not None,
            from_prompt=from_prompt,
            parents=parents,
            path=verdict.path if parents is not None else (),
            probs=probs if probs is None or eos_at is None else probs[:eos_at],
        )
        if self.policy is not None and not from_prompt:
            self.policy.observe(rnd)
        return rnd

    # -- the whole generation ---------------------------------------------------------------

    def generate(self, prompt: Sequence[int]) -> Iterator[Round]:
        """Yield rounds until EOS, -n or the end of the context; `stop_reason` tells which.

        Emitted tokens are yielded as soon as a round is accepted, so a caller that streams
        them loses nothing if the generator is abandoned (Ctrl-C, closed pipe).
        """
        first = self.prefill(prompt)
        limit = self.config.n_predict
        produced = 0
        t_start = time.perf_counter()
        try:
            while True:
                remaining = limit - produced if limit >= 0 else 1 << 30
                if remaining <= 0:
                    self.stop_reason = "limit"
                    return
                if first is not None:  # its token needs no cell: the prompt's pass made it
                    rnd, first = self._prompt_round(first), None
                elif self.target.n_past + 1 > self.target.n_ctx:
                    self.stop_reason = "context"
                    return
                else:
                    rnd = self.step(remaining)
                produced += len(rnd.emitted)
                self.stats.add_round(rnd)
                self.stats.predicted_ms = (time.perf_counter() - t_start) * 1e3
                yield rnd
                if rnd.eos:
                    self.stop_reason = "eos"
                    return
        finally:
            self.stats.predicted_ms = (time.perf_counter() - t_start) * 1e3

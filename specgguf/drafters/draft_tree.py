"""Growing a draft tree from a model's logits, a level per pass: llama.cpp's --draft-p-split
rule and SGLang's EAGLE top-k, in one rule.

At each depth every node of the frontier (the branches still growing) offers candidates from
its row: its best token, as a chain drafts it, and up to topk - 1 more that the draft gives
at least p-split (on top_k_confidence's scale: probability among the 10 best logits at
temperature 1). All candidates of the level are ranked by the product of the confidences
along their path (the draft's own estimate that the target takes the whole branch) and the
best topk are kept, within the node and leaf caps; the drafter's own best chain always stays
(a tree is never worse than the chain it grew from). Each kept node is decoded in ONE pass of
the draft model with the level's other nodes, each in a sequence of its own (`Branches`), so
a tree of depth d costs d draft passes, each wider than a chain's step.

Probabilistic drafting draws a node's children from q, the user's sampler chain over its row,
without replacement: the first as a chain draws it, each further one (while fewer than topk
and what q has left is at least p-split) from what is left of q. Which children are drawn is
decided before each draw, never after seeing it, so the siblings are the sample that
specgguf.core.acceptance.verify_tree's recursive rejection sampling expects.

The tree goes out depth first (tree.preorder), its first chain the drafter's best chain.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from specgguf.core import tree
from specgguf.core.draft import Draft, DraftGate, DraftTiming
from specgguf.core.sampling import (
    DRAFT,
    SparseDist,
    confidence_of,
    distribution,
    sibling,
    top_k_confidences,
)
from specgguf.core.tree import TreeShape
from specgguf.drafters.draft_steps import DraftRules


class Branches(Protocol):
    """A draft context's sequences beside its own (sequence 0, the drafter's chain), as
    specgguf.binding.engine.Context offers them."""

    n_seq: int

    def decode_beside(self, tokens: list[int], pos: list[int], seq: list[int]) -> np.ndarray:
        """One pass: row j is tokens[j] at pos[j] of sequence seq[j]; a row of logits each."""
        ...

    def fork(self, src: int, dst: int) -> None: ...

    def seq_rm(self, seq: int, p0: int) -> None: ...


@dataclass
class _Node:
    token: int
    parent: int  # a node index, or tree.ROOT
    score: float  # the product of the confidences from the root down to this node
    q: SparseDist | None = None  # probabilistic: the distribution its parent drew it from


def _candidates(
    row: np.ndarray, shape: TreeShape, rules: DraftRules, pos: int, limit: int
) -> list[tuple[int, float, SparseDist | None]]:
    """(token, confidence, q) of at most `limit` children a node with logits `row` offers,
    best first (probabilistic: in draw order); [] where even its best is below p-min
    (llama.cpp: that branch stops)."""
    ids, conf = top_k_confidences(row)
    if conf[0] < rules.p_min:
        return []
    if not rules.probabilistic:
        out = [(int(ids[0]), float(conf[0]), None)]
        for t, c in zip(ids[1:limit], conf[1:limit], strict=True):
            if c >= shape.p_split:
                out.append((int(t), float(c), None))
        return out
    q = distribution(row, rules.sampler)
    out = []
    left: SparseDist | None = q
    mass = 1.0  # what the draws so far left of q
    for j in range(limit):
        if left is None or (j and mass < shape.p_split):
            break  # decided before the draw: the siblings stay a sample of q
        x = left.sample_at(rules.random.uniform(pos, sibling(DRAFT, j)))
        out.append((x, confidence_of(row, x), q))
        mass -= q.prob(x)
        keep = left.ids != x
        total = left.probs[keep].sum()
        left = SparseDist(left.ids[keep], left.probs[keep] / total) if total > 0 else None
    return out


#: a candidate child: (score, its parent's frontier rank, its rank among the parent's
#: candidates, token, confidence, q)
_Offer = tuple[float, int, int, int, float, "SparseDist | None"]


@dataclass
class _Level:
    """One depth's choice of children: the frontier (node, its logits row, its sequence),
    each node's score, the rules, the level's position and its room (`slots`: nodes it may
    add; `leaf_room`: leaves it may add)."""

    frontier: list[tuple[int, np.ndarray, int]]
    scores: dict[int, float]
    shape: TreeShape
    rules: DraftRules
    pos: int
    slots: int
    leaf_room: int

    def choose(self) -> tuple[list[_Offer], int]:
        """The children kept, by parent rank then draw order, and the leaves they add; []
        where the first chain stops (and so the tree)."""
        if self.slots <= 0:
            return [], 0
        return self._drawn() if self.rules.probabilistic else self._ranked()

    def _ranked(self) -> tuple[list[_Offer], int]:
        """One-hot children: every frontier node's candidates, the first chain's best first,
        then the best by score. Which are kept may depend on every candidate: one-hot
        verification only asks whether the target's own token is among a node's children."""
        frontier, topk = self.frontier, self.shape.topk
        offers: list[_Offer] = []
        for rank, (node, row, _seq) in enumerate(frontier):
            for j, (tok, conf, q) in enumerate(
                _candidates(row, self.shape, self.rules, self.pos, topk)
            ):
                offers.append((self.scores[node] * conf, rank, j, tok, conf, q))
        main = next((o for o in offers if o[1] == 0 and o[2] == 0), None)
        if main is None:
            return [], 0
        chosen = [main]
        fathers = {0}  # frontier ranks with a child chosen at this level
        grown = 1 if frontier[0][0] == tree.ROOT else 0
        for o in sorted((o for o in offers if o is not main), key=lambda o: -o[0]):
            if len(chosen) >= self.slots:
                break
            adds = 1 if frontier[o[1]][0] == tree.ROOT or o[1] in fathers else 0
            if grown + adds > self.leaf_room:
                continue  # one more leaf would need a sequence the target lacks
            chosen.append(o)
            fathers.add(o[1])
            grown += adds
        return sorted(chosen, key=lambda o: (o[1], o[2])), grown

    def _drawn(self) -> tuple[list[_Offer], int]:
        """Sampled children: the frontier nodes in rank order, each drawing as many children
        as the room left allows, decided before its draws, and keeping every one it draws.
        Recursive rejection sampling is exact only for siblings that are the sample the
        drafter drew: a child dropped after it was seen (for its score) would bias which
        ones the target meets."""
        chosen: list[_Offer] = []
        grown = 0
        for rank, (node, row, _seq) in enumerate(self.frontier):
            first_leaf = 1 if node == tree.ROOT else 0  # a node's first child adds no leaf
            room = 1 + self.leaf_room - grown - first_leaf
            limit = min(self.shape.topk, self.slots - len(chosen), room)
            if limit <= 0:
                break
            drawn = _candidates(row, self.shape, self.rules, self.pos, limit)
            if not drawn and rank == 0:
                return [], 0
            for j, (tok, conf, q) in enumerate(drawn):
                chosen.append((self.scores[node] * conf, rank, j, tok, conf, q))
            grown += first_leaf + max(0, len(drawn) - 1) if drawn else 0
        return chosen, grown


def draft_tree(
    first: np.ndarray,
    ctx: Branches,
    budget: int,
    gate: DraftGate | None,
    rules: DraftRules,
    shape: TreeShape,
    *,
    max_leaves: int,
    pos_first: int,
    timing: DraftTiming,
) -> tuple[Draft, list[int]]:
    """A tree at most `budget` deep from `first` (the row after the sequence's last token,
    which sequence 0 of `ctx` holds up to pos_first - 1), and the tokens of its first chain
    that sequence 0 now holds too (the caller's bookkeeping, as a chain's steps). The other
    sequences are dropped before returning. `gate` (auto's) is asked for the first chain's
    tokens, as a chain asks it."""
    if shape.topk > ctx.n_seq:  # as many branches at once as the context has sequences
        shape = replace(shape, topk=ctx.n_seq)
    nodes: list[_Node] = []
    frontier: list[tuple[int, np.ndarray, int]] = [(tree.ROOT, first, 0)]  # node, row, seq
    scores = {tree.ROOT: 1.0}
    leaves = 0
    cap = shape.node_cap(budget)
    own: list[int] = []  # sequence 0's decoded tokens (the first chain, but its last node)
    free = list(range(ctx.n_seq - 1, 0, -1))
    try:
        for depth in range(1, budget + 1):
            pos = pos_first + depth - 1  # where this level's nodes sit
            slots = min(shape.topk, cap - len(nodes))
            level_choice = _Level(frontier, scores, shape, rules, pos, slots, max_leaves - leaves)
            chosen, grown = level_choice.choose()
            main = chosen[0] if chosen and chosen[0][1] == 0 and chosen[0][2] == 0 else None
            if main is None or (gate is not None and not gate(depth - 1, main[4])):
                break  # the first chain ends here: so does the tree
            leaves += grown
            level: list[tuple[int, int]] = []  # (node index, its parent's sequence)
            for score, rank, _j, tok, _conf, q in chosen:
                scores[len(nodes)] = score
                nodes.append(_Node(tok, frontier[rank][0], score, q))
                level.append((len(nodes) - 1, frontier[rank][2]))
            if depth == budget or len(nodes) >= cap:
                break
            frontier = _grow(ctx, nodes, level, frontier, free, pos, own, timing)
    finally:
        for s in range(1, ctx.n_seq):
            ctx.seq_rm(s, 0)
    order = tree.preorder([n.parent for n in nodes])
    parents = tree.reorder([n.parent for n in nodes], order)
    tokens = [nodes[i].token for i in order]
    probs = [nodes[i].q for i in order] if rules.probabilistic else None
    timing.proposed = len(tokens)
    # a tree that stayed one chain goes out as a chain
    return Draft(tokens, probs, parents if tree.branches(parents) else None), own


def _grow(
    ctx: Branches,
    nodes: list[_Node],
    level: list[tuple[int, int]],
    frontier: list[tuple[int, np.ndarray, int]],
    free: list[int],
    pos: int,
    own: list[int],
    timing: DraftTiming,
) -> list[tuple[int, np.ndarray, int]]:
    """Decode the level's nodes (at `pos`) in one pass, each in its parent's sequence (the
    first child) or in a copy of it: the next frontier, with each node's row and sequence."""
    taken: set[int] = set()
    live = {seq for _, seq in level}
    for _node, _row, seq in frontier:  # branches that stopped give their sequence back
        if seq not in live and seq != 0:
            ctx.seq_rm(seq, 0)
            free.append(seq)
    seqs: list[int] = []
    for _node, parent_seq in level:
        if parent_seq not in taken:
            taken.add(parent_seq)
            seqs.append(parent_seq)
        else:
            s = free.pop()
            ctx.fork(parent_seq, s)
            seqs.append(s)
    tokens = [nodes[i].token for i, _ in level]
    t0 = time.perf_counter()
    rows = ctx.decode_beside(tokens, [pos] * len(tokens), seqs)
    timing.steps_ms += (time.perf_counter() - t0) * 1e3
    timing.steps += 1
    own.extend(t for t, s in zip(tokens, seqs, strict=True) if s == 0)
    return [(i, rows[j], seqs[j]) for j, (i, _) in enumerate(level)]

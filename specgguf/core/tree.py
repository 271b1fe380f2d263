"""Draft trees: their shape, and the arithmetic a tree round needs (pure, no backend).

A tree draft (specgguf.core.draft.Draft with `parents`) holds several guesses at once: where
the drafter is unsure at some position, two or more tokens are proposed there and each
continues as a branch of its own. The target evaluates every node in ONE pass, each node at
position n_past + its depth and seeing exactly its ancestors (specgguf.binding.engine's tree
decode), and the verifier (specgguf.core.acceptance.verify_tree) walks down from the root,
keeping one path. A chain loses the rest of a round at its first wrong guess; a tree goes on
along the sibling the target did pick.

Nodes are numbered in evaluation order: a node's parent comes before it (-1 is the root, the
round's last emitted token, row 0 of the pass; node i is row i + 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

ROOT = -1
#: the most children a node may have: a drafter weighs the 10 best tokens of a row (the
#: scale of its confidence, specgguf.core.sampling.top_k_confidences)
TOPK_MAX = 10
#: the most nodes one tree round verifies (each leaf is a sequence of the target's context)
NODES_MAX = 64


@dataclass(frozen=True)
class TreeShape:
    """How wide a drafter may make its tree (--spec-tree-topk, --spec-tree-nodes,
    --spec-draft-p-split; the depth is the round's draft length).

    `topk`: the most children a node may have, and the most branches drafted at each depth
    (SGLang's EAGLE `topk`; 1: a chain). `nodes`: the most nodes verified in the round's pass
    (SGLang's `num_draft_tokens` minus its root; 0: no cap besides depth x topk). `p_split`:
    a candidate other than a node's best becomes a sibling only where the draft gives it at
    least this probability (llama.cpp's --draft-p-split: branch where the draft is unsure)."""

    topk: int = 1
    nodes: int = 0
    p_split: float = 0.1

    @property
    def branches(self) -> bool:
        return self.topk > 1

    def node_cap(self, depth: int) -> int:
        """The most nodes a tree of `depth` levels may have under this shape."""
        full = depth * self.topk
        return min(full, self.nodes) if self.nodes > 0 else full


    def resolved(self, *, adaptive: bool) -> TreeShape:
        """The shape a generation drafts with: `topk` 0 (--spec-tree-topk not given) is
        AUTO_TREE's width under --spec-draft-n-max auto (auto then chooses, round by round,
        whether a tree pays: specgguf.auto.tree_choice) and a chain with a fixed n_max, as
        llama.cpp drafts."""
        if self.topk > 0:
            return self
        if not adaptive:
            return replace(CHAIN, p_split=self.p_split)
        return TreeShape(AUTO_TREE.topk, self.nodes or AUTO_TREE.nodes, self.p_split)


#: a chain's shape: what every drafter draws without --spec-tree-topk
CHAIN = TreeShape()
#: --spec-tree-topk not given (TreeShape.resolved)
UNSET = TreeShape(topk=0)
#: the shape auto may try where the user gave none: three candidates per node, at most ten
#: nodes verified (a pass of 11 rows)
AUTO_TREE = TreeShape(topk=3, nodes=10)


def chain_parents(n: int) -> list[int]:
    """The parents of an n-token chain: each token follows the one before it."""
    return list(range(-1, n - 1))


def depths(parents: Sequence[int]) -> list[int]:
    """Each node's depth below the root (a child of the root: 1)."""
    out: list[int] = []
    for i, p in enumerate(parents):
        if not ROOT <= p < i:
            raise ValueError(f"tree node {i}: parent {p} is not an earlier node")
        out.append(1 if p == ROOT else out[p] + 1)
    return out


def depth_of(parents: Sequence[int] | None, n: int) -> int:
    """Positions drafted by n proposals: a chain's length (parents None), a tree's deepest
    branch."""
    return max(depths(parents), default=0) if parents else n


def branches(parents: Sequence[int] | None) -> bool:
    """Whether some node has a sibling (a "tree" whose every node has one child is a chain,
    verified as one)."""
    return parents is not None and any(p != i - 1 for i, p in enumerate(parents))


def children(parents: Sequence[int]) -> dict[int, list[int]]:
    """node -> its children in order (ROOT's included; a leaf has no entry)."""
    out: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        out.setdefault(p, []).append(i)
    return out


def leaves(parents: Sequence[int]) -> list[int]:
    """The nodes that no node follows, in node order (the first is the first chain drawn)."""
    has_child = set(parents)
    return [i for i in range(len(parents)) if i not in has_child]


def path_to(node: int, parents: Sequence[int]) -> list[int]:
    """The nodes from the root's child down to `node`, `node` included (ROOT: [])."""
    out: list[int] = []
    while node != ROOT:
        out.append(node)
        node = parents[node]
    out.reverse()
    return out


def first_chain(parents: Sequence[int]) -> list[int]:
    """The nodes of the drafter's own best chain: from the root, each node's first child."""
    kids = children(parents)
    out: list[int] = []
    node = ROOT
    while node in kids:
        node = kids[node][0]
        out.append(node)
    return out


def preorder(parents: Sequence[int]) -> list[int]:
    """The nodes depth first, children in their order: the first chain comes first, so that
    node i of it is node i of the tree (what `reorder` renumbers a tree by)."""
    kids = children(parents)
    out: list[int] = []
    stack = list(reversed(kids.get(ROOT, [])))
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(kids.get(node, [])))
    return out


def reorder(parents: Sequence[int], order: Sequence[int]) -> list[int]:
    """The parents of the tree renumbered so that new node j is old node order[j] (an order
    in which every parent comes before its children)."""
    new = {old: j for j, old in enumerate(order)}
    return [new[parents[old]] if parents[old] != ROOT else ROOT for old in order]


def leaf_sets(parents: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """The tree's leaves and, for each node, the indices (into that leaf list) of the leaves
    below it or at it: the sequences a node's KV cell must belong to, so that in one pass
    each leaf's sequence sees exactly its own path. The root belongs to every leaf."""
    ends = leaves(parents)
    below: list[list[int]] = [[] for _ in parents]
    for k, leaf in enumerate(ends):
        for node in path_to(leaf, parents):
            below[node].append(k)
    return ends, below


def widest_level(parents: Sequence[int]) -> int:
    """The most nodes at one depth (what a pass evaluating the tree level by level holds)."""
    counts: dict[int, int] = {}
    for d in depths(parents):
        counts[d] = counts.get(d, 0) + 1
    return max(counts.values(), default=0)


def trie(paths: Sequence[Sequence[int]], *, nodes: int, width: int) -> tuple[list[int], list[int]]:
    """(tokens, parents) of the tree that holds `paths` (token sequences from the root, the
    most likely first), their common prefixes merged so that siblings are distinct: what a
    drafter with several continuations proposes at once. At most `nodes` nodes and `width`
    children per node; a path that no longer fits is cut where it would exceed them. The
    first path is the tree's first chain (each node's first child)."""
    tokens: list[int] = []
    parents: list[int] = []
    child: dict[tuple[int, int], int] = {}  # (parent, token) -> node
    kids: dict[int, int] = {}
    for path in paths:
        node = ROOT
        for tok in path:
            nxt = child.get((node, tok))
            if nxt is None:
                if len(tokens) >= nodes or kids.get(node, 0) >= width:
                    break
                nxt = child[(node, tok)] = len(tokens)
                tokens.append(int(tok))
                parents.append(node)
                kids[node] = kids.get(node, 0) + 1
            node = nxt
    order = preorder(parents)
    return [tokens[i] for i in order], reorder(parents, order)

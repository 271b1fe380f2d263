"""Tree drafts on the pure-numpy toy: the loop verifies a tree in one pass and keeps one
branch, and the text stays the target's (greedy: plain greedy; one-hot trees under sampling:
plain seeded decoding), whatever the tree's shape; sampled trees (siblings drawn without
replacement) follow the target's distribution exactly, by recursive rejection sampling."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pytest

from specgguf.core import tree
from specgguf.core.acceptance import verify, verify_tree
from specgguf.core.draft import Draft
from specgguf.core.sampling import PositionRandom, SamplerParams, SparseDist
from tests.test_loop_toy import PROMPT, VOCAB, NoisyOracle, ToyContext, run, toy_hash


class ToyTreeContext(ToyContext):
    """The toy with tree passes: each node's row is the table's at the hash of its path."""

    tree_width = 16
    tree_passes = 0

    def decode_tree(self, root: int, tokens: Sequence[int], parents: Sequence[int], pos0: int):
        assert pos0 == len(self.tokens)
        ends = tree.leaves(parents)
        assert len(ends) <= self.tree_width
        self.tree_passes += 1
        base = self.hashes[-1] if self.hashes else None
        h_root = toy_hash(base, root)
        hashes: list[int] = []
        for t, p in zip(tokens, parents, strict=True):
            hashes.append(toy_hash(h_root if p == tree.ROOT else hashes[p], t))
        self._tree = (root, list(tokens), hashes, h_root)
        return np.stack([self.table[h_root], *(self.table[h] for h in hashes)])

    def keep_path(self, path: Sequence[int]) -> None:
        root, tokens, hashes, h_root = self._tree
        self.tokens.append(root)
        self.hashes.append(h_root)
        for i in path:
            self.tokens.append(tokens[i])
            self.hashes.append(hashes[i])


def random_parents(rng: random.Random, n: int) -> list[int]:
    """A random tree of n nodes (each node's parent an earlier node or the root)."""
    return [rng.randrange(-1, i) for i in range(n)]


class TreeOracle(NoisyOracle):
    """Proposes random trees of `nodes` nodes; along one random branch it puts the target's
    greedy continuation, wrong with probability `p_wrong`; siblings are distinct tokens."""

    def __init__(self, p_wrong: float, nodes: int, seed: int = 0) -> None:
        super().__init__(p_wrong, nodes, seed)
        self.nodes = nodes

    def propose(self, budget: int, gate=None) -> Draft:
        parents = random_parents(self.rng, self.nodes)
        ctx = ToyContext(n_ctx=10_000)
        ctx.decode(self.history[:-1], 0, outputs="none")
        # the target's greedy continuation along the first child of each node
        h = toy_hash(ctx.hashes[-1] if ctx.hashes else None, self.history[-1])
        kids = tree.children(parents)
        right = {p: self.rng.choice(c) for p, c in kids.items()}  # where the right guess goes
        tokens = [0] * len(parents)
        states = {tree.ROOT: h}
        for i, p in enumerate(parents):
            best = int(np.argmax(ctx.table[states[p]]))
            tok = best if i == right[p] and self.rng.random() >= self.p_wrong else None
            while tok is None or tok in {tokens[c] for c in kids[p] if c < i} or (
                i != right[p] and tok == best
            ):
                tok = self.rng.randrange(VOCAB)
            tokens[i] = tok
            states[i] = toy_hash(states[p], tok)
        return Draft(tokens, None, parents)


@pytest.mark.parametrize("nodes", [1, 2, 5, 9])
@pytest.mark.parametrize("p_wrong", [0.0, 0.3, 1.0])
def test_greedy_trees_equal_plain_greedy(nodes, p_wrong):
    plain, _ = run([], PROMPT, 60)
    target = ToyTreeContext()
    got, dec = run_on(target, [TreeOracle(p_wrong, nodes)], 60)
    assert got == plain
    if nodes > 1:
        assert target.tree_passes > 0 and dec.stats.tree_rounds == target.tree_passes
    if p_wrong == 0.0:
        assert dec.stats.n_accept > 0


def test_seeded_sampling_on_one_hot_trees_equals_plain_seeded_decoding():
    warm = SamplerParams(temp=1.1)
    plain, _ = run([], PROMPT, 50, sampler=warm)
    for p_wrong in (0.0, 0.5):
        got, dec = run_on(ToyTreeContext(), [TreeOracle(p_wrong, 6, seed=4)], 50, sampler=warm)
        assert got == plain
        assert dec.stats.tree_off_chain > 0 or p_wrong == 0.0


def test_a_target_without_tree_passes_gets_chains():
    """The loop tells drafters the target verifies chains only (tree_leaves 1), and a tree
    proposed anyway is verified as its best chain, the text still plain greedy."""
    oracle = TreeOracle(0.3, 6, seed=2)
    got, dec = run([oracle], PROMPT, 40)
    assert oracle.tree_leaves == 1
    assert got == run([], PROMPT, 40)[0]
    assert dec.stats.tree_rounds == 0 and dec.stats.rounds > 0


def run_on(target, drafters, n, *, sampler=None, seed=3):
    from specgguf.core.loop import SpeculativeDecoder
    from specgguf.core.rounds import GenerationConfig
    from tests.test_loop_toy import EOS, GREEDY

    dec = SpeculativeDecoder(
        target, drafters, GenerationConfig(n_predict=n, n_max=8, sampler=sampler or GREEDY),
        PositionRandom(seed), is_eog=lambda t: t == EOS,
    )  # fmt: skip
    assert all(d.tree_leaves == target.tree_width for d in drafters)
    out: list[int] = []
    for rnd in dec.generate(PROMPT):
        out.extend(rnd.emitted)
        assert target.tokens == [*PROMPT, *out][:-1] or rnd.eos
    return out, dec


# -- the sampled tree's rejection sampler on a toy: exact distributions --------------------

V = 6


def dist(probs) -> SparseDist:
    probs = np.asarray(probs, dtype=np.float64)
    ids = np.flatnonzero(probs > 0)
    return SparseDist(ids.astype(np.int64), probs[ids] / probs[ids].sum())


def draw_without_replacement(q: SparseDist, k: int, rng: np.random.Generator) -> list[int]:
    out: list[int] = []
    left = q
    for _ in range(k):
        if left is None:
            break
        x = left.sample(rng)
        out.append(x)
        keep = left.ids != x
        rest = np.bincount(left.ids[keep], left.probs[keep], minlength=V)
        left = dist(rest) if keep.any() else None
    return out


@pytest.mark.parametrize("k", [1, 2, 3])
def test_sampled_siblings_follow_the_targets_distribution(k):
    """One level: k children drawn from q without replacement; the emitted first token is
    distributed as p (empirically, 60k rounds, within 4 standard errors per token)."""
    rng = np.random.default_rng(7)
    p = dist([0.05, 0.4, 0.25, 0.0, 0.2, 0.1])
    q = dist([0.3, 0.1, 0.3, 0.2, 0.05, 0.05])  # a poor draft: q puts mass where p has none
    n = 60_000
    counts = np.zeros(V)
    for _ in range(n):
        kids = draw_without_replacement(q, k, rng)
        v = verify_tree(kids, [tree.ROOT] * len(kids), [q] * len(kids), lambda _r: p, rng)
        counts[kids[v.path[0]] if v.path else v.token] += 1
    se = np.sqrt(p.probs.max() * (1 - p.probs.max()) / n)
    np.testing.assert_allclose(counts / n, np.bincount(p.ids, p.probs, minlength=V), atol=4 * se)


def test_a_sampled_two_level_tree_follows_the_joint_distribution():
    """Two levels, each node's children drawn without replacement from its own q: the first
    two emitted tokens follow p(x1) p(x2 | x1)."""
    rng = np.random.default_rng(11)
    p1 = dist([0.5, 0.3, 0.2, 0, 0, 0])
    p2 = {a: dist(np.roll([0.6, 0.25, 0.15, 0, 0, 0], a)) for a in range(V)}
    q1 = dist([0.2, 0.2, 0.2, 0.2, 0.1, 0.1])
    q2 = {a: dist(np.roll([0.1, 0.5, 0.1, 0.1, 0.1, 0.1], a)) for a in range(V)}
    n = 40_000
    joint = np.zeros((V, V))
    for _ in range(n):
        first = draw_without_replacement(q1, 2, rng)
        tokens, parents, probs = list(first), [tree.ROOT] * len(first), [q1] * len(first)
        for i, a in enumerate(first):
            for b in draw_without_replacement(q2[a], 2, rng):
                tokens.append(b)
                parents.append(i)
                probs.append(q2[a])

        def p_at(row: int, tokens=tokens) -> SparseDist:
            return p1 if row == 0 else p2[tokens[row - 1]]

        v = verify_tree(tokens, parents, probs, p_at, rng)
        out = [tokens[i] for i in v.path] + [v.token]
        if len(out) == 1:  # nothing accepted: the second token comes from p2 of the first
            out.append(p2[out[0]].sample(rng))
        joint[out[0], out[1]] += 1
    want = np.zeros((V, V))
    for a, pa in zip(p1.ids, p1.probs, strict=True):
        want[a, p2[int(a)].ids] = pa * p2[int(a)].probs
    np.testing.assert_allclose(joint / n, want, atol=0.012)


def test_a_chain_is_verified_as_before():
    """verify (chains) is verify_tree with chain parents: same verdicts on random rounds."""
    rng = np.random.default_rng(2)
    for _ in range(200):
        k = int(rng.integers(1, 5))
        ps = [dist(rng.dirichlet(np.ones(V))) for _ in range(k + 1)]
        qs = [dist(rng.dirichlet(np.ones(V))) for _ in range(k)]
        toks = [int(q.sample(rng)) for q in qs]
        u = PositionRandom(int(rng.integers(1 << 30)))
        a = verify(toks, qs, ps.__getitem__, u.uniform)
        b = verify_tree(toks, tree.chain_parents(k), qs, ps.__getitem__, u.uniform)
        assert (a.n_accepted, a.token, a.path) == (b.n_accepted, b.token, b.path)


def test_a_trie_merges_common_prefixes_and_keeps_the_first_path_first():
    tokens, parents = tree.trie([[1, 2, 3], [1, 2, 4], [5, 6], [1, 7]], nodes=10, width=3)
    chain = tree.first_chain(parents)
    assert [tokens[i] for i in chain] == [1, 2, 3]
    ends = tree.leaves(parents)
    paths = {tuple(tokens[j] for j in tree.path_to(leaf, parents)) for leaf in ends}
    assert paths == {(1, 2, 3), (1, 2, 4), (5, 6), (1, 7)}
    # caps: nodes and children per node cut a path where it would exceed them
    tokens, parents = tree.trie([[1, 2, 3], [1, 2, 4], [5, 6]], nodes=4, width=1)
    assert [tokens[i] for i in tree.first_chain(parents)] == [1, 2, 3]
    assert len(tokens) == 3  # [1,2,4] needs a second child of 2, [5,6] a second of the root


def test_ngram_map_k4v_proposes_its_continuations_as_a_tree_where_counts_disagree():
    from specgguf.drafters.ngram_map import NgramMapK4V

    a, b = [20, 21, 22, 23], [30, 31, 32, 33]
    key = [1, 2]
    seq = [7]  # (a start at position 0 is never indexed, as in llama.cpp)
    for cont in (a, b, a, b):  # two continuations, equally often: no chain wins
        seq += key + cont + [9, 9, 9, 9]
    seq += [8] * 12  # every occurrence eligible
    d = NgramMapK4V(size_n=2, size_m=4, min_hits=1)
    d.begin([*seq, *key])
    assert d.propose(8).tokens == []  # a chain needs a dominant continuation
    d.tree, d.tree_leaves = tree.TreeShape(topk=3, nodes=10), 4
    draft = d.propose(8)
    assert draft.is_tree
    ends = tree.leaves(draft.parents)
    paths = {tuple(draft.tokens[j] for j in tree.path_to(x, draft.parents)) for x in ends}
    assert paths == {tuple(a), tuple(b)}
    assert d.peek(8).parents is None  # a shadow draft stays a chain


class _ToyBranches:
    """engine.Context's branch calls on a toy: a row of logits per path (seeded by it)."""

    def __init__(self, n_seq: int, vocab: int = V) -> None:
        self.n_seq, self.vocab = n_seq, vocab
        self.paths: dict[int, tuple[int, ...]] = {0: ()}

    def row(self, path: tuple[int, ...]) -> np.ndarray:
        rng = np.random.default_rng(hash(path) & 0xFFFF)
        return rng.normal(size=self.vocab) * 1.5

    def fork(self, src: int, dst: int) -> None:
        self.paths[dst] = self.paths[src]

    def seq_rm(self, seq: int, p0: int) -> None:
        self.paths.pop(seq, None) if seq else None

    def decode_beside(self, tokens, pos, seq):
        out = []
        for t, s in zip(tokens, seq, strict=True):
            self.paths[s] = (*self.paths[s], int(t))
            out.append(self.row(self.paths[s]))
        return np.array(out)


def test_a_drafted_sampled_tree_follows_the_targets_distribution():
    """draft_tree's probabilistic levels (siblings drawn without replacement, frontier
    nodes drawing in rank order within the level's room) verified by verify_tree: the
    first two emitted tokens follow the target's p (20k seeded rounds)."""
    from specgguf.core.draft import DraftTiming
    from specgguf.drafters.draft_steps import DraftRules
    from specgguf.drafters.draft_tree import draft_tree

    sampler = SamplerParams(temp=1.0, top_k=0, top_p=1.0, min_p=0.0)

    def target(path: tuple[int, ...]) -> SparseDist:
        rng = np.random.default_rng((hash(path) * 7 + 1) & 0xFFFF)
        return dist(rng.dirichlet(np.ones(V) * 0.7))

    shape = tree.TreeShape(topk=3, nodes=7, p_split=0.05)
    n = 20_000
    joint = np.zeros((V, V))
    for seed in range(n):
        ctx = _ToyBranches(3)
        rules = DraftRules(sampler, n_max=3, probabilistic=True, random=PositionRandom(seed))
        draft, _ = draft_tree(ctx.row(()), ctx, 3, None, rules, shape, max_leaves=5,
                              pos_first=10, timing=DraftTiming())  # fmt: skip
        parents = draft.parents if draft.parents is not None else tree.chain_parents(len(draft))

        def p_at(r: int, draft=draft, parents=parents) -> SparseDist:
            nodes = tree.path_to(r - 1, parents) if r else []
            return target(tuple(draft.tokens[i] for i in nodes))

        u = PositionRandom(seed + 1 << 20)
        v = verify_tree(draft.tokens, parents, draft.probs, p_at, u.uniform)
        out = [draft.tokens[i] for i in v.path] + [v.token]
        if len(out) == 1:
            out.append(target((out[0],)).sample_at(u.uniform(1, 0)))
        joint[out[0], out[1]] += 1
    want = np.zeros((V, V))
    p1 = target(())
    for a, pa in zip(p1.ids, p1.probs, strict=True):
        p2 = target((int(a),))
        want[a, p2.ids] = pa * p2.probs
    np.testing.assert_allclose(joint / n, want, atol=0.015)

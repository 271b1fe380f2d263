"""The tree pass on a tiny llama.cpp model: one llama_decode over every node of a draft tree,
each node seeing exactly its ancestors (its row equals a chain evaluation of its path), and
the accepted path kept as the sequence's next positions with no stray cells left behind."""

from __future__ import annotations

from dataclasses import replace

import llama_cpp as ll
import numpy as np
import pytest

from specgguf.binding import engine
from specgguf.core import tree

PARAMS = engine.ContextParams(n_ctx=256, n_batch=64, n_ubatch=64, n_threads=1, flash_attn="off")
TREE_PARAMS = replace(PARAMS, n_seq_max=8)

#: trees of several shapes: node i follows parents[i] (-1: the root)
SHAPES = {
    "chain": [-1, 0, 1],
    "root fan": [-1, -1, -1],
    "split at 1": [-1, 0, 0, 1, 2],
    "deep and wide": [-1, -1, 0, 0, 1, 2, 3, 5],
}


@pytest.fixture(scope="module")
def model(tiny_target):
    m = engine.Model(tiny_target)
    yield m
    m.close()


def chain_rows(model, prefix, path_tokens):
    """Every row of a plain single-sequence evaluation of prefix + path."""
    ctx = engine.Context(model, PARAMS)
    try:
        ctx.decode(prefix[:-1], 0, outputs="none")
        out = ctx.decode([prefix[-1], *path_tokens], len(prefix) - 1, outputs="all")
        return np.array(out)
    finally:
        ctx.close()


def tree_tokens(parents, seed):
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.choice(np.arange(5, 60), size=len(parents), replace=False)]


@pytest.mark.parametrize("shape", SHAPES)
def test_each_node_sees_exactly_its_ancestors(model, shape):
    parents = SHAPES[shape]
    tokens = tree_tokens(parents, 1)
    prompt = model.tokenize("the cat sat on")
    ctx = engine.Context(model, TREE_PARAMS)
    try:
        ctx.decode(prompt[:-1], 0, outputs="none")
        rows = np.array(ctx.decode_tree(prompt[-1], tokens, parents, len(prompt) - 1))
        assert rows.shape[0] == 1 + len(tokens)
        for node in [tree.ROOT, *range(len(tokens))]:
            path = tree.path_to(node, parents)
            ref = chain_rows(model, prompt, [tokens[i] for i in path])[-1]
            np.testing.assert_allclose(rows[node + 1], ref, atol=1e-3, rtol=1e-3)
    finally:
        ctx.close()


def all_paths(parents):
    """Every path a verdict can keep: [] (the root only) and each node's path."""
    return [[], *(tree.path_to(i, parents) for i in range(len(parents)))]


def seq_state(ctx, seq):
    return ll.llama_state_seq_get_size(ctx.ptr, seq)


@pytest.mark.parametrize("shape", SHAPES)
def test_keep_path_leaves_the_path_and_nothing_else(model, shape):
    parents = SHAPES[shape]
    tokens = tree_tokens(parents, 2)
    prompt = model.tokenize("def main():")
    for path in all_paths(parents):
        ctx = engine.Context(model, TREE_PARAMS)
        plain = engine.Context(model, PARAMS)
        try:
            ctx.decode(prompt[:-1], 0, outputs="none")
            ctx.decode_tree(prompt[-1], tokens, parents, len(prompt) - 1)
            ctx.keep_path(path)
            kept = [*prompt, *(tokens[i] for i in path)]
            assert ctx.tokens == kept and ctx.n_past == len(kept)
            for s in range(1, 8):  # the branches' sequences are gone
                assert ll.llama_memory_seq_pos_max(ctx.memory, s) == -1
            assert ll.llama_memory_seq_pos_max(ctx.memory, 0) == len(kept) - 1
            plain.decode(kept, 0, outputs="none")
            # sequence 0 holds exactly the kept cells (a sibling's cell would be counted)
            assert seq_state(ctx, 0) == seq_state(plain, 0)
            # and the next pass reads them as a plain evaluation of the kept text does
            nxt = np.array(ctx.decode([7, 8], len(kept), outputs="all"))
            ref = np.array(plain.decode([7, 8], len(kept), outputs="all"))
            np.testing.assert_allclose(nxt, ref, atol=1e-3, rtol=1e-3)
        finally:
            ctx.close()
            plain.close()


def test_rounds_of_trees_keep_the_cache_clean(model):
    """Tree after tree on one context (what a generation does): after each round the cache
    is the kept text, a chain decode in between changes nothing."""
    prompt = model.tokenize("Once upon a time")
    ctx = engine.Context(model, TREE_PARAMS)
    try:
        ctx.decode(prompt[:-1], 0, outputs="none")
        last, kept = prompt[-1], list(prompt[:-1])
        rng = np.random.default_rng(3)
        for r in range(12):
            parents = list(SHAPES.values())[r % len(SHAPES)]
            tokens = tree_tokens(parents, 10 + r)
            rows = ctx.decode_tree(last, tokens, parents, len(kept))
            pick = int(rng.integers(len(parents)))
            path = tree.path_to(pick, parents)[: int(rng.integers(0, 3))]
            bonus = int(np.argmax(rows[path[-1] + 1 if path else 0]))
            ctx.keep_path(path)
            kept += [last, *(tokens[i] for i in path)]
            last = bonus
            assert ctx.tokens == kept
        plain = engine.Context(model, PARAMS)
        try:
            plain.decode(kept, 0, outputs="none")
            assert seq_state(ctx, 0) == seq_state(plain, 0)
            np.testing.assert_allclose(
                np.array(ctx.decode([last], len(kept))),
                np.array(plain.decode([last], len(kept))),
                atol=1e-3,
                rtol=1e-3,
            )
        finally:
            plain.close()
    finally:
        ctx.close()

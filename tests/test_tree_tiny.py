"""Tree drafts on tiny llama.cpp models: draft-simple grows a tree (a level per draft pass,
branches in sequences of the draft context), the target verifies it in one pass, and the
text is the target's own: plain greedy, or plain seeded decoding with one-hot drafts."""

from __future__ import annotations

import pytest

from specgguf.core.sampling import SamplerParams
from specgguf.core.tree import TreeShape
from tests.test_speculative_tiny import PROMPTS, against_plain, generate, make_session

SHAPES = [TreeShape(topk=2, p_split=0.0), TreeShape(topk=4, nodes=9, p_split=0.05)]


@pytest.fixture(scope="module")
def plain(tiny_target):
    s = make_session(tiny_target, None, [])
    yield s
    s.close()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"topk{s.topk}-nodes{s.nodes}")
def test_greedy_trees_equal_plain_greedy(tiny_target, tiny_draft, plain, shape):
    spec = make_session(tiny_target, tiny_draft, ["draft-simple"], n_max=4, tree=shape)
    try:
        trees = off = 0
        for _, dec, _ in against_plain(spec, plain, 40, str(shape)):
            trees += dec.stats.tree_rounds
            off += dec.stats.tree_off_chain
            assert dec.stats.tree_nodes <= dec.stats.tree_rounds * shape.node_cap(4)
        assert trees > 0  # the draft really branched
        assert off > 0  # and a branch off its best chain was kept
    finally:
        spec.close()


def test_seeded_sampling_with_one_hot_trees_equals_plain(tiny_target, tiny_draft, plain):
    warm = SamplerParams(temp=0.9)
    spec = make_session(
        tiny_target, tiny_draft, ["draft-simple"], n_max=4, tree=SHAPES[1], draft_sampling="greedy"
    )
    try:
        for seed in (1, 2):
            ref, _ = generate(plain, PROMPTS[1], 40, warm, seed)
            got, dec = generate(spec, PROMPTS[1], 40, warm, seed)
            assert got == ref
            assert dec.stats.tree_rounds > 0
    finally:
        spec.close()


def test_probabilistic_trees_run_and_keep_the_cache_true(tiny_target, tiny_draft):
    """Sampled siblings (their exactness is tests/test_tree_toy's): rounds emit, and the
    target's cache holds exactly the prompt and the emitted text but its last token."""
    spec = make_session(
        tiny_target, tiny_draft, ["draft-simple"], n_max=4, tree=SHAPES[1],
        draft_sampling="probabilistic",
    )  # fmt: skip
    try:
        tokens = spec.tokenize(PROMPTS[2])
        dec = spec.decoder(SamplerParams(temp=1.0), 40, 5)
        out: list[int] = []
        for rnd in dec.generate(tokens):
            out.extend(rnd.emitted)
            if not rnd.eos:
                assert spec.target.tokens == [*tokens, *out][:-1]
        assert dec.stats.tree_rounds > 0 and len(out) > 0
    finally:
        spec.close()


def test_two_slots_verify_their_trees_in_shared_passes(tiny_target, tiny_draft, monkeypatch):
    """-np 2: both slots grow trees (their branches in sequences of the shared draft
    context) and verify them in the shared target passes; each text is the one its slot
    gives alone, and the shared cache keeps no stray cell."""
    import llama_cpp as ll

    from specgguf.loading.session import LoadOptions, Session, SpecOptions
    from tests.test_batched import _gen, assert_same_or_near_tie, concurrently, tokens_of

    def make(parallel: int) -> Session:
        load = LoadOptions(model=tiny_target, model_draft=tiny_draft, n_ctx=512 * parallel,
                           threads=1, flash_attn="off")  # fmt: skip
        spec = SpecOptions(["draft-simple"], n_max=4, draft_sampling="greedy", tree=SHAPES[1])
        return Session(load, spec, parallel=parallel)

    from specgguf.binding.batched import SequenceView

    trees: list[int] = []
    decode_tree = SequenceView.decode_tree

    def counted(view, *args):
        trees.append(view.seq)
        return decode_tree(view, *args)

    monkeypatch.setattr(SequenceView, "decode_tree", counted)
    one, many = make(1), make(2)
    try:
        greedy = SamplerParams(temp=0.0)
        prompts = [one.tokenize(p) for p in PROMPTS[:2]]
        alone = _gen(one, greedy)
        refs = [tokens_of(alone.generate(p)) for p in prompts]
        gen = _gen(many, greedy)
        got = concurrently(gen, prompts, None)
        for i in range(2):
            assert_same_or_near_tie(one, prompts[i], refs[i], got[i], f"slot {i}")
        assert set(trees) == {0, 1}  # both slots verified trees in the shared passes
        target = many.target.owner
        assert target.branches > 1 and many.draft_ctx.owner.branches > 1
        memory = target.ctx.memory
        for s in range(2, 2 * target.branches):  # the branches' sequences are empty
            assert ll.llama_memory_seq_pos_max(memory, s) == -1
        for i, view in enumerate(target.views):
            assert ll.llama_memory_seq_pos_max(memory, i) == len(view.tokens) - 1
    finally:
        many.close()
        one.close()

"""draft-mtp over several NextN layers, chained (tests.tiny_mimo2: a mimo2 target with two):
draft step i runs layer i over the whole draft so far, so a draft is at most two tokens long,
as in llama.cpp; every layer reads every target row. Random weights: drafts are nearly always
rejected, and the text must still be plain decoding's."""

from __future__ import annotations

import pytest

from specgguf.heads.mtp_info import MtpLayers, mtp_layers, mtp_problem
from specgguf.loading.session import LoadOptions, Session, SpecOptions
from specgguf.modelfiles.gguf_info import read_gguf_info
from tests.mtp_checks import GREEDY, PROMPT, WARM, N
from tests.tiny_mimo2 import N_TRUNK, build_tiny_mimo2
from tests.tiny_models import TARGET_SEED


@pytest.fixture(scope="module")
def chained(tiny_models_dir):
    return build_tiny_mimo2(tiny_models_dir / "mimo2-mtp2.gguf", seed=TARGET_SEED, nextn=2)


def session(target, types=("draft-mtp",), n_max=4):
    load = LoadOptions(model=target, n_ctx=512, threads=1, flash_attn="off")
    return Session(load, SpecOptions(types=list(types), n_max=n_max))


def generate(s, tokens, sampler=GREEDY, n=N, seed=5, **kw):
    dec = s.decoder(sampler, n, seed, **kw)
    rounds = list(dec.generate(tokens))
    return [t for r in rounds for t in r.emitted], [r.proposed for r in rounds]


@pytest.fixture(scope="module")
def pair(chained):
    mtp, plain = session(chained, n_max=8), session(chained, types=())
    yield mtp, plain
    mtp.close()
    plain.close()


def test_the_header_names_both_layers(chained):
    info = read_gguf_info(chained)
    assert mtp_layers(info) == MtpLayers(count=2, first_block=N_TRUNK)
    assert mtp_problem(info) is None


@pytest.mark.parametrize("k", range(1, 9))
def test_greedy_equals_plain_and_drafts_are_capped_by_the_layer_count(pair, k):
    mtp, plain = pair
    spec = SpecOptions(types=["draft-mtp"], n_max=k)
    got, proposed = generate(mtp, mtp.tokenize(PROMPT), spec=spec, reuse_prefix=False)
    assert got == generate(plain, plain.tokenize(PROMPT), reuse_prefix=False)[0]
    assert max(map(len, proposed)) == min(k, 2)


def test_seeded_sampling_equals_plain(pair):
    mtp, plain = pair
    spec = SpecOptions(types=["draft-mtp"], n_max=2, draft_sampling="greedy")
    for seed in (1, 2):
        got = generate(mtp, mtp.tokenize(PROMPT), WARM, seed=seed, spec=spec, reuse_prefix=False)
        ref = generate(plain, plain.tokenize(PROMPT), WARM, seed=seed, reuse_prefix=False)
        assert got[0] == ref[0]


def test_every_round_drafts_what_a_fresh_head_drafts_there(pair, chained):
    mtp, _ = pair
    prompt = mtp.tokenize(PROMPT)
    spec = SpecOptions(types=["draft-mtp"], n_max=2)
    fresh = session(chained, n_max=2)
    try:
        history = list(prompt)
        dec = mtp.decoder(GREEDY, 24, 5, spec=spec, reuse_prefix=False)
        for i, rnd in enumerate(dec.generate(prompt)):
            if i % 4 == 1:  # a fresh head drafts after the first token of history[:-1] (greedy)
                emitted, proposed = generate(fresh, history[:-1], n=24, reuse_prefix=False)
                assert emitted[0] == history[-1]
                assert proposed[1][: len(rnd.proposed)] == rnd.proposed
            history += rnd.emitted
    finally:
        fresh.close()


def test_a_chained_layer_without_its_fused_projection_is_refused(tiny_models_dir):
    path = build_tiny_mimo2(
        tiny_models_dir / "mimo2-noqkv.gguf",
        seed=TARGET_SEED,
        drop=(f"blk.{N_TRUNK + 1}.attn_qkv.weight",),
    )
    problem = mtp_problem(read_gguf_info(path))
    assert problem is not None and f"blk.{N_TRUNK + 1}.attn_qkv.weight" in problem


def test_prefix_reuse_on_an_attention_target_resumes_at_a_kept_state(chained):
    """An attention target keeps any common prefix; the head resumes after the last hidden
    state it kept within it (one per ANCHOR_EVERY positions), and drafts as a fresh head."""
    from specgguf.drafters.mtp import ANCHOR_EVERY

    warm, fresh = session(chained, n_max=2), session(chained, n_max=2)
    try:
        first = warm.tokenize(" ".join([PROMPT] * 6))
        assert len(first) > ANCHOR_EVERY + 20
        generate(warm, first, n=8)
        second = first[: ANCHOR_EVERY + 10] + warm.tokenize(" and then a dog")
        dec = warm.decoder(GREEDY, N, 5)
        rounds = list(dec.generate(second))
        # the target would keep 74 positions; the head has a state at 63: both resume at 64
        assert dec.stats.cache_n == ANCHOR_EVERY
        got = ([t for r in rounds for t in r.emitted], [r.proposed for r in rounds])
        assert got == generate(fresh, second, reuse_prefix=False)
        again = warm.decoder(GREEDY, 1, 5)
        list(again.generate(second))  # the same prompt once more: all of it is reused
        assert again.stats.cache_n == len(second) - 1
    finally:
        warm.close()
        fresh.close()

"""Speculation on a hybrid target and hybrid drafts (tiny qwen35: one gated-delta-net layer, one
attention layer): their memory drops only whole sequences, so every rejection is rolled back
from a checkpoint (specgguf.binding.checkpoints). Whatever the drafts, the text must be what
plain decoding prints: greedy, and seeded sampling token for token (greedy drafts)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from specgguf_cli.app import run_cli

from specgguf.binding import engine, memory_caps
from specgguf.binding.checkpoints import CheckpointedContext
from specgguf.core.sampling import SamplerParams
from specgguf.errors import SpecggufError
from specgguf.loading.session import LoadOptions, Session, SpecOptions
from tests.conversation import check_two_turns
from tests.serve_helpers import FAST, Server, post_together
from tests.tiny_hybrid import LOOPY_SSM_A, build_tiny_mamba, build_tiny_qwen35
from tests.tiny_models import DRAFT_PERTURB, TARGET_SEED

GREEDY = SamplerParams(temp=0.0)
WARM = SamplerParams(temp=0.8)
PROMPT = "the cat sat on the mat and the cat sat on"
N = 40


@pytest.fixture(scope="module")
def hybrid(tiny_models_dir):
    """The tiny qwen35 target."""
    return build_tiny_qwen35(tiny_models_dir / "qwen35.gguf", seed=TARGET_SEED)


@pytest.fixture(scope="module")
def hybrid_drafts(tiny_models_dir, hybrid):
    """Hybrid drafts by how often the target rejects them: "never" (the target itself),
    "some" (the target's weights plus noise), "always" (a model that always proposes EOS,
    which the target never emits)."""
    return {
        "never": hybrid,
        "some": build_tiny_qwen35(
            tiny_models_dir / "qwen35-draft.gguf",
            seed=99,
            perturb_from_seed=TARGET_SEED,
            perturb_scale=DRAFT_PERTURB,
        ),
        "always": build_tiny_qwen35(
            tiny_models_dir / "qwen35-eos.gguf", seed=5, eos_logit_bias=40.0
        ),
    }


@pytest.fixture(scope="module")
def loopy(tiny_models_dir):
    """A qwen35 whose state forgets at once: its greedy text settles into a short cycle, so
    the n-gram drafters find earlier occurrences (rejected until it settles, accepted after)."""
    path = tiny_models_dir / "qwen35-loopy.gguf"
    return build_tiny_qwen35(path, seed=TARGET_SEED, ssm_a=LOOPY_SSM_A)


def session(target, draft=None, types=(), n_max=4, *, n_batch=2048):
    load = LoadOptions(
        model=target, model_draft=draft, n_ctx=512, threads=1, flash_attn="off",
        n_batch=n_batch, n_ubatch=min(512, n_batch),
    )  # fmt: skip
    return Session(load, SpecOptions(types=list(types), n_max=n_max))


def generate(s, tokens, sampler=GREEDY, n=N, seed=5, **kw):
    dec = s.decoder(sampler, n, seed, **kw)
    return [t for rnd in dec.generate(tokens) for t in rnd.emitted], dec.stats


@pytest.fixture(scope="module")
def plain(hybrid):
    s = session(hybrid)
    yield s
    s.close()


def reference(plain, prompt=PROMPT, sampler=GREEDY, n=N):
    return generate(plain, plain.tokenize(prompt), sampler, n)[0]


# -- what the memory can do -------------------------------------------------------------------


def test_probe_tells_attention_from_hybrid(hybrid, tiny_target, tiny_draft):
    s = session(hybrid, tiny_draft, ["draft-simple"])
    try:
        assert s.memory == {"target": memory_caps.FULL, "draft": memory_caps.PARTIAL}
        assert isinstance(s.target, CheckpointedContext)
        assert isinstance(s.draft_ctx, engine.Context)  # attention: rolls back in place
        report = s.memory_report()
        assert report["target"]["kind"] == "hybrid" and report["target"]["removal"] == "full"
        assert report["draft"]["kind"] == "attention"
        # what check predicts from the header is what the probe found
        assert memory_caps.expected_removal("qwen35") == memory_caps.FULL
        assert memory_caps.expected_removal("llama") == memory_caps.PARTIAL
    finally:
        s.close()


def test_a_bare_context_refuses_a_partial_removal_instead_of_drifting(hybrid):
    """The bug of the issue: llama.cpp refused the rollback, the bookkeeping went on as if it
    had not, and the next decode failed (llama_decode -1). The engine now says so at once."""
    engine.init_backend()
    model = engine.Model(hybrid)
    ctx = engine.Context(model, engine.ContextParams(n_ctx=256, n_threads=1, flash_attn="off"))
    try:
        assert memory_caps.probe_removal(ctx) == memory_caps.FULL
        ctx.decode([10, 20, 30, 40], 0, outputs="none")
        with pytest.raises(SpecggufError, match="cannot drop its last positions"):
            ctx.truncate(2)
        assert ctx.n_past == 4  # nothing pretended
        ctx.truncate(0)  # the whole sequence: any memory can
        assert ctx.n_past == 0 and ctx.tokens == []
    finally:
        ctx.close()
        model.close()


def test_rollback_leaves_what_a_fresh_evaluation_computes(hybrid):
    """Restore + re-decode is exact: after rolling back a verify pass, the logits are those of
    a context that never saw the rejected tokens (and differ from ones that did)."""
    engine.init_backend()
    model = engine.Model(hybrid)
    params = engine.ContextParams(n_ctx=256, n_threads=1, flash_attn="off")
    a = CheckpointedContext(engine.Context(model, params), every_decode=False)
    b = engine.Context(model, params)
    try:
        prompt = model.tokenize(PROMPT)
        a.decode(prompt, 0, outputs="none")
        a.decode([65, 66, 67, 68], len(prompt), outputs="all")  # a verify pass
        a.truncate(len(prompt) + 2)  # two accepted, two rejected
        assert a.tokens == [*prompt, 65, 66] and a.stats.restores == 1
        assert a.stats.redecoded == 2
        got = np.array(a.decode([70], len(prompt) + 2, outputs="last")[0])
        b.decode([*prompt, 65, 66], 0, outputs="none")
        want = np.array(b.decode([70], len(prompt) + 2, outputs="last")[0])
        np.testing.assert_allclose(got, want, atol=1e-4)
        b.clear()
        b.decode([*prompt, 65, 66, 67, 68], 0, outputs="none")
        stale = np.array(b.decode([70], len(prompt) + 4, outputs="last")[0])
        assert np.abs(stale - want).max() > 1e-2  # the rejected tokens would have mattered
    finally:
        a.close()
        b.close()
        model.close()


# -- draft-simple: K = 1..8, rejections never / sometimes / every round -----------------------


@pytest.mark.parametrize("n_max", range(1, 9))
@pytest.mark.parametrize("rejects", ["never", "some", "always"])
def test_greedy_draft_simple_equals_plain(hybrid, hybrid_drafts, plain, rejects, n_max):
    ref = reference(plain)
    s = session(hybrid, hybrid_drafts[rejects], ["draft-simple"], n_max=n_max)
    try:
        got, st = generate(s, s.tokenize(PROMPT))
        assert got == ref
        restores = s.target.stats.restores
        assert st.n_drafted > 0
        if rejects == "never":
            assert st.n_accept == st.n_drafted and restores == 0
        elif rejects == "always":
            # every drafting round rolled the target back (and the draft its own proposals)
            assert st.n_accept == 0 and restores == st.rounds > 0  # rounds: drafting ones
            assert s.draft_ctx.stats.restores > 0 or n_max == 1
        else:
            assert 0 < st.n_accept < st.n_drafted and restores > 0
    finally:
        s.close()


@pytest.mark.parametrize("n_max", [1, 3, 8])
@pytest.mark.parametrize("rejects", ["never", "some", "always"])
def test_seeded_sampling_equals_plain_token_for_token(hybrid, hybrid_drafts, plain, rejects, n_max):
    ref = reference(plain, sampler=WARM)
    s = session(hybrid, hybrid_drafts[rejects], ["draft-simple"], n_max=n_max)
    s.spec.draft_sampling = "greedy"  # a one-hot draft: the text is the target's, per seed
    try:
        got, st = generate(s, s.tokenize(PROMPT), WARM)
        assert got == ref and st.n_drafted > 0
    finally:
        s.close()


def test_an_attention_draft_for_a_hybrid_target(hybrid, tiny_draft, plain):
    s = session(hybrid, tiny_draft, ["draft-simple"], n_max=4)
    try:
        got, st = generate(s, s.tokenize(PROMPT))
        assert got == reference(plain) and s.target.stats.restores > 0
    finally:
        s.close()


def test_a_hybrid_draft_for_an_attention_target(tiny_target, hybrid_drafts):
    base = session(tiny_target)
    s = session(tiny_target, hybrid_drafts["some"], ["draft-simple"], n_max=5)
    try:
        assert s.memory == {"target": memory_caps.PARTIAL, "draft": memory_caps.FULL}
        got, st = generate(s, s.tokenize(PROMPT), n=48)
        assert got == generate(base, base.tokenize(PROMPT), n=48)[0]
        assert st.n_drafted > 0 and s.draft_ctx.stats.restores > 0
        # a draft context saves before each step, so its rollbacks land on a checkpoint:
        # nothing is evaluated twice
        assert s.draft_ctx.stats.redecoded == 0
    finally:
        s.close()
        base.close()


# -- n-gram drafting ------------------------------------------------------------------------


@pytest.mark.parametrize("n_max", [1, 4, 8])
@pytest.mark.parametrize("spec_type", ["ngram-simple", "ngram-mod"])
@pytest.mark.parametrize("sampler", [GREEDY, WARM], ids=["greedy", "seeded"])
def test_ngram_drafts_equal_plain(loopy, spec_type, n_max, sampler, capsys):
    key = str(min(2, n_max))  # ngram-simple proposes nothing shorter than its key
    flags = [
        "--spec-ngram-simple-size-n", key, "--spec-ngram-simple-size-m", str(n_max),
        "--spec-ngram-mod-n-match", "2", "--spec-ngram-mod-n-min", "1",
        "--spec-ngram-mod-n-max", str(n_max),
    ]  # fmt: skip
    temp = ["--temp", "0"] if sampler.greedy else ["--temp", "0.8", "-s", "3"]
    base = ["run", "-m", str(loopy), "-t", "1", "-c", "512", "-fa", "off", "-p", PROMPT,
            "-n", "96", "--ignore-eos", "--json", "-q", *temp]  # fmt: skip

    def run(*args):
        assert run_cli([*base, *args]) == 0
        return json.loads(capsys.readouterr().out)

    plain_out = run("--spec-type", "none")
    got = run("--spec-type", spec_type, "--spec-draft-n-max", str(n_max), *flags)
    assert got["text"] == plain_out["text"]
    t = got["timings"]
    assert got["kv_rollback"]["target"]["removal"] == "full" and t["rollback_ms"] > 0
    # the cycle is found: drafts accepted, and rejected ones (before it settles) rolled back
    assert 0 < t["draft_n_accepted"] < t["draft_n"]


# -- prompts longer than a batch, turns, the server --------------------------------------------


def test_a_prompt_longer_than_one_batch(hybrid, hybrid_drafts):
    long_prompt = " ".join(f"word{i}" for i in range(60))  # > 64 tokens: several batches
    base = session(hybrid, n_batch=64)
    s = session(hybrid, hybrid_drafts["some"], ["draft-simple"], n_max=4, n_batch=64)
    try:
        tokens = s.tokenize(long_prompt)
        assert len(tokens) > 2 * 64
        got, st = generate(s, tokens)
        assert got == generate(base, tokens)[0]
        assert s.target.stats.restores > 0
    finally:
        s.close()
        base.close()


def test_prefix_reuse_across_turns_and_from_a_prompt_checkpoint(hybrid, hybrid_drafts):
    """Turn 2 extends everything cached: nothing is restored, only the new tokens evaluated.
    A prompt that leaves the cached text earlier resumes from the latest prompt-end
    checkpoint inside the shared prefix, or evaluates afresh where there is none."""
    warm = session(hybrid, hybrid_drafts["some"], ["draft-simple"])
    fresh = session(hybrid, hybrid_drafts["some"], ["draft-simple"])
    try:
        turn1 = warm.tokenize(PROMPT)
        out1, st1 = generate(warm, turn1)
        turn2 = turn1 + out1 + warm.tokenize(" then the dog ran")
        got2, st2 = generate(warm, turn2)
        assert got2 == generate(fresh, turn2, reuse_prefix=False)[0]
        assert st2.cache_n == len(turn1) + len(out1) - 1
        # turn 3 rewrites turn 2's answer: the cache is kept up to the end of turn 2's prompt
        # (its checkpoint), not further, since a recurrent state cannot be cut back freely
        turn3 = turn2 + warm.tokenize(" but the bird sang")
        got3, st3 = generate(warm, turn3)
        assert got3 == generate(fresh, turn3, reuse_prefix=False)[0]
        assert st3.cache_n == len(turn2) - 1
        # a prompt that shares only a few tokens with anything checkpointed: a fresh evaluation
        other = warm.tokenize("the dog")
        got4, st4 = generate(warm, other)
        assert got4 == generate(fresh, other, reuse_prefix=False)[0]
        assert st4.cache_n == 0
    finally:
        warm.close()
        fresh.close()


def test_conversation_turns(hybrid, hybrid_drafts, monkeypatch, capsys):
    models = ["-m", str(hybrid), "-md", str(hybrid_drafts["some"]), "-t", "1", "-c", "512",
              "-fa", "off", "--spec-type", "draft-simple", "--spec-draft-n-max", "4"]  # fmt: skip
    check_two_turns(models, monkeypatch, capsys)


def test_server_with_two_slots(hybrid, hybrid_drafts):
    s = Server(["-m", str(hybrid), "-md", str(hybrid_drafts["some"]), *FAST, "-c", "1024",
                "-np", "2", "--spec-type", "draft-simple", "--spec-draft-n-max", "4"])  # fmt: skip
    prompts = [PROMPT, "once upon a time there was"]
    try:
        bodies = [{"prompt": p, "n_predict": 24} for p in prompts]
        answers = post_together(s, "/completion", bodies)
        again = s.post("/completion", {"prompt": prompts[0], "n_predict": 24})
        cold = s.post("/completion", {"prompt": prompts[0], "n_predict": 24, "cache_prompt": False})
    finally:
        code, err = s.stop()
    assert code == 0 and "Traceback" not in err, err
    plain = session(hybrid)
    try:
        for i, p in enumerate(prompts):
            ref = plain.target_model.piece
            want = b"".join(ref(t) for t in generate(plain, plain.tokenize(p), n=24)[0])
            assert answers[i]["content"] == want.decode()
    finally:
        plain.close()
    assert again["content"] == cold["content"] == answers[0]["content"]
    assert again["timings"]["cache_n"] > 0 and cold["timings"]["cache_n"] == 0


def test_bench_cost_curve_rolls_back_by_checkpoints(hybrid, hybrid_drafts, plain):
    """bench times k-token passes and rolls each back: on a hybrid pair that goes through the
    checkpoints (each pass restored exactly, nothing evaluated twice), and both caches are left
    empty, so the next generation is what a fresh one prints."""
    from specgguf.bench import measure_cost_curve

    s = session(hybrid, hybrid_drafts["some"], ["draft-simple"])
    try:
        tokens = s.tokenize(PROMPT)
        curve = measure_cost_curve(s, tokens, max_k=4, reps=2)
        assert set(curve.target_ms) >= {1, 5} and curve.draft_ms is not None
        assert s.target.n_past == 0 and s.draft_ctx.n_past == 0
        assert s.target.stats.restores > 0 and s.target.stats.redecoded == 0
        assert generate(s, tokens)[0] == reference(plain)
    finally:
        s.close()


# -- a purely recurrent target and draft (mamba) ------------------------------------------------


@pytest.fixture(scope="module")
def mamba(tiny_models_dir):
    """The tiny mamba target, a noisy copy of it and one that always proposes EOS."""
    d = tiny_models_dir
    return {
        "target": build_tiny_mamba(d / "mamba.gguf", seed=TARGET_SEED),
        "some": build_tiny_mamba(
            d / "mamba-draft.gguf", seed=99, perturb_from_seed=TARGET_SEED,
            perturb_scale=DRAFT_PERTURB,
        ),
        "always": build_tiny_mamba(d / "mamba-eos.gguf", seed=5, eos_logit_bias=40.0),
    }  # fmt: skip


@pytest.mark.parametrize("n_max", [1, 4, 8])
@pytest.mark.parametrize("rejects", ["some", "always"])
def test_mamba_target_and_draft(mamba, rejects, n_max):
    base = session(mamba["target"])
    s = session(mamba["target"], mamba[rejects], ["draft-simple"], n_max=n_max)
    try:
        assert s.memory == {"target": memory_caps.FULL, "draft": memory_caps.FULL}
        assert s.memory_report()["target"]["kind"] == "recurrent"
        tokens = s.tokenize(PROMPT)
        got, st = generate(s, tokens)
        assert got == generate(base, tokens)[0]
        assert st.n_drafted > 0 and s.target.stats.restores > 0
        if rejects == "always":
            assert st.n_accept == 0
        # the next turn extends the cache: reused whole
        turn2 = tokens + got + s.tokenize(" and then")
        got2, st2 = generate(s, turn2, n=16)
        assert got2 == generate(base, turn2, n=16, reuse_prefix=False)[0]
        assert st2.cache_n == len(tokens) + len(got) - 1
    finally:
        s.close()
        base.close()

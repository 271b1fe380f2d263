"""--spec-type draft-mtp on a tiny qwen35 target carrying one NextN layer (tests.tiny_hybrid,
nextn=1): the head is an MTP context over the target's own loaded model, fed the target's last
hidden state of every row it evaluates. The head's weights are random, so nearly every draft
is rejected (the first round's included): what must hold is that the text is plain decoding's
whatever the drafts, and that the head's state follows the target's through chunked prompts,
rollbacks, prefix reuse and context ends (then its drafts are those of a fresh head)."""

from __future__ import annotations

import pytest
from specgguf_cli.app import run_cli

from specgguf.backend.session import LoadOptions, Session, SpecOptions
from specgguf.core.sampling import SamplerParams
from specgguf.drafters.mtp import MtpDrafter
from specgguf.errors import ExitCode
from tests.conversation import check_two_turns
from tests.serve_helpers import FAST, Server, post_together
from tests.tiny_hybrid import build_tiny_qwen35
from tests.tiny_models import TARGET_SEED

GREEDY = SamplerParams(temp=0.0)
WARM = SamplerParams(temp=0.8)
HOT = SamplerParams(temp=5.0, top_k=0, top_p=1.0, min_p=0.0)
PROMPT = "the cat sat on the mat and the cat sat on"
N = 32


@pytest.fixture(scope="module")
def mtp_target(tiny_models_dir):
    return build_tiny_qwen35(tiny_models_dir / "qwen35-mtp.gguf", seed=TARGET_SEED, nextn=1)


@pytest.fixture(scope="module")
def plain_target(tiny_models_dir):
    return build_tiny_qwen35(tiny_models_dir / "qwen35-plain.gguf", seed=TARGET_SEED)


def session(target, types=("draft-mtp",), n_max=4, *, n_ctx=512, n_batch=2048, **spec):
    load = LoadOptions(
        model=target, n_ctx=n_ctx, threads=1, flash_attn="off",
        n_batch=n_batch, n_ubatch=min(512, n_batch),
    )  # fmt: skip
    return Session(load, SpecOptions(types=list(types), n_max=n_max, **spec))


def generate(s, tokens, sampler=GREEDY, n=N, seed=5, **kw):
    """(emitted tokens, each round's proposals, the decoder) of one generation."""
    dec = s.decoder(sampler, n, seed, **kw)
    dec.rounds = list(dec.generate(tokens))
    return [t for r in dec.rounds for t in r.emitted], [r.proposed for r in dec.rounds], dec


@pytest.fixture(scope="module")
def plain(mtp_target):
    s = session(mtp_target, types=())
    yield s
    s.close()


@pytest.fixture(scope="module")
def mtp(mtp_target):
    s = session(mtp_target, n_max=8)
    yield s
    s.close()


def reference(plain, prompt=PROMPT, sampler=GREEDY, n=N):
    return generate(plain, plain.tokenize(prompt), sampler, n, reuse_prefix=False)[0]


@pytest.mark.parametrize("k", range(1, 9))
def test_greedy_equals_plain_decoding_for_every_draft_length(mtp, plain, k):
    spec = SpecOptions(types=["draft-mtp"], n_max=k)
    got, proposed, dec = generate(mtp, mtp.tokenize(PROMPT), spec=spec, reuse_prefix=False)
    assert got == reference(plain)
    assert isinstance(dec.drafters[0], MtpDrafter)
    assert max(map(len, proposed)) == k  # it drafted, up to the budget
    # random weights: the very first round's draft is rejected, and still the text is plain's
    assert proposed[0] and dec.rounds[0].n_accepted < len(proposed[0])


def test_seeded_sampling_equals_plain_decoding_token_for_token(mtp, plain):
    spec = SpecOptions(types=["draft-mtp"], n_max=4, draft_sampling="greedy")
    for seed in (1, 2, 3):
        got = generate(mtp, mtp.tokenize(PROMPT), WARM, seed=seed, spec=spec, reuse_prefix=False)
        ref = generate(plain, plain.tokenize(PROMPT), WARM, seed=seed, reuse_prefix=False)
        assert got[0] == ref[0]


def test_probabilistic_drafts_carry_the_heads_distribution(mtp):
    spec = SpecOptions(types=["draft-mtp"], n_max=4, draft_sampling="probabilistic")
    dec = mtp.decoder(HOT, 24, 7, spec=spec, reuse_prefix=False)
    drafter = dec.drafters[0]
    assert drafter.rules.probabilistic
    seen = []
    real_propose = drafter.propose

    def spy(budget, gate=None):
        d = real_propose(budget, gate)
        seen.append(d)
        return d

    drafter.propose = spy
    out = [t for r in dec.generate(mtp.tokenize(PROMPT)) for t in r.emitted]
    assert len(out) == 24
    drafts = [d for d in seen if d.tokens]
    assert drafts and all(d.probs is not None and len(d.probs) == len(d.tokens) for d in drafts)
    # each proposal is a sample of its q (q gives it a positive probability)
    assert all(q.prob(t) > 0 for d in drafts for t, q in zip(d.tokens, d.probs, strict=True))
    # at a high temperature the target's p and the head's q overlap: some drafts are accepted
    assert dec.stats.n_accept > 0


def test_every_round_drafts_what_a_fresh_head_drafts_there(mtp, mtp_target):
    """The head's state after accepted and rejected rounds alike: round r's draft equals the
    first draft of a fresh session given everything emitted before round r as its prompt
    (sampled at a high temperature, so that drafts are accepted; randomness is keyed by
    position, so both draw the same samples)."""
    spec = SpecOptions(types=["draft-mtp"], n_max=4, draft_sampling="probabilistic")
    prompt = mtp.tokenize(PROMPT)
    dec = mtp.decoder(HOT, 40, 11, spec=spec, reuse_prefix=False)
    history, checked = list(prompt), 0
    fresh = session(mtp_target)
    try:
        after_accept = False
        for rnd in dec.generate(prompt):
            if after_accept or checked < 3:
                first = fresh.decoder(HOT, 40, 11, spec=spec, reuse_prefix=False)
                theirs = next(iter(first.generate(history))).proposed
                assert theirs[: len(rnd.proposed)] == rnd.proposed  # near -n: a smaller budget
                checked += 1
            after_accept = rnd.n_accepted > 0
            history += rnd.emitted
    finally:
        fresh.close()
    assert dec.stats.n_accept > 0 and checked > 3


def test_a_prompt_longer_than_one_batch(mtp_target, plain):
    long_prompt = " ".join([PROMPT] * 4)
    s = session(mtp_target, n_batch=16)
    fresh = session(mtp_target)
    try:
        tokens = s.tokenize(long_prompt)
        assert len(tokens) > 3 * 16
        got, proposed, _ = generate(s, tokens)
        assert got == reference(plain, long_prompt)
        # the head read the prompt in chunks and drafts what a head that read it at once does
        assert proposed == generate(fresh, fresh.tokenize(long_prompt))[1]
    finally:
        s.close()
        fresh.close()


def test_prefix_reuse_resumes_the_head_where_the_target_resumes(mtp_target, plain):
    warm = session(mtp_target)
    fresh = session(mtp_target)
    try:
        turn1 = warm.tokenize(PROMPT)
        out1, _, _ = generate(warm, turn1)
        turn2 = turn1 + out1 + warm.tokenize(" then the dog ran")
        got, proposed, dec = generate(warm, turn2)
        ref, ref_proposed, _ = generate(fresh, turn2, reuse_prefix=False)
        assert got == ref
        assert dec.stats.cache_n > 0  # the target (and with it the head) kept turn 1
        assert proposed == ref_proposed  # the resumed head drafts as a fresh one
        # a prompt that shares only its start: both resume there and still agree
        other = warm.tokenize("the cat sat on a hat")
        got3, proposed3, _ = generate(warm, other)
        ref3, ref_proposed3, _ = generate(fresh, other, reuse_prefix=False)
        assert (got3, proposed3) == (ref3, ref_proposed3)
    finally:
        warm.close()
        fresh.close()


def test_conversation_turns(mtp_target, monkeypatch, capsys):
    models = ["-m", str(mtp_target), "-t", "1", "-c", "512", "-fa", "off",
              "--spec-type", "draft-mtp", "--spec-draft-n-max", "4"]  # fmt: skip
    plain = [a if a != "draft-mtp" else "none" for a in models]
    check_two_turns(models, monkeypatch, capsys, replay=plain)


def test_the_context_end(mtp_target):
    small = session(mtp_target, n_ctx=256, n_max=8)  # llama.cpp's smallest context
    plain_small = session(mtp_target, types=(), n_ctx=256)
    try:
        tokens = small.tokenize(PROMPT)
        got, proposed, dec = generate(small, tokens, n=400)
        ref, _, ref_dec = generate(plain_small, tokens, n=400)
        assert got == ref and dec.stop_reason == ref_dec.stop_reason == "context"
        assert len(tokens) + len(got) == 257  # the cache's 256 positions and the last token
        # it drafted up to the end, each draft within the cells left
        assert proposed[-2] and len(proposed[-2]) <= 2
    finally:
        small.close()
        plain_small.close()


def test_two_slots_have_their_own_heads(mtp_target, plain):
    load = LoadOptions(model=mtp_target, n_ctx=1024, threads=1, flash_attn="off")
    s = Session(load, SpecOptions(types=["draft-mtp"], n_max=4), parallel=2)
    try:
        a, b = s.slots
        assert a.mtp is not None and b.mtp is not None and a.mtp.head is not b.mtp.head
        other = "once upon a time there was"
        got_b = generate(s, s.tokenize(other), slot=b)[0]
        got_a = generate(s, s.tokenize(PROMPT), slot=a)[0]
        assert got_a == reference(plain) and got_b == reference(plain, other)
    finally:
        s.close()


def test_server_with_two_slots(mtp_target, plain):
    s = Server(["-m", str(mtp_target), *FAST, "-c", "1024", "-np", "2",
                "--spec-type", "draft-mtp", "--spec-draft-n-max", "4"])  # fmt: skip
    prompts = [PROMPT, "once upon a time there was"]
    try:
        bodies = [{"prompt": p, "n_predict": 24} for p in prompts]
        answers = post_together(s, "/completion", bodies)
        again = s.post("/completion", bodies[0])
    finally:
        code, err = s.stop()
    assert code == 0 and "Traceback" not in err, err
    piece = plain.target_model.piece
    for i, p in enumerate(prompts):
        want = b"".join(piece(t) for t in reference(plain, p, n=24)).decode()
        assert answers[i]["content"] == want
    assert again["content"] == answers[0]["content"] and again["tokens_cached"] > 0


# -- refusals, before anything is loaded -------------------------------------------------------


def test_a_target_without_nextn_layers_is_refused(plain_target, capsys):
    argv = ["run", "-m", str(plain_target), "--spec-type", "draft-mtp", "-p", "hi", "-n", "4"]
    assert run_cli(argv) == ExitCode.INCOMPATIBLE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no MTP layers" in err[0]


def test_a_library_without_the_calls_is_refused(mtp_target, monkeypatch, capsys):
    from specgguf.backend import engine, llama_ext

    loaded = []
    monkeypatch.setattr(llama_ext, "ext", lambda: None)
    monkeypatch.setattr(engine.Model, "__init__", lambda *a, **k: loaded.append(a))
    argv = ["run", "-m", str(mtp_target), "--spec-type", "draft-mtp", "-p", "hi", "-n", "4"]
    assert run_cli(argv) == ExitCode.NO_RUNTIME
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "draft-mtp" in err[0]
    assert loaded == []  # refused before any model loads


def test_bench_times_the_mtp_heads_step_and_stores_it_as_draft_mtps(mtp_target, capfd):
    import json
    import os
    from pathlib import Path

    argv = ["bench", "-m", str(mtp_target), "-t", "1", "-c", "512", "-n", "8", "-p", "abc abc",
            "--spec-type", "draft-mtp:2", "--json"]  # fmt: skip
    assert run_cli(argv) == 0
    report = json.loads(capfd.readouterr().out)
    assert report["cost_curve"]["draft_step_ms"] > 0  # the head's own step, timed
    for row in report["configs"]:  # timing between prompts left every head as it must be
        same = row["same_text_as_plain"]
        assert same is None or same["identical"] == same["runs"], row["label"]
    stored = Path(os.environ["SPECGGUF_PROFILES"]).rglob("*.json")
    profiles = [json.loads(f.read_text()) for f in stored]
    assert any("draft-mtp" in p["draft"] for p in profiles)

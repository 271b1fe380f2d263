"""--spec-type draft-mtp on a tiny qwen35 target carrying one NextN layer (tests.tiny_hybrid,
nextn=1): the head is an MTP context over the target's own loaded model, fed the target's last
hidden state of every row it evaluates. The head's weights are random, so nearly every draft
is rejected (the first round's included): what must hold is that the text is plain decoding's
whatever the drafts, and that the head's state follows the target's through chunked prompts,
rollbacks, prefix reuse and context ends (then its drafts are those of a fresh head)."""

from __future__ import annotations

import pytest
from specgguf_cli.app import run_cli

from specgguf.errors import ExitCode
from specgguf.loading.session import LoadOptions, Session, SpecOptions
from tests import mtp_checks
from tests.conversation import check_two_turns
from tests.draft_spy import record_proposals
from tests.serve_helpers import FAST
from tests.tiny_hybrid import build_tiny_qwen35
from tests.tiny_models import TARGET_SEED


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


@pytest.mark.parametrize("k", range(1, 9))
def test_greedy_equals_plain_decoding_for_every_draft_length(mtp, plain, k):
    dec = mtp_checks.check_greedy_equals_plain(mtp, plain, k)
    # random weights: the first draft (after the prompt's token) is rejected, and still the
    # text is plain's
    first = dec.rounds[1]
    assert dec.rounds[0].from_prompt and first.proposed
    assert first.n_accepted < len(first.proposed)


def test_seeded_sampling_equals_plain_decoding_token_for_token(mtp, plain):
    mtp_checks.check_seeded_sampling(mtp, plain)


def test_probabilistic_drafts_carry_the_heads_distribution(mtp):
    spec = SpecOptions(types=["draft-mtp"], n_max=4, draft_sampling="probabilistic")
    dec = mtp.decoder(mtp_checks.HOT, 24, 7, spec=spec, reuse_prefix=False)
    drafter = dec.drafters[0]
    assert drafter.rules.probabilistic
    seen = record_proposals(drafter)
    out = [t for r in dec.generate(mtp.tokenize(mtp_checks.PROMPT)) for t in r.emitted]
    assert len(out) == 24
    drafts = [d for d in seen if d.tokens]
    assert drafts and all(d.probs is not None and len(d.probs) == len(d.tokens) for d in drafts)
    # each proposal is a sample of its q (q gives it a positive probability)
    assert all(q.prob(t) > 0 for d in drafts for t, q in zip(d.tokens, d.probs, strict=True))
    # at a high temperature the target's p and the head's q overlap: some drafts are accepted
    assert dec.stats.n_accept > 0


def test_every_round_drafts_what_a_fresh_head_drafts_there(mtp, mtp_target):
    fresh = session(mtp_target)
    try:
        mtp_checks.check_rounds_match_a_fresh_session(mtp, fresh)
    finally:
        fresh.close()


def test_a_prompt_longer_than_one_batch(mtp_target, plain):
    s, fresh = session(mtp_target, n_batch=16), session(mtp_target)
    try:
        mtp_checks.check_a_prompt_longer_than_one_batch(s, fresh, plain)
    finally:
        s.close()
        fresh.close()


def test_prefix_reuse_resumes_the_head_where_the_target_resumes(mtp_target):
    warm, fresh = session(mtp_target), session(mtp_target)
    try:
        mtp_checks.check_prefix_reuse(warm, fresh)
    finally:
        warm.close()
        fresh.close()


def test_conversation_turns(mtp_target, monkeypatch, capsys):
    models = ["-m", str(mtp_target), "-t", "1", "-c", "512", "-fa", "off",
              "--spec-type", "draft-mtp", "--spec-draft-n-max", "4"]  # fmt: skip
    plain = [a if a != "draft-mtp" else "none" for a in models]
    check_two_turns(models, monkeypatch, capsys, replay=plain)


def test_the_context_end(mtp_target):
    small = session(mtp_target, n_ctx=256, n_max=8)
    plain_small = session(mtp_target, types=(), n_ctx=256)
    try:
        mtp_checks.check_the_context_end(small, plain_small)
    finally:
        small.close()
        plain_small.close()


def test_two_slots_have_their_own_heads(mtp_target, plain):
    load = LoadOptions(model=mtp_target, n_ctx=1024, threads=1, flash_attn="off")
    s = Session(load, SpecOptions(types=["draft-mtp"], n_max=4), parallel=2)
    try:
        mtp_checks.check_two_slots(s, plain)
    finally:
        s.close()


def test_server_with_two_slots(mtp_target, plain):
    argv = ["-m", str(mtp_target), *FAST, "-c", "1024", "-np", "2", "--spec-type", "draft-mtp",
            "--spec-draft-n-max", "4"]  # fmt: skip
    mtp_checks.check_server_two_slots(argv, plain)


# -- refusals, before anything is loaded -------------------------------------------------------


def test_a_target_without_nextn_layers_is_refused(plain_target, capsys):
    argv = ["run", "-m", str(plain_target), "--spec-type", "draft-mtp", "-p", "hi", "-n", "4"]
    assert run_cli(argv) == ExitCode.INCOMPATIBLE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no MTP layers" in err[0]


def test_a_library_without_the_calls_is_refused(mtp_target, monkeypatch, capsys):
    from specgguf.binding import engine, llama_ext

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

"""draft-eagle3 on tiny GGUFs: an EAGLE-3 head over a tiny llama target, run by llama.cpp.

The heads are random (tests/tiny_eagle3.py): one with its own lm_head, which nearly never
agrees with the target (every round a rejection, the boundary moved back each time), and one
whose draft vocabulary (d2t) is the target's two most frequent tokens, so that some rounds
are accepted (the boundary moved forward). Either way the output must be the target's own.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from specgguf_cli.app import run_cli

from specgguf.core.sampling import SamplerParams
from specgguf.errors import ExitCode, SpecggufError
from specgguf.loading.session import LoadOptions, Session, SpecOptions
from tests.conversation import check_two_turns
from tests.draft_spy import record_proposals
from tests.gguf_factory import SMOLLM, need_models
from tests.hearing import (
    GREEDY,
    check_end_of_context,
    check_long_prompt,
    check_prefix_reuse,
    check_refusals,
    check_server_slots,
    generate,
    refuse_loading,
)
from tests.tiny_eagle3 import build_eagle3_head, build_eagle3_target
from tests.tiny_models import TARGET_SEED

WARM = SamplerParams(temp=0.9, top_k=40, top_p=0.95)
PROMPTS = ["Hello world, this is", "the cat sat on the mat and"]
#: the tiny target's two most frequent greedy tokens ('#', 's'): the d2t head's vocabulary
FREQUENT = [35, 115]
N = 40


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("eagle3")
    return {
        "target": build_eagle3_target(d / "target.gguf", seed=TARGET_SEED),
        "random": build_eagle3_head(d / "head.gguf"),
        "d2t": build_eagle3_head(d / "head-d2t.gguf", d2t=FREQUENT, seed=3),
    }


def session(target, head=None, n_max=4, *, n_batch=2048, n_ctx=512, **spec):
    load = LoadOptions(
        model=target, model_draft=head, n_ctx=n_ctx, threads=1, flash_attn="off",
        n_batch=n_batch, n_ubatch=min(512, n_batch),
    )  # fmt: skip
    types = ["draft-eagle3"] if head is not None else []
    return Session(load, SpecOptions(types=types, n_max=n_max, **spec))


def maker(models, kind):
    """A session maker over the target with the `kind` head (head=False: plain)."""

    def make(head=True, **kw):
        return session(models["target"], models[kind] if head else None, **kw)

    return make


@pytest.fixture(scope="module")
def plain(models):
    s = session(models["target"])
    yield s
    s.close()


def reference(plain, prompt, sampler=GREEDY, n=N):
    return generate(plain, plain.tokenize(prompt), sampler, n)[0]


@pytest.mark.parametrize("n_max", range(1, 9))
def test_greedy_equals_plain(models, plain, n_max):
    drafted = accepted = 0
    for head in ("random", "d2t"):
        s = session(models["target"], models[head], n_max=n_max)
        try:
            for prompt in PROMPTS:
                got, dec, _ = generate(s, s.tokenize(prompt))
                assert got == reference(plain, prompt), (head, prompt)
                drafted += dec.stats.n_drafted
                accepted += dec.stats.n_accept
        finally:
            s.close()
    assert drafted > 0 and accepted > 0  # both directions of the boundary were taken


@pytest.mark.parametrize(
    ("head", "others"), [("random", []), ("d2t", []), ("d2t", ["ngram-simple"])]
)
def test_every_round_drafts_what_a_fresh_head_drafts_there(models, head, others):
    """After accepted and rejected rounds alike, and rounds another drafter won, the head's
    state is what evaluating the whole sequence so far as a prompt gives: its next draft is
    a fresh head's first one."""
    s = session(models["target"], models[head], n_max=3)
    s.spec.types = [*others, "draft-eagle3"]
    s.spec.ngram = {"size_n": 2}  # short keys: the n-gram drafter wins some rounds
    fresh = session(models["target"], models[head], n_max=3)
    try:
        loopy = "the cat sat on the mat. the cat sat on the mat. the cat sat on the"
        prompt = s.tokenize(loopy if others else PROMPTS[0])
        _, dec, rounds = generate(s, prompt, n=N)
        assert dec.stats.n_accept > 0 or head == "random"
        if others:
            assert {r.drafter for r in rounds} >= {"ngram-simple", "draft-eagle3"}
        seq = list(prompt)
        for r in rounds:
            if r.drafter == "draft-eagle3":
                # a fresh head that read seq[:-1] as a prompt: its first token is seq[-1]
                # (greedy), and its first draft follows seq
                _, _, first = generate(fresh, seq[:-1], n=8, reuse_prefix=False)
                assert first[0].from_prompt and first[0].emitted == seq[-1:]
                want = first[1].proposed
                n = min(len(want), len(r.proposed))
                assert n > 0 and r.proposed[:n] == want[:n], len(seq) - len(prompt)
            seq.extend(r.emitted)
    finally:
        s.close()
        fresh.close()


def test_the_d2t_head_drafts_only_its_vocabulary(models):
    s = session(models["target"], models["d2t"], n_max=3)
    try:
        _, _, rounds = generate(s, s.tokenize(PROMPTS[0]))
        proposed = {t for r in rounds for t in r.proposed}
        assert proposed and proposed <= set(FREQUENT)
    finally:
        s.close()


@pytest.mark.parametrize("head", ["random", "d2t"])
def test_seeded_sampling_equals_plain_token_for_token(models, plain, head):
    s = session(models["target"], models[head], n_max=4, draft_sampling="greedy")
    try:
        for prompt in PROMPTS:
            got, dec, _ = generate(s, s.tokenize(prompt), WARM)
            assert got == reference(plain, prompt, WARM) and dec.stats.n_drafted > 0
    finally:
        s.close()


def test_probabilistic_drafts_carry_the_heads_distribution(models):
    s = session(models["target"], models["d2t"], n_max=4, draft_sampling="probabilistic")
    try:
        dec = s.decoder(WARM, N, 5)
        (drafter,) = dec.drafters
        drafts = record_proposals(drafter)
        out = [t for r in dec.generate(s.tokenize(PROMPTS[0])) for t in r.emitted]
        assert len(out) == N
        with_q = [d for d in drafts if d.tokens]
        assert with_q and all(d.probs is not None for d in with_q)
        # q is the head's: all its mass on the d2t vocabulary
        for d in with_q:
            for q, tok in zip(d.probs, d.tokens, strict=True):
                assert q.prob(tok) > 0
                assert sum(q.prob(t) for t in FREQUENT) == pytest.approx(1.0, abs=1e-5)
    finally:
        s.close()


def test_a_prompt_longer_than_one_batch(models, plain):
    long_prompt = " ".join(f"word{i}" for i in range(40))
    check_long_prompt(maker(models, "d2t"), reference(plain, long_prompt), long_prompt)


def test_a_rejection_in_the_first_drafting_round(models, plain):
    s = session(models["target"], models["random"], n_max=4)
    try:
        got, _, rounds = generate(s, s.tokenize(PROMPTS[0]))
        assert rounds[0].from_prompt and not rounds[0].proposed
        assert rounds[1].proposed and rounds[1].n_accepted == 0
        assert got == reference(plain, PROMPTS[0])
    finally:
        s.close()


def test_prefix_reuse_drafts_as_a_fresh_evaluation(models):
    check_prefix_reuse(maker(models, "d2t"), PROMPTS[0])


def test_conversation_turns(models, monkeypatch, capsys):
    args = ["-m", str(models["target"]), "-md", str(models["d2t"]), "-t", "1", "-c", "512",
            "-fa", "off", "--spec-draft-n-max", "4"]  # fmt: skip
    check_two_turns(args, monkeypatch, capsys, replay=[*args, "--spec-type", "none"])


def test_the_end_of_the_context(models):
    check_end_of_context(maker(models, "d2t"), PROMPTS[1], n_max=8)


def test_server_slots_each_hear_their_own_target(models, plain):
    check_server_slots(models["target"], models["d2t"], plain, PROMPTS, reference)


def test_bench_rows_and_the_heads_step_cost(models, capfd):
    argv = ["bench", "-m", str(models["target"]), "-md", str(models["d2t"]), "-t", "1",
            "-c", "512", "-n", "8", "-p", PROMPTS[0], "--spec-type", "draft-eagle3:2",
            "--json"]  # fmt: skip
    assert run_cli(argv) == 0
    report = json.loads(capfd.readouterr().out)
    assert [c["label"] for c in report["configs"]][1:] == ["draft-eagle3 n_max=2"]
    assert report["cost_curve"]["draft_step_ms"] > 0  # the head's own step, timed
    stored = Path(os.environ["SPECGGUF_PROFILES"]).rglob("*.json")
    profiles = [json.loads(f.read_text()) for f in stored]
    assert any("draft-eagle3" in p["draft"] for p in profiles)  # stored as the head's step
    assert not any("draft-simple" in p["draft"] for p in profiles)
    # without --spec-type the head's file makes its type, in the default rows too
    assert run_cli(argv[: argv.index("--spec-type")] + ["--json"]) == 0
    labels = [c["label"] for c in json.loads(capfd.readouterr().out)["configs"]]
    assert "draft-eagle3 n_max=3" in labels
    assert "default (ngram-map-k,suffix,draft-eagle3 auto)" in labels


@pytest.mark.real
def test_a_random_head_over_smollm2_matches_plain_or_parts_at_a_near_tie(tmp_path):
    """On a real (Q4_1) target a verify pass and a one-token step round differently, so the
    texts may part where the target's two best logits nearly tie (draft-simple's rule)."""
    need_models(SMOLLM)
    from scripts.eagle3_parity import make_head
    from tests.test_batched import assert_same_or_near_tie
    from tests.test_batched_real import NEAR_TIE

    head = make_head(SMOLLM, tmp_path / "head.gguf")
    base, s = session(SMOLLM), session(SMOLLM, head, n_max=4)
    try:
        tokens = s.tokenize("The quick brown fox jumps over the lazy dog. Then the dog")
        got, dec, _ = generate(s, tokens, n=32)
        ref = generate(base, tokens, n=32)[0]
        assert_same_or_near_tie(base, tokens, ref, got, "smollm2", near_tie=NEAR_TIE)
        assert dec.stats.n_drafted > 0
    finally:
        s.close()
        base.close()


# -- refusals before anything loads ----------------------------------------------------------


@pytest.fixture
def no_loading(monkeypatch):
    refuse_loading(monkeypatch)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        (dict(target_hidden_size=48), ExitCode.INCOMPATIBLE),  # made for another target
        (dict(omit=["blk.0.ffn_up.weight"]), ExitCode.MODEL),  # lacks tensors
        (dict(d2t=[3, 10_000]), ExitCode.INCOMPATIBLE),  # d2t outside the vocabulary
    ],
)
def test_bad_heads_are_refused_before_loading(models, tmp_path, no_loading, kwargs, code):
    head = build_eagle3_head(tmp_path / "bad.gguf", **kwargs)
    with pytest.raises(SpecggufError) as err:
        session(models["target"], head)
    assert err.value.code == code and "\n" not in str(err.value)


def test_a_qwen2_target_and_a_library_without_the_calls_are_refused(
    models, tmp_path, monkeypatch
):
    head = models["random"]
    check_refusals(session, models["target"], head, tmp_path, monkeypatch, "draft-eagle3")


def test_the_command_line_says_it_in_one_line(models, capfd):
    argv = ["run", "-m", str(models["target"]), "-md", str(models["random"]), "-p", "hi"]
    assert run_cli([*argv, "--spec-type", "draft-simple"]) == ExitCode.USAGE
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "EAGLE-3 head" in err and "Traceback" not in err
    argv = ["run", "-m", str(models["target"]), "-md", str(models["target"]), "-p", "hi"]
    assert run_cli([*argv, "--spec-type", "draft-eagle3"]) == ExitCode.MODEL
    assert "needs an EAGLE-3 head" in capfd.readouterr().err

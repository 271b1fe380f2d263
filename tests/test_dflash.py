"""draft-dflash and draft-dspark on tiny GGUFs: a block drafter over a tiny llama target, run by
llama.cpp.

The drafters are random (tests/tiny_dflash.py): one with its own lm_head, which nearly never
agrees with the target (every round a rejection, the drafter's cache cut back each time), one
whose draft vocabulary (d2t) is the target's two most frequent tokens, so that some rounds
are accepted, and a DSpark drafter (a Markov head, a confidence head). Either way the output
must be the target's own.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from specgguf_cli.app import run_cli

from specgguf.core.sampling import SamplerParams
from specgguf.errors import ExitCode, SpecggufError
from specgguf.loading.session import LoadOptions, Session, SpecOptions
from tests.conversation import check_two_turns
from tests.draft_spy import record_proposals
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
from tests.tiny_dflash import build_dflash_head
from tests.tiny_eagle3 import build_eagle3_target
from tests.tiny_models import TARGET_SEED

WARM = SamplerParams(temp=0.9, top_k=40, top_p=0.95)
PROMPTS = ["Hello world, this is", "the cat sat on the mat and"]
#: the tiny target's two most frequent greedy tokens ('#', 's'): the d2t drafter's vocabulary
FREQUENT = [35, 115]
N = 40
#: each drafter's --spec-type
TYPES = {"random": "draft-dflash", "d2t": "draft-dflash", "dspark": "draft-dspark"}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("dflash")
    return {
        "target": build_eagle3_target(d / "target.gguf", seed=TARGET_SEED),
        "random": build_dflash_head(d / "dflash.gguf"),
        "d2t": build_dflash_head(d / "dflash-d2t.gguf", d2t=FREQUENT, seed=3),
        "dspark": build_dflash_head(
            d / "dspark.gguf", d2t=FREQUENT, seed=5, markov_rank=8, confidence=True
        ),
    }


def session(target, head=None, n_max=4, *, kind="random", n_batch=2048, n_ctx=512, **spec):
    load = LoadOptions(
        model=target, model_draft=head, n_ctx=n_ctx, threads=1, flash_attn="off",
        n_batch=n_batch, n_ubatch=min(512, n_batch),
    )  # fmt: skip
    types = [TYPES[kind]] if head is not None else []
    return Session(load, SpecOptions(types=types, n_max=n_max, **spec))


def maker(models, kind):
    """A session maker over the target with the `kind` drafter (head=False: plain)."""

    def make(head=True, **kw):
        return session(models["target"], models[kind] if head else None, kind=kind, **kw)

    return make


@pytest.fixture(scope="module")
def plain(models):
    s = session(models["target"])
    yield s
    s.close()


def reference(plain, prompt, sampler=GREEDY, n=N):
    return generate(plain, plain.tokenize(prompt), sampler, n)[0]


@pytest.mark.parametrize("n_max", [1, 3, 7, 12])
def test_greedy_equals_plain(models, plain, n_max):
    drafted = accepted = 0
    for kind in ("random", "d2t", "dspark"):
        s = session(models["target"], models[kind], n_max=n_max, kind=kind)
        try:
            for prompt in PROMPTS:
                got, dec, rounds = generate(s, s.tokenize(prompt))
                assert got == reference(plain, prompt), (kind, prompt)
                # one pass drafts at most the trained block's mask rows (block_size 8)
                longest = max(len(r.proposed) for r in rounds)
                assert longest == min(n_max, 8 if kind == "dspark" else 7), kind
                drafted += dec.stats.n_drafted
                accepted += dec.stats.n_accept
        finally:
            s.close()
    assert drafted > 0 and accepted > 0  # the drafter's cache was cut back and kept both


@pytest.mark.parametrize(("kind", "others"), [("random", []), ("d2t", ["ngram-simple"])])
def test_every_round_drafts_what_a_fresh_drafter_drafts_there(models, kind, others):
    """After accepted and rejected rounds alike, and rounds another drafter won, the drafter's
    cache is what evaluating the whole sequence so far as a prompt gives: its draft is a fresh
    drafter's first one there, token for token."""
    s = session(models["target"], models[kind], n_max=3, kind=kind)
    s.spec.types = [*others, TYPES[kind]]
    s.spec.ngram = {"size_n": 2}  # short keys: the n-gram drafter wins some rounds
    fresh = session(models["target"], models[kind], n_max=3, kind=kind)
    try:
        loopy = "the cat sat on the mat. the cat sat on the mat. the cat sat on the"
        prompt = s.tokenize(loopy if others else PROMPTS[0])
        _, dec, rounds = generate(s, prompt, n=N)
        if others:
            assert {r.drafter for r in rounds} >= {"ngram-simple", "draft-dflash"}
            assert dec.stats.n_accept > 0
        seq = list(prompt)
        compared = 0
        for r in rounds:
            if r.drafter == "draft-dflash" and r.proposed:
                _, _, first = generate(fresh, seq[:-1], n=8, reuse_prefix=False)
                assert first[0].from_prompt and first[0].emitted == seq[-1:]
                want = first[1].proposed
                n = min(len(want), len(r.proposed))
                assert n > 0 and r.proposed[:n] == want[:n], len(seq) - len(prompt)
                compared += 1
            seq.extend(r.emitted)
        assert compared > 3
    finally:
        s.close()
        fresh.close()


def test_the_d2t_drafter_drafts_only_its_vocabulary(models):
    s = session(models["target"], models["d2t"], n_max=3)
    try:
        _, _, rounds = generate(s, s.tokenize(PROMPTS[0]))
        proposed = {t for r in rounds for t in r.proposed}
        assert proposed and proposed <= set(FREQUENT)
    finally:
        s.close()


@pytest.mark.parametrize("kind", ["random", "d2t", "dspark"])
def test_seeded_sampling_equals_plain_token_for_token(models, plain, kind):
    s = session(models["target"], models[kind], n_max=4, kind=kind, draft_sampling="greedy")
    try:
        for prompt in PROMPTS:
            got, dec, _ = generate(s, s.tokenize(prompt), WARM)
            assert got == reference(plain, prompt, WARM) and dec.stats.n_drafted > 0
    finally:
        s.close()


def test_probabilistic_drafts_carry_the_drafters_distribution(models):
    s = session(models["target"], models["d2t"], n_max=4, draft_sampling="probabilistic")
    try:
        dec = s.decoder(WARM, N, 5)
        (drafter,) = dec.drafters
        drafts = record_proposals(drafter)
        out = [t for r in dec.generate(s.tokenize(PROMPTS[0])) for t in r.emitted]
        assert len(out) == N
        with_q = [d for d in drafts if d.tokens]
        assert with_q and all(d.probs is not None for d in with_q)
        for d in with_q:  # q is the drafter's: all its mass on the d2t vocabulary
            for q, tok in zip(d.probs, d.tokens, strict=True):
                assert q.prob(tok) > 0
                assert sum(q.prob(t) for t in FREQUENT) == pytest.approx(1.0, abs=1e-5)
    finally:
        s.close()


def test_dspark_p_min_reads_its_confidence_head(models, plain):
    """With --spec-draft-p-min a DSpark draft stops at the first row its confidence head
    scores below it (the rows' own top probability is not what is tested)."""
    s = session(models["target"], models["dspark"], n_max=6, kind="dspark", p_min=0.7)
    try:
        dec = s.decoder(GREEDY, N, 5)
        (drafter,) = dec.drafters
        confs = []
        block = drafter.head.block

        def spy(*a):
            rows, conf = block(*a)
            confs.append(conf)
            return rows, conf

        drafter.head.block = spy
        drafts = record_proposals(drafter)
        rounds = list(dec.generate(s.tokenize(PROMPTS[0])))
        assert [t for r in rounds for t in r.emitted] == reference(plain, PROMPTS[0])
        cuts = [int(np.argmax(c < 0.7)) if (c < 0.7).any() else len(c) for c in confs]
        lengths = [len(d.tokens) for d in drafts]
        assert len(lengths) == len(cuts) and len(set(cuts) - {0, 6}) > 1  # cut mid-block too
        # each draft ends at its first low-confidence row (or sooner, at the end of -n)
        assert all(n <= cut for n, cut in zip(lengths, cuts, strict=True))
        assert sum(n == cut for n, cut in zip(lengths, cuts, strict=True)) > len(cuts) // 2
    finally:
        s.close()


def test_dspark_without_a_confidence_head_refuses_p_min(models, tmp_path):
    head = build_dflash_head(tmp_path / "dspark-noconf.gguf", markov_rank=4)
    s = session(models["target"], head, kind="dspark", p_min=0.5)
    try:
        with pytest.raises(SpecggufError) as err:
            s.decoder(GREEDY, 8, 1)
        assert err.value.code == ExitCode.USAGE and "--spec-draft-p-min 0" in str(err.value)
    finally:
        s.close()


def test_a_prompt_longer_than_one_batch(models, plain):
    long_prompt = " ".join(f"word{i}" for i in range(40))
    check_long_prompt(maker(models, "d2t"), reference(plain, long_prompt), long_prompt)


def test_prefix_reuse_drafts_as_a_fresh_evaluation(models):
    check_prefix_reuse(maker(models, "d2t"), PROMPTS[0])


def test_the_end_of_the_context(models):
    check_end_of_context(maker(models, "d2t"), PROMPTS[1], n_max=7)


def test_server_slots_each_hear_their_own_target(models, plain):
    check_server_slots(models["target"], models["d2t"], plain, PROMPTS, reference)


def test_conversation_turns(models, monkeypatch, capsys):
    args = ["-m", str(models["target"]), "-md", str(models["d2t"]), "-t", "1", "-c", "512",
            "-fa", "off", "--spec-draft-n-max", "4"]  # fmt: skip
    check_two_turns(args, monkeypatch, capsys, replay=[*args, "--spec-type", "none"])


def test_bench_rows_and_the_drafters_pass_cost(models, capfd):
    argv = ["bench", "-m", str(models["target"]), "-md", str(models["dspark"]), "-t", "1",
            "-c", "512", "-n", "8", "-p", PROMPTS[0], "--spec-type", "draft-dspark:2",
            "--json"]  # fmt: skip
    assert run_cli(argv) == 0
    report = json.loads(capfd.readouterr().out)
    assert [c["label"] for c in report["configs"]][1:] == ["draft-dspark n_max=2"]
    assert report["cost_curve"]["draft_step_ms"] > 0  # the drafter's own block pass, timed
    # without --spec-type the file makes its type
    assert run_cli(argv[: argv.index("--spec-type")] + ["--json"]) == 0
    labels = [c["label"] for c in json.loads(capfd.readouterr().out)["configs"]]
    assert "draft-dspark n_max=3" in labels


def test_run_takes_the_type_from_the_file(models, capfd):
    argv = ["run", "-m", str(models["target"]), "-md", str(models["d2t"]), "-p", PROMPTS[0],
            "-n", "16", "--temp", "0", "-t", "1", "-c", "256", "-fa", "off", "--json"]  # fmt: skip
    assert run_cli(argv) == 0
    assert json.loads(capfd.readouterr().out)["spec_type"][-1] == "draft-dflash"


# -- refusals before anything loads ----------------------------------------------------------


@pytest.fixture
def no_loading(monkeypatch):
    refuse_loading(monkeypatch)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        (dict(n_embd=32), ExitCode.INCOMPATIBLE),  # made for a target of another width
        (dict(target_layers=(0, 1, 9)), ExitCode.INCOMPATIBLE),  # a layer it lacks
        (dict(omit=["blk.1.ffn_up.weight"]), ExitCode.MODEL),  # lacks tensors
        (dict(d2t=[3, 10_000]), ExitCode.INCOMPATIBLE),  # d2t outside the vocabulary
    ],
)
def test_bad_drafters_are_refused_before_loading(models, tmp_path, no_loading, kwargs, code):
    head = build_dflash_head(tmp_path / "bad.gguf", **kwargs)
    with pytest.raises(SpecggufError) as err:
        session(models["target"], head)
    assert err.value.code == code and "\n" not in str(err.value)


def test_a_qwen2_target_and_a_library_without_the_calls_are_refused(
    models, tmp_path, monkeypatch
):
    head = models["random"]
    check_refusals(session, models["target"], head, tmp_path, monkeypatch, "draft-dflash")


def test_the_command_line_says_it_in_one_line(models, capfd):
    argv = ["run", "-m", str(models["target"]), "-md", str(models["random"]), "-p", "hi"]
    assert run_cli([*argv, "--spec-type", "draft-simple"]) == ExitCode.USAGE
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "DFlash drafter" in err and "Traceback" not in err
    assert run_cli([*argv, "--spec-type", "draft-dspark"]) == ExitCode.MODEL
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "needs a DSpark drafter" in err
    argv = ["run", "-m", str(models["target"]), "-md", str(models["target"]), "-p", "hi"]
    assert run_cli([*argv, "--spec-type", "draft-dflash"]) == ExitCode.MODEL
    assert "needs a DFlash drafter" in capfd.readouterr().err

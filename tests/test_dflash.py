"""draft-dflash and draft-dspark on tiny GGUFs: a block drafter over a tiny llama target, run by
llama.cpp.

The drafters are random (tests/tiny_dflash.py): one with its own lm_head, which nearly never
agrees with the target (every round a rejection, the drafter's cache cut back each time), one
whose draft vocabulary (d2t) is the target's two most frequent tokens, so that some rounds
are accepted, and a DSpark drafter (a Markov head, a confidence head). Either way the output
must be the target's own.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from specgguf_cli.app import run_cli

from specgguf.errors import ExitCode, SpecggufError
from tests.conversation import check_two_turns
from tests.draft_spy import record_proposals
from tests.head_pairs import target_and_heads
from tests.hearing import (
    FREQUENT,
    GREEDY,
    PROMPTS,
    N,
    bench_argv,
    chat_args,
    check_command_line_refusals,
    check_drafts_as_fresh,
    check_drafts_carry_q,
    check_drafts_only,
    check_end_of_context,
    check_greedy_equals_plain,
    check_long_prompt,
    check_prefix_reuse,
    check_refusals,
    check_refused_before_loading,
    check_seeded_sampling,
    check_server_slots,
    maker,
    open_session,
    reference,
)
from tests.tiny_dflash import BAD_DFLASH_HEADS, build_dflash_head

#: each drafter's --spec-type
TYPES = {"random": "draft-dflash", "d2t": "draft-dflash", "dspark": "draft-dspark"}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    dspark = functools.partial(
        build_dflash_head, d2t=FREQUENT, seed=5, markov_rank=8, confidence=True
    )
    return target_and_heads(tmp_path_factory, "dflash", build_dflash_head, "dflash", dspark=dspark)


def session(target, head=None, n_max=4, *, kind="random", **kw):
    """A session drafting with the `kind` drafter's file `head` (None: plain)."""
    return open_session(target, head, n_max, spec_type=TYPES[kind], **kw)


@pytest.fixture(scope="module")
def plain(models):
    s = session(models["target"])
    yield s
    s.close()


@pytest.mark.parametrize("n_max", [1, 3, 7, 12])
def test_greedy_equals_plain(models, plain, n_max):
    def open_kind(kind):
        return session(models["target"], models[kind], n_max=n_max, kind=kind)

    def one_pass_per_block(kind, rounds):
        # one pass drafts at most the trained block's mask rows (block_size 8)
        longest = max(len(r.proposed) for r in rounds)
        assert longest == min(n_max, 8 if kind == "dspark" else 7), kind

    check_greedy_equals_plain(open_kind, ("random", "d2t", "dspark"), plain, one_pass_per_block)


@pytest.mark.parametrize(("kind", "others"), [("random", []), ("d2t", ["ngram-simple"])])
def test_every_round_drafts_what_a_fresh_drafter_drafts_there(models, kind, others):
    make = maker(functools.partial(session, kind=kind), models["target"], models[kind])
    dec, compared = check_drafts_as_fresh(make, others, TYPES[kind])
    assert dec.stats.n_accept > 0 or not others
    assert compared > 3


def test_the_d2t_drafter_drafts_only_its_vocabulary(models):
    check_drafts_only(session(models["target"], models["d2t"], n_max=3), FREQUENT)


@pytest.mark.parametrize("kind", ["random", "d2t", "dspark"])
def test_seeded_sampling_equals_plain_token_for_token(models, plain, kind):
    s = session(models["target"], models[kind], n_max=4, kind=kind, draft_sampling="greedy")
    check_seeded_sampling(s, plain)


def test_probabilistic_drafts_carry_the_drafters_distribution(models):
    s = session(models["target"], models["d2t"], n_max=4, draft_sampling="probabilistic")
    check_drafts_carry_q(s, FREQUENT)


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


def d2t_maker(models):
    return maker(session, models["target"], models["d2t"])


def test_a_prompt_longer_than_one_batch(models, plain):
    long_prompt = " ".join(f"word{i}" for i in range(40))
    check_long_prompt(d2t_maker(models), reference(plain, long_prompt), long_prompt)


def test_prefix_reuse_drafts_as_a_fresh_evaluation(models):
    check_prefix_reuse(d2t_maker(models), PROMPTS[0])


def test_the_end_of_the_context(models):
    check_end_of_context(d2t_maker(models), PROMPTS[1], n_max=7)


def test_server_slots_each_hear_their_own_target(models, plain):
    check_server_slots(models["target"], models["d2t"], plain, PROMPTS, reference)


def test_conversation_turns(models, monkeypatch, capsys):
    args = chat_args(models["target"], models["d2t"])
    check_two_turns(args, monkeypatch, capsys, replay=[*args, "--spec-type", "none"])


def test_bench_rows_and_the_drafters_pass_cost(models, capfd):
    argv = bench_argv(models["target"], models["dspark"], "draft-dspark:2")
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


@pytest.mark.parametrize(("kwargs", "code"), BAD_DFLASH_HEADS)
def test_bad_drafters_are_refused_before_loading(models, tmp_path, monkeypatch, kwargs, code):
    head = build_dflash_head(tmp_path / "bad.gguf", **kwargs)
    check_refused_before_loading(session, models["target"], head, code, monkeypatch)


def test_a_qwen2_target_and_a_library_without_the_calls_are_refused(
    models, tmp_path, monkeypatch
):
    head = models["random"]
    check_refusals(session, models["target"], head, tmp_path, monkeypatch, "draft-dflash")


def test_the_command_line_says_it_in_one_line(models, capfd):
    target, head = models["target"], models["random"]
    check_command_line_refusals(target, head, "draft-dflash", capfd, what="a DFlash drafter")
    argv = ["run", "-m", str(target), "-md", str(head), "-p", "hi", "--spec-type", "draft-dspark"]
    assert run_cli(argv) == ExitCode.MODEL
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "needs a DSpark drafter" in err

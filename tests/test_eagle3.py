"""draft-eagle3 on tiny GGUFs: an EAGLE-3 head over a tiny llama target, run by llama.cpp.

The heads are random (tests/tiny_eagle3.py): one with its own lm_head, which nearly never
agrees with the target (every round a rejection, the boundary moved back each time), and one
whose draft vocabulary (d2t) is the target's two most frequent tokens, so that some rounds
are accepted (the boundary moved forward). Either way the output must be the target's own.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest
from specgguf_cli.app import run_cli

from tests import hearing
from tests.conversation import check_two_turns
from tests.gguf_factory import SMOLLM, need_models
from tests.head_pairs import target_and_heads
from tests.tiny_eagle3 import BAD_EAGLE3_HEADS, build_eagle3_head

#: a session drafting draft-eagle3 with a head file (None: plain)
session = functools.partial(hearing.open_session, spec_type="draft-eagle3")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return target_and_heads(tmp_path_factory, "eagle3", build_eagle3_head, "head")


def head_maker(models, head):
    """A session maker over the target with the `head` head (head=False: plain)."""
    return hearing.maker(session, models["target"], models[head])


@pytest.fixture(scope="module")
def plain(models):
    s = session(models["target"])
    yield s
    s.close()


@pytest.mark.parametrize("n_max", range(1, 9))
def test_greedy_equals_plain(models, plain, n_max):
    def open_head(head):
        return session(models["target"], models[head], n_max=n_max)

    # both directions of the boundary are taken
    hearing.check_greedy_equals_plain(open_head, ("random", "d2t"), plain)


@pytest.mark.parametrize(
    ("head", "others"), [("random", []), ("d2t", []), ("d2t", ["ngram-simple"])]
)
def test_every_round_drafts_what_a_fresh_head_drafts_there(models, head, others):
    dec, compared = hearing.check_drafts_as_fresh(head_maker(models, head), others, "draft-eagle3")
    assert dec.stats.n_accept > 0 or head == "random"
    assert compared > 0


def test_the_d2t_head_drafts_only_its_vocabulary(models):
    hearing.check_drafts_only(session(models["target"], models["d2t"], n_max=3), hearing.FREQUENT)


@pytest.mark.parametrize("head", ["random", "d2t"])
def test_seeded_sampling_equals_plain_token_for_token(models, plain, head):
    hearing.check_seeded_sampling(
        session(models["target"], models[head], draft_sampling="greedy"), plain
    )


def test_probabilistic_drafts_carry_the_heads_distribution(models):
    s = session(models["target"], models["d2t"], n_max=4, draft_sampling="probabilistic")
    hearing.check_drafts_carry_q(s, hearing.FREQUENT)


def test_a_prompt_longer_than_one_batch(models, plain):
    long_prompt = " ".join(f"word{i}" for i in range(40))
    hearing.check_long_prompt(
        head_maker(models, "d2t"), hearing.reference(plain, long_prompt), long_prompt
    )


def test_a_rejection_in_the_first_drafting_round(models, plain):
    s = session(models["target"], models["random"], n_max=4)
    try:
        got, _, rounds = hearing.generate(s, s.tokenize(hearing.PROMPTS[0]))
        assert rounds[0].from_prompt and not rounds[0].proposed
        assert rounds[1].proposed and rounds[1].n_accepted == 0
        assert got == hearing.reference(plain, hearing.PROMPTS[0])
    finally:
        s.close()


def test_prefix_reuse_drafts_as_a_fresh_evaluation(models):
    hearing.check_prefix_reuse(head_maker(models, "d2t"), hearing.PROMPTS[0])


def test_conversation_turns(models, monkeypatch, capsys):
    args = hearing.chat_args(models["target"], models["d2t"])
    check_two_turns(args, monkeypatch, capsys, replay=[*args, "--spec-type", "none"])


def test_the_end_of_the_context(models):
    hearing.check_end_of_context(head_maker(models, "d2t"), hearing.PROMPTS[1], n_max=8)


def test_server_slots_each_hear_their_own_target(models, plain):
    hearing.check_server_slots(
        models["target"], models["d2t"], plain, hearing.PROMPTS, hearing.reference
    )


def test_bench_rows_and_the_heads_step_cost(models, capfd):
    argv = hearing.bench_argv(models["target"], models["d2t"], "draft-eagle3:2")
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
        got, dec, _ = hearing.generate(s, tokens, n=32)
        ref = hearing.generate(base, tokens, n=32)[0]
        assert_same_or_near_tie(base, tokens, ref, got, "smollm2", near_tie=NEAR_TIE)
        assert dec.stats.n_drafted > 0
    finally:
        s.close()
        base.close()


# -- refusals before anything loads ----------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "code"), BAD_EAGLE3_HEADS)
def test_bad_heads_are_refused_before_loading(models, tmp_path, monkeypatch, kwargs, code):
    head = build_eagle3_head(tmp_path / "bad.gguf", **kwargs)
    hearing.check_refused_before_loading(session, models["target"], head, code, monkeypatch)


def test_a_qwen2_target_and_a_library_without_the_calls_are_refused(models, tmp_path, monkeypatch):
    head = models["random"]
    hearing.check_refusals(session, models["target"], head, tmp_path, monkeypatch, "draft-eagle3")


def test_the_command_line_says_it_in_one_line(models, capfd):
    target, head = models["target"], models["random"]
    hearing.check_command_line_refusals(target, head, "draft-eagle3", capfd, what="an EAGLE-3 head")

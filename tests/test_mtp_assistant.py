"""draft-mtp with a separate MTP drafter file (-md): a tiny gemma4-assistant over a tiny gemma4
target (tests.tiny_gemma4). The assistant's context is an MTP context over its own model with
the target's context beside it; it has no KV cache of its own (it attends over the target's last
two layers' cache) and drafts every token of a round at the same position.

Two assistants: a random one (never accepted: the first round is a rejection) and an "echo" one
that repeats the target's own prediction (accepted wherever the target repeats a token), so
that rounds after an accepted draft are exercised too. What must hold is plain decoding's text
whatever the drafts, and drafts that depend only on what the target's cache holds (those of a
fresh session given the same text)."""

from __future__ import annotations

import json

import pytest
from specgguf_cli.app import run_cli

from specgguf.errors import ExitCode
from specgguf.loading.session import LoadOptions, Session, SpecOptions
from tests.conversation import check_two_turns
from tests.mtp_checks import (
    PROMPT,
    N,
    check_a_prompt_longer_than_one_batch,
    check_greedy_equals_plain,
    check_prefix_reuse,
    check_rounds_match_a_fresh_session,
    check_seeded_sampling,
    check_server_two_slots,
    check_the_context_end,
    check_two_slots,
    generate,
    reference,
)
from tests.serve_helpers import FAST
from tests.tiny_gemma4 import N_EMBD, build_tiny_assistant, build_tiny_gemma4
from tests.tiny_models import DRAFT_SEED, TARGET_SEED


@pytest.fixture(scope="module")
def target(tiny_models_dir):
    return build_tiny_gemma4(tiny_models_dir / "gemma4.gguf", seed=TARGET_SEED)


@pytest.fixture(scope="module")
def random_assistant(tiny_models_dir):
    return build_tiny_assistant(tiny_models_dir / "gemma4-assistant.gguf", seed=DRAFT_SEED)


@pytest.fixture(scope="module")
def echo(tiny_models_dir, target):
    path = tiny_models_dir / "gemma4-echo.gguf"
    return build_tiny_assistant(path, seed=DRAFT_SEED, echo=target)


def session(target, draft, types=("draft-mtp",), n_max=4, *, n_ctx=512, n_batch=2048, **kw):
    load = LoadOptions(
        model=target, model_draft=draft, n_ctx=n_ctx, threads=1, flash_attn="off",
        n_batch=n_batch, n_ubatch=min(512, n_batch),
    )  # fmt: skip
    return Session(load, SpecOptions(types=list(types), n_max=n_max), **kw)


@pytest.fixture(scope="module")
def plain(target):
    s = session(target, None, types=())
    yield s
    s.close()


@pytest.fixture(scope="module")
def echoing(target, echo):
    s = session(target, echo, n_max=8)
    yield s
    s.close()


def test_the_tiny_gemma4_target_decodes(plain):
    out = reference(plain)
    assert len(out) == N and len(set(out)) > 3  # text, not one token over and over


@pytest.mark.parametrize("k", range(1, 9))
def test_greedy_equals_plain_decoding_for_every_draft_length(echoing, plain, k):
    dec = check_greedy_equals_plain(echoing, plain, k)
    assert dec.drafters[0].head.shares_cache  # the assistant's context, over the target's cache
    assert dec.stats.n_accept > 0  # and some drafts were accepted


def test_a_rejection_in_the_first_drafting_round(target, random_assistant, plain):
    s = session(target, random_assistant)
    try:
        got, proposed, dec = generate(s, s.tokenize(PROMPT), reuse_prefix=False)
    finally:
        s.close()
    assert got == reference(plain)
    assert dec.rounds[0].from_prompt and not proposed[0]  # the first token: the prompt's
    assert proposed[1] and dec.rounds[1].n_accepted == 0


def test_seeded_sampling_equals_plain_decoding_token_for_token(echoing, plain):
    check_seeded_sampling(echoing, plain)


def test_every_round_drafts_what_a_fresh_session_drafts_there(echoing, target, echo):
    """The assistant reads the target's cache and the carried state only."""
    fresh = session(target, echo)
    try:
        check_rounds_match_a_fresh_session(echoing, fresh)
    finally:
        fresh.close()


def test_a_prompt_longer_than_one_batch(target, echo, plain):
    s, fresh = session(target, echo, n_batch=16), session(target, echo)
    try:
        check_a_prompt_longer_than_one_batch(s, fresh, plain)
    finally:
        s.close()
        fresh.close()


def test_prefix_reuse_drafts_as_a_fresh_session(target, echo):
    warm, fresh = session(target, echo), session(target, echo)
    try:
        check_prefix_reuse(warm, fresh)
    finally:
        warm.close()
        fresh.close()


def test_conversation_turns(target, echo, monkeypatch, capsys):
    models = ["-m", str(target), "-md", str(echo), "-t", "1", "-c", "512", "-fa", "off",
              "--spec-draft-n-max", "4"]  # fmt: skip
    plain = ["-m", str(target), "-t", "1", "-c", "512", "-fa", "off"]
    check_two_turns(models, monkeypatch, capsys, replay=plain)


def test_the_context_end(target, echo):
    small = session(target, echo, n_ctx=256, n_max=8)
    plain_small = session(target, None, types=(), n_ctx=256)
    try:
        check_the_context_end(small, plain_small)
    finally:
        small.close()
        plain_small.close()


def test_two_slots_have_their_own_assistant_contexts(target, echo, plain):
    s = session(target, echo, n_ctx=1024, parallel=2)
    try:
        check_two_slots(s, plain)
    finally:
        s.close()


def test_server_with_two_slots(target, echo, plain):
    argv = ["-m", str(target), "-md", str(echo), *FAST, "-c", "1024", "-np", "2",
            "--spec-draft-n-max", "4"]  # fmt: skip
    check_server_two_slots(argv, plain)


# -- the type from the header, and refusals before anything is loaded -------------------------


def test_the_md_header_selects_draft_mtp_and_check_names_it(target, echo, capsys):
    argv = ["run", "-m", str(target), "-md", str(echo), "-t", "1", "-c", "512", "-fa", "off",
            "--spec-draft-n-max", "4", "-p", PROMPT, "-n", "8", "--temp", "0"]  # fmt: skip
    assert run_cli(argv) == 0
    assert "draft-mtp" in capsys.readouterr().err
    assert run_cli(["check", "-m", str(target), "-md", str(echo)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "gemma4-assistant MTP drafter: 2 layers" in out
    assert run_cli(["check", "-m", str(target), "-md", str(echo), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["draft_kind"].startswith("gemma4-assistant MTP drafter")
    assert report["memory"]["draft"]["kv_bytes"] == 0  # it reads the target's cache


def refused(argv, capsys, monkeypatch) -> tuple[int, str]:
    """run_cli's status and its one line on stderr, with every model load recorded."""
    from specgguf.binding import engine

    loaded: list[object] = []
    monkeypatch.setattr(engine.Model, "__init__", lambda *a, **k: loaded.append(a))
    code = run_cli(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert loaded == [] and len(err) == 1, err  # one line, before any model loads
    return code, err[0]


def test_an_assistant_made_for_another_target_is_refused(target, tiny_models_dir, capsys,
                                                         monkeypatch):  # fmt: skip
    other = build_tiny_assistant(tiny_models_dir / "a48.gguf", seed=1, target_embd=N_EMBD - 16)
    for cmd in ("run", "check"):
        argv = [cmd, "-m", str(target), "-md", str(other)] + (["-p", "hi"] if cmd == "run" else [])
        code, line = refused(argv, capsys, monkeypatch)
        assert code == ExitCode.INCOMPATIBLE
        assert f"made for a target of width {N_EMBD - 16}, this target's is {N_EMBD}" in line


def test_a_target_that_is_not_gemma4_is_refused(tiny_target, echo, capsys, monkeypatch):
    code, line = refused(["run", "-m", str(tiny_target), "-md", str(echo), "-p", "hi"], capsys,
                         monkeypatch)  # fmt: skip
    assert code == ExitCode.INCOMPATIBLE and "this target is llama" in line


def test_an_assistant_lacking_tensors_is_refused(target, tiny_models_dir, capsys, monkeypatch):
    broken = build_tiny_assistant(
        tiny_models_dir / "broken.gguf",
        seed=1,
        drop=("nextn.post_projection.weight", "blk.1.attn_q.weight"),
    )
    code, line = refused(["check", "-m", str(target), "-md", str(broken)], capsys, monkeypatch)
    assert code == ExitCode.INCOMPATIBLE
    assert "lacks the tensor(s) nextn.post_projection.weight, blk.1.attn_q.weight" in line


def test_layers_that_would_read_the_wrong_kind_of_target_layer_are_refused(
    tiny_models_dir, echo, capsys, monkeypatch
):
    # a target whose last layer slides and the one before it does not: the assistant's
    # sliding layer would read the cache of a full layer (of another head size)
    sliding_last = build_tiny_gemma4(
        tiny_models_dir / "gemma4-swa-last.gguf", seed=1, pattern=(False, True, False, True)
    )
    code, line = refused(["check", "-m", str(sliding_last), "-md", str(echo)], capsys, monkeypatch)
    assert code == ExitCode.INCOMPATIBLE
    assert "sliding-attention layer 0 would read target layer 2, which is not sliding" in line


def test_an_assistant_as_a_draft_model_or_a_model_as_an_assistant(
    target, echo, tiny_draft, capsys, monkeypatch
):
    code, line = refused(["run", "-m", str(target), "-md", str(echo), "--spec-type",
                          "draft-simple", "-p", "hi"], capsys, monkeypatch)  # fmt: skip
    assert code == ExitCode.USAGE and "is an MTP drafter, not a draft model" in line
    code, line = refused(["run", "-m", str(target), "-md", str(tiny_draft), "--spec-type",
                          "draft-mtp", "-p", "hi"], capsys, monkeypatch)  # fmt: skip
    assert code == ExitCode.USAGE and "not an MTP drafter" in line
    # with draft-simple beside it, a plain -md is its draft model: no refusal for that
    from specgguf.heads.eagle3_info import check_draft_role
    from specgguf.modelfiles.gguf_info import read_gguf_info

    check_draft_role(["draft-simple", "draft-mtp"], read_gguf_info(tiny_draft))


def test_a_library_without_the_calls_is_refused(target, echo, capsys, monkeypatch):
    from specgguf.binding import llama_ext

    monkeypatch.setattr(llama_ext, "ext", lambda: None)
    code, line = refused(["run", "-m", str(target), "-md", str(echo), "-p", "hi"], capsys,
                         monkeypatch)  # fmt: skip
    assert code == ExitCode.NO_RUNTIME and "draft-mtp" in line


def test_a_target_whose_last_layers_reuse_earlier_caches(tiny_models_dir):
    """Gemma-4's small models share KV between layers: the target's last two layers read the
    caches of earlier ones, and so does the assistant that reads theirs."""
    shared = build_tiny_gemma4(tiny_models_dir / "gemma4-kv2.gguf", seed=TARGET_SEED, shared_kv=2)
    assistant = build_tiny_assistant(
        tiny_models_dir / "kv2-echo.gguf", seed=DRAFT_SEED, echo=shared
    )
    plain, s = session(shared, None, types=()), session(shared, assistant)
    try:
        got, _, dec = generate(s, s.tokenize(PROMPT), n=64)
        assert got == reference(plain, n=64) and dec.stats.n_accept > 0
    finally:
        s.close()
        plain.close()


def test_bench_measures_draft_mtp_with_the_assistant(target, echo, capfd):
    argv = ["bench", "-m", str(target), "-md", str(echo), "-t", "1", "-c", "512", "-n", "8",
            "-p", "abc abc", "--json"]  # fmt: skip
    assert run_cli(argv) == 0
    report = json.loads(capfd.readouterr().out)
    assert report["cost_curve"]["draft_step_ms"] > 0  # the assistant's own step, timed
    labels = [row["label"] for row in report["configs"]]
    assert any(label.startswith("draft-mtp") for label in labels), labels
    for row in report["configs"]:
        same = row["same_text_as_plain"]
        assert same is None or same["identical"] == same["runs"], row["label"]

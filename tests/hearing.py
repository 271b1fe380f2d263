"""Checks every drafter that hears the target passes (draft-eagle3, draft-dflash, draft-dspark),
over a `make(**options)` that opens a Session drafting with it (no head: plain decoding):
its output is the target's own however the rounds went, and its drafts after prefix reuse or
chunked prompts are those of a fresh evaluation."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specgguf.binding import engine
from specgguf.core.sampling import SamplerParams
from specgguf.loading.session import LoadOptions, Session, SpecOptions
from tests.draft_spy import record_proposals
from tests.serve_helpers import FAST, Server, post_together

GREEDY = SamplerParams(temp=0.0)
WARM = SamplerParams(temp=0.9, top_k=40, top_p=0.95)
PROMPTS = ["Hello world, this is", "the cat sat on the mat and"]
#: the tiny target's two most frequent greedy tokens ('#', 's'): a d2t drafter's vocabulary
FREQUENT = [35, 115]
#: tokens generated per check
N = 40
#: a session maker: make(head=True, **LoadOptions/SpecOptions overrides)
Make = Callable[..., object]


def generate(s, tokens, sampler=GREEDY, n=40, seed=5, **kw):
    """(emitted tokens, the decoder, its rounds) of one generation over session `s`."""
    dec = s.decoder(sampler, n, seed, **kw)
    rounds = list(dec.generate(tokens))
    return [t for r in rounds for t in r.emitted], dec, rounds


def open_session(
    target, head=None, n_max=4, *, spec_type: str, n_batch=2048, n_ctx=512, **spec
) -> Session:
    """A one-thread session over `target` drafting `spec_type` with `head` (None: plain)."""
    load = LoadOptions(
        model=target, model_draft=head, n_ctx=n_ctx, threads=1, flash_attn="off",
        n_batch=n_batch, n_ubatch=min(512, n_batch),
    )  # fmt: skip
    types = [spec_type] if head is not None else []
    return Session(load, SpecOptions(types=types, n_max=n_max, **spec))


def maker(open_head_session, target, head_file) -> Make:
    """A session maker over `target` drafting with `head_file` (make(head=False): plain)."""

    def make(head=True, **kw):
        return open_head_session(target, head_file if head else None, **kw)

    return make


def reference(plain, prompt: str, sampler=GREEDY, n=N) -> list[int]:
    """What plain decoding emits for `prompt`."""
    return generate(plain, plain.tokenize(prompt), sampler, n)[0]


def check_greedy_equals_plain(open_kind, kinds, plain, on_rounds=None) -> None:
    """Every drafter `open_kind(kind)` opens emits plain's greedy text for every prompt, and
    together they drafted and had some drafts accepted. `on_rounds(kind, rounds)`: more checks."""
    drafted = accepted = 0
    for kind in kinds:
        s = open_kind(kind)
        try:
            for prompt in PROMPTS:
                got, dec, rounds = generate(s, s.tokenize(prompt))
                assert got == reference(plain, prompt), (kind, prompt)
                if on_rounds is not None:
                    on_rounds(kind, rounds)
                drafted += dec.stats.n_drafted
                accepted += dec.stats.n_accept
        finally:
            s.close()
    assert drafted > 0 and accepted > 0  # the drafter's state was cut back and kept both


def check_drafts_as_fresh(make: Make, others: list[str], spec_type: str):
    """After accepted and rejected rounds alike, and rounds another drafter (`others`) won,
    the drafter's state is what evaluating the whole sequence so far as a prompt gives: each
    of its drafts is a fresh drafter's first one there. Returns (the decoder, how many rounds
    were compared)."""
    s, fresh = make(n_max=3), make(n_max=3)
    s.spec.types = [*others, spec_type]
    s.spec.ngram = {"size_n": 2}  # short keys: the n-gram drafter wins some rounds
    try:
        loopy = "the cat sat on the mat. the cat sat on the mat. the cat sat on the"
        prompt = s.tokenize(loopy if others else PROMPTS[0])
        _, dec, rounds = generate(s, prompt, n=N)
        if others:
            assert {r.drafter for r in rounds} >= {*others, spec_type}
        seq = list(prompt)
        compared = 0
        for r in rounds:
            if r.drafter == spec_type and r.proposed:
                # a fresh drafter that read seq[:-1] as a prompt: its first token is seq[-1]
                # (greedy), and its first draft follows seq
                _, _, first = generate(fresh, seq[:-1], n=8, reuse_prefix=False)
                assert first[0].from_prompt and first[0].emitted == seq[-1:]
                want = first[1].proposed
                n = min(len(want), len(r.proposed))
                assert n > 0 and r.proposed[:n] == want[:n], len(seq) - len(prompt)
                compared += 1
            seq.extend(r.emitted)
        return dec, compared
    finally:
        s.close()
        fresh.close()


def check_drafts_only(s, vocabulary: list[int]) -> None:
    """A d2t drafter proposes only tokens of its draft vocabulary; closes `s`."""
    try:
        _, _, rounds = generate(s, s.tokenize(PROMPTS[0]))
        proposed = {t for r in rounds for t in r.proposed}
        assert proposed and proposed <= set(vocabulary)
    finally:
        s.close()


def check_seeded_sampling(s, plain) -> None:
    """Seeded sampling with drafts emits plain's sampled text token for token; closes `s`."""
    try:
        for prompt in PROMPTS:
            got, dec, _ = generate(s, s.tokenize(prompt), WARM)
            assert got == reference(plain, prompt, WARM) and dec.stats.n_drafted > 0
    finally:
        s.close()


def check_drafts_carry_q(s, vocabulary: list[int]) -> None:
    """Probabilistic drafts carry the drafter's own distribution q: all its mass on the d2t
    `vocabulary`; closes `s`."""
    try:
        dec = s.decoder(WARM, N, 5)
        (drafter,) = dec.drafters
        drafts = record_proposals(drafter)
        out = [t for r in dec.generate(s.tokenize(PROMPTS[0])) for t in r.emitted]
        assert len(out) == N
        with_q = [d for d in drafts if d.tokens]
        assert with_q and all(d.probs is not None for d in with_q)
        for d in with_q:
            for q, tok in zip(d.probs, d.tokens, strict=True):
                assert q.prob(tok) > 0
                assert sum(q.prob(t) for t in vocabulary) == pytest.approx(1.0, abs=1e-5)
    finally:
        s.close()


def chat_args(target, head) -> list[str]:
    """The command line of a one-thread chat drafting with `head` (for check_two_turns)."""
    return ["-m", str(target), "-md", str(head), "-t", "1", "-c", "512", "-fa", "off",
            "--spec-draft-n-max", "4"]  # fmt: skip


def bench_argv(target, head, spec_type: str) -> list[str]:
    """`bench --json` of a short prompt drafting `spec_type` with `head`."""
    return ["bench", "-m", str(target), "-md", str(head), "-t", "1", "-c", "512", "-n", "8",
            "-p", PROMPTS[0], "--spec-type", spec_type, "--json"]  # fmt: skip


def check_refused_before_loading(open_head_session, target, head, code, monkeypatch) -> None:
    """A bad head is refused from its header with `code`, in one line, nothing loaded."""
    from specgguf.errors import SpecggufError

    refuse_loading(monkeypatch)
    with pytest.raises(SpecggufError) as err:
        open_head_session(target, head)
    assert err.value.code == code and "\n" not in str(err.value)


def refuse_loading(monkeypatch) -> None:
    """Any model load fails the test: what is refused must be refused from the headers."""

    def refuse(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(engine, "Model", refuse)


def check_refusals(open_session, target, head, tmp_path, monkeypatch, spec_type: str) -> None:
    """Refused from the headers, one line each, nothing loaded: a qwen2 target (its graph
    records no layer inputs), and a libllama without the hidden-state calls `spec_type`
    needs. `open_session(target, head)` opens a session drafting with `head`."""
    from specgguf.binding import llama_ext
    from specgguf.errors import ExitCode, SpecggufError
    from tests.tiny_eagle3 import write_qwen2_target_header

    refuse_loading(monkeypatch)
    qwen2 = write_qwen2_target_header(tmp_path / "qwen2.gguf")
    with pytest.raises(SpecggufError) as err:
        open_session(qwen2, head)
    assert err.value.code == ExitCode.INCOMPATIBLE and "qwen2" in str(err.value)
    monkeypatch.setattr(llama_ext, "ext", lambda: None)
    with pytest.raises(SpecggufError) as err:
        open_session(target, head)
    assert err.value.code == ExitCode.NO_RUNTIME and spec_type in str(err.value)
    assert "\n" not in str(err.value)


def check_long_prompt(make: Make, reference: list[int], prompt: str) -> None:
    """A prompt of several batches: the output is plain's, the drafts those after one pass."""
    s, one = make(n_batch=32), make()
    try:
        tokens = s.tokenize(prompt)
        assert len(tokens) > 3 * 32
        got, _, rounds = generate(s, tokens)
        got1, _, rounds1 = generate(one, tokens)
        assert got == got1 == reference
        assert [r.proposed for r in rounds] == [r.proposed for r in rounds1]
    finally:
        s.close()
        one.close()


def check_prefix_reuse(make: Make, first: str) -> None:
    """A second turn that keeps the first's cache, and a third that leaves it early, draft
    what a fresh evaluation of the same prompt drafts."""
    warm, fresh = make(), make()
    try:
        turn1 = warm.tokenize(first)
        out1, _, _ = generate(warm, turn1)
        turn2 = turn1 + out1 + warm.tokenize(" then the dog ran")
        got2, dec2, rounds2 = generate(warm, turn2)
        ref2, _, fresh2 = generate(fresh, turn2, reuse_prefix=False)
        assert got2 == ref2
        assert dec2.stats.cache_n > len(turn1)  # the target kept turn 1 and its answer
        assert [r.proposed for r in rounds2] == [r.proposed for r in fresh2]
        turn3 = turn1[:3] + warm.tokenize(" but the bird sang")
        got3, dec3, rounds3 = generate(warm, turn3)
        ref3, _, fresh3 = generate(fresh, turn3, reuse_prefix=False)
        assert got3 == ref3 and dec3.stats.cache_n <= 3
        assert [r.proposed for r in rounds3] == [r.proposed for r in fresh3]
    finally:
        warm.close()
        fresh.close()


def check_end_of_context(make: Make, prompt: str, n_max: int) -> None:
    """Generating past the context stops where plain decoding stops, with the same text."""
    s, small = make(n_max=n_max, n_ctx=64), make(head=False, n_ctx=64)
    try:
        tokens = s.tokenize(prompt)
        n = 2 * s.target.n_ctx  # llama.cpp rounds the context up: more than any -c fits
        got, dec, _ = generate(s, tokens, n=n)
        ref, ref_dec, _ = generate(small, tokens, n=n)
        assert got == ref and dec.stop_reason == ref_dec.stop_reason == "context"
        assert dec.stats.n_drafted > 0
    finally:
        s.close()
        small.close()


def check_server_slots(target, head, plain, prompts: list[str], reference) -> None:
    """`serve -np 2`: each slot's drafter hears its own target; both answers are plain's."""
    s = Server(["-m", str(target), "-md", str(head), *FAST, "-c", "1024", "-np", "2",
                "--spec-draft-n-max", "4"])  # fmt: skip
    try:
        bodies = [{"prompt": p, "n_predict": 24} for p in prompts]
        answers = post_together(s, "/completion", bodies)
        again = s.post("/completion", {"prompt": prompts[0], "n_predict": 24})
    finally:
        code, err = s.stop()
    assert code == 0 and "Traceback" not in err, err
    for i, p in enumerate(prompts):
        want = b"".join(plain.target_model.piece(t) for t in reference(plain, p, n=24))
        assert answers[i]["content"] == want.decode()
    assert again["content"] == answers[0]["content"] and again["timings"]["cache_n"] > 0


def check_command_line_refusals(target, head, spec_type: str, capfd, *, what: str) -> None:
    """`run` says it in one line: the head file `head` (a `what`, e.g. "EAGLE-3 head") under
    draft-simple is a usage error naming it; the target itself under `spec_type` is a model
    error saying it needs a `what`."""
    from specgguf_cli.app import run_cli

    from specgguf.errors import ExitCode

    argv = ["run", "-m", str(target), "-md", str(head), "-p", "hi"]
    assert run_cli([*argv, "--spec-type", "draft-simple"]) == ExitCode.USAGE
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and what in err and "Traceback" not in err
    argv = ["run", "-m", str(target), "-md", str(target), "-p", "hi"]
    assert run_cli([*argv, "--spec-type", spec_type]) == ExitCode.MODEL
    assert f"needs {what}" in capfd.readouterr().err

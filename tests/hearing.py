"""Checks every drafter that hears the target passes (draft-eagle3, draft-dflash, draft-dspark),
over a `make(**options)` that opens a Session drafting with it (no head: plain decoding):
its output is the target's own however the rounds went, and its drafts after prefix reuse or
chunked prompts are those of a fresh evaluation."""

from __future__ import annotations

from collections.abc import Callable

from specgguf.binding import engine
from specgguf.core.sampling import SamplerParams
from tests.serve_helpers import FAST, Server, post_together

GREEDY = SamplerParams(temp=0.0)
#: a session maker: make(head=True, **LoadOptions/SpecOptions overrides)
Make = Callable[..., object]


def generate(s, tokens, sampler=GREEDY, n=40, seed=5, **kw):
    """(emitted tokens, the decoder, its rounds) of one generation over session `s`."""
    dec = s.decoder(sampler, n, seed, **kw)
    rounds = list(dec.generate(tokens))
    return [t for r in rounds for t in r.emitted], dec, rounds


def refuse_loading(monkeypatch) -> None:
    """Any model load fails the test: what is refused must be refused from the headers."""

    def refuse(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(engine, "Model", refuse)


def check_refusals(open_session, target, head, tmp_path, monkeypatch, spec_type: str) -> None:
    """Refused from the headers, one line each, nothing loaded: a qwen2 target (its graph
    records no layer inputs), and a libllama without the hidden-state calls `spec_type`
    needs. `open_session(target, head)` opens a session drafting with `head`."""
    import pytest

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
    assert again["content"] == answers[0]["content"] and again["tokens_cached"] > 0

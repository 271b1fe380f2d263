"""Cross-vocabulary drafting on tiny models with two different tokenizers (tests/tiny_models.py
vocab="xvocab": other merges, a token that splits "é", control tokens at other ids): the text
is exactly plain decoding's, greedy and seeded; sampling follows the target's distribution;
the CLI says which mode it is in, and --spec-vocab-strict restores llama.cpp's refusal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specgguf.core.sampling import PositionRandom, SamplerParams, distribution
from specgguf.drafters.cross_vocab import CrossVocabDrafter
from specgguf.errors import ExitCode, IncompatibleModelsError
from specgguf.loading.session import CROSS_VOCAB_NOTICE, LoadOptions, Session, SpecOptions
from tests.tiny_models import TARGET_SEED, build_tiny_model, special_ids

PROMPTS = [
    "the cat sat on",
    "café, résumé and the naïve one",  # the draft splits "é" across tokens
    "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n",  # chat markers
]
GREEDY = SamplerParams(temp=0.0)


def make_session(target: Path, draft: Path | None, types: list[str], n_max: int = 3, **load):
    opts = LoadOptions(
        model=target, model_draft=draft, n_ctx=512, threads=1, flash_attn="off", **load
    )
    return Session(opts, SpecOptions(types=types, n_max=n_max))


def generate(session: Session, prompt: str, n: int, sampler=GREEDY, seed: int = 0):
    dec = session.decoder(sampler, n, seed)
    out: list[int] = []
    rounds = []
    for rnd in dec.generate(session.tokenize(prompt)):
        out.extend(rnd.emitted)
        rounds.append(rnd)
    return out, dec, rounds


@pytest.fixture(scope="module")
def plain(tiny_target):
    s = make_session(tiny_target, None, [])
    yield s
    s.close()


@pytest.fixture(scope="module")
def cross(tiny_target, tiny_xvocab):
    s = make_session(tiny_target, tiny_xvocab, ["draft-simple"], n_max=8)
    yield s
    s.close()


def test_a_different_vocabulary_selects_the_cross_vocabulary_drafter(cross, tiny_target):
    assert cross.cross_vocab
    (drafter,) = cross._drafters(GREEDY, PositionRandom(0), cross.spec, None)
    assert isinstance(drafter, CrossVocabDrafter)
    with pytest.raises(IncompatibleModelsError) as exc:
        make_session(tiny_target, cross.load.model_draft, ["draft-simple"], strict_vocab=True)
    assert exc.value.code == ExitCode.INCOMPATIBLE


@pytest.mark.parametrize("n_max", range(1, 9))
def test_greedy_equals_plain_decoding(tiny_target, tiny_xvocab, plain, n_max):
    spec = make_session(tiny_target, tiny_xvocab, ["draft-simple"], n_max=n_max)
    try:
        drafted = accepted = 0
        for prompt in PROMPTS:
            ref, ref_dec, _ = generate(plain, prompt, 40)
            got, dec, rounds = generate(spec, prompt, 40)
            assert got == ref, f"n_max={n_max} diverged on {prompt!r}"
            assert ref_dec.stats.n_drafted == 0
            assert all(len(r.proposed) <= n_max for r in rounds)
            drafted += dec.stats.n_drafted
            accepted += dec.stats.n_accept
            assert dec.stats.translate_rounds > 0
        # drafts really went through translation and some were right
        assert drafted > 0 and accepted > 0
    finally:
        spec.close()


def test_proposals_are_the_target_tokenization_of_the_draft_text(cross, plain):
    """Every proposal spells a prefix of the draft's text, in target tokens (the translation
    is what the trace shows), and what the target accepted is target text."""
    _, _, rounds = generate(cross, PROMPTS[0], 40)
    tm = cross.target_model
    seen = 0
    for r in rounds:
        x = r.translation
        if x is None or not r.proposed:
            continue
        seen += 1
        draft_text = "".join(x["draft_text"]).encode("utf-8", "surrogateescape")
        proposed = b"".join(tm.piece_special(t) for t in r.proposed)
        assert x["target_tokens"] == r.proposed
        # the target's proposal text is the draft's text, minus an open last token
        assert draft_text.startswith(proposed) or proposed in draft_text
    assert seen > 0


@pytest.mark.parametrize("seed", [1, 7, 42])
def test_seeded_sampling_equals_plain_decoding(cross, plain, seed):
    sampler = SamplerParams(temp=0.9, top_k=40, top_p=0.95, min_p=0.05)
    for prompt in PROMPTS[:2]:
        ref, _, _ = generate(plain, prompt, 32, sampler, seed)
        got, dec, _ = generate(cross, prompt, 32, sampler, seed)
        assert got == ref, f"seed {seed} diverged on {prompt!r}"
        assert dec.stats.n_drafted > 0


@pytest.mark.slow
def test_first_sampled_token_follows_the_target_distribution(cross, plain):
    """Over many seeds the first token of a cross-vocabulary run is distributed as the target's
    own p (chi-square against the exact distribution from the target's logits)."""
    sampler = SamplerParams(temp=1.5, top_k=0, top_p=1.0, min_p=0.0)
    prompt = PROMPTS[0]
    tokens = plain.tokenize(prompt)
    t = plain.target
    t.truncate(0)
    logits = t.decode(tokens, 0, outputs="last")
    p = distribution(np.array(logits[0]), sampler)
    n = 400
    counts: dict[int, int] = {}
    drafted = 0
    for seed in range(n):
        got, dec, _ = generate(cross, prompt, 3, sampler, seed)
        counts[got[0]] = counts.get(got[0], 0) + 1
        drafted += dec.stats.n_drafted
    assert drafted > 0
    probs = {int(tok): float(q) for tok, q in zip(p.ids, p.probs, strict=True)}
    assert sum(counts.values()) == n
    assert all(tok in probs for tok in counts)  # nothing outside the target's support
    assert _chi2_ok(counts, probs, n)
    # negative control: a sampler that always took the most likely token fails the same test
    assert not _chi2_ok({p.top()[0]: n}, probs, n)


def _chi2_ok(counts: dict[int, int], probs: dict[int, float], n: int) -> bool:
    """Chi-square of `counts` against `probs`, bins with expected count >= 5 (the rest
    pooled), under a generous bound (p < 1e-4 for any dof these tests see)."""
    big = [tok for tok, q in probs.items() if q * n >= 5]
    obs = [counts.get(tok, 0) for tok in big]
    exp = [probs[tok] * n for tok in big]
    rest_obs = n - sum(obs)
    rest_exp = n - sum(exp)
    if rest_exp >= 5:
        obs.append(rest_obs)
        exp.append(rest_exp)
    chi2 = sum((o - e) ** 2 / e for o, e in zip(obs, exp, strict=True))
    dof = max(1, len(obs) - 1)
    return chi2 < dof + 6 * np.sqrt(2 * dof) + 10


def test_a_draft_eos_ends_the_draft_and_maps_to_the_target_end_token(tiny_target, plain, tmp_path):
    """A draft that ends at once proposes the target's own <|im_end|> (found through its text,
    although the ids differ); the target rejects it and the text is unchanged."""
    ender = build_tiny_model(
        tmp_path / "ender.gguf", seed=TARGET_SEED, vocab="xvocab", eos_logit_bias=40.0
    )
    assert special_ids("xvocab")["<|im_end|>"] != special_ids("bytes")["<|im_end|>"]
    spec = make_session(tiny_target, ender, ["draft-simple"], n_max=4)
    try:
        ref, _, _ = generate(plain, PROMPTS[0], 16)
        got, _, rounds = generate(spec, PROMPTS[0], 16)
        assert got == ref
        target_end = special_ids("bytes")["<|im_end|>"]
        drafted = [r for r in rounds if r.proposed]
        assert drafted and all(r.proposed == [target_end] for r in drafted)
        assert all(r.translation["draft_text"] == ["<|im_end|>"] for r in drafted)
    finally:
        spec.close()


def test_a_target_that_ends_stops_at_eos(tiny_xvocab, tmp_path):
    ending = build_tiny_model(tmp_path / "ending.gguf", seed=TARGET_SEED, eos_logit_bias=40.0)
    p = make_session(ending, None, [])
    x = make_session(ending, tiny_xvocab, ["draft-simple"], n_max=4)
    try:
        ref, ref_dec, _ = generate(p, PROMPTS[0], 16)
        got, dec, _ = generate(x, PROMPTS[0], 16)
        assert got == ref and dec.stop_reason == ref_dec.stop_reason == "eos"
    finally:
        p.close()
        x.close()


def test_bytes_that_split_characters_in_generated_text(tmp_path):
    """Targets that generate any byte (characters split across tokens, invalid UTF-8): drafting
    through text stays lossless and the draft's KV keeps following the text."""
    t = build_tiny_model(tmp_path / "t.gguf", seed=5, ascii_only=False)
    d = build_tiny_model(tmp_path / "d.gguf", seed=5, vocab="xvocab", ascii_only=False)
    p = make_session(t, None, [])
    x = make_session(t, d, ["draft-simple"], n_max=4)
    try:
        for prompt in ("é", "naïve 日本 text"):
            ref, _, _ = generate(p, prompt, 40)
            got, dec, _ = generate(x, prompt, 40)
            assert got == ref
            assert dec.stats.translate_rounds > 0
    finally:
        p.close()
        x.close()


def test_prefix_reuse_across_prompts_keeps_text_identical(cross, plain):
    """A second prompt that starts like the first reuses the draft's KV; output unchanged."""
    a = PROMPTS[2]
    b = PROMPTS[2] + "the"
    for prompt in (a, b, a):
        ref, _, _ = generate(plain, prompt, 24)
        got, _, _ = generate(cross, prompt, 24)
        assert got == ref


# -- the command line ------------------------------------------------------------------------


def _run(*argv: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specgguf_cli.app", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_cli_run_prints_one_notice_and_the_plain_text(tiny_target, tiny_xvocab, tmp_path):
    common = ["-p", "the cat sat on", "-n", "24", "--temp", "0", "-c", "256", "-t", "1"]
    trace = tmp_path / "trace.jsonl"
    res = _run(
        "run", "-m", str(tiny_target), "-md", str(tiny_xvocab), "--spec-draft-n-max", "4",
        "--trace", str(trace), "--json", *common,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stderr.count(CROSS_VOCAB_NOTICE) == 1
    assert "cross-vocabulary" in CROSS_VOCAB_NOTICE
    plain = _run("run", "-m", str(tiny_target), "--spec-type", "none", "--json", *common)
    assert json.loads(res.stdout)["text"] == json.loads(plain.stdout)["text"]
    timings = json.loads(res.stdout)["timings"]
    assert timings["translate_rounds"] > 0 and timings["draft_n"] > 0
    assert "translate" in res.stderr
    recs = [json.loads(line) for line in trace.read_text().splitlines()]
    drafted = [r for r in recs if r.get("draft_tokens")]
    assert drafted
    for r in drafted:
        assert len(r["draft_text"]) == len(r["draft_tokens"])
        assert r["translated"] == r["proposed"]
    strict = _run(
        "run", "-m", str(tiny_target), "-md", str(tiny_xvocab), "--spec-vocab-strict", *common
    )
    assert strict.returncode == ExitCode.INCOMPATIBLE
    assert strict.stdout == "" and len(strict.stderr.strip().splitlines()) == 1


def test_cli_check_reports_the_mode_and_the_overlap(tiny_target, tiny_xvocab, tiny_draft):
    res = _run("check", "-m", str(tiny_target), "-md", str(tiny_xvocab), "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["mode"] == "cross-vocabulary"
    # 256 byte tokens + 3 control tokens shared, 9 of the 24 merges too (" o", "er", "on", ...)
    assert 259 / 283 < report["vocab_overlap"] < 1.0
    same = _run("check", "-m", str(tiny_target), "-md", str(tiny_draft), "--json")
    same = json.loads(same.stdout)
    assert same["mode"] == "same-vocabulary" and same["vocab_overlap"] == 1.0
    human = _run("check", "-m", str(tiny_target), "-md", str(tiny_xvocab))
    assert human.returncode == 0 and "cross-vocabulary" in human.stdout
    assert "overlap" in human.stdout


def test_running_to_the_end_of_the_context_never_fails(tiny_target, tiny_xvocab):
    """The draft shares the target's context size but can need more tokens for the same text:
    near the end it stops drafting; the run ends with stop_reason "context" as plain does."""
    opts = dict(n_ctx=64, threads=1, flash_attn="off")
    p = Session(LoadOptions(model=tiny_target, **opts), SpecOptions(types=[]))
    x = Session(
        LoadOptions(model=tiny_target, model_draft=tiny_xvocab, **opts),
        SpecOptions(types=["draft-simple"], n_max=8),
    )
    try:
        # " sing": 2 target tokens (" s", "ing"), 5 draft tokens (the draft lacks both merges)
        for prompt in (PROMPTS[1], " sing" * 6, " sing" * 14):
            ref, ref_dec, _ = generate(p, prompt, -1)
            got, dec, _ = generate(x, prompt, -1)
            assert got == ref
            assert dec.stop_reason == ref_dec.stop_reason == "context"
    finally:
        p.close()
        x.close()


class _FakeCtx:
    """Records what is decoded (bench's cost curve on a context)."""

    n_ctx = 64

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], int]] = []

    def decode(self, tokens, pos0, outputs="last"):
        self.calls.append((tuple(tokens), pos0))

    def truncate(self, n):
        pass


@pytest.mark.parametrize("cross_vocab", [True, False])
def test_bench_cost_curve_feeds_the_draft_its_own_tokens(cross_vocab):
    """bench times a draft step on the draft's context: with another vocabulary it must feed
    the draft's tokenization of the prompt, never target ids (which may not exist there)."""
    from types import SimpleNamespace

    from specgguf.bench import measure_cost_curve
    from specgguf.loading.session import Session

    session = SimpleNamespace(
        target=_FakeCtx(),
        draft_ctx=_FakeCtx(),
        cross_vocab=cross_vocab,
        draft_tokens=lambda toks: [1000 + t for t in toks] + [1999],
        info=SimpleNamespace(eagle3=None, dflash=None),
        draft_type="draft-simple",
    )
    # the contexts (and the draft's tokens) come from the Session method made for timing
    session.timing_contexts = lambda toks: Session.timing_contexts(session, toks)
    measure_cost_curve(session, [1, 2, 3, 4], max_k=2, reps=2)
    fed = [t for toks, _ in session.draft_ctx.calls for t in toks]
    assert fed
    if cross_vocab:
        assert all(t >= 1000 for t in fed)
        assert session.draft_ctx.calls[0] == ((1001, 1002, 1003, 1004), 0)
        assert session.draft_ctx.calls[1] == ((1999,), 4)
    else:  # the same-vocabulary path is unchanged
        assert all(t < 1000 for t in fed)
        assert session.draft_ctx.calls[0] == ((1, 2, 3), 0)

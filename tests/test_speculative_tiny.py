"""The speculative loop on tiny GGUF models: lossless in greedy mode, distribution-preserving
when sampling. These run llama.cpp for real (models built by tests/tiny_models.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from specgguf.core.sampling import SamplerParams, distribution
from specgguf.loading.session import LoadOptions, Session, SpecOptions

PROMPTS = ["the cat sat on", "def main():\n    return", "Once upon a time, in a land"]
GREEDY = SamplerParams(temp=0.0)


def make_session(target: Path, draft: Path | None, types: list[str], n_max: int = 3, **spec):
    load = LoadOptions(model=target, model_draft=draft, n_ctx=512, threads=1, flash_attn="off")
    return Session(load, SpecOptions(types=types, n_max=n_max, **spec))


@contextmanager
def plain_and_speculative(target: Path, draft: Path) -> Iterator[dict[str, Session]]:
    """Plain decoding, the draft model with one-hot (greedy) drafts, and ngram-simple, on one
    pair: seeded sampling under one-hot drafts is token for token plain sampling."""
    made = {
        "plain": make_session(target, None, []),
        "draft": make_session(target, draft, ["draft-simple"], n_max=4, draft_sampling="greedy"),
        "ngram": make_session(target, None, ["ngram-simple"]),
    }
    try:
        yield made
    finally:
        for s in made.values():
            s.close()


def generate(session: Session, prompt: str, n: int, sampler=GREEDY, seed: int = 0):
    dec = session.decoder(sampler, n, seed)
    out: list[int] = []
    for rnd in dec.generate(session.tokenize(prompt)):
        out.extend(rnd.emitted)
    return out, dec


def against_plain(spec: Session, plain: Session, n: int, what: str):
    """For each of PROMPTS, (text, decoder, plain's decoder) of `spec`'s greedy run, once its
    text is checked to be `plain`'s (`what` names the configuration in the message)."""
    for prompt in PROMPTS:
        ref, ref_dec = generate(plain, prompt, n)
        got, dec = generate(spec, prompt, n)
        assert got == ref, f"{what} diverged on {prompt!r}"
        yield got, dec, ref_dec


def greedy_under_auto(plain: Session, spec: Session, prompt: str, n: int = 60):
    """`prompt`'s greedy run on `spec` under a fresh AdaptivePolicy, checked to give `plain`'s
    text: (the decoder, the policy, detached) for what else a test asks of them."""
    from specgguf.auto.policy import AdaptivePolicy

    ref, _ = generate(plain, prompt, n)
    policy = AdaptivePolicy(n_max_cap=8)
    dec = spec.decoder(GREEDY, n, 0, budget_policy=policy)
    policy.attach(dec.drafters)
    got = [t for r in dec.generate(spec.tokenize(prompt)) for t in r.emitted]
    policy.detach()
    assert got == ref
    return dec, policy


@pytest.fixture(scope="module")
def plain(tiny_target):
    s = make_session(tiny_target, None, [])
    yield s
    s.close()


@pytest.mark.parametrize("n_max", [1, 2, 3, 5, 8])
def test_greedy_speculative_equals_greedy_target(tiny_target, tiny_draft, plain, n_max):
    spec = make_session(tiny_target, tiny_draft, ["draft-simple"], n_max=n_max)
    try:
        drafted = accepted = 0
        for got, dec, ref_dec in against_plain(spec, plain, 48, f"n_max={n_max}"):
            assert ref_dec.stats.n_drafted == 0  # the baseline really is plain decoding
            assert len(got) == 48
            drafted += dec.stats.n_drafted
            accepted += dec.stats.n_accept
        # the draft is a perturbed target: acceptance is neither trivial nor zero
        assert drafted > 0
        assert 0.1 < accepted / drafted < 0.95
    finally:
        spec.close()


def test_p_min_and_n_min_limit_drafts(tiny_target, tiny_draft, plain):
    ref, _ = generate(plain, PROMPTS[0], 32)
    strict = make_session(tiny_target, tiny_draft, ["draft-simple"], n_max=8, p_min=0.999999)
    try:
        got, dec = generate(strict, PROMPTS[0], 32)
        assert got == ref
        assert dec.stats.n_drafted < 32  # an almost impossible p_min stops nearly every draft
    finally:
        strict.close()
    long_only = make_session(tiny_target, tiny_draft, ["draft-simple"], n_max=4, n_min=4)
    try:
        got, dec = generate(long_only, PROMPTS[0], 32)
        assert got == ref
        # every verified draft had exactly 4 tokens: shorter ones were thrown away
        assert dec.stats.rounds > 0
        assert dec.stats.position_drafted == [dec.stats.rounds] * 4
    finally:
        long_only.close()


def test_target_kv_is_rolled_back_to_accepted_prefix(tiny_target, tiny_draft):
    spec = make_session(tiny_target, tiny_draft, ["draft-simple"], n_max=5)
    try:
        tokens = spec.tokenize(PROMPTS[1])
        dec = spec.decoder(GREEDY, 40, 0)
        emitted = 0
        for rnd in dec.generate(tokens):
            emitted += len(rnd.emitted)
            # invariant: the KV holds prompt + emitted tokens except the very last one
            assert spec.target.n_past == len(tokens) + emitted - 1
    finally:
        spec.close()


def first_token_exact(session: Session, prompt: str, sampler: SamplerParams) -> dict[int, float]:
    tokens = session.tokenize(prompt)
    session.target.truncate(0)
    logits = session.target.decode(tokens, 0, outputs="last")
    d = distribution(logits[0], sampler)
    return dict(zip(d.ids.tolist(), d.probs.tolist(), strict=True))


@pytest.mark.slow
def test_sampled_first_tokens_follow_target_distribution(tiny_target, tiny_draft, plain):
    """Over many seeds, the first token (sampled from the prompt's pass) is distributed as
    the target's own p, and the second, the first one drafted (probabilistic draft,
    rejection sampling), has the marginal of plain target sampling."""
    sampler = SamplerParams(temp=1.5, top_k=6, top_p=1.0, min_p=0.0)
    prompt = PROMPTS[0]
    exact = first_token_exact(plain, prompt, sampler)
    spec = make_session(tiny_target, tiny_draft, ["draft-simple"], n_max=3)
    n = 1500
    first: dict[int, int] = {}
    second_spec: dict[int, int] = {}
    second_plain: dict[int, int] = {}
    rejected = 0
    try:
        for seed in range(n):
            got, dec = generate(spec, prompt, 3, sampler, seed=seed)
            first[got[0]] = first.get(got[0], 0) + 1
            second_spec[got[1]] = second_spec.get(got[1], 0) + 1
            rejected += dec.stats.n_drafted - dec.stats.n_accept
            ref, _ = generate(plain, prompt, 2, sampler, seed=10_000 + seed)
            second_plain[ref[1]] = second_plain.get(ref[1], 0) + 1
    finally:
        spec.close()
    assert rejected > 50  # rejections (and so residual sampling) really happened
    tvd_first = 0.5 * sum(
        abs(first.get(t, 0) / n - exact.get(t, 0.0)) for t in set(first) | set(exact)
    )
    assert tvd_first < 0.05
    keys = set(second_spec) | set(second_plain)
    tvd_second = 0.5 * sum(abs(second_spec.get(t, 0) - second_plain.get(t, 0)) / n for t in keys)
    assert tvd_second < 0.09


def test_context_end_stops_cleanly_and_matches_plain(tiny_target, tiny_draft):
    """Drafts are cut to the room left in the context; generation ends with reason
    "context" at the same token as plain decoding, and never overflows the KV cache."""
    outs = []
    for types in ([], ["draft-simple"]):
        load = LoadOptions(
            model=tiny_target, model_draft=tiny_draft, n_ctx=64, threads=1, flash_attn="off"
        )
        s = Session(load, SpecOptions(types=types, n_max=8))
        try:
            dec = s.decoder(GREEDY, -1, 0, ignore_eos=True)
            tokens = s.tokenize(PROMPTS[0])
            out: list[int] = []
            for rnd in dec.generate(tokens):
                out.extend(rnd.emitted)
                assert s.target.n_past <= s.target.n_ctx
            assert dec.stop_reason == "context"
            assert len(tokens) + len(out) == s.target.n_ctx + 1  # the last token needs no cell
            outs.append(out)
        finally:
            s.close()
    assert outs[0] == outs[1]


@pytest.mark.parametrize("n_max", [1, 3, 8])
def test_sampled_output_with_one_hot_drafts_equals_plain_sampling_for_a_seed(
    tiny_target, tiny_draft, plain, n_max
):
    # uniforms keyed by position: at --temp > 0 the target's sample at a position does not
    # depend on what was drafted, so one-hot speculation reproduces plain decoding exactly
    hot = SamplerParams(temp=1.2, top_k=0, top_p=1.0, min_p=0.0)
    spec = make_session(
        tiny_target, tiny_draft, ["draft-simple"], n_max=n_max, draft_sampling="greedy"
    )
    try:
        drafted = 0
        for seed, prompt in enumerate(PROMPTS):
            ref, _ = generate(plain, prompt, 40, hot, seed=seed)
            got, dec = generate(spec, prompt, 40, hot, seed=seed)
            assert got == ref, f"n_max={n_max} diverged on {prompt!r}"
            drafted += dec.stats.n_drafted
            other, _ = generate(plain, prompt, 40, hot, seed=seed + 100)
            assert other != ref  # the seed matters: this is sampling, not greedy
        assert drafted > 0
    finally:
        spec.close()

"""Token probabilities under speculation, on the tiny GGUF pair: every emitted token's figures
are the target's at its position, read from the pass that verified it, so they equal the same
generation's without speculation (greedy and seeded; before and after the sampler chain);
a mutant that reports the draft's probability for drafted tokens (llama-server's 0.0 under
speculation: a one-hot draft's log 1) fails the comparison.

Also the Generation's side: the figures come out with the text they belong to (a stop string
cut away takes its tokens' figures with it)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specgguf.core import loop
from specgguf.core.sampling import SamplerParams, SparseDist
from specgguf.core.token_probs import ProbsRequest, TokenProbs, after_chain, before_chain
from specgguf.generator import Generator, GenParams

GREEDY = SamplerParams(temp=0.0)
HOT = SamplerParams(temp=1.0, top_k=40, top_p=0.95, min_p=0.0)
PROMPTS = ["the cat sat on", "def main():\n    return", "Once upon a time, in a land"]
#: the issue's tolerance for an emitted token's value: a (K+1)-row verify pass and a one-row
#: step use other kernels and round differently (measured here: at most 4.5e-4)
TOL = 1e-3
#: ... and for the alternatives listed with it, which the issue does not bound: the same
#: rounding reached 1.3e-3 on an alternative at log p = -2.5
TOL_TOP = 2e-3


@pytest.fixture(scope="module")
def sessions(tiny_target, tiny_draft):
    from tests.test_speculative_tiny import plain_and_speculative

    with plain_and_speculative(tiny_target, tiny_draft) as made:
        yield made


def figures(session, prompt, sampler, seed, probs, n=48, stop=()):
    """(text, every released TokenProbs, tokens drafted and accepted) of one generation."""
    gen = Generator(session, sampler=sampler, n_predict=n, seed=seed)
    g = gen.generate(gen.tokenize(prompt), GenParams(seed=seed, probs=probs, stop=stop))
    out: list[TokenProbs] = []
    for chunk in g:
        out += chunk.probs
    return g.text, out, g.stats.n_accept


def assert_same_figures(ref: list[TokenProbs], got: list[TokenProbs]) -> None:
    assert [e.token for e in got] == [e.token for e in ref]
    for i, (a, b) in enumerate(zip(ref, got, strict=True)):
        assert abs(a.value - b.value) <= TOL, (i, a.value, b.value)
        assert len(a.top) == len(b.top), i
        theirs = dict(b.top)
        for t, v in a.top:  # the same alternatives (a swap only where two values tie)
            if t in theirs:
                assert abs(theirs[t] - v) <= TOL_TOP, (i, t)
            else:
                assert abs(v - a.top[-1][1]) <= TOL_TOP, (i, t)


CASES = [(GREEDY, 0), (HOT, 7), (HOT, 8)]


@pytest.mark.parametrize("post", [False, True], ids=["before-chain", "after-chain"])
@pytest.mark.parametrize("sampler,seed", CASES)
def test_speculative_figures_equal_plain_ones(sessions, sampler, seed, post):
    asked = ProbsRequest(5, post_sampling=post)
    accepted = 0
    for prompt in PROMPTS:
        text, ref, _ = figures(sessions["plain"], prompt, sampler, seed, asked)
        assert len(ref) == 48 or text  # one entry per emitted token
        for kind in ("draft", "ngram"):
            got_text, got, n_acc = figures(sessions[kind], prompt, sampler, seed, asked)
            assert got_text == text, kind
            assert_same_figures(ref, got)
            accepted += n_acc
    assert accepted > 20  # drafted tokens were reported, not only the target's own


def test_the_figures_are_the_targets_distribution(sessions):
    """Before the chain: log probabilities of the whole row (the chosen one among them, the
    top ones decreasing); after it, greedy keeps one token at 1."""
    _, before, _ = figures(sessions["draft"], PROMPTS[0], HOT, 3, ProbsRequest(8))
    for e in before:
        values = [v for _, v in e.top]
        assert values == sorted(values, reverse=True) and len(values) == 8
        assert sum(math.exp(v) for v in values) <= 1.0 + 1e-6
        assert e.value <= values[0] + 1e-9
        if e.token in dict(e.top):
            assert dict(e.top)[e.token] == pytest.approx(e.value)
    _, after, _ = figures(sessions["draft"], PROMPTS[0], GREEDY, 0, ProbsRequest(3, True))
    assert all(e.value == 1.0 and e.top == ((e.token, 1.0),) for e in after)


def test_a_mutant_reporting_the_drafts_probability_fails(sessions, monkeypatch):
    """For an accepted drafted token the mutant reports the drafter's probability (a one-hot
    draft: log 1 = 0.0, what llama-server reports for drafted tokens): the comparison with
    plain decoding must catch it."""
    judge = loop.SpeculativeDecoder._judge

    def mutant(self, logits, n_past, drafter, draft, *args, **kw):
        rnd = judge(self, logits, n_past, drafter, draft, *args, **kw)
        if rnd.probs is not None:
            for j in range(rnd.n_accepted):
                q = draft.probs[j].prob(rnd.emitted[j]) if draft.probs is not None else 1.0
                rnd.probs[j] = TokenProbs(rnd.emitted[j], math.log(q), rnd.probs[j].top)
        return rnd

    asked = ProbsRequest(2)
    _, ref, _ = figures(sessions["plain"], PROMPTS[1], GREEDY, 0, asked)
    _, honest, _ = figures(sessions["draft"], PROMPTS[1], GREEDY, 0, asked)
    assert_same_figures(ref, honest)
    monkeypatch.setattr(loop.SpeculativeDecoder, "_judge", mutant)
    _, got, n_acc = figures(sessions["draft"], PROMPTS[1], GREEDY, 0, asked)
    assert n_acc > 0
    with pytest.raises(AssertionError):
        assert_same_figures(ref, got)


def test_no_figures_unless_asked(sessions):
    _, out, _ = figures(sessions["draft"], PROMPTS[0], GREEDY, 0, None)
    assert out == []


def test_a_stop_string_takes_its_tokens_figures_with_it(sessions):
    text, full, _ = figures(sessions["plain"], PROMPTS[0], GREEDY, 0, ProbsRequest(0))
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    cut, part, _ = figures(sessions["draft"], PROMPTS[0], GREEDY, 0, ProbsRequest(0), stop=(stop,))
    assert cut == text[: text.index(stop)]
    assert 0 < len(part) < len(full)
    assert [e.token for e in part] == [e.token for e in full[: len(part)]]
    shown = b"".join(sessions["plain"].target_model.piece(e.token) for e in part)
    # every reported token shows in the text; the tokens after the stop's start do not
    assert shown.decode(errors="replace").startswith(cut)
    assert len(shown.decode(errors="replace")) - len(cut) < len(stop) + 8


def test_the_readers_on_a_known_row():
    row = np.log(np.array([0.1, 0.6, 0.05, 0.25], dtype=np.float32)) + 3.0
    e = before_chain(row, 3, 2)
    assert e.value == pytest.approx(math.log(0.25), abs=1e-6)
    assert [t for t, _ in e.top] == [1, 3]
    assert e.top[0][1] == pytest.approx(math.log(0.6), abs=1e-6)
    dist = SparseDist(np.array([1, 3, 0]), np.array([0.5, 0.5, 0.0]))
    a = after_chain(dist, 3, 5)
    assert a.value == 0.5 and a.top == ((1, 0.5), (3, 0.5))  # zero mass is not listed

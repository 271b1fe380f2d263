"""Constrained decoding under speculation on the numpy toy target, with toy constraints.

What must hold (specgguf.core.constraint): every row the verifier reads is the chain on the
row with forbidden tokens removed, so greedy and seeded speculative output equal constrained
plain decoding token for token, a forbidden proposal is rejected, and the constraint's state
advances over emitted tokens only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from specgguf.core.constraint import NoTokenAllowed, constrained_distribution
from specgguf.core.draft import Draft, Drafter
from specgguf.core.sampling import SamplerParams, distribution
from tests.test_loop_toy import PROMPT, VOCAB, NoisyOracle, run


class ToyConstraint:
    """Token t may follow iff (t * 11 + sum of the accepted tokens) % mod is in `keep`: which
    tokens are allowed changes with every accepted token, so a state advanced over the wrong
    token (a rejected proposal) shows in the output. It counts the ids it was asked about."""

    def __init__(self, mod: int = 3, keep: Sequence[int] = (1, 2), dead_after: int = -1) -> None:
        self.mod, self.keep, self.dead_after = mod, tuple(keep), dead_after
        self.total = 0
        self.accepted: list[int] = []
        self.asked: list[int] = []  # sizes of the `allowed` calls (shared by clones)

    def allowed(self, ids: np.ndarray) -> np.ndarray:
        self.asked.append(len(ids))
        if len(self.accepted) == self.dead_after:
            return np.zeros(len(ids), dtype=bool)
        return np.isin((np.asarray(ids) * 11 + self.total) % self.mod, self.keep)

    def accept(self, token: int) -> None:
        assert self.allowed(np.array([token]))[0], f"accepted forbidden token {token}"
        self.total += token
        self.accepted.append(token)

    def clone(self) -> ToyConstraint:
        c = ToyConstraint(self.mod, self.keep, self.dead_after)
        c.total, c.accepted, c.asked = self.total, list(self.accepted), self.asked
        return c


def masked(logits: np.ndarray, c: ToyConstraint) -> np.ndarray:
    row = logits.astype(np.float64).copy()
    row[~c.allowed(np.arange(row.size))] = -np.inf
    return row


def as_dict(d) -> dict[int, float]:
    return {int(i): float(p) for i, p in zip(d.ids, d.probs, strict=True) if p > 0}


SAMPLERS = [
    SamplerParams(temp=0.0),
    SamplerParams(),
    SamplerParams(temp=1.3, top_k=5, top_p=1.0, min_p=0.0),
    SamplerParams(temp=0.7, top_k=0, top_p=0.9, min_p=0.1),
    SamplerParams(temp=1.0, top_k=40, top_p=0.5, min_p=0.0),
]


@pytest.mark.parametrize("params", SAMPLERS)
@pytest.mark.parametrize("mod,keep", [(3, (1, 2)), (5, (0,)), (7, (3,))])
def test_the_constrained_row_is_the_chain_on_the_masked_row(params, mod, keep):
    rng = np.random.default_rng(4)
    for total in range(12):
        logits = rng.normal(size=200).astype(np.float32) * 3
        c = ToyConstraint(mod, keep)
        c.total = total
        got = as_dict(constrained_distribution(logits, params, c))
        want = as_dict(distribution(masked(logits, c), params))
        assert got.keys() == want.keys()
        for t in got:
            assert got[t] == pytest.approx(want[t], rel=1e-9)


def test_an_allowed_argmax_costs_one_question():
    logits = np.zeros(VOCAB, dtype=np.float32)
    logits[4] = 5.0  # 4 * 11 % 3 == 2: allowed
    c = ToyConstraint()
    assert constrained_distribution(logits, SamplerParams(temp=0.0), c).top()[0] == 4
    assert c.asked == [1]
    logits[3] = 9.0  # 33 % 3 == 0: forbidden, so more is asked
    assert constrained_distribution(logits, SamplerParams(temp=0.0), c).top()[0] == 4
    assert c.asked[1:] == [1, min(64, VOCAB)]


def test_a_dead_end_raises_no_token_allowed():
    c = ToyConstraint(dead_after=0)
    with pytest.raises(NoTokenAllowed):
        constrained_distribution(np.zeros(VOCAB, np.float32), SamplerParams(), c)


class Forbidden(Drafter):
    """Proposes, every round, tokens the toy constraint forbids after the text so far (it
    follows the text on a constraint of its own)."""

    name = "ngram-simple"
    cheap = True
    max_draft = 4

    def begin(self, prompt: Sequence[int]) -> None:
        self.state = ToyConstraint()

    def observe(self, tokens: Sequence[int]) -> None:
        for t in tokens:
            self.state.accept(t)

    def propose(self, n_max: int) -> Draft:
        ok = self.state.allowed(np.arange(VOCAB))
        return Draft([t for t in range(VOCAB) if not ok[t]][:n_max])


GREEDY = SamplerParams(temp=0.0)
WARM = SamplerParams(temp=1.1)


@pytest.mark.parametrize("sampler", [GREEDY, WARM], ids=["greedy", "seeded"])
@pytest.mark.parametrize("p_wrong", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_speculation_equals_constrained_plain_decoding(sampler, p_wrong, k):
    plain, _ = run([], PROMPT, 50, sampler=sampler, constraint=ToyConstraint())
    oracle = NoisyOracle(p_wrong, k)
    got, dec = run([oracle], PROMPT, 50, sampler=sampler, constraint=ToyConstraint())
    assert got == plain
    assert dec.stats.n_drafted > 0
    # the state advanced over exactly the emitted tokens (accept() asserts each was allowed)
    assert dec.constraint.accepted == got
    # and the constraint did change the text
    free, _ = run([], PROMPT, 50, sampler=sampler)
    assert free != plain


def test_forbidden_proposals_are_all_rejected():
    plain, _ = run([], PROMPT, 40, constraint=ToyConstraint())
    # the trace asks every position, past the forbidden proposals too
    got, dec = run([Forbidden()], PROMPT, 40, constraint=ToyConstraint(), trace_probs=True)
    assert got == plain
    assert dec.stats.n_drafted > 0 and dec.stats.n_accept == 0


def test_a_dead_end_in_the_middle_of_a_round_raises():
    with pytest.raises(NoTokenAllowed):
        run([NoisyOracle(0.0, 4)], PROMPT, 30, constraint=ToyConstraint(dead_after=6))

"""The whole sampler chain under speculation, on the numpy toy target: each verify row is
sampled with the chain's state after its own prefix, drafted tokens included.

- greedy with penalties: speculative text equals plain text, whatever is drafted;
- seeded sampling with one-hot drafts and penalties, XTC, mirostat: token for token plain's;
- sampled drafts: the emitted tokens follow plain decoding's law (statistically);
- a mutant whose rows all read the round's starting state (history not advanced through the
  drafted rows) fails the first two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from specgguf.core import chain_state
from specgguf.core.draft import Draft, Drafter
from specgguf.core.sampling import SamplerParams, distribution
from tests.test_loop_toy import PROMPT, VOCAB, NoisyOracle, ToyCopyDrafter, run

#: strong penalties over a short window (the window's oldest tokens leave within a round)
PENALISED = {"penalty_repeat": 1.6, "penalty_freq": 0.5, "penalty_present": 0.8,
             "penalty_last_n": 6}  # fmt: skip


class Replay(Drafter):
    """Proposes the continuation of a known text (plain decoding's): every draft is right,
    so whole rounds are accepted and every row after the first reads drafted tokens."""

    name = "ngram-simple"
    cheap = True

    def __init__(self, text: Sequence[int], max_draft: int) -> None:
        self.text = list(text)
        self.max_draft = max_draft
        self.n = 0

    def begin(self, prompt: Sequence[int]) -> None:
        self.n = len(prompt)
        self.full = list(prompt) + self.text

    def observe(self, tokens: Sequence[int]) -> None:
        self.n += len(tokens)

    def propose(self, n_max: int) -> Draft:
        return Draft(self.full[self.n : self.n + min(n_max, self.max_draft)])


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize(
    "settings",
    [{"temp": 0.0, **PENALISED}, {"temp": 0.0, "penalty_last_n": -1, "penalty_present": 2.0}],
)
def test_greedy_with_penalties_equals_plain(k, settings):
    sampler = SamplerParams(**settings)
    plain, _ = run([], PROMPT, 60, sampler=sampler)
    assert plain != run([], PROMPT, 60)[0]  # the penalties change the text
    for drafter in (Replay(plain, k), NoisyOracle(0.3, k)):
        got, dec = run([drafter], PROMPT, 60, sampler=sampler)
        assert got == plain
    assert dec.stats.n_accept > 0


SEEDED = [
    {"temp": 1.0, **PENALISED},
    {"temp": 0.9, "xtc_probability": 0.5, "xtc_threshold": 0.05, "top_k": 0},
    {"temp": 1.0, "mirostat": 2, "mirostat_tau": 3.0, "mirostat_eta": 0.3},
    {"temp": 1.0, "mirostat": 1, "mirostat_tau": 3.0, "mirostat_eta": 0.3},
    {"temp": 1.2, "typ_p": 0.7, "top_n_sigma": 1.5, "dynatemp_range": 0.4, **PENALISED},
]


@pytest.mark.parametrize("settings", SEEDED, ids=lambda s: ",".join(s))
def test_seeded_sampling_with_one_hot_drafts_equals_plain(settings):
    sampler = SamplerParams(**settings)
    for seed in (3, 4):
        plain, _ = run([], PROMPT, 50, sampler=sampler, seed=seed)
        for drafter in (Replay(plain, 5), NoisyOracle(0.4, 4)):
            got, _ = run([drafter], PROMPT, 50, sampler=sampler, seed=seed)
            assert got == plain


class SampledDrafter(ToyCopyDrafter):
    """Draws k tokens from the toy target's own chain without the penalties (close to p, so
    most drafts are accepted and later rows read them) and reports that q."""

    name = "draft-simple"
    cheap = True

    def __init__(self, k: int, seed: int, sampler: SamplerParams) -> None:
        self.max_draft = k
        self.rng = np.random.default_rng(seed)
        self.sampler = replace(sampler, penalty_repeat=1.0, penalty_present=0.0)

    def propose(self, n_max: int) -> Draft:
        ctx, last = self.primed_copy()
        toks, qs = [], []
        for _ in range(min(n_max, self.max_draft)):
            q = distribution(ctx.decode([last], ctx.n_past)[0], self.sampler)
            last = q.sample(self.rng)
            toks.append(last)
            qs.append(q)
        return Draft(toks, qs)


def _third_tokens(sampler: SamplerParams, drafted: bool, n_runs: int) -> np.ndarray:
    """The third token of `n_runs` seeded generations, and whether it repeats the second."""
    out = np.zeros((n_runs, 2), dtype=np.int64)
    for seed in range(n_runs):
        drafters = [SampledDrafter(3, seed, sampler)] if drafted else []
        toks, _ = run(drafters, [1, 2, 1], 4, sampler=sampler, seed=seed, eos=-60.0)
        out[seed] = toks[2], toks[2] == toks[1]
    return out


#: sharp enough that the law sits on a few tokens, penalised hard enough that a repeat of
#: the token before is rare unless the penalty misses it
LAW = SamplerParams(temp=0.35, top_k=0, top_p=1.0, min_p=0.0, penalty_repeat=3.0,
                    penalty_present=3.0)  # fmt: skip
N_LAW = 1500


def _law_matches_plain(plain: np.ndarray, spec: np.ndarray) -> None:
    a = np.bincount(plain[:, 0], minlength=VOCAB) / len(plain)
    b = np.bincount(spec[:, 0], minlength=VOCAB) / len(spec)
    assert 0.5 * np.abs(a - b).sum() < 0.1  # sampling noise at 1500 runs is about 0.07
    # the third token is verified on a row whose prefix holds the drafted second token: a
    # penalty that misses it repeats the second token as often as it would unpenalised
    assert abs(spec[:, 1].mean() - plain[:, 1].mean()) < 0.006


def test_sampled_drafts_keep_plain_decodings_law_with_penalties():
    """The first token comes from the prompt's pass; the next three are verified in one pass
    whose rows must see the drafted tokens' counts: the third token's law with drafts must be
    plain decoding's (within sampling noise)."""
    _law_matches_plain(_third_tokens(LAW, False, N_LAW), _third_tokens(LAW, True, N_LAW))


def test_a_mutant_whose_rows_ignore_the_drafted_prefix_is_caught(monkeypatch):
    """History not advanced through the drafted rows: every row reads the round's start."""
    real = chain_state.RoundRows.state

    def stale(self, r, dist_of):
        return real(self, 0, dist_of)

    plain = _third_tokens(LAW, False, N_LAW)
    monkeypatch.setattr(chain_state.RoundRows, "state", stale)
    with pytest.raises(AssertionError):
        test_greedy_with_penalties_equals_plain(8, {"temp": 0.0, **PENALISED})
    with pytest.raises(AssertionError):
        test_seeded_sampling_with_one_hot_drafts_equals_plain(SEEDED[0])
    with pytest.raises(AssertionError):
        _law_matches_plain(plain, _third_tokens(LAW, True, N_LAW))

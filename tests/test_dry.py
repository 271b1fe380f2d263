"""DRY (core.dry): the incremental tracker against a reference written straight from the
definition (a quadratic scan of the window), on small token vectors; the breakers found in a
vocabulary; the stage in the chain; and exactness under speculation, where a verify row must
see a repeat whose tokens were drafted in the same pass."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from specgguf.core import chain_state
from specgguf.core.chain_state import ChainState
from specgguf.core.dry import DryBreakers, DrySettings, DryTrack, breakers_from_vocab
from specgguf.core.sampler_vocab import SamplerVocab
from specgguf.core.sampling import SamplerParams, adjusted_row, chain_on_sorted, distribution
from specgguf.core.tree import ROOT, chain_parents
from tests.test_chain_speculation import Replay
from tests.test_loop_toy import NoisyOracle, run

# -- the reference ----------------------------------------------------------------------------


def reference(history, s: DrySettings) -> dict[int, float]:
    """token -> what DRY subtracts from its logit after `history`, from the definition."""
    w = list(history if s.window is None else history[-s.window :]) if s.window != 0 else []
    a, t = s.allowed, len(w) - 1
    if len(w) <= a:
        return {}
    limit = len(w)
    for p in range(t, -1, -1):  # the most recent breaker that starts inside the window
        ends = [0] if w[p] in s.breakers.single else []
        tails = s.breakers.tails.get(w[p], ())
        ends += [len(tl) for tl in tails if tuple(w[p + 1 : p + 1 + len(tl)]) == tl]
        if ends:
            limit = t - p - max(ends)
            break
    if limit < a:
        return {}
    longest: dict[int, int] = {}
    for j in range(t):  # every earlier position: how far the text ending there equals the end
        n = 0
        while n <= j and w[j - n] == w[t - n]:
            n += 1
        n = min(n, limit)
        if n >= a and w[j + 1] not in s.breakers.single:
            longest[w[j + 1]] = max(longest.get(w[j + 1], 0), n)
    cap = int(np.float32(88.7228391) / np.log(np.float32(s.base))) if s.base > 1.000001 else 0
    out = {}
    for tok, n in longest.items():
        e = n - a if cap <= 0 else min(n - a, cap)
        out[tok] = s.multiplier * s.base**e
    return out


def as_dict(ids: np.ndarray, amounts: np.ndarray) -> dict[int, float]:
    return {int(i): float(v) for i, v in zip(ids, amounts, strict=True)}


def assert_same(got: dict[int, float], want: dict[int, float]) -> None:
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert math.isclose(got[k], v, rel_tol=1e-12), (k, got[k], v)


#: breakers over a 6-token toy vocabulary: 0 is one by itself; 1 followed by 2, 3 is another
#: (and 1 followed by 2 alone a shorter one)
BREAKERS = DryBreakers(frozenset({0}), {1: ((2,), (2, 3))})


def settings(**kw) -> DrySettings:
    base = {"multiplier": 0.8, "base": 1.75, "allowed": 2, "window": None, "breakers": BREAKERS}
    return DrySettings(**{**base, **kw})


# -- the definition on small vectors -----------------------------------------------------------


def test_the_worked_example():
    """Window a b c c b c y a b c: the text ends with 'a b c', which also ends at the first
    c (3 tokens, then c), 'b c' before y (2 tokens), 'c' before b (1, under the allowed 2)."""
    a, b, c, y = 10, 11, 12, 13
    s = settings(multiplier=1.0, base=2.0, allowed=2, breakers=DryBreakers())
    track = DryTrack(s)
    track.push([a, b, c, c, b, c, y, a, b, c])
    got = as_dict(*track.penalties(track.point))
    assert got == {c: 2.0, y: 1.0}  # c: 1 * 2 ** (3 - 2); y: 1 * 2 ** (2 - 2)
    assert_same(got, reference([a, b, c, c, b, c, y, a, b, c], s))


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"allowed": 1},
        {"allowed": 3, "window": 12},
        {"window": 5},
        {"base": 1.0},
        {"base": 40.0, "multiplier": -0.5},  # the exponent's cap reached
        {"breakers": DryBreakers()},
    ],
    ids=str,
)
def test_the_tracker_equals_the_reference_token_by_token(kw):
    s = settings(**kw)
    rng = random.Random(7)
    for _ in range(40):
        seq = [rng.choice([0, 1, 2, 3, 4, 5, 4, 5, 2]) for _ in range(rng.randrange(1, 45))]
        track = DryTrack(s)
        for i, x in enumerate(seq):
            track.push([x])
            assert_same(as_dict(*track.penalties(track.point)), reference(seq[: i + 1], s))


@pytest.mark.parametrize(("allowed", "window"), [(2, 16), (1, None), (3, 3), (1, 2)])
def test_a_row_after_a_drafted_path_equals_the_reference_on_the_whole_text(allowed, window):
    """Stepping over drafted tokens (without changing the emitted sequence) gives the point
    of the sequence that holds them: repeats inside the path, across it, and breakers that
    complete inside it; windows shorter than the path too."""
    s = settings(allowed=allowed, window=window)
    rng = random.Random(11)
    for _ in range(60):
        emitted = [rng.randrange(6) for _ in range(rng.randrange(1, 25))]
        path = [rng.randrange(6) for _ in range(rng.randrange(1, 9))]
        track = DryTrack(s)
        track.push(emitted)
        point = track.point
        for k in range(1, len(path) + 1):
            point = track.after(point, path[:k])
            got = as_dict(*track.penalties(point, path[:k]))
            assert_same(got, reference(emitted + path[:k], s))
        assert track.tokens == emitted  # rows never change the sequence


def test_a_lone_breaker_token_is_never_penalised_and_cuts_the_matches():
    def penalties(seq, breakers):
        track = DryTrack(settings(multiplier=1.0, base=2.0, allowed=2, breakers=breakers))
        track.push(seq)
        return as_dict(*track.penalties(track.point))

    zero = DryBreakers(frozenset({0}))
    # 0 follows '4 5' once: it would continue the repeat, but a breaker is never penalised
    assert penalties([4, 5, 0, 4, 5], DryBreakers()) == {0: 1.0}
    assert penalties([4, 5, 0, 4, 5], zero) == {}
    # '4 0 5 6' recurs (7 would make it 5 long: 2 ** (4 - 2)); after the breaker 0 only
    # '5 6' counts: 2 ** (2 - 2)
    assert penalties([4, 0, 5, 6, 7, 4, 0, 5, 6], DryBreakers()) == {7: 4.0}
    assert penalties([4, 0, 5, 6, 7, 4, 0, 5, 6], zero) == {7: 1.0}


def test_breakers_are_found_in_the_vocabulary_by_their_text():
    """A token holding a whole breaker is one by itself; a token ending with a breaker's
    start is its head, the rest tokenized as its tail."""
    pieces = [b"a", b"\n", b"x\ny", b"<", b"<|", b"end", b"|>", b"ab", b"b", b"<|end|>", b"|"]
    vocab = {p.decode(): i for i, p in enumerate(pieces)}

    def tokenize(text: str) -> list[int]:  # greedy longest match over the toy vocabulary
        out, i = [], 0
        while i < len(text):
            n = max(n for n in range(1, len(text) - i + 1) if text[i : i + n] in vocab)
            out.append(vocab[text[i : i + n]])
            i += n
        return out

    br = breakers_from_vocab(["\n", "<|end|>", "ab"], pieces, tokenize)
    assert br.single == {1, 2, 7, 9}  # "\n", "x\ny", "ab", "<|end|>"
    assert br.tails == {3: ((10, 5, 6),), 4: ((5, 6),), 0: ((8,),)}  # "<" "|" "end" "|>" ...


# -- the stage in the chain --------------------------------------------------------------------


DRY = {"dry_multiplier": 2.0, "dry_base": 1.75, "dry_allowed_length": 1,
       "dry_penalty_last_n": -1, "dry_breakers": DryBreakers(frozenset({0}))}  # fmt: skip


def test_the_chain_lowers_the_continuation_of_a_repeat():
    params = SamplerParams(temp=0.0, **DRY)
    logits = np.zeros(8, dtype=np.float32)
    logits[3] = 1.0  # the favourite, which continues '2 -> 3' after a second 2
    chain = ChainState(params, [2, 3, 5, 2], None)
    row = chain.round([], [], 4).state(0, lambda i: None)
    assert distribution(logits, params, row).top()[0] != 3
    assert distribution(logits, params, None).top()[0] == 3  # a draft's row: no history


def test_a_constrained_row_sees_dry_before_the_grammar():
    """Under a grammar the leading penalties and DRY change the row before the allowed top-k
    is searched (adjusted_row), and the rest of the chain does not apply DRY twice."""
    params = SamplerParams(temp=1.0, top_k=0, top_p=1.0, min_p=0.0, **DRY)
    logits = np.array([0, 0, 0, 3.0, 2.5, 0, 0, 0], dtype=np.float32)
    row = ChainState(params, [2, 3, 5, 2], None).round([], [], 4).state(0, lambda i: None)
    adjusted = adjusted_row(logits, params, row)
    assert adjusted[3] == pytest.approx(3.0 - 2.0) and adjusted[4] == 2.5  # 2 * 1.75 ** 0
    ids = np.array([4, 3])
    d = chain_on_sorted(ids, adjusted[ids], params, row)
    assert d.prob(4) / d.prob(3) == pytest.approx(math.exp(1.5))


def test_dry_after_top_k_works_on_the_survivors():
    params = SamplerParams(temp=1.0, top_k=2, samplers=("top_k", "dry", "temperature"), **DRY)
    logits = np.array([0, 0, 0, 3.0, 2.5, 0, 0, 0], dtype=np.float32)
    chain = ChainState(params, [2, 3, 5, 2], None)
    row = chain.round([], [], 4).state(0, lambda i: None)
    d = distribution(logits, params, row)
    assert set(d.ids.tolist()) == {3, 4} and d.prob(4) > d.prob(3)


# -- exact under speculation -------------------------------------------------------------------


def test_a_repeat_drafted_in_the_same_pass_is_seen_by_the_later_rows():
    """A chain draft, then a tree: every row's penalties are those of the text up to it."""
    params = SamplerParams(**{**DRY, "dry_allowed_length": 2})
    s = chain_state.dry_track(params).settings
    prompt = [7, 1, 2]
    draft = [4, 5, 6, 4, 5]  # '4 5' repeats inside the draft: row 5 must penalise 6
    chain = ChainState(params, prompt, None)
    rows = chain.round(draft, chain_parents(len(draft)), len(prompt))
    for r in range(len(draft) + 1):
        got = as_dict(rows.state(r, None).dry_ids, rows.state(r, None).dry_amounts)
        assert_same(got, reference(prompt + draft[:r], s))
    assert 6 in as_dict(rows.state(5, None).dry_ids, rows.state(5, None).dry_amounts)
    tree = [4, 5, 4, 5, 9]  # two branches: 4 5 4 5, and 4 9 beside the first 5
    parents = [ROOT, 0, 1, 2, 0]
    rows = chain.round(tree, parents, len(prompt))
    for r, path in enumerate([[], [4], [4, 5], [4, 5, 4], [4, 5, 4, 5], [4, 9]]):
        got = as_dict(rows.state(r, None).dry_ids, rows.state(r, None).dry_amounts)
        assert_same(got, reference(prompt + path, s))


#: a prompt that repeats, so DRY changes the toy's text from the first tokens on
PROMPT = [5, 9, 13, 2, 7, 5, 9, 13, 2]
GREEDY_DRY = SamplerParams(temp=0.0, **DRY)


@pytest.mark.parametrize("k", [1, 3, 8])
def test_greedy_with_dry_equals_plain(k):
    plain, _ = run([], PROMPT, 60, sampler=GREEDY_DRY)
    assert plain != run([], PROMPT, 60)[0]  # DRY changes the text
    for drafter in (Replay(plain, k), NoisyOracle(0.3, k)):
        got, dec = run([drafter], PROMPT, 60, sampler=GREEDY_DRY)
        assert got == plain
    assert dec.stats.n_accept > 0


def test_seeded_sampling_with_dry_and_one_hot_drafts_equals_plain():
    sampler = SamplerParams(temp=1.0, **DRY)
    for seed in (3, 4):
        plain, _ = run([], PROMPT, 50, sampler=sampler, seed=seed)
        for drafter in (Replay(plain, 5), NoisyOracle(0.4, 4)):
            assert run([drafter], PROMPT, 50, sampler=sampler, seed=seed)[0] == plain


def test_a_mutant_whose_rows_ignore_the_drafted_prefix_is_caught(monkeypatch):
    real = chain_state.RoundRows.state
    monkeypatch.setattr(chain_state.RoundRows, "state", lambda self, r, d: real(self, 0, d))
    with pytest.raises(AssertionError):
        test_a_repeat_drafted_in_the_same_pass_is_seen_by_the_later_rows()
    with pytest.raises(AssertionError):
        test_greedy_with_dry_equals_plain(8)


def test_the_vocabulary_resolves_breakers_and_text_biases():
    """SamplerVocab: DRY's breakers and a text logit bias become token ids before a sequence
    starts (every token of the text, as often as it occurs); the scan stays inside the
    vocabulary (a token past its end would abort in llama.cpp)."""
    pieces = [b"a", b"\n", b"b", b"ab"]

    def piece(i: int) -> bytes:
        assert 0 <= i < len(pieces)
        return pieces[i]

    def tokenize(text: str) -> list[int]:
        return [{"a": 0, "\n": 1, "b": 2}[ch] for ch in text]

    vocab = SamplerVocab(len(pieces), piece, tokenize)
    params = SamplerParams(dry_multiplier=1.0, dry_sequence_breakers=("\n", "ab"),
                           logit_bias=(("aba", -1.0), (3, 2.0)))  # fmt: skip
    ready = vocab.ready(params)
    assert ready.dry_breakers.single == {1, 3} and ready.dry_breakers.tails == {0: ((2,),)}
    assert ready.logit_bias == ((0, -1.0), (2, -1.0), (0, -1.0), (3, 2.0))
    assert vocab.ready(ready) is ready


def test_run_takes_the_dry_flags_on_a_real_vocabulary(tiny_target, tiny_draft, capsys):
    """The flags reach the chain through the target's vocabulary (breakers looked up in it),
    with and without a draft model; DRY changes a repetitive prompt's greedy text."""
    from specgguf_cli.app import run_cli

    base = ["run", "-t", "1", "-c", "512", "-fa", "off", "-m", str(tiny_target), "-n", "12",
            "--temp", "0", "--json", "-q", "-p", "a b c a b c a b c a b c a b"]  # fmt: skip
    dry = ["--dry-multiplier", "4", "--dry-allowed-length", "1", "--dry-sequence-breaker", "\\n"]
    texts = []
    for extra in ([], dry, [*dry, "-md", str(tiny_draft)]):
        assert run_cli([*base, *extra]) == 0
        texts.append(json.loads(capsys.readouterr().out)["text"])
    assert texts[1] != texts[0], texts

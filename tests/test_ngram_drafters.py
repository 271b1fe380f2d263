"""The n-gram drafters: known proposals, llama.cpp's rules, files, and incremental updates."""

from __future__ import annotations

import os
import random
import struct

import pytest

from specgguf.core.draft import Draft, Drafter
from specgguf.drafters import ngram_cache as nc
from specgguf.drafters import ngram_mod
from specgguf.drafters.ngram_cache import (
    NgramCache,
    NgramCounts,
    draft_from_caches,
    load_ngram_cache,
    ngram_key,
    save_ngram_cache,
)
from specgguf.drafters.ngram_map import NgramMapK, NgramMapK4V
from specgguf.drafters.ngram_mod import NgramMod
from specgguf.drafters.ngram_options import NGRAM_FLAGS, NgramOptions
from specgguf.drafters.ngram_params import NgramModParams, NgramSimpleParams
from specgguf.drafters.ngram_simple import NgramSimple
from specgguf.drafters.registry import SPEC_TYPES, ngram_drafter
from specgguf.errors import ExitCode, SpecggufError, UsageError


def started(d: Drafter, tokens: list[int]) -> Drafter:
    d.begin(tokens)
    return d


# ---- reference semantics, written as plain scans ---------------------------------------------


def ref_simple(h: list[int], n: int, m: int, n_max: int) -> list[int]:
    """llama.cpp's common_ngram_simple_draft, restated over the full history h."""
    length = len(h)
    if length < n + m + 3:
        return []
    pattern = h[length - n :]
    for j in range(length - n - 2, 0, -1):
        if h[j : j + n] == pattern:
            k = min(m, length - 1 - j - n)
            return h[j + n : j + n + min(k, n_max)] if k >= n else []
    return []


def ref_map(h: list[int], n: int, m: int, key_only: bool, n_max: int) -> list[int]:
    """map-k / map-k4v as documented in ngram_map.py, by scanning every eligible start."""
    length = len(h)
    if length < 2 * n + m + 1:
        return []
    pattern = h[length - n :]
    starts = [j for j in range(1, length - n - m - 2) if h[j : j + n] == pattern]
    if not starts:
        return []
    if key_only:
        j = starts[-1]
        return h[j + n : j + n + min(m, n_max)]
    values: list[list] = []
    for j in starts:
        v = tuple(h[j + n : j + n + m])
        for entry in values:
            if entry[0] == v:
                entry[1] += 1
                break
        else:
            if len(values) < 4:
                values.append([v, 1])
    best = values[0]
    for entry in values[1:]:
        if entry[1] > best[1]:
            best = entry
    others = sum(e[1] for e in values) - best[1]
    if others > 0 and best[1] < 2 * others:
        return []
    return list(best[0][:n_max])


def ref_pick(part: dict[int, int], part_static: dict[int, int]) -> tuple[int, int, int]:
    """Full scan of a part: maximise count x static weight, then count, then -token."""

    def score(tok: int) -> tuple[int, int, int]:
        w = 100 * part_static[tok] if tok in part_static else 1
        return (part[tok] * w, part[tok], -tok)

    tok = max(part, key=score)
    return tok, part[tok], sum(part.values())


# ---- ngram-simple ----------------------------------------------------------------------------


def test_simple_copies_what_followed_the_pattern_and_respects_the_budget() -> None:
    d = started(NgramSimple(2, 3), [100, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2])
    assert d.propose(10).tokens == [3, 4, 5]
    assert d.propose(2).tokens == [3, 4]
    assert d.propose(0).tokens == []
    assert d.propose(10).probs is None  # deterministic proposal


def test_simple_uses_the_most_recent_occurrence() -> None:
    d = started(NgramSimple(2, 3), [100, 1, 2, 3, 4, 5, 1, 2, 7, 8, 9, 50, 1, 2])
    assert d.propose(10).tokens == [7, 8, 9]


def test_simple_needs_n_plus_m_plus_3_tokens() -> None:
    # a match exists in both; llama.cpp only looks once the history is long enough
    assert started(NgramSimple(2, 3), [100, 1, 2, 3, 4, 1, 2]).propose(10).tokens == []
    assert started(NgramSimple(2, 3), [100, 1, 2, 3, 4, 5, 1, 2]).propose(10).tokens == [3, 4, 5]


def test_simple_ignores_a_match_at_position_0_and_short_continuations() -> None:
    assert started(NgramSimple(2, 3), [1, 2, 3, 4, 5, 6, 7, 8, 1, 2]).propose(10).tokens == []
    period3 = [100] + [1, 2, 3] * 4
    # n=3: the latest match leaves 2 < size_n tokens to copy, so nothing is proposed
    assert started(NgramSimple(3, 3), period3).propose(10).tokens == []
    assert started(NgramSimple(2, 3), period3).propose(10).tokens == [1, 2]


def test_simple_no_match_no_proposal() -> None:
    assert started(NgramSimple(2, 3), list(range(20))).propose(10) == Draft()


def test_simple_min_hits() -> None:
    once = [100, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2]
    twice = [100, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2]
    assert started(NgramSimple(2, 3, min_hits=2), once).propose(10).tokens == []
    assert started(NgramSimple(2, 3, min_hits=2), twice).propose(10).tokens == [3, 4, 5]


def test_simple_matches_llama_cpp_scan_on_random_sequences() -> None:
    rng = random.Random(1)
    for _ in range(150):
        n, m = rng.randint(1, 4), rng.randint(1, 6)
        h = [rng.randint(0, 3) for _ in range(rng.randint(0, 60))]
        d = started(NgramSimple(n, m), h)
        n_max = rng.randint(1, 8)
        assert d.propose(n_max).tokens == ref_simple(h, n, m, n_max), (n, m, h)


# ---- ngram-map-k / ngram-map-k4v -------------------------------------------------------------

FILL = list(range(200, 210))


def test_map_k_proposes_after_the_key_and_needs_2n_plus_m_plus_1() -> None:
    assert started(NgramMapK(2, 3), [100, 1, 2, 3, 4, 5, 1, 2]).propose(10).tokens == []
    assert started(NgramMapK(2, 3), [100, 1, 2, 3, 4, 5, 6, 1, 2]).propose(10).tokens == [3, 4, 5]


def test_map_k_cap_follows_feedback() -> None:
    d = started(NgramMapK(2, 3), [100, 1, 2, 3, 4, 5, 6, 1, 2])
    assert d.propose(10).tokens == [3, 4, 5]
    d.feedback(3, 1)
    assert d.propose(10).tokens == [3]  # capped by last acceptance of this key
    d.feedback(1, 1)
    assert d.propose(10).tokens == [3]  # the cap never grows past what was drafted
    d.feedback(1, 0)
    assert d.propose(10).tokens == []  # a key that failed completely stops drafting


def test_map_k_cap_is_kept_when_the_loop_budget_cut_a_fully_accepted_draft() -> None:
    d = started(NgramMapK(2, 3), [100, 1, 2, 3, 4, 5, 6, 1, 2])
    assert d.propose(2).tokens == [3, 4]
    d.feedback(2, 2)
    assert d.propose(10).tokens == [3, 4, 5]
    assert d.propose(2).tokens == [3, 4]
    d.feedback(2, 1)
    assert d.propose(10).tokens == [3]


def test_map_k_feedback_without_a_draft_is_ignored() -> None:
    d = started(NgramMapK(2, 3), [100, 1, 2, 3, 4, 5, 6, 1, 2])
    d.feedback(3, 0)  # not this drafter's draft
    assert d.propose(10).tokens == [3, 4, 5]
    assert d.propose(0).tokens == []
    d.feedback(3, 0)  # the last call proposed nothing
    assert d.propose(10).tokens == [3, 4, 5]


def k4v_history(continuations: list[list[int]]) -> list[int]:
    h = [100]
    for i, c in enumerate(continuations):
        h += [1, 2] + c + [150 + i]
    return h + FILL + [1, 2]


def test_k4v_ambiguous_continuations_give_no_proposal() -> None:
    a, b = [7, 8], [5, 6]
    assert started(NgramMapK4V(2, 2), k4v_history([a, b, a, b])).propose(10).tokens == []
    assert started(NgramMapK4V(2, 2), k4v_history([a, a, a, b, b])).propose(10).tokens == []


def test_k4v_dominant_continuation_is_proposed_even_if_not_the_latest() -> None:
    a, b = [7, 8], [5, 6]
    h = k4v_history([a, a, b])  # 2 >= 2 x 1
    assert started(NgramMapK4V(2, 2), h).propose(10).tokens == [7, 8]
    assert started(NgramMapK(2, 2), h).propose(10).tokens == [5, 6]  # map-k: the latest
    assert started(NgramMapK4V(2, 2), k4v_history([a, b, a, a, b, a])).propose(1).tokens == [7]


def test_k4v_counts_only_four_distinct_continuations() -> None:
    # the fifth distinct continuation is never counted, so it cannot make the key ambiguous
    h = k4v_history([[7, 8]] * 5 + [[1, 1], [2, 2], [3, 3]] + [[5, 5]] * 9)
    assert started(NgramMapK4V(2, 2), h).propose(10).tokens == []  # 5 < 2 x 3
    h = k4v_history([[7, 8]] * 6 + [[1, 1], [2, 2], [3, 3]] + [[5, 5]] * 9)
    assert started(NgramMapK4V(2, 2), h).propose(10).tokens == [7, 8]  # 6 >= 2 x 3


def test_k4v_min_hits() -> None:
    h2, h3 = k4v_history([[7, 8]] * 2), k4v_history([[7, 8]] * 3)
    assert started(NgramMapK4V(2, 2, min_hits=3), h2).propose(10).tokens == []
    assert started(NgramMapK4V(2, 2, min_hits=3), h3).propose(10).tokens == [7, 8]
    assert started(NgramMapK(2, 2, min_hits=3), h2).propose(10).tokens == []
    assert started(NgramMapK(2, 2, min_hits=3), h3).propose(10).tokens == [7, 8]


def test_k4v_cap_is_per_continuation() -> None:
    d = started(NgramMapK4V(2, 3), k4v_history([[7, 8, 9]] * 3))
    assert d.propose(10).tokens == [7, 8, 9]
    d.feedback(3, 2)
    assert d.propose(10).tokens == [7, 8]


@pytest.mark.parametrize("cls,key_only", [(NgramMapK, True), (NgramMapK4V, False)])
def test_map_matches_reference_scan_on_random_sequences(cls: type, key_only: bool) -> None:
    rng = random.Random(2)
    for _ in range(150):
        n, m = rng.randint(1, 3), rng.randint(1, 4)
        h = [rng.randint(0, 2) for _ in range(rng.randint(0, 70))]
        n_max = rng.randint(1, 6)
        got = started(cls(n, m), h).propose(n_max).tokens
        assert got == ref_map(h, n, m, key_only, n_max), (n, m, h)


# ---- ngram-mod -------------------------------------------------------------------------------


def c_slot(window: list[int]) -> int:
    """llama.cpp's common_ngram_mod::idx, with C's 64-bit wrap-around."""
    res = 0
    for t in window:
        res = (res * 6364136223846793005 + t) % 2**64
    return res % ngram_mod.TABLE_SIZE


def test_mod_uses_llama_cpp_slots() -> None:
    rng = random.Random(3)
    h = [rng.randrange(150_000) for _ in range(300)]
    d = started(NgramMod(5, 0, 8), h[:100])
    d.observe(h[100:])
    for i in range(len(h) - 5):
        assert d._table[c_slot(h[i : i + 5])] == h[i + 5]


def test_mod_rolls_forward_up_to_its_own_n_max_then_the_budget() -> None:
    d = started(NgramMod(2, 3, 5), [1, 2, 3, 4, 5, 6, 7, 50, 1, 2])
    assert d.propose(10).tokens == [3, 4, 5, 6, 7]
    assert d.propose(2).tokens == [3, 4]


def two_sequences(n_min: int) -> NgramMod:
    d = started(NgramMod(2, n_min, 6), [1, 2, 3, 4, 5])  # ends in a window with no successor
    d.begin([9, 1, 2])  # the table is shared across sequences
    return d


def test_mod_discards_rollouts_shorter_than_n_min_before_applying_the_budget() -> None:
    assert two_sequences(3).propose(10).tokens == [3, 4, 5]
    assert two_sequences(3).propose(2).tokens == [3, 4]
    assert two_sequences(4).propose(10).tokens == []
    assert two_sequences(4).propose(2).tokens == []  # n_min is on the rollout, not the budget
    assert started(NgramMod(2, 0, 6), [1, 2, 3, 4]).propose(5).tokens == []  # unseen pattern


def test_mod_needs_n_match_tokens_before_the_last() -> None:
    d = started(NgramMod(3, 0, 4), [1, 2, 3, 4])
    d.begin([1, 2, 3])  # (1, 2, 3) -> 4 is in the table, but there is no token before it
    assert d.propose(4).tokens == []
    d.begin([0, 1, 2, 3])
    assert d.propose(4).tokens == [4]
    assert started(NgramMod(2, 0, 4), [1, 2, 3, 1, 2]).propose(4).tokens == [3, 1, 2, 3]


def test_mod_resets_after_five_low_acceptance_rounds() -> None:
    d = two_sequences(3)
    for _ in range(4):
        assert d.propose(3).tokens == [3, 4, 5]
        d.feedback(3, 0)
    assert d.propose(3).tokens == [3, 4, 5]
    d.feedback(3, 1)  # good enough (1/3 >= 25%): the streak restarts
    for _ in range(4):
        assert d.propose(3).tokens == [3, 4, 5]
        d.feedback(3, 0)
    d.feedback(3, 0)  # no draft since the last feedback: ignored
    assert d.propose(3).tokens == [3, 4, 5]
    d.feedback(3, 0)
    # reset, then only the current sequence [9, 1, 2] is indexed again
    assert d.propose(3).tokens == []
    assert d.occupancy == 1 / ngram_mod.TABLE_SIZE


def test_mod_resets_when_begin_fills_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    h = [1, 2, 3, 4, 5, 6, 1, 2]
    assert started(NgramMod(2, 0, 3), h).propose(3).tokens == [3, 4, 5]
    monkeypatch.setattr(ngram_mod, "RESET_OCCUPANCY", 5 / ngram_mod.TABLE_SIZE)
    assert started(NgramMod(2, 0, 3), h).propose(3).tokens == []


# ---- ngram-cache -----------------------------------------------------------------------------


def counts(entries: dict[tuple[int, ...], dict[int, int]]) -> NgramCounts:
    c = NgramCounts()
    for key, part in entries.items():
        for tok, n in part.items():
            c.add(ngram_key(list(key)), tok, n)
    return c


def test_cache_context_drafts_from_the_longest_ngram() -> None:
    d = started(NgramCache(), [5, 1, 2, 3, 4, 6, 1, 2, 3])
    assert d.propose(100).tokens == [4, 6, 1, 2, 3, 4, 6, 1]  # n_draft = 8
    assert d.propose(3).tokens == [4, 6, 1]
    assert started(NgramCache(), [5]).propose(8) == Draft()


def test_cache_context_thresholds() -> None:
    # unigram 7 -> {8, 9, 10}: 33% < 66%, and no longer n-gram matches
    assert started(NgramCache(), [7, 8, 7, 9, 7, 10, 7]).propose(8).tokens == []
    # unigram 7 -> 8 once: 1 sample < 2
    assert started(NgramCache(), [7, 8, 9, 7]).propose(8).tokens == []


def test_cache_dynamic_uses_strict_and_static_lax_thresholds(tmp_path) -> None:
    dyn, stat = tmp_path / "dyn.bin", tmp_path / "static.bin"
    seq = [40, 41, 1, 2]
    save_ngram_cache(counts({(1, 2): {3: 2}}), dyn)
    assert started(NgramCache(dynamic_path=dyn), seq).propose(1).tokens == []  # 2 < 3 samples
    save_ngram_cache(counts({(1, 2): {3: 3}}), dyn)
    assert started(NgramCache(dynamic_path=dyn), seq).propose(1).tokens == [3]
    save_ngram_cache(counts({(1, 2): {3: 2}}), stat)
    assert started(NgramCache(static_path=stat), seq).propose(1).tokens == [3]
    save_ngram_cache(counts({(1, 2): {3: 1}}), stat)
    assert started(NgramCache(static_path=stat), seq).propose(1).tokens == []  # 1 < 2 samples


def test_cache_static_weights_the_context_choice(tmp_path) -> None:
    seq = [1, 2, 5, 9, 1, 2, 6, 8, 1, 2]  # bigram (1, 2) -> {5: 1, 6: 1}
    assert started(NgramCache(), seq).propose(1).tokens == [5]  # tie: smallest token
    stat = tmp_path / "static.bin"
    save_ngram_cache(counts({(1, 2): {6: 1}}), stat)
    assert started(NgramCache(static_path=stat), seq).propose(1).tokens == [6]


def test_cache_pick_matches_a_full_scan() -> None:
    rng = random.Random(4)
    for _ in range(300):
        part = {rng.randrange(12): rng.randint(1, 9) for _ in range(rng.randint(1, 8))}
        part_static = {rng.randrange(12): rng.randint(1, 3) for _ in range(rng.randint(0, 5))}
        c = counts({(1,): part})
        assert nc._pick(c, ngram_key([1]), part_static) == ref_pick(part, part_static)


def test_cache_file_layout_is_llama_cpp_s(tmp_path) -> None:
    path = tmp_path / "c.bin"
    raw = struct.pack("<4ii", 7, 8, -1, -1, 2) + struct.pack("<4i", 9, 3, 10, 1)
    raw += struct.pack("<4ii", 5, -1, -1, -1, 1) + struct.pack("<2i", 6, 4)
    path.write_bytes(raw)
    c = load_ngram_cache(path)
    assert c.parts == {(7, 8, -1, -1): {9: 3, 10: 1}, (5, -1, -1, -1): {6: 4}}
    save_ngram_cache(c, tmp_path / "d.bin")
    assert (tmp_path / "d.bin").read_bytes() == raw


def test_cache_round_trip_gives_identical_proposals(tmp_path) -> None:
    rng = random.Random(5)
    h = [rng.randint(0, 6) for _ in range(400)]
    live = started(NgramCache(dynamic_path=tmp_path / "dyn.bin"), h)
    live.close()
    static = tmp_path / "static.bin"
    save_ngram_cache(live._context, static)
    loaded = NgramCache(static_path=static, dynamic_path=tmp_path / "dyn.bin")
    assert loaded._dynamic.parts == live._context.parts
    assert loaded._static.parts == live._context.parts
    empty = NgramCounts()
    for _ in range(100):
        tail = [rng.randint(0, 6) for _ in range(4)]
        want = draft_from_caches(tail, 8, live._context, empty, empty)
        assert draft_from_caches(tail, 8, loaded._dynamic, empty, empty) == want
        as_static = draft_from_caches(tail, 8, empty, empty, live._context)
        assert draft_from_caches(tail, 8, empty, empty, loaded._static) == as_static


def test_cache_dynamic_file_accumulates_across_runs(tmp_path) -> None:
    dyn = tmp_path / "dyn.bin"
    assert not dyn.exists()
    d = started(NgramCache(dynamic_path=dyn), [1, 2, 3])
    d.observe([1, 2])
    d.close()
    d.close()  # idempotent: merged once
    first = load_ngram_cache(dyn).parts
    assert first[ngram_key([1, 2])] == {3: 1}
    d = started(NgramCache(dynamic_path=dyn), [1, 2, 3])
    d.begin([1, 2, 4])  # the previous sequence is merged into the dynamic cache
    d.close()
    parts = load_ngram_cache(dyn).parts
    assert parts[ngram_key([1, 2])] == {3: 2, 4: 1}


def test_cache_atomic_write_keeps_the_old_file(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    dyn = tmp_path / "dyn.bin"
    save_ngram_cache(counts({(1, 2): {3: 5}}), dyn)
    before = dyn.read_bytes()
    d = started(NgramCache(dynamic_path=dyn), [4, 5, 6, 4, 5, 6])

    def boom(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(SpecggufError) as err:
        d.close()
    assert "\n" not in str(err.value) and str(dyn) in str(err.value)
    assert dyn.read_bytes() == before
    # no temp file left behind (the sidecar lock file stays: see ngram_cache's docstring)
    assert sorted(os.listdir(tmp_path)) == [".dyn.bin.lock", "dyn.bin"]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda raw: raw[:-3],  # not a whole number of int32
        lambda raw: raw[:-8],  # record cut short
        lambda raw: raw[:12],  # header cut short
        lambda raw: raw[:16] + struct.pack("<i", 0) + raw[20:],  # zero tokens
        lambda raw: raw[:16] + struct.pack("<i", -3) + raw[20:],
        lambda raw: raw[:24] + struct.pack("<i", 0) + raw[28:],  # zero count
    ],
)
def test_cache_corrupt_file_is_a_one_line_error(tmp_path, mutate) -> None:
    good = tmp_path / "good.bin"
    save_ngram_cache(counts({(1, 2): {3: 5, 4: 1}, (7,): {8: 2}}), good)
    bad = tmp_path / "bad.bin"
    bad.write_bytes(mutate(good.read_bytes()))
    for kwargs in ({"static_path": bad}, {"dynamic_path": bad}):
        with pytest.raises(SpecggufError) as err:
            NgramCache(**kwargs)
        assert err.value.code == ExitCode.USAGE
        assert "corrupt lookup cache" in str(err.value) and "\n" not in str(err.value)


def test_cache_missing_static_file_is_an_error(tmp_path) -> None:
    with pytest.raises(SpecggufError, match="cannot read lookup cache"):
        NgramCache(static_path=tmp_path / "nope.bin")
    assert len(load_ngram_cache(_empty(tmp_path))) == 0


def _empty(tmp_path) -> str:
    p = tmp_path / "empty.bin"
    p.write_bytes(b"")
    return str(p)


# ---- incremental == from scratch -------------------------------------------------------------

FACTORIES = {
    "ngram-simple": lambda: NgramSimple(2, 4),
    "ngram-simple-3": lambda: NgramSimple(3, 5, min_hits=2),
    "ngram-map-k": lambda: NgramMapK(2, 3),
    "ngram-map-k4v": lambda: NgramMapK4V(2, 2),
    "ngram-map-k4v-hits": lambda: NgramMapK4V(2, 2, min_hits=2),
    "ngram-mod": lambda: NgramMod(3, 2, 6),
    "ngram-cache": lambda: NgramCache(),
}


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_incremental_equals_from_scratch(kind: str) -> None:
    rng = random.Random(kind)
    make = FACTORIES[kind]
    doc = [rng.randint(0, 9) for _ in range(40)]
    seq = [rng.choice(doc) if rng.random() < 0.1 else t for t in doc * 6]  # repeats with edits
    inc = make()
    cut = rng.randint(0, 20)
    inc.begin(seq[:cut])
    pos, checks = cut, 0
    while pos < len(seq):
        step = rng.randint(1, 8)
        inc.observe(seq[pos : pos + step])
        pos = min(pos + step, len(seq))
        n_max = rng.randint(1, 8)
        got = inc.propose(n_max).tokens
        want = started(make(), seq[:pos]).propose(n_max).tokens
        assert got == want, (kind, pos)
        checks += bool(want)
    assert checks > 3  # the sequence really exercises proposals


# ---- parameters and the factory --------------------------------------------------------------


@pytest.mark.parametrize(
    "build,flag,value,bound",
    [
        (lambda v: NgramSimple(size_n=v), "--spec-ngram-simple-size-n", 0, ">= 1"),
        (lambda v: NgramSimple(size_m=v), "--spec-ngram-simple-size-m", 1025, "<= 1024"),
        (lambda v: NgramSimple(min_hits=v), "--spec-ngram-simple-min-hits", 0, ">= 1"),
        (lambda v: NgramMapK(size_n=v), "--spec-ngram-map-k-size-n", -1, ">= 1"),
        (lambda v: NgramMapK(size_m=v), "--spec-ngram-map-k-size-m", 0, ">= 1"),
        (lambda v: NgramMapK(min_hits=v), "--spec-ngram-map-k-min-hits", 0, ">= 1"),
        (lambda v: NgramMapK4V(size_n=v), "--spec-ngram-map-k4v-size-n", 2000, "<= 1024"),
        (lambda v: NgramMapK4V(size_m=v), "--spec-ngram-map-k4v-size-m", 0, ">= 1"),
        (lambda v: NgramMapK4V(min_hits=v), "--spec-ngram-map-k4v-min-hits", 0, ">= 1"),
        (lambda v: NgramMod(n_match=v), "--spec-ngram-mod-n-match", 0, ">= 1"),
        (lambda v: NgramMod(n_min=v), "--spec-ngram-mod-n-min", -1, ">= 0"),
        (lambda v: NgramMod(n_max=v), "--spec-ngram-mod-n-max", 1025, "<= 1024"),
    ],
)
def test_invalid_values_name_the_flag(build, flag: str, value: int, bound: str) -> None:
    with pytest.raises(UsageError) as err:
        build(value)
    assert str(err.value) == f"invalid value for {flag}: {value} (must be {bound})"
    assert err.value.code == ExitCode.USAGE


def test_boundary_values_are_accepted() -> None:
    NgramSimple(1, 1024, 1)
    NgramMod(1, 0, 0)
    NgramModParams(n_match=1024, n_min=1024, n_max=1024)
    with pytest.raises(UsageError, match="must be an integer"):
        NgramSimpleParams(size_n=True)  # type: ignore[arg-type]


def test_flag_table_covers_every_option_once() -> None:
    flags = {row.info.flag: row for row in NGRAM_FLAGS}
    assert len(flags) == len(NGRAM_FLAGS) == 16
    assert flags["--spec-ngram-mod-n-min"].default == 48
    assert flags["--spec-ngram-map-k4v-size-m"].default == 48
    assert flags["--lookup-cache-static"].info.aliases == ("-lcs",)
    assert flags["--lookup-cache-dynamic"].info.aliases == ("-lcd",)
    for spec_type, field_name, default in [
        ("ngram-simple", "size_n", 12),
        ("ngram-map-k", "min_hits", 1),
        ("ngram-mod", "n_match", 24),
        ("ngram-mod", "n_max", 64),
    ]:
        assert getattr(SPEC_TYPES[spec_type].params(), field_name) == default


def test_factory_builds_each_type_from_params() -> None:
    for spec_type in (t.name for t in SPEC_TYPES.values() if t.params is not None):
        d = ngram_drafter(spec_type)
        assert d.name == spec_type
    d = ngram_drafter("ngram-simple", {"size_n": 2, "size_m": 3})
    assert isinstance(d, NgramSimple) and (d.size_n, d.size_m, d.min_hits) == (2, 3, 1)
    d = ngram_drafter("ngram-mod", NgramModParams(n_match=3, n_min=1, n_max=9))
    assert isinstance(d, NgramMod) and d.max_draft == 9
    with pytest.raises(UsageError, match="unknown n-gram speculative type"):
        ngram_drafter("ngram-bogus")
    with pytest.raises(UsageError, match="--spec-ngram-map-k-size-m"):
        ngram_drafter("ngram-map-k", {"size_m": 0})
    with pytest.raises(TypeError):
        ngram_drafter("ngram-map-k", NgramModParams())


def test_options_hold_every_type_and_feed_the_factory() -> None:
    opts = NgramOptions.from_flags(
        {"--spec-ngram-map-k-size-m": 7, "--spec-ngram-mod-n-min": 0, "-lcs": None}
    )
    assert opts.map_k.size_m == 7 and opts.map_k.size_n == 12
    assert opts.mod == NgramModParams(n_min=0) and opts.simple == NgramSimpleParams()
    d = ngram_drafter("ngram-map-k", opts)
    assert isinstance(d, NgramMapK) and d.max_draft == 7
    assert ngram_drafter("ngram-cache", NgramOptions()).name == "ngram-cache"
    with pytest.raises(UsageError, match="--spec-ngram-simple-min-hits: 0"):
        NgramOptions.from_flags({"--spec-ngram-simple-min-hits": 0})


def test_peek_is_a_pure_query_that_feedback_never_judges() -> None:
    """A shadow draft (the auto policy's `peek`) must not arm the feedback that a real
    proposal arms: the loop's feedback after a round some other drafter drafted would
    otherwise cap a map-k key, or count towards ngram-mod's reset, for a draft never sent."""
    d = started(NgramMapK(2, 3), [100, 1, 2, 3, 4, 5, 6, 1, 2])
    assert d.peek(10).tokens == d.propose(10).tokens == [3, 4, 5]
    d.feedback(3, 3)  # judges the proposal
    assert d.peek(10).tokens == [3, 4, 5]
    d.feedback(3, 0)  # after a peek only: nothing to judge
    assert d.propose(10).tokens == [3, 4, 5]

    m = two_sequences(3)
    for _ in range(8):  # eight rejected "rounds" after peeks: no reset
        assert m.peek(3).tokens == [3, 4, 5]
        m.feedback(3, 0)
    assert m.propose(3).tokens == [3, 4, 5]
    for _ in range(3):
        assert m.peek(3).tokens == [3, 4, 5]
    assert m.peek(3) is not None and m.propose(3).tokens == [3, 4, 5]


def test_map_k_cap_is_kept_when_the_loop_sends_less_than_proposed() -> None:
    """auto cuts a long proposal to what pays after `propose` returned it: a cut draft that
    was wholly accepted says nothing against the key's length (it used to cap the key at the
    cut length, shortening every later proposal of that key)."""
    d = started(NgramMapK(2, 3), [100, 1, 2, 3, 4, 5, 6, 1, 2])
    assert d.propose(10).tokens == [3, 4, 5]
    d.feedback(2, 2)  # the loop sent 2 of the 3, both accepted
    assert d.propose(10).tokens == [3, 4, 5]
    d.feedback(2, 1)  # sent 2, one rejected: that is this key's doing
    assert d.propose(10).tokens == [3]

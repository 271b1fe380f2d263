"""`--cache-reuse N`: the chunk plan (specgguf.core.cache_reuse), and on a tiny model a
prompt with tokens cut out of its middle, or put into it, reusing the chunk after the edit,
shifted (the inserted tokens evaluated in place).

A one-layer model's cached keys and values depend only on each token and its position, so
after the shift its cache holds exactly what a fresh evaluation computes: the greedy text
must equal a fresh context's (near-tie rule). On deeper models a moved chunk's cells were
computed after the removed tokens, the approximation llama-server's option makes too."""

from __future__ import annotations

import pytest

from specgguf.core.cache_reuse import Move, ReusePlan, plan_reuse
from specgguf.core.context import common_prefix_len
from specgguf.core.sampling import SamplerParams
from specgguf.loading.session import LoadOptions, Session, SpecOptions
from tests.near_tie import assert_same_or_near_tie
from tests.tiny_models import TARGET_SEED, build_tiny_model

GREEDY = SamplerParams(temp=0.0)


def moves(cached, prompt, n_prefix, min_chunk, **kw) -> list[Move]:
    return list(plan_reuse(cached, prompt, n_prefix, min_chunk, **kw).moves)


def test_plan_moves_the_chunks_the_prompt_repeats() -> None:
    cached = [1, 2, 9, 9, 3, 4, 5, 8, 6, 7]
    prompt = [1, 2, 3, 4, 5, 6, 7, 0]
    assert moves(cached, prompt, 2, 2) == [Move(4, 2, 3), Move(8, 5, 2)]
    assert moves(cached, prompt, 2, 3) == [Move(4, 2, 3)]
    assert moves(cached, prompt, 2, 0) == []
    plan = plan_reuse(cached, prompt, 2, 2)
    assert plan.dropped(len(cached)) == [(2, 4), (7, 8)] and plan.holes() == []
    assert plan.end == 7


def test_plan_reuses_the_chunk_after_an_insertion() -> None:
    # the prompt inserts 2 (a hole, evaluated in place) and 8 8 (another): 3 4 and 5 6 7
    # move up; without holes only what follows the prefix directly is kept, as llama-server
    cached = [1, 3, 4, 5, 6, 7]
    prompt = [1, 2, 3, 4, 8, 8, 5, 6, 7, 0]
    plan = plan_reuse(cached, prompt, 1, 2)
    assert list(plan.moves) == [Move(1, 2, 2), Move(3, 6, 3)]
    assert plan.holes() == [(1, 2), (4, 6)] and plan.n_holes == 3 and plan.end == 9
    assert plan.shift_order() == [Move(3, 6, 3), Move(1, 2, 2)]  # up: right to left
    assert moves(cached, prompt, 1, 2, holes=False) == []


def test_plan_keeps_runs_of_exactly_n_and_no_shorter() -> None:
    cached = [0, *range(10, 18), 1, *range(20, 27), 2]
    prompt = [0, *range(20, 27), *range(10, 18), 3]
    # 10..17 is 8 long: kept at 8 (found after 20..26, a run of 7, was passed over), not 9
    assert moves(cached, prompt, 1, 8) == [Move(1, 8, 8)]
    assert moves(cached, prompt, 1, 9) == []
    assert moves(cached, prompt, 1, 7) == [Move(10, 1, 7)]  # then 10..17 lies behind it


def test_plan_shifts_down_before_up() -> None:
    plan = ReusePlan(0, (Move(4, 0, 2), Move(6, 8, 2), Move(9, 12, 3)))
    assert plan.shift_order() == [Move(4, 0, 2), Move(9, 12, 3), Move(6, 8, 2)]
    assert plan.dropped(20) == [(0, 4), (8, 9), (12, -1)]
    assert plan.holes() == [(2, 8), (10, 12)]


def test_editor_prompts_keep_the_suffix() -> None:
    """An editor's next prompt: the prefix window loses its first line and gains the typed
    one, the text after the cursor is the same: both windows are kept, the typed line is
    the one hole."""
    extra, window, typed = [7] * 5, list(range(100, 160)), [60, 61, 62]
    suffix = list(range(200, 240))
    cached = [*extra, *window, 1, *suffix, 2, 50, 51]  # ... FIM middle and the answer
    prompt = [*extra, *window[3:], *typed, 1, *suffix, 2]
    plan = plan_reuse(cached, prompt, 5, 16)
    assert list(plan.moves) == [Move(8, 5, 57), Move(65, 65, 42)]
    assert plan.holes() == [(62, 65)] and plan.end == len(prompt)


def test_chunks_shorter_than_the_shift_pass_are_evaluated_again() -> None:
    # a move in place needs no shift and stays; from the first move that shifts, the chunks
    # are kept only when they hold at least the break-even's tokens
    plan = ReusePlan(2, (Move(2, 2, 3), Move(9, 7, 4), Move(14, 12, 5)))
    assert plan.shifts and not ReusePlan(2, (Move(2, 2, 3),)).shifts
    assert plan.worth_shifting(0) is plan and plan.worth_shifting(9) is plan
    assert plan.worth_shifting(10) == ReusePlan(2, (Move(2, 2, 3),))
    unshifted = ReusePlan(2, (Move(2, 2, 3),))
    assert unshifted.worth_shifting(100) is unshifted


@pytest.fixture(scope="module")
def one_layer(tmp_path_factory):
    path = tmp_path_factory.mktemp("reuse") / "one-layer.gguf"
    return build_tiny_model(path, seed=TARGET_SEED, n_layer=1)


def session(model, cache_reuse: int, *, break_even: int | None = 0) -> Session:
    """A target-only session; its shift break-even pinned (None: as measured at load), so
    that what is moved does not depend on this machine's timings."""
    load = LoadOptions(model=model, n_ctx=512, threads=1, flash_attn="off",
                       cache_reuse=cache_reuse)  # fmt: skip
    s = Session(load, SpecOptions(types=[], n_max=4))
    if break_even is not None:
        s.target.shift_break_even = break_even
    return s


def generate(s: Session, tokens: list[int], *, reuse: bool = True):
    dec = s.decoder(GREEDY, 16, 0, reuse_prefix=reuse)
    return [t for rnd in dec.generate(tokens) for t in rnd.emitted], dec.stats


def same_as_fresh(fresh: Session, prompt: list[int], got: list[int], label: str) -> None:
    """`got` is what a fresh context's greedy decoding of `prompt` writes (near-tie rule)."""
    ref, _ = generate(fresh, prompt, reuse=False)
    assert_same_or_near_tie(fresh, prompt, ref, got, 1e-3, label=label)


def test_a_cut_in_the_middle_reuses_the_chunk_after_it(one_layer):
    head, cut, tail = b"def f(x):\n", b"    y = x * 2\n", b"    return y + 1\n"
    first = list(head + cut + tail)  # byte tokens: ids 0..255
    second = list(head + tail)
    warm, fresh, prefix_only = session(one_layer, 8), session(one_layer, 0), session(one_layer, 0)
    try:
        generate(warm, first)
        generate(prefix_only, first)
        got, st = generate(warm, second)
        # everything but the prompt's last token came from the cache (that one is evaluated)
        assert st.cache_n == len(second) - 1 and st.prompt_n == 1
        _, st_prefix = generate(prefix_only, second)
        assert st_prefix.cache_n == common_prefix_len(first, second) < st.cache_n
        same_as_fresh(fresh, second, got, "cache-reuse")
    finally:
        for s in (warm, fresh, prefix_only):
            s.close()


def test_an_insertion_in_the_middle_is_evaluated_in_place(one_layer):
    head, tail = b"def f(x):\n", b"    y = x * 2\n    return y + 1\n"
    first = list(head + tail)
    second = list(head + b"    x = abs(x)\n" + tail)
    warm, fresh = session(one_layer, 8), session(one_layer, 0)
    try:
        generate(warm, first)
        got, st = generate(warm, second)
        # the inserted line and the prompt's last token are evaluated, the rest is cached
        inserted = len(second) - len(first)
        assert st.prompt_n == inserted + 1 and st.cache_n == len(second) - 1 - inserted
        same_as_fresh(fresh, second, got, "cache-reuse holes")
    finally:
        for s in (warm, fresh):
            s.close()


def test_an_editor_step_cut_and_insertion_at_once(one_layer):
    """The window above the cursor loses its first line (a shift down) and gains the typed
    one (a hole), the text after the cursor stays: both chunks are kept, exactly."""
    head = b"# utils\n"
    above = [b"import os\n", b"def f(x):\n", b"    y = x * 2\n"]
    below = b"    return y + 1\n\ndef g():\n    pass\n"
    first = list(head + b"".join(above) + below)
    second = list(head + b"".join(above[1:]) + b"    z = y - 1\n" + below)
    warm, fresh = session(one_layer, 8), session(one_layer, 0)
    try:
        generate(warm, first)
        got, st = generate(warm, second)
        assert st.prompt_n == len(b"    z = y - 1\n") + 1
        same_as_fresh(fresh, second, got, "cut and insertion")
    finally:
        for s in (warm, fresh):
            s.close()


def draft_session(target, draft) -> Session:
    load = LoadOptions(model=target, model_draft=draft, n_ctx=512, threads=1,
                       flash_attn="off", cache_reuse=8)  # fmt: skip
    s = Session(load, SpecOptions(types=["draft-simple"], n_max=4))
    s.target.shift_break_even = s.draft_ctx.shift_break_even = 0
    return s


def test_the_draft_model_keeps_its_cache_the_same_way(one_layer, tiny_draft):
    """The draft model's context reuses the moved chunks too, its holes evaluated by its
    first pass (the catch-up of its first draft)."""
    s = draft_session(one_layer, tiny_draft)
    head, tail = b"def f(x):\n", b"    y = x * 2\n    return y + 1\n"
    try:
        generate(s, list(head + tail))
        second = list(head + b"    x = abs(x)\n" + tail)
        _, st = generate(s, second)
        inserted = len(second) - len(head + tail)
        assert st.prompt_n == inserted + 1 and s.draft_ctx.refilled == inserted
        assert s.draft_ctx.pending_holes == 0 and s.draft_ctx.shifts == 1
    finally:
        s.close()


def test_a_draft_model_that_does_not_draft_pays_nothing_for_the_reuse(one_layer, tiny_draft):
    """A generation that never asks the draft model (here: one token, no round) leaves its
    holes unevaluated (nor does its shift pass run); the next prompt drops the cells after
    the first such hole, and the text stays a fresh context's."""
    s, fresh = draft_session(one_layer, tiny_draft), session(one_layer, 0)
    head, tail = b"def f(x):\n", b"    y = x * 2\n    return y + 1\n"
    first, second = list(head + tail), list(head + b"    x = abs(x)\n" + tail)
    third = list(head + b"    x = abs(x)\n    w = 3\n" + tail)
    try:
        generate(s, first)
        dec = s.decoder(GREEDY, 1, 0)
        assert len([t for rnd in dec.generate(second) for t in rnd.emitted]) == 1
        inserted = len(second) - len(first)
        assert s.draft_ctx.pending_holes == inserted  # nothing evaluated on the draft
        assert s.target.pending_holes == 0  # the target's prefill evaluated its hole
        kept_before = s.draft_ctx.n_past
        got, _ = generate(s, third)
        # the draft's cells after the unevaluated hole were dropped, never read
        assert s.draft_ctx.pending_holes == 0 and kept_before > len(head)
        same_as_fresh(fresh, third, got, "draft left idle")
    finally:
        for x in (s, fresh):
            x.close()


def test_a_shift_dearer_than_the_chunk_evaluates_it_again(one_layer):
    """With a break-even above the moved chunk's length the chunk is evaluated again, not
    shifted: no shift, the whole edit evaluated, the text a fresh context's. Measured at
    load (break_even None), the break-even is a count and the context is left empty."""
    head, tail = b"def f(x):\n", b"    y = x * 2\n    return y + 1\n"
    first, second = list(head + tail), list(head + b"    x = abs(x)\n" + tail)
    warm, fresh = session(one_layer, 8, break_even=10_000), session(one_layer, 0)
    measured = session(one_layer, 8, break_even=None)
    try:
        assert measured.target.shift_break_even >= 0 and measured.target.n_past == 0
        generate(warm, first)
        got, st = generate(warm, second)
        assert st.cache_n == common_prefix_len(first, second) and warm.target.shifts == 0
        same_as_fresh(fresh, second, got, "evaluated again")
    finally:
        for x in (warm, fresh, measured):
            x.close()


def test_serve_refuses_cache_reuse_with_several_slots(tiny_target, capsys):
    from specgguf_cli.app import run_cli

    from specgguf.errors import ExitCode

    argv = ["serve", "-m", str(tiny_target), "--cache-reuse", "8", "-np", "2"]
    assert run_cli(argv) == ExitCode.USAGE
    assert "--cache-reuse works with one slot" in capsys.readouterr().err

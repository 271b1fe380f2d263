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


@pytest.fixture(scope="module")
def one_layer(tmp_path_factory):
    path = tmp_path_factory.mktemp("reuse") / "one-layer.gguf"
    return build_tiny_model(path, seed=TARGET_SEED, n_layer=1)


def session(model, cache_reuse: int) -> Session:
    load = LoadOptions(model=model, n_ctx=512, threads=1, flash_attn="off",
                       cache_reuse=cache_reuse)  # fmt: skip
    return Session(load, SpecOptions(types=[], n_max=4))


def generate(s: Session, tokens: list[int], *, reuse: bool = True):
    dec = s.decoder(GREEDY, 16, 0, reuse_prefix=reuse)
    return [t for rnd in dec.generate(tokens) for t in rnd.emitted], dec.stats


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
        ref, _ = generate(fresh, second, reuse=False)
        assert_same_or_near_tie(fresh, second, ref, got, 1e-3, label="cache-reuse")
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
        ref, _ = generate(fresh, second, reuse=False)
        assert_same_or_near_tie(fresh, second, ref, got, 1e-3, label="cache-reuse holes")
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
        ref, _ = generate(fresh, second, reuse=False)
        assert_same_or_near_tie(fresh, second, ref, got, 1e-3, label="cut and insertion")
    finally:
        for s in (warm, fresh):
            s.close()


def test_the_draft_model_keeps_its_cache_the_same_way(one_layer, tiny_draft):
    """The draft model's context reuses the moved chunks too, its holes evaluated as the
    prompt is read: its first draft waits for the prompt's last token only."""
    load = LoadOptions(model=one_layer, model_draft=tiny_draft, n_ctx=512, threads=1,
                       flash_attn="off", cache_reuse=8)  # fmt: skip
    s = Session(load, SpecOptions(types=["draft-simple"], n_max=4))
    head, tail = b"def f(x):\n", b"    y = x * 2\n    return y + 1\n"
    try:
        generate(s, list(head + tail))
        second = list(head + b"    x = abs(x)\n" + tail)
        _, st = generate(s, second)
        inserted = len(second) - len(head + tail)
        assert st.prompt_n == inserted + 1 and s.draft_ctx.refilled == inserted
    finally:
        s.close()


def test_serve_refuses_cache_reuse_with_several_slots(tiny_target, capsys):
    from specgguf_cli.app import run_cli

    from specgguf.errors import ExitCode

    argv = ["serve", "-m", str(tiny_target), "--cache-reuse", "8", "-np", "2"]
    assert run_cli(argv) == ExitCode.USAGE
    assert "--cache-reuse works with one slot" in capsys.readouterr().err

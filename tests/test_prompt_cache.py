"""--cache-ram: the target's sequences saved in host memory when a new prompt replaces them,
and loaded back when a later prompt shares more with one than with what its slot holds
(specgguf.binding.prompt_cache), within the MiB given."""

from __future__ import annotations

import numpy as np
import pytest

from tests.serve_helpers import FAST, serving

pytest.importorskip("llama_cpp")


@pytest.fixture(scope="module")
def model(tiny_target):
    from specgguf.binding import engine

    engine.init_backend(False)
    m = engine.Model(tiny_target)
    yield m
    m.close()


def _context(model):
    from specgguf.binding import engine

    return engine.Context(model, engine.ContextParams(n_ctx=256, n_threads=1,
                                                      flash_attn="off"))  # fmt: skip


def _prefill(ctx, tokens) -> np.ndarray:
    """As the loop does: keep what the cache holds, evaluate the rest; the last row's logits."""
    n = ctx.keep_prefix(tokens[:-1])
    if n < len(tokens) - 1:
        ctx.decode(tokens[n:-1], n, outputs="none")
    return np.array(ctx.decode(tokens[-1:], len(tokens) - 1)[-1])


def test_a_replaced_sequence_comes_back_exactly(model) -> None:
    from specgguf.binding.prompt_cache import PromptCache

    a = model.tokenize("the first prompt, long enough to be worth keeping around " * 2)
    b = model.tokenize("something else entirely, also quite long, with other words " * 2)
    more = [*a, *model.tokenize(" and then more", add_special=False)]
    ctx, fresh = _context(model), _context(model)
    try:
        ctx.prompt_cache = cache = PromptCache(-1)
        _prefill(ctx, a)
        _prefill(ctx, b)
        assert cache.saved == 1 and cache.loaded == 0
        n = ctx.keep_prefix(more[:-1])
        assert n == len(a) and cache.loaded == 1  # A back from host memory, not evaluated
        assert ctx.tokens == more[:n]
        ctx.decode(more[n:-1], n, outputs="none")
        got = np.array(ctx.decode(more[-1:], len(more) - 1)[-1])
        np.testing.assert_allclose(got, _prefill(fresh, more), rtol=1e-4, atol=1e-4)
    finally:
        ctx.close()
        fresh.close()


def test_the_cache_keeps_within_its_bound(model) -> None:
    from specgguf.binding.prompt_cache import PromptCache, get_state

    prompts = [model.tokenize(f"prompt number {i} " * 8) for i in range(3)]
    ctx = _context(model)
    try:
        _prefill(ctx, prompts[0])
        one = len(get_state(*ctx.state_handle()))
        ctx.prompt_cache = cache = PromptCache(-1)
        cache.limit = one + one // 2  # room for one saved sequence of this length
        for p in (*prompts[1:], prompts[0]):
            _prefill(ctx, p)
        assert cache.saved == 3 and cache.dropped == 2 and len(cache.entries) == 1
        assert cache.size <= cache.limit
        assert next(iter(cache.entries)) == tuple(prompts[2])  # the newest is kept
    finally:
        ctx.close()


@pytest.fixture(scope="module")
def server(tiny_target):
    yield from serving(["-m", str(tiny_target), *FAST, "-c", "512", "--spec-type", "none",
                        "--cache-ram", "8"])  # fmt: skip


def test_one_slot_serves_an_earlier_prompt_from_the_cache(server) -> None:
    a = "the first prompt, long enough to be worth keeping around " * 2
    b = "something else entirely, also quite long, with other words " * 2
    first = server.post("/completion", {"prompt": a, "n_predict": 2})
    server.post("/completion", {"prompt": b, "n_predict": 2})
    again = server.post("/completion", {"prompt": a, "n_predict": 2})
    assert first["timings"]["cache_n"] == 0
    assert again["timings"]["cache_n"] >= first["tokens_evaluated"] - 1  # all but the last
    assert again["content"] == first["content"]


@pytest.fixture(scope="module")
def two_slots(tiny_target):
    yield from serving(["-m", str(tiny_target), *FAST, "-c", "1024", "-np", "2",
                        "--spec-type", "none", "--cache-ram", "8"])  # fmt: skip


def test_slots_share_one_cache(two_slots) -> None:
    """Four prompts through two slots: the first one's sequence was replaced whatever slot it
    had, and comes back from the cache the slots share."""
    prompts = [f"prompt {i}: " + "some words that make it long enough to keep " * 2
               for i in range(4)]  # fmt: skip
    first = [two_slots.post("/completion", {"prompt": p, "n_predict": 2}) for p in prompts]
    again = two_slots.post("/completion", {"prompt": prompts[0], "n_predict": 2})
    assert again["timings"]["cache_n"] >= first[0]["tokens_evaluated"] - 1
    assert again["content"] == first[0]["content"]


def test_several_api_keys_refuse_a_shared_cache(capsys) -> None:
    """Saved sequences carry no key: several keys would read each other's prompts."""
    from specgguf_cli.app import run_cli

    assert run_cli(["serve", "--cache-ram", "8", "--api-key", "a,b", "--port", "0"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--cache-ram" in err and "--api-key" in err


@pytest.mark.parametrize(("hybrid", "warned"), [(False, False), (True, True)])
def test_a_target_that_cannot_drop_positions_says_nothing_is_cached(
        hybrid, warned, tiny_target, tiny_models_dir, capsys) -> None:  # fmt: skip
    from specgguf_cli.app import run_cli

    from tests.tiny_hybrid import build_tiny_qwen35
    from tests.tiny_models import TARGET_SEED

    model = build_tiny_qwen35(tiny_models_dir / "qwen35-cram.gguf", seed=TARGET_SEED) if (
        hybrid) else tiny_target
    argv = ["run", "-m", str(model), "-p", "hi", "-n", "2", "-t", "1", "-c", "256",
            "--spec-type", "none", "--cache-ram", "8"]  # fmt: skip
    assert run_cli(argv) == 0
    assert ("--cache-ram: this target's memory cannot drop" in capsys.readouterr().err) is warned


def _checkpointed(hybrid_model, **kw):
    from specgguf.binding import engine
    from specgguf.binding.checkpoints import CheckpointedContext

    ctx = engine.Context(hybrid_model, engine.ContextParams(n_ctx=256, n_threads=1,
                                                            flash_attn="off"))  # fmt: skip
    return CheckpointedContext(ctx, every_decode=False, keep=1, **kw)


def _prompt(ctx, tokens) -> int:
    """A prompt as the loop evaluates it; how many of its positions the cache kept."""
    n = ctx.keep_prefix(tokens[:-1])
    if n < len(tokens) - 1:
        ctx.decode(tokens[n:-1], n, outputs="none")
    ctx.decode(tokens[-1:], len(tokens) - 1)
    return n


@pytest.mark.parametrize(("settings", "parts_in", "resumes_from"), [
    ({}, "p2", "p2"),  # the default: two prompt checkpoints, any spacing
    ({}, "p1", "p1"),
    ({"prompt_keep": 1}, "p1", "none"),  # only the second prompt's checkpoint is kept
    ({"prompt_keep": 0}, "p2", "none"),
    ({"prompt_keep": 2, "min_step": 100}, "p2", "p1"),  # the second came too soon after
])  # fmt: skip
def test_ctx_checkpoints_and_min_step_choose_what_a_hybrid_resumes_from(
        settings, parts_in, resumes_from, tiny_models_dir) -> None:  # fmt: skip
    """--ctx-checkpoints N / --checkpoint-min-step M on a hybrid target: a prompt that parts
    from the last one inside it resumes from the latest prompt checkpoint kept before that."""
    from specgguf.binding import engine
    from tests.tiny_hybrid import build_tiny_qwen35
    from tests.tiny_models import TARGET_SEED

    model = engine.Model(build_tiny_qwen35(tiny_models_dir / "qwen35-ckpt.gguf",
                                           seed=TARGET_SEED))  # fmt: skip
    p1 = model.tokenize("one two three four five six seven eight nine ten")
    p2 = [*p1, *model.tokenize(" eleven twelve thirteen fourteen", add_special=False)]
    prompts = {"p1": p1, "p2": p2}
    p3 = [*prompts[parts_in][:-1], *model.tokenize(" and something else", add_special=False)]
    ctx = _checkpointed(model, **settings)
    try:
        _prompt(ctx, p1)
        _prompt(ctx, p2)
        resumed = _prompt(ctx, p3)
        assert resumed == (len(prompts[resumes_from]) - 1 if resumes_from != "none" else 0)
    finally:
        ctx.close()
        model.close()


def _idle_slot_case(server) -> tuple[dict, dict]:
    """Prompt A in slot 0, then B in slot 1 (slot 0 idle as B starts), then A again in slot 1:
    only an idle-slot save put A in the cache (slot 0 was never replaced)."""
    a = "the idle slot's prompt, long enough to be worth keeping around " * 2
    b = "another prompt for the other slot, with other words in it " * 2
    first = server.post("/completion", {"prompt": a, "n_predict": 2, "id_slot": 0})
    server.post("/completion", {"prompt": b, "n_predict": 2, "id_slot": 1})
    again = server.post("/completion", {"prompt": a, "n_predict": 2, "id_slot": 1})
    return first, again


def test_idle_slots_are_saved_for_the_other_slots(two_slots) -> None:
    """--cache-idle-slots (on by default): A, idle in slot 0, reaches slot 1 from the cache."""
    first, again = _idle_slot_case(two_slots)
    assert again["timings"]["cache_n"] >= first["tokens_evaluated"] - 1
    assert again["content"] == first["content"]


@pytest.fixture(scope="module")
def no_idle_saves(tiny_target):
    yield from serving(["-m", str(tiny_target), *FAST, "-c", "1024", "-np", "2",
                        "--spec-type", "none", "--cache-ram", "8",
                        "--no-cache-idle-slots"])  # fmt: skip


def test_no_cache_idle_slots_leaves_idle_slots_alone(no_idle_saves) -> None:
    first, again = _idle_slot_case(no_idle_saves)
    assert again["timings"]["cache_n"] == 0  # A was only ever in slot 0's cells
    assert again["content"] == first["content"]


def test_cache_idle_slots_without_cache_ram_warns(tiny_target, capsys, monkeypatch) -> None:
    from specgguf_cli import options as o
    from specgguf_cli.app import run_cli

    def stop(*args, **kwargs):
        raise SystemExit(99)

    monkeypatch.setattr(o.SessionFlags, "resolve", stop)
    with pytest.raises(SystemExit):
        run_cli(["serve", "-m", str(tiny_target), "--cache-idle-slots", "--port", "0"])
    assert "--cache-idle-slots needs --cache-ram" in capsys.readouterr().err

"""The target's hidden states as a drafter hears them (engine.Context.capture + decode's hear),
on the tiny llama model: no drafter, just the plumbing every hidden-state drafter stands on."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from specgguf.binding import engine, llama_ext
from specgguf.core.draft import TargetPass
from specgguf.errors import ExitCode, SpecggufError

PROMPT = [5, 40, 41, 42, 60, 61, 7, 8, 9, 70, 71, 72, 73]


def context(model: engine.Model, n_batch: int = 512) -> engine.Context:
    params = engine.ContextParams(n_ctx=128, n_batch=n_batch, n_threads=1, flash_attn="off")
    return engine.Context(model, params)


def heard(ctx: engine.Context, tokens, layers) -> list[TargetPass]:
    """Decode `tokens` from position 0, keeping a copy of every pass heard."""
    passes: list[TargetPass] = []

    def hear(p: TargetPass) -> None:  # the rows are views: copy them while they are valid
        passes.append(
            TargetPass(list(p.tokens), p.pos0, {k: v.copy() for k, v in p.hidden.items()})
        )

    ctx.capture(layers)
    ctx.decode(tokens, 0, outputs="none", hear=hear)
    return passes


@pytest.fixture(scope="module")
def model(tiny_target):
    m = engine.Model(tiny_target)
    yield m
    m.close()


def test_layer_zero_input_is_the_token_embedding_and_chunks_keep_their_positions(
    model, tiny_target
):
    emb = next(t for t in gguf.GGUFReader(tiny_target).tensors if t.name == "token_embd.weight")
    table = np.asarray(emb.data, dtype=np.float32).reshape(-1, model.n_embd)
    ctx = context(model, n_batch=4)  # 13 tokens: passes of 4, 4, 4 and 1
    try:
        passes = heard(ctx, PROMPT, [0, model.n_layer - 1])
    finally:
        ctx.close()
    assert [p.pos0 for p in passes] == [0, 4, 8, 12]
    assert [t for p in passes for t in p.tokens] == PROMPT
    rows = np.concatenate([p.hidden[0] for p in passes])
    assert rows.shape == (len(PROMPT), model.n_embd)
    np.testing.assert_allclose(rows, table[PROMPT], rtol=1e-5, atol=1e-6)


def test_a_deeper_layer_does_not_depend_on_how_the_prompt_was_cut(model):
    layer = model.n_layer - 1
    whole, cut = context(model), context(model, n_batch=3)
    try:
        a = np.concatenate([p.hidden[layer] for p in heard(whole, PROMPT, [layer])])
        b = np.concatenate([p.hidden[layer] for p in heard(cut, PROMPT, [layer])])
    finally:
        whole.close()
        cut.close()
    assert not np.allclose(a, 0.0)
    np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


def test_a_target_whose_graph_records_no_layer_inputs_is_refused_before_llama_cpp(
    model, monkeypatch
):
    ctx = context(model)
    try:
        with pytest.raises(SpecggufError) as err:  # llama's graph never writes that state
            ctx.capture([model.n_layer])
        assert err.value.code == ExitCode.INCOMPATIBLE and "last layer" in str(err.value)
        monkeypatch.setattr(model, "architecture", "qwen2")
        with pytest.raises(SpecggufError) as err:
            ctx.capture([0])
        assert err.value.code == ExitCode.INCOMPATIBLE and "qwen2" in str(err.value)
        with pytest.raises(SpecggufError) as err:
            ctx.capture([model.n_layer + 1])
        assert err.value.code == ExitCode.INCOMPATIBLE
        assert ctx.captured == ()
    finally:
        ctx.close()


def test_a_library_without_the_staging_calls_is_one_line_and_exit_10(model, monkeypatch):
    ctx = context(model)
    try:
        monkeypatch.setattr(llama_ext, "ext", lambda: None)
        with pytest.raises(SpecggufError) as err:
            ctx.capture([0])
        assert err.value.code == ExitCode.NO_RUNTIME
        assert "\n" not in str(err.value)
    finally:
        ctx.close()


def test_decoding_with_hear_on_a_context_that_captures_nothing_is_a_bug(model):
    ctx = context(model)
    try:
        with pytest.raises(ValueError):
            ctx.decode(PROMPT, 0, outputs="none", hear=lambda p: None)
    finally:
        ctx.close()

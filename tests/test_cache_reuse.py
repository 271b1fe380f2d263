"""`--cache-reuse N`: the chunk plan (specgguf.core.cache_reuse), and on a tiny model a
prompt with tokens cut out of its middle reusing the chunk after the cut, shifted.

A one-layer model's cached keys and values depend only on each token and its position, so
after the shift its cache holds exactly what a fresh evaluation computes: the greedy text
must equal a fresh context's (near-tie rule). On deeper models a moved chunk's cells were
computed after the removed tokens, the approximation llama-server's option makes too."""

from __future__ import annotations

import pytest

from specgguf.core.cache_reuse import Move, reuse_moves
from specgguf.core.context import common_prefix_len
from specgguf.core.sampling import SamplerParams
from specgguf.loading.session import LoadOptions, Session, SpecOptions
from tests.near_tie import assert_same_or_near_tie
from tests.tiny_models import TARGET_SEED, build_tiny_model

GREEDY = SamplerParams(temp=0.0)


def test_plan_moves_the_chunks_the_prompt_repeats() -> None:
    cached = [1, 2, 9, 9, 3, 4, 5, 8, 6, 7]
    prompt = [1, 2, 3, 4, 5, 6, 7, 0]
    assert reuse_moves(cached, prompt, 2, 2) == [Move(4, 2, 3), Move(8, 5, 2)]
    assert reuse_moves(cached, prompt, 2, 3) == [Move(4, 2, 3)]
    assert reuse_moves(cached, prompt, 2, 0) == []
    # what the prompt inserts is never found in the cache: only cuts are reused
    assert reuse_moves([1, 3, 4], [1, 2, 3, 4], 1, 1) == []


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


def test_serve_refuses_cache_reuse_with_several_slots(tiny_target, capsys):
    from specgguf_cli.app import run_cli

    from specgguf.errors import ExitCode

    argv = ["serve", "-m", str(tiny_target), "--cache-reuse", "8", "-np", "2"]
    assert run_cli(argv) == ExitCode.USAGE
    assert "--cache-reuse works with one slot" in capsys.readouterr().err

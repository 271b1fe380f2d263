"""serve --kv-unified-per-slot N: no slot holds more than N tokens, and without -c the KV pool
is -np x N (llama-server's rule); N above a slot's share of -c is a warning, not a cap."""

from __future__ import annotations

import pytest

from specgguf.loading.preflight import slot_pool
from tests.serve_helpers import FAST, serving


def test_the_pool_is_sized_as_llama_server_sizes_it() -> None:
    assert slot_pool(None, 4096, 4, 0) == 4096  # unset: -c (or its default) as it was
    assert slot_pool(None, 4096, 4, 300) == 1200  # no -c: -np x N
    assert slot_pool(2048, 2048, 2, 300) == 600  # a share above N: the reachable cells only
    assert slot_pool(512, 512, 2, 300) == 512  # N above the share: the pool stays -c
    assert slot_pool(0, 8192, 2, 1000) == 2000  # -c 0 is the training context, as -c


def _slot_sizes(path, n_ctx, parallel, per_slot) -> tuple[list[int], list[str]]:
    pytest.importorskip("llama_cpp")
    from specgguf.loading.session import LoadOptions, Session, SpecOptions

    load = LoadOptions(model=path, n_ctx=n_ctx, threads=1, flash_attn="off",
                       kv_unified_per_slot=per_slot)  # fmt: skip
    s = Session(load, SpecOptions(types=[]), parallel=parallel)
    try:
        return [slot.target.n_ctx for slot in s.slots], list(s.warnings)
    finally:
        s.close()


@pytest.mark.parametrize(("n_ctx", "parallel", "per_slot", "sizes"), [
    (None, 2, 96, [96, 96]),  # no -c: the pool is 2 x 96 (llama.cpp pads it: each capped)
    (1024, 2, 96, [96, 96]),  # -c: each share (512) cut to N
    (None, 1, 100, [100]),
    (1024, 2, 0, [512, 512]),  # unset: -c / -np
])  # fmt: skip
def test_each_slot_holds_at_most_n(tiny_target, n_ctx, parallel, per_slot, sizes) -> None:
    assert _slot_sizes(tiny_target, n_ctx, parallel, per_slot) == (sizes, [])


def test_n_above_the_share_is_a_warning(tiny_target) -> None:
    sizes, warnings = _slot_sizes(tiny_target, 512, 2, 300)
    assert sizes == [256, 256]
    assert len(warnings) == 1 and "exceeds a slot's share" in warnings[0]


def test_n_past_the_training_context_is_a_warning(tiny_target) -> None:
    sizes, warnings = _slot_sizes(tiny_target, None, 1, 4096)  # the tiny model trained on 2048
    assert sizes == [4096]
    assert len(warnings) == 1 and "larger than the model's training context" in warnings[0]


def test_serve_refuses_a_prompt_past_the_slot_cap(tiny_target) -> None:
    for server in serving(["-m", str(tiny_target), *FAST, "-np", "2", "--spec-type", "none",
                           "--kv-unified-per-slot", "64"]):  # fmt: skip
        status, _, props = server.request("GET", "/props")
        assert status == 200 and props["default_generation_settings"]["n_ctx"] == 64
        status, _, err = server.request("POST", "/completion",
                                        {"prompt": "word " * 80, "n_predict": 1})  # fmt: skip
        assert status == 400 and "the context of a slot is 64" in err["error"]["message"]
        out = server.post("/completion", {"prompt": "word " * 20, "n_predict": 2})
        assert out["tokens_predicted"] == 2

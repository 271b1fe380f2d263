"""What one API key's requests left in a slot's KV caches is neither reused by nor shown to
another key: a guess of another key's prompt is evaluated in full (`cache_n` 0, so its
timings are a cold prompt's), the slot it lands in does not depend on what other keys' slots
hold, and /slots hides another key's figures. The same key, and a server without keys, keep
their reuse."""

from __future__ import annotations

import pytest

from specgguf.core.sampling import SamplerParams
from specgguf.generator import Generator, GenParams
from specgguf.loading.session import LoadOptions, Session, SpecOptions
from tests.serve_helpers import FAST, serving

SECRET = "the secret code word of the cat is purple and the dog knows it"


@pytest.fixture(scope="module")
def server(tiny_target):
    yield from serving(
        ["-m", str(tiny_target), *FAST, "-c", "2048", "-np", "2", "--api-key", "keyA,keyB"]
    )


def _cache_n(server, key: str, prompt: str) -> int:
    body = {"prompt": prompt, "n_predict": 4}
    return server.post("/completion", body, key=key)["timings"]["cache_n"]


def test_another_keys_prompt_is_never_reused(server):
    assert _cache_n(server, "keyA", SECRET) == 0
    # keyB guesses keyA's prompt exactly: nothing is reused
    assert _cache_n(server, "keyB", SECRET) == 0
    # keyA's slot kept its prompt: keyA's next turn reuses it
    assert _cache_n(server, "keyA", SECRET + " again") > 0
    # and keyB reuses what keyB wrote
    assert _cache_n(server, "keyB", SECRET) > 0


def test_slots_hides_another_keys_figures(server):
    _cache_n(server, "keyA", SECRET)

    def cached(key: str) -> list:
        status, _, slots = server.request("GET", "/slots", key=key)
        assert status == 200, slots
        return [s["n_cached"] for s in slots]

    mine, theirs = cached("keyA"), cached("keyB")
    assert any(n for n in mine if n is not None)
    for a, b in zip(mine, theirs, strict=True):
        # each slot's figures are shown to exactly the key that wrote it (or to both, empty)
        assert a is None or b is None or a == b == 0


@pytest.fixture(scope="module")
def generator(tiny_target):
    load = LoadOptions(model=tiny_target, n_ctx=512, threads=1, flash_attn="off")
    session = Session(load, SpecOptions(types=[], n_max=4))
    yield Generator(session, sampler=SamplerParams(temp=0), n_predict=4)
    session.close()


def _run(gen: Generator, tokens: list[int], namespace) -> int:
    g = gen.generate(tokens, GenParams(namespace=namespace))
    for _ in g:
        pass
    return g.stats.cache_n


def test_a_call_ended_before_its_prefill_leaves_the_slot_to_nobody(generator):
    tokens = generator.tokenize(SECRET)
    a, b = ("api-key", "a"), ("api-key", "b")
    _run(generator, tokens, a)
    # b's call ends before its prompt replaced a's tokens: b must not own them afterwards
    generator.generate(tokens, GenParams(namespace=b)).finish("cancelled")
    assert _run(generator, tokens, b) == 0
    assert _run(generator, tokens, b) > 0  # now b's own
    assert _run(generator, tokens, None) == 0


def test_without_keys_every_call_reuses(generator):
    tokens = generator.tokenize(SECRET)
    _run(generator, tokens, None)
    assert _run(generator, tokens, None) > 0

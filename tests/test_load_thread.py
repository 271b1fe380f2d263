"""Decodes made while loading run on a thread that ends with them (engine.on_passing_thread):
llama.cpp's CPU backend keeps a team of OpenMP workers per thread that has decoded, and a
second team alive made every later decode of the working thread slower."""

from __future__ import annotations

import threading

import pytest

from specgguf.binding import engine


def test_on_passing_thread_returns_raises_and_leaves_no_thread():
    seen: list[threading.Thread] = []

    def work() -> int:
        seen.append(threading.current_thread())
        return 7

    assert engine.on_passing_thread(work) == 7
    assert seen[0] is not threading.current_thread() and not seen[0].is_alive()
    with pytest.raises(KeyError):
        engine.on_passing_thread(lambda: {}["missing"])


def test_a_session_decodes_nothing_on_the_loading_thread(tiny_target, tiny_draft, monkeypatch):
    from specgguf.loading.session import LoadOptions, Session, SpecOptions

    threads: list[str] = []
    real = engine.Context.decode

    def decode(self, *a, **kw):
        threads.append(threading.current_thread().name)
        return real(self, *a, **kw)

    monkeypatch.setattr(engine.Context, "decode", decode)
    load = LoadOptions(model=tiny_target, model_draft=tiny_draft, n_ctx=512, threads=1)
    session = Session(load, SpecOptions(types=["draft-simple"], n_max=3))
    try:
        assert threads and set(threads) == {"specgguf-load"}  # the memory probes
    finally:
        session.close()

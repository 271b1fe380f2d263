"""specgguf.interrupts in-process: when a signal raises, when it waits, and what it exits with.

The end-to-end behaviour (real signals on a real `specgguf run`) is in tests/test_interrupt.py;
here the handler is driven directly, with os.kill on this very process where that is safe.
"""

from __future__ import annotations

import os
import signal
import sys

import pytest

from specgguf import interrupts
from specgguf.interrupts import Interrupted
from tests.signal_defaults import default_dispositions

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@pytest.fixture(autouse=True)
def _clean():
    # a terminal's dispositions, however the suite was launched (nohup ignores SIGHUP, a
    # background job SIGINT): the tests that want an inherited "ignore" set it themselves
    with default_dispositions():
        interrupts.reset()
        yield
        interrupts.reset()


def test_first_signal_raises_later_ones_only_count():
    with interrupts.handling():
        with pytest.raises(Interrupted) as e:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pthread_sigmask(signal.SIG_BLOCK, [])  # a bytecode boundary or two
        assert e.value.signum == signal.SIGTERM and isinstance(e.value, KeyboardInterrupt)
        os.kill(os.getpid(), signal.SIGINT)  # while cleaning up: no second exception
        assert interrupts.exit_code() == 143  # the first signal decides
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # restored


@interrupts.callback
def _fake_llama_callback(signum: int) -> bool:
    os.kill(os.getpid(), signum)
    return interrupts.pending()


def test_signal_inside_a_registered_callback_waits_for_check():
    with interrupts.handling():
        assert _fake_llama_callback(signal.SIGHUP) is True  # nothing raised inside it
        assert interrupts.received() == signal.SIGHUP
        with pytest.raises(Interrupted):
            interrupts.check()
        interrupts.check()  # raised once: not again
        with pytest.raises(Interrupted):
            interrupts.raise_pending()  # a call that gave up because of it: always


def test_unregistered_code_is_interrupted_at_once():
    def plain(signum):
        os.kill(os.getpid(), signum)
        return "went on"

    with interrupts.handling(), pytest.raises(Interrupted):
        plain(signal.SIGINT)


def test_deferred_block_finishes_then_raises():
    done = []
    with interrupts.handling():
        with pytest.raises(Interrupted), interrupts.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            done.append("saved")
        assert done == ["saved"]


def test_third_signal_exits_at_once(monkeypatch):
    exits = []

    def fake_exit(code):
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(interrupts.os, "_exit", fake_exit)
    with interrupts.handling():
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        assert exits == []
        with pytest.raises(SystemExit):
            os.kill(os.getpid(), signal.SIGINT)
    assert exits == [130]


def test_ignored_signals_stay_ignored():
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup
    try:
        with interrupts.handling():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is interrupts._handler
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, old)


def test_exit_codes():
    assert interrupts.exit_code() == 130  # a KeyboardInterrupt from elsewhere
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)):
        interrupts.reset()
        interrupts.note(sig)
        assert interrupts.exit_code() == code


def test_a_signal_as_llama_decode_returns_waits_for_the_bookkeeping(tiny_target, monkeypatch):
    """A signal landing just after llama_decode returned, before the context recorded the
    cells it added, is raised only once they are recorded: the interrupted decode's tokens
    are the context's, and the next decode follows them. (Raised at once, it left cells the
    context did not know of, and the next turn's decode at the position the context believed
    next was refused by llama.cpp, status -1: a -cnv turn after Ctrl-C failed, exit 7.)"""
    from specgguf.binding import engine

    model = engine.Model(tiny_target)
    ctx = engine.Context(model, engine.ContextParams(n_ctx=256, n_threads=1, flash_attn="off"))
    real = engine.ll.llama_decode

    def decode_then_signal(ptr, batch) -> int:
        rc = real(ptr, batch)
        os.kill(os.getpid(), signal.SIGINT)  # handled at the next bytecode: here
        return rc

    try:
        with interrupts.handling():
            monkeypatch.setattr(engine.ll, "llama_decode", decode_then_signal)
            with pytest.raises(Interrupted):
                ctx.decode([5, 6, 7], 0)
            monkeypatch.setattr(engine.ll, "llama_decode", real)
            interrupts.reset()
            assert ctx.tokens == [5, 6, 7] and ctx.n_past == 3
            assert ctx.decode([8], 3) is not None  # the next position is free
    finally:
        ctx.close()
        model.close()

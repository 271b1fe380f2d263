"""Ctrl-C, SIGTERM and SIGHUP: one way to stop, at a moment where stopping is safe.

Why not Python's defaults:

* SIGINT raises KeyboardInterrupt wherever the main thread happens to be. While llama.cpp loads
  a model it calls back into Python (its log callback) hundreds of times; an exception raised
  inside a ctypes callback cannot travel through C, so ctypes prints "Exception ignored on
  calling ctypes callback" and drops it: the run goes on and exits 0.
* SIGTERM (`timeout`, `docker stop`, systemd) and SIGHUP (a closed terminal) kill the process
  on the spot: no statistics, no -lcd cache, no machine profile, no --json object.

So `handling()` installs one handler for the three signals. It records the first signal and
raises `Interrupted` (a KeyboardInterrupt, so every existing `except KeyboardInterrupt` path
keeps what was generated) only when the main thread is NOT inside a registered ctypes callback
or an `atomic` section. When it is, the signal stays pending: the callback answers llama.cpp
"stop" where llama.cpp asks (model-load progress, the compute abort check) and `check()`
raises once the llama.cpp call has returned. An atomic section is a llama.cpp call together
with the bookkeeping that records what it did (a context's decode and its list of cached
tokens): a signal raised between the two, as the call returns, would leave cells in the cache
that the context does not know of, and the next decode at the position it believes next would
be refused by llama.cpp. Later signals never raise: cleanup (saving caches, printing statistics)
runs to its end, with no second traceback. A third signal exits at once, for a cleanup that
hangs.

The exit status is 128 + the signal number, as a shell reports a process killed by it:
130 (SIGINT), 143 (SIGTERM), 129 (SIGHUP).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import CodeType, FrameType
from typing import Any, TypeVar

SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
FORCE_AFTER = 3  # the third signal exits without cleanup


class Interrupted(KeyboardInterrupt):
    """The run was asked to stop by `signum`; exit status 128 + signum."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signum)
        self.signum = int(signum)


_received: int | None = None  # the first signal since the last reset
_raised = False  # Interrupted was raised for it: later signals only count
_count = 0
_deferred = 0  # > 0: inside deferred(), record only
#: code of the registered callbacks and atomic sections: a signal landing in them stays pending
_holding_codes: set[CodeType] = set()

F = TypeVar("F", bound=Callable[..., Any])


def reset() -> None:
    """Forget any signal received (a new command in the same process, a new chat turn)."""
    global _received, _raised, _count
    _received, _raised, _count = None, False, 0


def received() -> int | None:
    """The first signal received since the last reset, or None."""
    return _received


def pending() -> bool:
    """A signal arrived: callbacks use this to tell llama.cpp to stop early."""
    return _received is not None


def exit_code(default: int = 130) -> int:
    """128 + the signal that stopped the run (130 when none was recorded: a KeyboardInterrupt
    raised some other way)."""
    return 128 + _received if _received is not None else default


def signal_name(signum: int | None = None) -> str:
    s = _received if signum is None else signum
    try:
        return signal.Signals(s).name if s is not None else "SIGINT"
    except ValueError:
        return f"signal {s}"


def check() -> None:
    """Raise Interrupted if a signal arrived that has not been raised yet. Call it after every
    llama.cpp call that may have run a callback while the signal came."""
    global _raised
    if _received is not None and not _raised and not _deferred:
        _raised = True
        raise Interrupted(_received)


def raise_pending() -> None:
    """Raise Interrupted for the signal received, even when it was raised once already: a
    llama.cpp call that gave up because of it has no result to go on with."""
    global _raised
    if _received is not None:
        _raised = True
        raise Interrupted(_received)


def note(signum: int) -> None:
    """Record a signal seen some other way (a KeyboardInterrupt caught where it cannot
    propagate) so that the next check() raises it."""
    global _received, _count
    _count += 1
    if _received is None:
        _received = signum


def callback(fn: F) -> F:
    """Register `fn` as a function C calls back: a signal landing while it runs is held pending
    instead of raised into C (where ctypes would print and drop it)."""
    _holding_codes.add(fn.__code__)
    return fn


def atomic(fn: F) -> F:
    """Register `fn` as a section a signal must not cut in half (a llama.cpp call and the
    bookkeeping that records it): a signal landing while it runs, or while anything it calls
    runs, is held pending; `fn` (or the next `check()`) raises it once what it changed is
    recorded. Costs nothing until a signal arrives."""
    _holding_codes.add(fn.__code__)
    return fn


def _in_callback(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code in _holding_codes:
            return True
        frame = frame.f_back
    return False


def _handler(signum: int, frame: FrameType | None) -> None:
    global _received, _raised, _count
    _count += 1
    if _received is None:
        _received = signum
    if _count >= FORCE_AFTER:
        with suppress(OSError):
            os.write(2, f"\n{signal_name(signum)} again: exiting without cleanup\n".encode())
        os._exit(128 + (_received or signum))
    if _raised or _deferred or _in_callback(frame):
        return
    _raised = True
    raise Interrupted(_received)


@contextmanager
def handling() -> Iterator[None]:
    """Install the handler for SIGINT, SIGTERM and SIGHUP for the duration of a command, and
    restore what was there before. A signal whose disposition is "ignore" stays ignored (nohup,
    a background job started without job control). Outside the main thread: nothing to do."""
    global _deferred
    reset()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}
    try:
        for s in SIGNALS:
            old = signal.getsignal(s)
            if old == signal.SIG_IGN:
                continue
            previous[s] = old
            signal.signal(s, _handler)
        yield
    finally:
        _deferred += 1  # the command is over: a signal now is only recorded
        try:
            for s, old in previous.items():
                signal.signal(s, old if old is not None else signal.SIG_DFL)
        finally:
            _deferred -= 1


@contextmanager
def deferred() -> Iterator[None]:
    """Within the block a signal is only recorded; it is raised when the block ends (unless one
    was already raised). For cleanup that must not be cut in half: saving the -lcd cache and the
    profile, writing the report and the --json object."""
    global _deferred
    _deferred += 1
    try:
        yield
    finally:
        _deferred -= 1
    check()

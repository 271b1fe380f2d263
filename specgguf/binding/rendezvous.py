"""Lockstep for a server's slots: the one pass every waiting sequence shares.

Each active request runs its Generation on a thread of its own and is a *member* here. When a
member needs a decode it hands its rows over (`submit`) and waits; when every member is
waiting, one step runs: one llama_decode per context with rows pending (the target's, the
draft model's), each batch mixing the rows of all the sequences. The members therefore
advance together, one target pass per step for all of them, whatever each one is doing (a
prompt chunk, a verification, a draft token).

Why a rendezvous and not a batching thread with a timer: a step should start as soon as the
last sequence is ready and never wait for one that is not coming; waiting for "everyone who is
a member" is exactly that, and a member that ends, fails or is cancelled simply leaves (a
cancelled member that is waiting leaves at once, its rows unevaluated).

Every step runs on one thread of the rendezvous' own, never on a member's: a process's
decodes must all come from one thread (why: specgguf.binding.engine.on_passing_thread), and
steps called from whichever member came last would come from a different one almost every
step.

This module knows nothing of llama.cpp: what a step does is each context's `step()`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from specgguf.binding.outcome import Outcome


class Cancelled(Exception):
    """The member's request was cancelled while its rows waited for a step."""


class Pending(Protocol):
    """A decode waiting for steps: `finished` once all its rows are evaluated (or failed)."""

    finished: bool


class Stepper(Protocol):
    """A context with pending decodes: `step()` evaluates one batch of them and returns how
    many requests it finished (one that raises has finished none); `withdraw(req)` forgets
    a request not yet finished; `holds()`: the other steppers wait while this one has such
    work (the draft model's steps). `role` ("target", "draft") and `stats` (steps, rows,
    sequences) are what /metrics reports."""

    role: str
    stats: Any

    def has_pending(self) -> bool: ...

    def holds(self) -> bool: ...

    def step(self) -> int: ...

    def withdraw(self, req: Pending) -> None: ...


class Rendezvous:
    """The members and the lock under which every step runs (so no member's rollback can
    overlap a decode of the same context)."""

    def __init__(self) -> None:
        #: members wait on `_cond` for their rows; the step thread waits on `_due` (one lock)
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        self._due = threading.Condition(lock)
        self._stepping: threading.Thread | None = None
        #: calls waiting to run on the step thread: (fn, its outcome, done)
        self._calls: list[tuple[Callable[[], Any], Outcome, threading.Event]] = []
        #: steps that raised so far, and the last one's exception: the members waiting in such
        #: a step get it (their rows withdrawn), and the steps go on for the others
        self._failures = 0
        self._failure: BaseException | None = None
        self._owed = 0  # members still to see the last failure (no step runs until they have)
        # Joining must not wait for the step lock: the step thread holds it through every
        # step, and a newcomer counted here makes the steps wait for its rows (and a step in
        # flight give way) instead (its own lock, never held across a step).
        self._count = threading.Lock()
        self._members = 0
        #: members that ever joined: a step in flight that sees it change gives way to the
        #: newcomer (BatchedContext abandons a prompt chunk; the step's other contexts wait)
        self.joins = 0
        self._unfinished = 0
        self._local = threading.local()
        self.steppers: list[Stepper] = []

    @contextlib.contextmanager
    def member(self, cancelled: Callable[[], bool] | None = None) -> Iterator[None]:
        """The calling thread takes part in the steps until the block ends; `cancelled` is
        asked while it waits (True: it stops waiting, its decode raises Cancelled)."""
        with self._count:
            self._members += 1
            self.joins += 1
        self._local.cancelled = cancelled
        try:
            yield
        finally:
            self._local.cancelled = None
            with self._count:
                self._members -= 1
            with self._cond:
                self._kick()  # the others may all be waiting now

    def wake(self) -> None:
        """Make waiting members look at their cancellation again (a request was cancelled).
        Never blocks its caller (the event loop): if the lock is taken, a step is running
        and wakes everyone when it ends, or a member is about to wait and is woken by the
        next step."""
        if self._cond.acquire(blocking=False):
            try:
                self._cond.notify_all()
            finally:
                self._cond.release()

    def run_locked(self, fn: Callable[[], None]) -> None:
        """Run `fn` (a rollback of one sequence) where no step can run at the same time."""
        with self._cond:
            fn()

    def submit(self, stepper: Stepper, req: Pending, enqueue: Callable[[], None]) -> None:
        """Queue `req` on `stepper` (through `enqueue`, under the lock) and return once it is
        finished. A thread that is not a member (a single caller, a test) is never waited for:
        its decode runs in the next step."""
        cancelled = getattr(self._local, "cancelled", None)
        with self._cond:
            enqueue()
            self._unfinished += 1
            failures = self._failures
            self._kick()
            while not req.finished:
                failed = self._failures != failures
                if failed or cancelled is not None and cancelled():
                    stepper.withdraw(req)
                    self._unfinished -= 1
                    if failed:
                        self._owed -= 1
                    self._kick()
                    if failed:
                        raise self._failure  # type: ignore[misc]
                    raise Cancelled
                self._cond.wait()

    def _kick(self) -> None:
        """(Under the lock.) Start a step if every member is waiting (and wake the waiting
        members, which may have to look at their cancellation)."""
        if self._unfinished and self._unfinished >= self._members and not self._owed:
            self._wake_stepping()

    def _wake_stepping(self) -> None:
        """(Under the lock.) Wake the step thread, starting it the first time."""
        if self._stepping is None:
            self._stepping = threading.Thread(
                target=self._step_forever, name="specgguf-steps", daemon=True
            )
            self._stepping.start()
        self._due.notify()

    def on_step_thread(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the step thread between steps and return what it returns (or raise
        what it raises): work on the shared contexts that is not a step, such as timing
        their passes, must run on the thread every decode runs on, or it leaves a second
        team of llama.cpp workers behind (decoding measurably slower afterwards)."""
        done, out = threading.Event(), Outcome()
        with self._cond:
            self._calls.append((fn, out, done))
            self._wake_stepping()
        done.wait()
        return out.result()

    def _step_forever(self) -> None:
        """The step thread: a call handed over (`on_step_thread`), or a step whenever every
        member waits (it never ends: a daemon, idle on its condition while nobody decodes)."""
        with self._cond:
            while True:
                while not self._calls and (
                    self._owed or not self._unfinished or self._unfinished < self._members
                ):
                    self._due.wait()
                if self._calls:
                    fn, out, done = self._calls.pop(0)
                    out.run(fn)
                    done.set()
                    continue
                try:
                    self._step()
                except Exception as e:  # noqa: BLE001 - its waiters raise it; steps go on
                    self._failures += 1
                    self._failure, self._owed = e, self._unfinished
                self._cond.notify_all()

    def _step(self) -> None:
        joins = self.joins
        ready = [s for s in self.steppers if s.has_pending()]
        for s in [s for s in ready if s.holds()] or ready:
            self._unfinished -= s.step()
            if self.joins != joins:  # a newcomer: the other contexts' rows wait for its own
                break

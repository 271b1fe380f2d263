"""A call's outcome, carried from the thread that ran it to the thread that waits for it (the
load-time probe's thread, the rendezvous' step thread: both run a caller's work on a thread
of their own and hand back what it returned or raise what it raised)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Outcome:
    """What `fn()` returned or raised: `run` on one thread, `result` on another once it ran."""

    __slots__ = ("error", "value")

    def __init__(self) -> None:
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self, fn: Callable[[], Any]) -> None:
        try:
            self.value = fn()
        except BaseException as e:  # noqa: BLE001 - raised by `result`, in the caller
            self.error = e

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value

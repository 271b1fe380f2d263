"""Default signal dispositions for the processes the signal tests signal.

A suite launched under `nohup`, or as a background job of a shell without job control,
inherits SIGHUP and/or SIGINT as "ignore", and every child inherits that too. specgguf rightly
keeps an inherited "ignore" (specgguf.interrupts), so a test that sends those signals must
first give its process the dispositions a terminal gives: `restore_defaults` as a Popen
`preexec_fn`, `default_dispositions()` around an in-process test.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

from specgguf.interrupts import SIGNALS


def restore_defaults() -> None:
    """Every signal specgguf handles back to its default disposition (in a child, before exec)."""
    for s in SIGNALS:
        signal.signal(s, signal.SIG_DFL)


@contextmanager
def default_dispositions() -> Iterator[None]:
    """This process with the default dispositions for the duration, then what it had."""
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    restore_defaults()
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old if old is not None else signal.SIG_DFL)

"""What `serve` has loaded, and --sleep-idle-seconds: the models freed while nobody asks.

llama-server's sleep: after N seconds with no request running, waiting or being answered,
the models and their KV caches are freed (the process keeps its port and its answers of
/health, /props, /v1/models and /metrics); the next request that needs a model loads them
again, the way they were loaded at start, and is answered once they are back. What a slot's
KV cache held is gone, so that request's prompt is evaluated whole; what auto measured is
merged into the machine profile before the models go.

`Models` is the one owner of the loaded models: the scheduler asks it to sleep and to wake
(on its worker thread, between requests), and the server's listeners are told of each
change (the App answers from what it remembered before the sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specgguf.generator import Generator


@dataclass
class Loaded:
    """One loading of serve's models: the generator over its session, and the embeddings
    context of --embeddings (None without)."""

    gen: Generator
    embedder: Any = None

    def close(self) -> None:
        """Keep what auto measured (the machine profile) and what the n-gram caches learned,
        then free the embeddings context, the contexts and the weights."""
        try:
            self.gen.save_profile()
            self.gen.close()
        finally:
            if self.embedder is not None:
                self.embedder.close()
            self.gen.session.close()


class Models:
    """serve's models: loaded by `load` (at once), freed by sleep(), loaded again by
    wake(). `idle_seconds` <= 0: they never sleep."""

    def __init__(self, load: Callable[[], Loaded], idle_seconds: int = -1) -> None:
        self._load = load
        self.idle_seconds = idle_seconds
        self.loaded: Loaded | None = load()
        #: (before_sleep, woke) pairs: before_sleep() while the models are still there,
        #: woke(loaded) once they are back
        self._listeners: list[tuple[Callable[[], None], Callable[[Loaded], None]]] = []
        self.last_busy = time.monotonic()
        self.sleeps = 0  # how many times the models were freed
        #: answers under way that read the models (App.hold; changed on the event loop)
        self.holds = 0

    @property
    def gen(self) -> Generator:
        assert self.loaded is not None, "the models sleep: wake() them first"
        return self.loaded.gen

    @property
    def asleep(self) -> bool:
        return self.loaded is None

    def listen(self, before_sleep: Callable[[], None], woke: Callable[[Loaded], None]) -> None:
        self._listeners.append((before_sleep, woke))

    def busy(self) -> None:
        """Something ran just now: the idle time starts again."""
        self.last_busy = time.monotonic()

    def hold(self) -> Callable[[], None]:
        """The models stay awake until the returned release() (idempotent) is called."""
        self.holds += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.holds -= 1
                self.busy()

        return release

    def idle_left(self) -> float | None:
        """Seconds of idleness left before the models sleep (None: they never will, or
        sleep already)."""
        if self.idle_seconds <= 0 or self.asleep:
            return None
        return max(0.0, self.last_busy + self.idle_seconds - time.monotonic())

    def may_sleep(self) -> bool:
        """Idle long enough, and no answer holds the models."""
        left = self.idle_left()
        return left is not None and left <= 0 and self.holds == 0

    def sleep(self) -> None:
        """Free the models (the listeners remember what they answer from first)."""
        if self.loaded is None:
            return
        for before_sleep, _ in self._listeners:
            before_sleep()
        loaded, self.loaded = self.loaded, None
        self.sleeps += 1
        loaded.close()

    def wake(self) -> Loaded:
        """The models, loaded again if they sleep (the listeners are given them)."""
        if self.loaded is None:
            self.loaded = self._load()
            for _, woke in self._listeners:
                woke(self.loaded)
            self.busy()
        return self.loaded

    def close(self) -> None:
        """At the end of serve: free whatever is loaded."""
        loaded, self.loaded = self.loaded, None
        if loaded is not None:
            loaded.close()

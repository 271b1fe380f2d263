"""--sleep-idle-seconds: after N idle seconds the models and their KV caches are freed;
/health, /props and /v1/models still answer (is_sleeping); the next request loads them
again and is answered.

First the scheduler's side on stand-in models (what is loaded and freed, and when), then a
served tiny model with a 1-second idle time. No timings are asserted: the tests wait (with a
safety bound) for the state the server reports."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from specgguf.server.scheduler import Scheduler
from specgguf.server.sleep import Loaded, Models
from tests.serve_helpers import FAST, post_together, serving

SAFETY_S = 60


class _Gen:
    """A generator that only records being closed (Loaded.close's calls)."""

    n_slots = 1
    rendezvous = None

    def __init__(self, n: int) -> None:
        self.n = n
        self.closed = False
        self.session = self

    def save_profile(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _wait_for(cond, what: str) -> None:
    deadline = time.monotonic() + SAFETY_S
    while not cond():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def test_idle_models_are_freed_and_loaded_again_before_the_next_call():
    loaded: list[_Gen] = []

    def load() -> Loaded:
        loaded.append(_Gen(len(loaded)))
        return Loaded(loaded[-1])  # type: ignore[arg-type]

    models = Models(load, idle_seconds=1)
    sched = Scheduler(models.gen, models=models)
    sched.start()
    try:
        _wait_for(lambda: models.asleep, "the models sleep")
        assert loaded[0].closed and sched.sleeping and len(loaded) == 1

        async def call() -> int:
            return await sched.call(lambda: sched.gen.n)

        # the call runs on the models loaded again, not on the freed ones
        assert asyncio.run(call()) == 1
        assert len(loaded) == 2 and not loaded[1].closed and not sched.sleeping
    finally:
        sched.shutdown()
        sched.join(SAFETY_S)
        models.close()
    assert loaded[1].closed


def test_a_held_answer_keeps_the_models_awake():
    models = Models(lambda: Loaded(_Gen(0)), idle_seconds=1)  # type: ignore[arg-type]
    sched = Scheduler(models.gen, models=models)
    release = models.hold()
    sched.start()
    try:
        woke = threading.Event()
        threading.Timer(2.5, woke.set).start()  # well past the idle time
        woke.wait()
        assert not models.asleep  # an answer still reads the models
        release()
        _wait_for(lambda: models.asleep, "the models sleep once released")
    finally:
        sched.shutdown()
        sched.join(SAFETY_S)
        models.close()


def test_without_the_flag_they_never_sleep():
    models = Models(lambda: Loaded(_Gen(0)), idle_seconds=-1)  # type: ignore[arg-type]
    assert models.idle_left() is None and not models.may_sleep()


# -- a served tiny model -------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tiny_target):
    yield from serving(["-m", str(tiny_target), *FAST, "-c", "512", "--sleep-idle-seconds", "1"])


def _sleeping(server) -> bool:
    status, _, props = server.request("GET", "/props")
    assert status == 200, props
    return props["is_sleeping"]


def test_a_sleeping_server_answers_and_wakes_for_a_request(server):
    body = {"prompt": "once upon a time", "n_predict": 8}
    before = server.post("/completion", body)
    _wait_for(lambda: _sleeping(server), "/props says is_sleeping")
    assert server.request("GET", "/health")[2] == {"status": "ok", "is_sleeping": True}
    models = server.request("GET", "/v1/models")[2]
    assert models["data"][0]["id"] and models["data"][0]["meta"]["n_vocab"] > 0
    assert server.request("GET", "/metrics")[0] == 200
    assert _sleeping(server)  # none of those woke it

    after = server.post("/completion", body)  # loads the models again, then answers
    assert after["content"] == before["content"]  # the same models, greedy
    assert after["timings"]["cache_n"] == 0  # the KV cache was freed with them
    # /slots asks for the models: they are loaded for it too
    _wait_for(lambda: _sleeping(server), "asleep again")
    status, _, slots = server.request("GET", "/slots")
    assert status == 200 and slots[0]["n_ctx"] > 0


def test_slots_decoding_together_sleep_and_wake_too(tiny_target):
    """-np 2: the slots' shared passes run on the models loaded again."""
    args = ["-m", str(tiny_target), *FAST, "-c", "1024", "-np", "2", "--sleep-idle-seconds", "1"]
    for server in serving(args):
        body = {"prompt": "the river runs", "n_predict": 6}
        before = post_together(server, "/completion", [body, body])
        _wait_for(lambda s=server: _sleeping(s), "/props says is_sleeping")
        after = post_together(server, "/completion", [body, body])
        assert [a["content"] for a in after] == [b["content"] for b in before]
        assert server.request("GET", "/metrics")[0] == 200

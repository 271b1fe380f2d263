"""--sse-ping-interval: a stream that has been silent that many seconds (a long prompt being
evaluated, a request waiting for a slot) gets an SSE comment line, `:`, which clients skip.

In-process, over ASGI, with a job whose events the test releases: ordering only (the ping
comes before the event the test sends once it has seen the ping), never timings."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from specgguf.generator import GenParams
from specgguf.server import protocol as p
from specgguf.server.app import SSE_PING, App, ServerConfig
from specgguf.server.http_settings import HttpSettings
from specgguf.server.scheduler import Event, Job
from tests.test_serve_loop import asgi_send

SAFETY_S = 60  # a test that never sees its ping fails after this, it does not hang


class _Pieces:
    """The generator the answer's shape reads (token text), and the scheduler a stream ends
    its jobs with; nothing else."""

    def piece(self, token: int) -> bytes:
        return b"?"

    format_piece = piece

    def cancel(self, job: Job, reason: str) -> None:
        job.cancel(reason)


def _app(ping: int) -> App:
    cfg = ServerConfig(model_id="m", model_path="m.gguf", http=HttpSettings(sse_ping_interval=ping))
    stub = _Pieces()
    return App(stub, stub, cfg)  # type: ignore[arg-type]


async def _stream(app: App, body: dict, job_ready: asyncio.Future) -> list[bytes]:
    """POST /completion `body` (streamed) through the ASGI app, whose start() gives the
    test's job; once the first ping is on the wire the job fails, which ends the stream.
    Returns the body's chunks as sent."""
    chunks: list[bytes] = []

    async def send(message: dict) -> None:
        if message["type"] != "http.response.body":
            return
        chunks.append(message.get("body", b""))
        if chunks[-1] == SSE_PING:
            job: Job = await job_ready
            err = p.ApiError(500, "ended by the test", "test")
            job.events.put_nowait(Event("error", error=err))

    await asyncio.wait_for(asgi_send(app, "POST", "/completion", send, body), SAFETY_S)
    return chunks


def _run_stream(monkeypatch, app: App, body: dict) -> list[bytes]:
    async def scenario() -> list[bytes]:
        job_ready: asyncio.Future = asyncio.get_running_loop().create_future()

        async def start(self, req):
            job = Job([1, 2, 3], GenParams(), asyncio.get_running_loop())
            job_ready.set_result(job)
            return [job]  # and nothing ever comes from it: the model is "busy"

        monkeypatch.setattr(App, "start", start)
        return await _stream(app, body, job_ready)

    try:
        return asyncio.run(scenario())
    finally:
        app.close()


def test_a_silent_stream_gets_a_comment_line_then_goes_on(monkeypatch):
    chunks = _run_stream(monkeypatch, _app(1), {"prompt": "x", "stream": True})
    assert SSE_PING in chunks
    # the comment is a whole SSE event of its own: a client skips it and reads on
    after = b"".join(chunks[chunks.index(SSE_PING) + 1:])
    assert after.startswith(b"data: ") and b"ended by the test" in after


def test_a_request_sets_its_own_interval(monkeypatch):
    """The server pings never (-1); the request asks every second, and gets its ping."""
    body = {"prompt": "x", "stream": True, "sse_ping_interval": 1}
    assert SSE_PING in _run_stream(monkeypatch, _app(-1), body)


def test_events_ping_only_while_silent():
    """App.events: a ping after the silence, then the events as they come."""

    async def scenario() -> list[str]:
        app = _app(1)
        job = Job([1], GenParams(), asyncio.get_running_loop())
        kinds: list[str] = []
        try:
            async for ev in app.events(job, ping=1):
                kinds.append(ev.kind)
                if ev.kind == "ping" and kinds.count("ping") == 1:
                    job.events.put_nowait(Event("done"))
        finally:
            app.close()
        return kinds

    assert asyncio.run(asyncio.wait_for(scenario(), SAFETY_S)) == ["ping", "done"]


@pytest.mark.parametrize(("value", "ok"), [(-1, True), (0, True), (30, True), (-2, False),
                                           ("5", False), (10**9, False)])  # fmt: skip
def test_request_field_is_checked(value: Any, ok: bool):
    body = {"prompt": "x", "sse_ping_interval": value}
    if ok:
        assert p.parse_completion(body, native=True).sse_ping_interval == value
    else:
        with pytest.raises(p.ApiError, match="sse_ping_interval"):
            p.parse_completion(body, native=True)

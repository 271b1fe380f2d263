"""The server's event loop stays free while requests are prepared.

In-process, over ASGI (no model: the requests tested never reach the scheduler): a request's
preparation (its body parsed, its JSON schema turned into a grammar) is made to wait until
/health has been answered. Run on the event loop, it would wait in vain (nothing else runs
there meanwhile) and /health would be answered after it; run on a preparation thread, /health
is answered first. Ordering only: the wait's bound is a safety net, not a measurement.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from specgguf.chat.render import RenderOptions
from specgguf.io import json_input
from specgguf.server import protocol as p
from specgguf.server.app import PREPARE_THREADS, App, ServerConfig

SAFETY_S = 60  # how long a blocked preparation waits before giving up (a failing test)
SCHEMA_BODY = {
    "messages": [{"role": "user", "content": "hi"}],
    "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}},
}


async def asgi(
    app: App, method: str, path: str, body: Any = None, raw: bytes | None = None
) -> tuple[int, Any]:
    """One request through the ASGI app (`body` as JSON, or `raw` bytes): (status, the JSON
    answer)."""
    out: dict[str, Any] = {"body": b""}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    await asgi_send(app, method, path, send, body, raw)
    return out["status"], json.loads(out["body"])


async def asgi_send(
    app: App, method: str, path: str, send, body: Any = None, raw: bytes | None = None
) -> None:
    """One request through the ASGI app (`body` as JSON, or `raw` bytes), its answer's
    messages given to `send`; the client stays connected."""
    data = raw if raw is not None else json.dumps(body).encode() if body is not None else b""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "server": ("127.0.0.1", 8080), "client": ("127.0.0.1", 50000),
        "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(len(data)).encode())],
    }  # fmt: skip
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": data, "more_body": False}
        await asyncio.Event().wait()  # the client stays
        raise AssertionError("unreachable")

    await app(scope, receive, send)


class Gate:
    """Stands in for one step of preparation: says it has begun, then waits until it is
    opened (or SAFETY_S), remembering whether it was opened in time."""

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.opened = threading.Event()
        self.running = 0
        self.most = 0
        self.in_time: list[bool] = []
        self._lock = threading.Lock()

    def wrap(self, real):
        def gated(*args, **kwargs):
            with self._lock:
                self.running += 1
                self.most = max(self.most, self.running)
            self.entered.release()
            self.in_time.append(self.opened.wait(SAFETY_S))
            with self._lock:
                self.running -= 1
            return real(*args, **kwargs)

        return gated

    async def wait_entered(self) -> None:
        while not self.entered.acquire(blocking=False):
            await asyncio.sleep(0.01)


class _NoModel:
    """What preparing a request asks of the Generator before a model is needed: the
    template's tool-call dialect (a template without markers: the fallback's) and the
    rendering defaults (whether the model thinks)."""

    render_options = RenderOptions()

    def dialect(self):
        from specgguf.chat.dialects import detect

        return detect("")


@pytest.fixture
def app():
    cfg = ServerConfig(model_id="m", model_path="m.gguf")
    a = App(_NoModel(), None, cfg)  # type: ignore[arg-type]
    yield a
    a.close()


@pytest.mark.parametrize("step", ["body", "schema"])
def test_health_is_answered_while_a_request_is_prepared(app, monkeypatch, step):
    gate = Gate()
    if step == "body":
        monkeypatch.setattr(json_input, "loads", gate.wrap(json_input.loads))
    else:
        monkeypatch.setattr(p, "output_grammar", gate.wrap(p.output_grammar))

    async def scenario() -> tuple[int, Any]:
        heavy = asyncio.ensure_future(asgi(app, "POST", "/v1/chat/completions", SCHEMA_BODY))
        await gate.wait_entered()  # the preparation has begun (on the loop: and given up)
        assert await asgi(app, "GET", "/health") == (200, {"status": "ok"})
        gate.opened.set()
        return await heavy

    monkeypatch.setattr(App, "start", _no_scheduler)
    status, answer = asyncio.run(scenario())
    # the preparation waited for /health's answer, and had it: the loop was not held
    assert gate.in_time == [True]
    assert status == 418 and answer["error"]["code"] == "prepared"


async def _no_scheduler(self, req):
    """What follows preparation needs a model: the test stops there."""
    assert req.params.grammar is not None  # the schema was converted
    raise p.ApiError(418, "prepared", "prepared")


def test_preparations_run_at_most_prepare_threads_at_once(app, monkeypatch):
    gate = Gate()
    monkeypatch.setattr(p, "output_grammar", gate.wrap(p.output_grammar))
    monkeypatch.setattr(App, "start", _no_scheduler)

    async def scenario() -> list:
        tasks = [
            asyncio.ensure_future(asgi(app, "POST", "/v1/chat/completions", SCHEMA_BODY))
            for _ in range(PREPARE_THREADS + 2)
        ]
        for _ in range(PREPARE_THREADS):
            await gate.wait_entered()
        # every preparation thread is busy, and the loop still answers
        assert await asgi(app, "GET", "/health") == (200, {"status": "ok"})
        busy = gate.running
        gate.opened.set()
        results = await asyncio.gather(*tasks)
        return [busy, results]

    busy, results = asyncio.run(scenario())
    assert busy == PREPARE_THREADS and gate.most <= PREPARE_THREADS
    assert all(status == 418 for status, _ in results) and len(gate.in_time) == PREPARE_THREADS + 2


def test_a_body_that_is_not_json_is_still_a_400(app):
    status, answer = asyncio.run(asgi(app, "POST", "/v1/chat/completions", raw=b"{not json"))
    assert status == 400 and answer["error"]["code"] == "invalid_json"


class _Tokenizer:
    """The generator and scheduler /tokenize needs: one token per byte, on the caller."""

    def encode(self, text, add_special=False, parse_special=True):
        return list(text.encode())

    async def call(self, fn):
        return fn()


def test_health_is_answered_while_a_long_tokenization_is_written_out(monkeypatch):
    from starlette.responses import JSONResponse

    stub = _Tokenizer()
    app = App(stub, stub, ServerConfig(model_id="m", model_path="m.gguf"))  # type: ignore[arg-type]
    gate = Gate()
    render = JSONResponse.render
    gated = gate.wrap(render)

    def rendering(self, content):  # only the tokens wait: /health's answer is rendered too
        return (gated if "tokens" in content else render)(self, content)

    monkeypatch.setattr(JSONResponse, "render", rendering)

    async def scenario() -> tuple[int, Any]:
        heavy = asyncio.ensure_future(asgi(app, "POST", "/tokenize", {"content": "abc"}))
        await gate.wait_entered()
        assert await asgi(app, "GET", "/health") == (200, {"status": "ok"})
        gate.opened.set()
        return await heavy

    try:
        assert asyncio.run(scenario()) == (200, {"tokens": [97, 98, 99]})
    finally:
        app.close()
    assert gate.in_time == [True]

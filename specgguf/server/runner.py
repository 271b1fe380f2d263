"""Start and stop the server: bind, run uvicorn, end cleanly on SIGTERM/SIGINT.

The first SIGTERM or SIGINT stops accepting connections and ends every request in flight at
its next round: each stream still gets its final chunk (finish_reason, timings) and
`data: [DONE]`; a request whose body is still arriving is answered 503 at once, and a
response its client does not read is cut after GRACEFUL_S seconds, so no client can hold the
shutdown up. Then the worker thread finishes, auto's measurements are saved and the process
exits 0. A second SIGINT exits at once.

uvicorn re-raises a captured signal after a graceful shutdown (so a SIGTERM'd process would
die of SIGTERM); specgguf installs its own handlers instead, because a server that shut down
cleanly on request has succeeded.

uvicorn bounds the time a connection may sit idle between requests, but not the time before
its first request's head has arrived: a client that connects and sends nothing, or half a
header line, would hold its socket for ever (enough of them, and no one else can connect).
Such a connection is closed after --timeout, the bound a request body has too.

Nor does uvicorn bound how many connections are open at once (its limit_concurrency answers
a request with a text/plain 503, but only once the request's head has arrived, so idle or
slow connections still pile up, each holding a descriptor and a buffer): a connection made
while --max-connections are open is answered 503 with an OpenAI error object and closed at
once. Both are done by the one protocol class (_bounded_protocol), which also answers a
request uvicorn cannot parse with OpenAI's error object instead of uvicorn's text/plain 400.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from http import HTTPStatus

from specgguf.errors import ExitCode, SpecggufError
from specgguf.server.app import App, ServerConfig
from specgguf.server.connections import default_max_connections
from specgguf.server.protocol import ApiError
from specgguf.server.router import Router
from specgguf.server.scheduler import Scheduler, SlotSettings
from specgguf.server.sleep import Models

#: after SIGTERM, seconds the responses still being written (a client that reads slowly or
#: not at all) may take before they are cut: a shutdown is never held up longer by a client
GRACEFUL_S = 5


def bind(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A listening socket, or one clear line (address in use, bad host). `reuse_port`
    (--reuse-port): bound with SO_REUSEPORT, beside other sockets bound so."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise SpecggufError(f"--host {host}: {e.strerror}", ExitCode.USAGE) from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise SpecggufError(
            f"cannot listen on {host}:{port}: {e.strerror}", ExitCode.SERVER
        ) from None
    sock.set_inheritable(True)
    return sock


def serve(
    models: Models,
    cfg: ServerConfig,
    *,
    host: str,
    port: int,
    max_queue: int = 64,
    max_connections: int | None = None,
    verbose: bool = False,
    announce: Callable[[str], None] | None = None,
    slots: SlotSettings | None = None,
) -> int:
    """Serve `models` (loaded; they sleep after --sleep-idle-seconds where `models` says so)
    until SIGTERM/SIGINT."""
    import uvicorn

    gen = models.gen

    if max_connections is None:
        max_connections = default_max_connections(cfg.n_parallel, max_queue)
    _room_for_descriptors(max_connections)
    sock = bind(host, port, cfg.http.reuse_port)
    real_port = sock.getsockname()[1]
    sched = Scheduler(gen, max_queue=max_queue, slots=slots or SlotSettings(), models=models)
    app = App(gen, sched, cfg)
    app.attach(models)
    config = uvicorn.Config(
        cfg.http.with_cors(app),
        http=_bounded_protocol(cfg.read_timeout, max_connections),
        log_level="info" if verbose else "warning",
        access_log=verbose,
        lifespan="off",
        timeout_graceful_shutdown=GRACEFUL_S,
        **cfg.http.uvicorn_options(),
    )
    server = _Server(config, sched, app)
    models.busy()  # (the idle time starts now)
    sched.start()
    if announce is not None:
        shown = f"[{host}]" if ":" in host else host
        announce(
            f"specgguf serve: listening on {cfg.http.scheme}://{shown}:{real_port} "
            f"({gen.n_slots} slot"
            f"{'s' if gen.n_slots > 1 else ''} of {gen.n_ctx} tokens, model {cfg.model_id})"
        )
    try:
        asyncio.run(serving(server, sock, cfg.http.threads_http))
    finally:
        app.close()
        sched.shutdown()
        sched.join(timeout=60)
        sock.close()
    return 0


def serve_router(router: Router, *, host: str, port: int, verbose: bool = False,
                 announce: Callable[[str], None] | None = None,
                 reuse_port: bool = False) -> int:  # fmt: skip
    """Router mode (specgguf.server.router) until SIGTERM/SIGINT; then every model's
    server is stopped."""
    import uvicorn

    sock = bind(host, port, reuse_port)
    config = uvicorn.Config(router, log_level="info" if verbose else "warning",
                            access_log=verbose, lifespan="off",
                            timeout_graceful_shutdown=GRACEFUL_S)  # fmt: skip
    if announce is not None:
        shown = f"[{host}]" if ":" in host else host
        announce(f"specgguf serve: listening on http://{shown}:{sock.getsockname()[1]} "
                 f"(router: {len(router.instances)} models, loaded on demand"
                 + (f"; {len(router.startup)} loading now" if router.startup else "")
                 + ")")  # fmt: skip
    async def main() -> None:
        # load-on-startup models load as the router begins to listen (held: a task's only
        # reference must not be the loop's weak one)
        loads = asyncio.create_task(router.load_startup_models())
        try:
            await _RouterServer(config).serve(sockets=[sock])
        finally:
            loads.cancel()

    try:
        asyncio.run(main())
    finally:
        router.close()
        sock.close()
    return 0


async def serving(server, sock: socket.socket, threads_http: int) -> None:
    """Run `server` on `sock`, with --threads-http threads for its blocking work: the thread
    limiter is the event loop's own (anyio keeps one per loop), so it is sized here, in the
    loop, before the first request."""
    if threads_http >= 1:
        import anyio.to_thread

        anyio.to_thread.current_default_thread_limiter().total_tokens = threads_http
    await server.serve(sockets=[sock])


def closing_response(err: ApiError) -> bytes:
    """A complete HTTP/1.1 answer carrying `err` as OpenAI's error object, for a connection
    that is closed after it (Retry-After when `err` has one)."""
    body = json.dumps(err.body()).encode()
    retry = f"retry-after: {err.retry_after}\r\n" if err.retry_after else ""
    head = (
        f"HTTP/1.1 {err.status} {HTTPStatus(err.status).phrase}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n{retry}"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


def overloaded_response(max_connections: int) -> bytes:
    """What a connection past --max-connections is told before it is closed."""
    return closing_response(
        ApiError(
            503,
            f"too many open connections (--max-connections {max_connections}); retry later",
            "too_many_connections",
            retry_after=1,
        )
    )


#: what a request uvicorn cannot parse as HTTP/1.1 is told (uvicorn's own is text/plain)
MALFORMED = closing_response(
    ApiError(400, "the request is not valid HTTP/1.1", "invalid_http_request")
)


def _room_for_descriptors(max_connections: int) -> None:
    """Raise the soft limit on open files to fit --max-connections (and the process's own
    files), up to the hard limit: else accept() would fail first, with a log line per try."""
    try:
        import resource
    except ImportError:  # not POSIX: the platform's limit stands
        return
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = max_connections + 256  # and the files the process itself keeps open
        if hard != resource.RLIM_INFINITY:
            want = min(want, hard)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def _bounded_protocol(seconds: float, max_connections: int):
    """uvicorn's HTTP/1.1 protocol within two bounds (see the module docstring): a connection
    made while `max_connections` others are open is answered 503 and closed; one whose first
    request head has not arrived `seconds` after it was made is closed. Once a request has
    begun its body has App.body's bound, and between requests uvicorn's keep-alive timeout
    holds. A request that is not HTTP/1.1 gets OpenAI's error object, as every other error
    does (uvicorn calls send_400_response for it, then reads nothing more)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    overloaded = overloaded_response(max_connections)

    class Bounded(H11Protocol):
        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._head_timer = self.loop.call_later(seconds, self._head_overdue)
            if len(self.connections) > max_connections:  # this one included
                transport.write(overloaded)
                transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_timer.cancel()
            super().connection_lost(exc)

        def send_400_response(self, msg: str) -> None:
            if self.cycle is None or not self.cycle.response_started:  # else: cut it short
                self.transport.write(MALFORMED)
            self.transport.close()

        def _head_overdue(self) -> None:
            if self.cycle is None and not self.transport.is_closing():
                self.transport.close()

    return Bounded


@contextlib.contextmanager
def _signals_to(handler) -> Iterator[None]:
    """SIGINT and SIGTERM handled by `handler` meanwhile: not uvicorn's own capture, which
    raises the signal again once the server has stopped (the exit status would be the
    signal's, not 0)."""
    sigs = (signal.SIGINT, signal.SIGTERM)
    old = {s: signal.signal(s, handler) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class _RouterServer:
    """uvicorn.Server that stops on SIGTERM/SIGINT and exits 0 (see _signals_to)."""

    def __new__(cls, config):
        import uvicorn

        class Server(uvicorn.Server):
            def capture_signals(self) -> contextlib.AbstractContextManager[None]:
                return _signals_to(self.handle_exit)

        return Server(config)


class _Server:
    """uvicorn.Server with specgguf's signal handling (see the module docstring)."""

    def __new__(cls, config, sched: Scheduler, app: App):
        import uvicorn

        class Server(uvicorn.Server):
            def __init__(self) -> None:
                super().__init__(config)
                self.loop: asyncio.AbstractEventLoop | None = None

            async def startup(self, sockets=None) -> None:
                self.loop = asyncio.get_running_loop()
                await super().startup(sockets=sockets)

            def capture_signals(self) -> contextlib.AbstractContextManager[None]:
                return _signals_to(self.handle_exit)

            def handle_exit(self, sig, frame) -> None:
                if self.should_exit and sig == signal.SIGINT:
                    self.force_exit = True
                self.should_exit = True
                if self.loop is not None:
                    self.loop.call_soon_threadsafe(sched.shutdown)
                    self.loop.call_soon_threadsafe(app.begin_shutdown)
                else:
                    sched.shutdown()
                    app.begin_shutdown()

        return Server()


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)

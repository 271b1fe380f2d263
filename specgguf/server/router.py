"""Router mode (`serve --models-dir DIR`): several GGUFs served by name, as llama-server's
router serves them.

Each model of the directory (a `.gguf` file; a sub-directory's first `.gguf` for a split
model) is listed by its name (the file name without `.gguf`). A request names its model:
a POST body's `model` field, a GET's `?model=` query. A model not loaded is loaded for it
(unless --no-models-autoload, or the request's `?autoload=false`): a `specgguf serve` of its
own on 127.0.0.1 (the router's other flags, so speculation and sampling are the same for
each model, each with its own defaults), to which the request is relayed byte for byte,
streams included. At most --models-max are loaded at once (0: no bound): the least recently
used idle one is stopped to make room. Like llama-server, one process per model: stopping
it gives its memory back whole.

With --models-preset FILE (specgguf.server.presets), the file's sections add options to
the directory's models, or are models of their own; a model may have other names (its
`alias`), be loaded when the router starts (`load-on-startup`) and be given more or less
time to stop (`stop-timeout`).

Endpoints of the router itself: GET /models (and /v1/models): every model with its
`status` (`unloaded`, `loading`, `loaded`; `failed` and `exit_code` after a failed load);
POST /models/load and /models/unload `{"model": NAME}`; GET /health."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from specgguf.errors import UsageError
from specgguf.server.protocol import ApiError, bad

#: the most models a directory may list (its listing is read once, at start)
MAX_MODELS = 1024
#: seconds a model's server may take to load and listen before the load fails
LOAD_S = 600
#: seconds a stopped model's server has to end before it is killed
STOP_S = 30
#: the headers of a relayed answer that are the connection's, not the answer's
_HOP = {b"connection", b"keep-alive", b"transfer-encoding"}
#: the router's own flags and variables, which a model's server must not inherit
ROUTER_FLAGS = ("--models-dir", "--models-preset", "--models-max", "--models-autoload",
                "--no-models-autoload")  # fmt: skip
ROUTER_ENV = ("LLAMA_ARG_MODELS_DIR", "LLAMA_ARG_MODELS_PRESET", "LLAMA_ARG_MODELS_MAX",
              "LLAMA_ARG_MODELS_AUTOLOAD")  # fmt: skip


@dataclass(frozen=True)
class RouterModel:
    """One model the router serves: its server's arguments beyond the router's own."""

    name: str
    path: Path | None  # its file where known (GET /models shows it)
    args: tuple[str, ...]  # e.g. ("--model", PATH, "--ctx-size", "4096")
    aliases: tuple[str, ...] = ()  # other names a request may give it by
    load_on_startup: bool = False
    stop_timeout: int | None = None  # seconds its server has to stop (None: STOP_S)


def directory_entries(models: dict[str, Path]) -> dict[str, RouterModel]:
    """--models-dir's models with no preset: each its file."""
    return {name: RouterModel(name, path, ("--model", str(path))) for name, path in models.items()}


def directory_models(directory: Path) -> dict[str, Path]:
    """The directory's models by name: each `.gguf` file, and each sub-directory's first
    `.gguf` (a split model's first shard), sorted; one UsageError line when there is none."""
    if not directory.is_dir():
        raise UsageError(f"--models-dir {directory}: no such directory")
    found: dict[str, Path] = {}
    for entry in sorted(directory.iterdir()):
        if entry.is_file() and entry.suffix == ".gguf":
            found[entry.stem] = entry
        elif entry.is_dir():
            shards = sorted(p for p in entry.iterdir() if p.suffix == ".gguf"
                            and not p.name.startswith("mmproj"))  # fmt: skip
            if shards:
                found[entry.name] = shards[0]
        if len(found) > MAX_MODELS:
            raise UsageError(f"--models-dir {directory}: more than {MAX_MODELS} models")
    if not found:
        raise UsageError(f"--models-dir {directory}: no .gguf model in it")
    return found


def child_argv(argv: Sequence[str]) -> list[str]:
    """`serve`'s own arguments less the router's flags and --host/--port (a model's server
    listens on 127.0.0.1, on a free port)."""
    valued = {"--models-dir", "--models-preset", "--models-max", "--host", "--port"}
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in valued:
            skip = "=" not in arg
            continue
        if name in ROUTER_FLAGS:
            continue
        out.append(arg)
    return out


@dataclass
class Instance:
    """One model of the router, and its server while it is loaded."""

    name: str
    model: RouterModel
    status: str = "unloaded"  # unloaded, loading, loaded
    proc: subprocess.Popen | None = None
    port: int = 0
    last_used: float = 0.0
    in_flight: int = 0  # requests being relayed to it
    exit_code: int | None = None  # of a load that failed

    def listing(self, created: int) -> dict[str, Any]:
        status: dict[str, Any] = {"value": self.status}
        if self.exit_code is not None and self.status == "unloaded":
            status.update(failed=True, exit_code=self.exit_code)
        path = self.model.path
        return {"id": self.name, "object": "model", "created": created, "owned_by": "specgguf",
                "aliases": list(self.model.aliases), "path": str(path) if path else None,
                "status": status}  # fmt: skip


class Router:
    """The router's ASGI app over its models (see the module docstring)."""

    def __init__(
        self, models: dict[str, RouterModel], argv: Sequence[str], *, models_max: int = 4,
        autoload: bool = True, api_keys: tuple[str, ...] = (), max_body: int = 8 << 20,
    ) -> None:  # fmt: skip
        self.instances = {name: Instance(name, m) for name, m in models.items()}
        #: a model's other names (its preset's alias), each to its name
        self.aliases = {a: m.name for m in models.values() for a in m.aliases
                        if a not in models}  # fmt: skip
        startup = [m.name for m in models.values() if m.load_on_startup]
        if 0 < models_max < len(startup):
            raise UsageError(f"--models-preset: {len(startup)} models load on startup, more "
                             f"than --models-max {models_max}")  # fmt: skip
        #: the models loaded as the router starts (load-on-startup)
        self.startup = startup
        self.argv = child_argv(argv)
        self.models_max = models_max
        self.autoload = autoload
        self.api_keys = api_keys
        self.max_body = max_body
        self.started = int(time.time())
        self._lock: asyncio.Lock | None = None

    # -- ASGI --------------------------------------------------------------------------------

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        try:
            await self._handle(scope, receive, send)
        except ApiError as e:
            await _json(send, e.status, e.body())

    async def _handle(self, scope, receive, send) -> None:
        path, method = scope["path"], scope["method"]
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if path in ("/health", "/v1/health"):
            await _json(send, 200, {"status": "ok"})
            return
        if path in ("/models", "/v1/models") and method == "GET":
            data = [i.listing(self.started) for i in self.instances.values()]
            await _json(send, 200, {"object": "list", "data": data})
            return
        self._check_key(scope)
        body = await self._body(receive) if method == "POST" else b""
        if path in ("/models/load", "/models/unload") and method == "POST":
            inst = self._named(_model_field(body))
            if path == "/models/load":
                await self._load(inst)
            else:
                await self._stop(inst)
            await _json(send, 200, {"success": True})
            return
        name = _model_field(body) if method == "POST" else (query.get("model") or [None])[0]
        if name is None:
            raise bad("router mode: name the model ('model' in the body, ?model= for GET)",
                      "missing_field")  # fmt: skip
        inst = self._named(name)
        autoload = (query.get("autoload") or [None])[0]
        may_load = self.autoload if autoload is None else autoload == "true"
        for last in (False, True):
            if inst.status != "loaded":
                if not may_load:
                    raise bad(f"model {name!r} is not loaded (POST /models/load loads it)",
                              "model_not_loaded")  # fmt: skip
                await self._load(inst)
            try:
                await self._relay(inst, scope, body, send)
                return
            except _Gone as e:
                # its server ended on its own (killed, out of memory): loaded again, once
                if last or not await self._ended(inst):
                    raise ApiError(502, str(e), "bad_gateway") from None

    async def _ended(self, inst: Instance) -> bool:
        """Whether `inst`'s server has ended (waiting a little for it): then it is unloaded."""
        proc = inst.proc
        if proc is None:
            return True
        try:
            await asyncio.get_running_loop().run_in_executor(None, proc.wait, 5)
        except subprocess.TimeoutExpired:
            return False
        if inst.proc is proc:
            inst.status, inst.exit_code, inst.proc = "unloaded", proc.returncode, None
        return True

    def _check_key(self, scope) -> None:
        if not self.api_keys:
            return
        headers = dict(scope.get("headers") or [])
        auth = headers.get(b"authorization", b"").decode("latin-1")
        key = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        key = key or headers.get(b"x-api-key", b"").decode("latin-1").strip()
        if key not in self.api_keys:
            raise ApiError(401, "invalid or missing API key", "invalid_api_key")

    async def _body(self, receive) -> bytes:
        data = bytearray()
        while True:
            message = await receive()
            data.extend(message.get("body", b""))
            if len(data) > self.max_body:
                raise ApiError(413, f"the request body is larger than {self.max_body} bytes",
                               "request_too_large")  # fmt: skip
            if not message.get("more_body"):
                return bytes(data)

    def _named(self, name: Any) -> Instance:
        name = self.aliases.get(name, name) if isinstance(name, str) else name
        if not isinstance(name, str) or name not in self.instances:
            raise ApiError(404, f"no model named {name!r} in --models-dir or --models-preset "
                           "(GET /models lists them)", "model_not_found")  # fmt: skip
        return self.instances[name]

    # -- loading and stopping -------------------------------------------------------------

    async def _load(self, inst: Instance) -> None:
        """Load `inst` (once: a second request waits for the first's load), making room
        under --models-max first."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if inst.status == "loaded":
                return
            if inst.status == "unloaded":
                await self._make_room()
                inst.status, inst.exit_code = "loading", None
                loop = asyncio.get_running_loop()
                try:
                    inst.proc, inst.port = await loop.run_in_executor(None, self._start, inst)
                except ApiError:
                    inst.status = "unloaded"
                    raise
                inst.status = "loaded"
                inst.last_used = time.monotonic()

    async def load_startup_models(self) -> None:
        """As the router starts: the load-on-startup models loaded, in turn (a failure is in
        the log and in GET /models; the router serves on)."""
        for name in self.startup:
            try:
                await self._load(self.instances[name])
            except ApiError as e:
                sys.stderr.write(f"[{name}] {e}\n")

    async def _make_room(self) -> None:
        """(Under the lock.) Stop the least recently used idle models until one more fits."""
        while self.models_max > 0:
            loaded = [i for i in self.instances.values() if i.status == "loaded"]
            if len(loaded) < self.models_max:
                return
            idle = [i for i in loaded if i.in_flight == 0]
            if not idle:
                raise ApiError(503, f"--models-max {self.models_max} models are loaded and "
                               "busy: try again later", "server_busy", retry_after=1)  # fmt: skip
            await self._stop(min(idle, key=lambda i: i.last_used))

    def _start(self, inst: Instance) -> tuple[subprocess.Popen, int]:
        """(On a thread.) `inst`'s server started; its port once it listens."""
        env = {k: v for k, v in os.environ.items() if k not in ROUTER_ENV}
        cmd = [sys.executable, "-m", "specgguf_cli.app", *self.argv, *inst.model.args,
               "-a", inst.name, "--host", "127.0.0.1", "--port", "0"]  # fmt: skip
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env=env)  # fmt: skip
        inst.proc = proc  # at once: a router stopping mid-load (close()) stops it too
        assert proc.stderr is not None
        deadline = time.monotonic() + LOAD_S
        port: list[int] = []

        def read() -> None:  # its stderr, passed on, until it says where it listens
            assert proc.stderr is not None
            for raw in proc.stderr:
                line = raw.decode("utf-8", "replace")
                sys.stderr.write(f"[{inst.name}] {line}")
                m = re.search(r"listening on https?://\S+:(\d+)", line)
                if m and not port:
                    port.append(int(m.group(1)))

        threading.Thread(target=read, daemon=True, name=f"router-{inst.name}").start()
        while not port:
            if proc.poll() is not None or time.monotonic() > deadline:
                _end(proc)
                inst.proc, inst.exit_code = None, proc.returncode
                raise ApiError(500, f"model {inst.name!r} failed to load (exit "
                               f"{proc.returncode}): see the server's log", "load_failed")
            time.sleep(0.05)
        return proc, port[0]

    async def _stop(self, inst: Instance) -> None:
        proc, inst.proc, inst.status = inst.proc, None, "unloaded"
        if proc is not None:
            wait = inst.model.stop_timeout
            await asyncio.get_running_loop().run_in_executor(
                None, _end, proc, STOP_S if wait is None else wait)

    def close(self) -> None:
        """At the end: every model's server stopped."""
        for inst in self.instances.values():
            if inst.proc is not None:
                wait = inst.model.stop_timeout
                _end(inst.proc, STOP_S if wait is None else wait)
                inst.proc, inst.status = None, "unloaded"

    # -- relaying ---------------------------------------------------------------------------

    async def _relay(self, inst: Instance, scope, body: bytes, send) -> None:
        """The request to `inst`'s server, its answer back as it comes (HTTP/1.0: the
        answer ends with the connection, streams unchunked)."""
        inst.in_flight += 1
        inst.last_used = time.monotonic()
        writer = None
        started = released = False

        def release() -> None:
            """The model has answered: idle again. Before the client can see the answer's end
            (its last body byte, or the end of a stream), so a request that follows at once
            finds it idle: released after, the next one could still count it busy (a 503)."""
            nonlocal released
            if not released:
                released = True
                inst.in_flight -= 1
                inst.last_used = time.monotonic()

        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", inst.port)
            target = scope.get("raw_path") or scope["path"].encode()
            if scope.get("query_string"):
                target += b"?" + scope["query_string"]
            head = [f"{scope['method']} ".encode() + target + b" HTTP/1.0"]
            for k, v in scope.get("headers") or []:
                if k.lower() not in _HOP | {b"content-length", b"host"}:
                    head.append(k + b": " + v)
            head += [b"Host: 127.0.0.1", b"Content-Length: " + str(len(body)).encode()]
            writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
            await writer.drain()
            status_line = await reader.readline()
            parts = status_line.split()
            if len(parts) < 2 or not parts[1].isdigit():
                raise ApiError(502, f"model {inst.name!r}: no answer from its server",
                               "bad_gateway")  # fmt: skip
            headers = []
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                k, _, v = line.rstrip(b"\r\n").partition(b":")
                if k.strip().lower() not in _HOP:
                    headers.append((k.strip().lower(), v.strip()))
            length = next((int(v) for k, v in headers if k == b"content-length" and v.isdigit()),
                          None)  # fmt: skip
            await send({"type": "http.response.start", "status": int(parts[1]),
                        "headers": headers})  # fmt: skip
            started = True
            relayed = 0
            while chunk := await reader.read(65536):
                relayed += len(chunk)
                if length is not None and relayed >= length:
                    release()  # the client has the whole answer with this chunk
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            release()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            if not started:
                raise _Gone(f"model {inst.name!r}: its server is gone") from None
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            release()
            if writer is not None:
                writer.close()


class _Gone(Exception):
    """A model's server did not take the request (it is not listening any more)."""


def _model_field(body: bytes) -> Any:
    try:
        obj = json.loads(body or b"{}")
    except ValueError:
        raise bad("the request body is not JSON", "invalid_json") from None
    return obj.get("model") if isinstance(obj, dict) else None


async def _json(send, status: int, obj: Any) -> None:
    data = json.dumps(obj).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode())]})  # fmt: skip
    await send({"type": "http.response.body", "body": data, "more_body": False})


def _end(proc: subprocess.Popen, wait: float = STOP_S) -> None:
    """SIGTERM (a graceful stop: its requests end), then SIGKILL after `wait` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

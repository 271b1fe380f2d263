"""Start `specgguf serve` as a real process on 127.0.0.1 and talk to it with the standard
library (raw HTTP, as curl would) -- the openai client is used by the tests themselves."""

from __future__ import annotations

import http.client
import json
import os
import re
import selectors
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
START_S = 300  # model load + bind, generous on a busy 2-core machine
FAST = ["-t", "1", "-fa", "off", "--temp", "0"]


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}


class Server:
    """A `specgguf serve` process on a free port; `stop()` sends SIGTERM and returns the exit
    status (and stderr)."""

    def __init__(self, args: list[str], *, timeout: float = 60, cwd: Path = ROOT,
                 tls: ssl.SSLContext | None = None) -> None:  # fmt: skip
        """`cwd`: the source tree whose specgguf runs (scripts/bench_default.py's base);
        `tls`: the client context of a server started with --ssl-* (its requests go over
        HTTPS)."""
        self.timeout = timeout  # seconds a request may take (a busy CPU is slow)
        self.tls = tls
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specgguf_cli.app", "serve", "--port", "0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env(),
        )
        self.err = b""
        self.port = self._wait_listening()

    def _wait_listening(self) -> int:
        fd = self.proc.stderr.fileno()
        deadline = time.monotonic() + START_S
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                m = re.search(rb"listening on https?://[^:]+:(\d+)", self.err)
                if m:
                    return int(m.group(1))
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None and not sel.select(0):
                    self.proc.kill()
                    raise AssertionError(f"server did not start: {self.err.decode()}")
                if sel.select(timeout=min(left, 1.0)):
                    chunk = os.read(fd, 65536)
                    if not chunk and self.proc.poll() is not None:
                        raise AssertionError(f"server exited: {self.err.decode()}")
                    self.err += chunk

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def conn(self) -> http.client.HTTPConnection:
        if self.tls is not None:
            return http.client.HTTPSConnection(
                "127.0.0.1", self.port, timeout=self.timeout, context=self.tls
            )
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        key: str | None = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        """(status, headers, parsed JSON or text)."""
        c = self.conn()
        h = {"Content-Type": "application/json", **(headers or {})}
        if key:
            h["Authorization"] = f"Bearer {key}"
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        payload = r.read()
        c.close()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        try:
            parsed = json.loads(payload)
        except ValueError:
            parsed = payload.decode("utf-8", "replace")
        return r.status, hdrs, parsed

    def post(self, path: str, body: Any, *, key: str | None = None) -> Any:
        status, _, obj = self.request("POST", path, body, key=key)
        assert status == 200, (status, obj)
        return obj

    def stream(self, path: str, body: Any, *, key: str | None = None):
        """Open a streamed request; returns (connection, response) for sse_events()."""
        c = self.conn()
        h = {"Content-Type": "application/json"}
        if key:
            h["Authorization"] = f"Bearer {key}"
        c.request("POST", path, body=json.dumps(body).encode(), headers=h)
        r = c.getresponse()
        assert r.status == 200, (r.status, r.read())
        return c, r

    def metrics(self, key: str | None = None) -> dict[str, float]:
        status, _, text = self.request("GET", "/metrics", key=key)
        assert status == 200
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
            raise AssertionError("server did not exit after the signal") from None
        return self.proc.returncode, (self.err + err).decode("utf-8", "replace")

    def stop_cleanly(self) -> None:
        """SIGTERM, and assert the server exited 0 without a traceback."""
        code, err = self.stop()
        assert code == 0, err
        assert "Traceback" not in err, err


def post_together(server: Server, path: str, bodies: list[Any]) -> list[Any]:
    """POST each of `bodies` to `path` from its own thread, all at once (concurrent requests
    for a server's slots); the answers in the order of `bodies`."""
    import threading

    answers: list[Any] = [None] * len(bodies)

    def ask(i: int) -> None:
        answers[i] = server.post(path, bodies[i])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def sse_events(resp) -> Any:
    """Yield each `data:` payload of a server-sent event stream (JSON, or the string
    "[DONE]")."""
    buf = b""
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.rstrip(b"\r\n")
        if not line:
            if buf:
                data = buf.decode()
                buf = b""
                yield data if data == "[DONE]" else json.loads(data)
            continue
        if line.startswith(b"data: "):
            buf += line[6:]


def serving(args: list[str], *, timeout: float = 60, tls: ssl.SSLContext | None = None):
    """A module fixture's server: yielded, then stopped, which must end cleanly (exit 0, no
    traceback on stderr). `timeout`: seconds a request may take; `tls`: as Server's."""
    s = Server(args, timeout=timeout, tls=tls)
    yield s
    code, err = s.stop()
    assert code == 0, err
    assert "Traceback" not in err, err


#: Qwen2.5's chat template (tools described, <tool_call> blocks), for the tiny models' servers
QWEN_TEMPLATE = Path(__file__).parent / "data" / "qwen2.5-instruct.jinja"


def tool_serving(target, draft, *, timeout: float = 60):
    """`serving` the tiny pair with Qwen2.5's template, as the tool-call tests need it."""
    yield from serving(
        ["-m", str(target), "-md", str(draft), *FAST, "-c", "4096",
         "--chat-template-file", str(QWEN_TEMPLATE)],
        timeout=timeout,
    )  # fmt: skip


def openai_client(server: Server, key: str = "x"):
    """The official openai client on `server`, waiting as long as the server's requests may
    take (the test is skipped without the package)."""
    import pytest

    openai = pytest.importorskip("openai")
    return openai.OpenAI(
        base_url=server.base + "/v1", api_key=key, max_retries=0, timeout=server.timeout
    )


def function_tool(
    name: str, properties: dict[str, Any], *, description: str | None = None, closed: bool = False
) -> dict[str, Any]:
    """An OpenAI `tools` entry: a function whose parameters are an object of `properties`, each
    required (`closed`: and no other allowed). Keys in the order clients send them."""
    function: dict[str, Any] = {"name": name}
    if description is not None:
        function["description"] = description
    parameters = {"type": "object", "properties": properties, "required": list(properties)}
    if closed:
        parameters["additionalProperties"] = False
    function["parameters"] = parameters
    return {"type": "function", "function": function}


def assert_streamed_as_whole(server: Server, body: dict, message: dict) -> None:
    """The chat answer to `body` streamed adds up to `message` (the whole answer's): its
    reasoning_content deltas to its reasoning, its content deltas to its content."""
    conn, resp = server.stream("/v1/chat/completions", {**body, "stream": True})
    deltas = [e["choices"][0]["delta"] for e in sse_events(resp) if e != "[DONE]" and e["choices"]]
    conn.close()
    assert "".join(d.get("reasoning_content", "") for d in deltas) == message["reasoning_content"]
    assert "".join(d.get("content") or "" for d in deltas) == message["content"]

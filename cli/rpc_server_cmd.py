"""`specgguf rpc-server`: ggml's own RPC worker, from the installed library.

A worker machine then needs only specgguf: no llama.cpp checkout, and the protocol is the one
the client speaks (same ggml). The server itself is ggml's (`ggml_backend_rpc_start_server`),
so llama.cpp clients of the same ggml version can use it too, and vice versa.

ggml RPC has no authentication, so the default address is loopback and anything else needs
--allow-remote. The C server blocks forever; it runs in a daemon thread so that Ctrl-C and
SIGTERM reach Python and end the process at once.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from pathlib import Path

import typer

from specgguf.errors import ExitCode, UsageError


def rpc_server(
    host: str = typer.Option(
        "127.0.0.1",
        "-H",
        "--host",
        help="Address to listen on. Not loopback only with --allow-remote.",
    ),
    port: int = typer.Option(50052, "-p", "--port", help="Port to listen on."),
    threads: int = typer.Option(0, "-t", "--threads", help="CPU threads (0: all usable cores)."),
    cache_dir: Path | None = typer.Option(
        None,
        "-c",
        "--cache",
        help="Directory where the worker caches tensors it has received (by hash), so a "
        "client that loads the same model again sends hashes instead of weights.",
    ),
    allow_remote: bool = typer.Option(
        False,
        "--allow-remote",
        help="Listen on a non-loopback address. ggml RPC has no authentication: anyone who "
        "reaches the port can use this machine. Trusted networks only.",
    ),
) -> int:
    """Run a ggml RPC worker on this machine's CPU (for `run --rpc HOST:PORT`)."""
    from specgguf.binding import devices
    if not 0 < port < 65536:
        raise UsageError(f"--port {port}: out of range")
    if threads < 0:
        raise UsageError(f"--threads {threads}: must be >= 0")
    devices.check_listen_host(host, allow_remote)
    if cache_dir is not None:
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"-c {cache_dir}: {e.strerror or e}") from None
    _check_bind(host, port)
    from specgguf.binding.engine import default_threads

    serve = devices.start_server(host, port, threads or default_threads(), cache_dir)

    done = threading.Event()
    stopped_by: list[int] = []

    def _stop(signum: int, _frame: object) -> None:
        stopped_by.append(signum)
        done.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)

    def _serve() -> None:
        try:
            serve()
        finally:
            done.set()

    worker = threading.Thread(target=_serve, name="ggml-rpc-server", daemon=True)
    worker.start()
    while not done.wait(0.5):
        pass
    sys.stdout.flush()
    if stopped_by:
        # the C server cannot be asked to stop: leave without joining it
        code = ExitCode.INTERRUPTED if stopped_by[0] == signal.SIGINT else 0
        sys.stderr.flush()
        os._exit(int(code))
    print("error: rpc-server: ggml's RPC server stopped (see the line above)", file=sys.stderr)
    sys.stderr.flush()
    os._exit(int(ExitCode.RPC))


def _check_bind(host: str, port: int) -> None:
    """Fail in one line if the address cannot be listened on (ggml would only print a bare
    'Failed to create server socket')."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as e:
        from specgguf.binding.devices import RpcError

        raise RpcError(f"rpc-server: cannot listen on {host}:{port} ({e.strerror or e})") from None

"""serve's HTTP server settings from the flag table's `http` rows (--threads-http,
--api-key-file, --ssl-*, --cors-*, --api-prefix, --path, --sse-ping-interval):
the one value that carries them from the command line to the runner, and their checks.

Each is checked before the models load, so a bad file costs one line, not a minute's load
and then a traceback from uvicorn."""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from specgguf.errors import UsageError


@dataclass(frozen=True)
class HttpSettings:
    #: --threads-http: the size of the thread pool (anyio's default thread limiter) that runs
    #: the HTTP server's blocking work; below 1: anyio's default (40)
    threads_http: int = -1
    #: --api-key-file: more keys, one a line (specgguf.server.api_keys)
    api_key_file: Path | None = None
    #: --ssl-key-file, --ssl-cert-file: PEM files; with both, serve speaks HTTPS only
    ssl_key_file: Path | None = None
    ssl_cert_file: Path | None = None
    #: --cors-origins, --cors-methods, --cors-headers, --cors-credentials: CORS answers are
    #: sent once any of them is given, the others then at llama-server's defaults
    cors_origins: str | None = None
    cors_methods: str | None = None
    cors_headers: str | None = None
    cors_credentials: bool | None = None
    #: --api-prefix: every endpoint (and the page) under this path, e.g. /llm
    api_prefix: str = ""
    #: --path: a directory of static files served at / in place of the chat page
    static_path: Path | None = None
    #: --sse-ping-interval: a stream silent this many seconds (a long prompt's evaluation, a
    #: request waiting for a slot) gets an SSE comment line, `:`, which clients skip, so that
    #: proxies and clients with read timeouts keep the connection; <= 0: none (llama-server's
    #: default, 30)
    sse_ping_interval: int = 30
    #: --reuse-port: the listening socket is bound with SO_REUSEPORT, so that several
    #: servers may listen on one port (the kernel spreads the connections between them)
    reuse_port: bool = False

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, Any]]) -> HttpSettings:
        """From LlamaTuning.http's (field, value) pairs."""
        known = {f.name for f in fields(cls)}
        given = dict(pairs)
        unknown = set(given) - known
        assert not unknown, f"http settings without a field: {unknown}"  # a table row's typo
        return cls(**given)

    @property
    def tls(self) -> bool:
        return self.ssl_cert_file is not None

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    def check(self) -> None:
        """One UsageError line for TLS files that cannot serve (one without the other, a file
        that is missing, not PEM, or a key that does not match the certificate)."""
        if (self.ssl_key_file is None) != (self.ssl_cert_file is None):
            raise UsageError("--ssl-key-file and --ssl-cert-file go together: give both or none")
        if self.ssl_cert_file is None or self.ssl_key_file is None:
            return
        for path in (self.ssl_cert_file, self.ssl_key_file):
            if not path.is_file():
                raise UsageError(f"no such file: {path}")
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(
                self.ssl_cert_file, self.ssl_key_file
            )
        except (ssl.SSLError, OSError) as e:
            raise UsageError(
                f"--ssl-cert-file {self.ssl_cert_file} / --ssl-key-file {self.ssl_key_file}: "
                f"not a PEM certificate and its key ({e.strerror or e})"
            ) from None

    def check_paths(self) -> None:
        """One UsageError line for a --path that is not a directory."""
        if self.static_path is not None and not self.static_path.is_dir():
            raise UsageError(f"--path {self.static_path}: no such directory")

    @property
    def cors(self) -> bool:
        return any(v is not None for v in (self.cors_origins, self.cors_methods,
                                           self.cors_headers, self.cors_credentials))  # fmt: skip

    def with_cors(self, app: Any) -> Any:
        """`app` behind Starlette's CORS middleware where --cors-* asks for it (outside the API
        key check: a browser's preflight carries no key). llama-server's defaults: origins *,
        methods GET, POST, DELETE, OPTIONS, headers *, credentials allowed (with origins *, a
        request's Origin is echoed); origins `localhost` answers only a loopback Origin."""
        if not self.cors:
            return app
        from starlette.middleware.cors import CORSMiddleware

        origins = _words(self.cors_origins or "*")
        regex = None
        if origins == ["localhost"]:
            origins, regex = [], LOOPBACK_ORIGIN
        return CORSMiddleware(
            app, allow_origins=origins, allow_origin_regex=regex,
            allow_methods=_words(self.cors_methods or CORS_METHODS),
            allow_headers=_words(self.cors_headers or "*"),
            allow_credentials=self.cors_credentials is not False,
        )  # fmt: skip

    def uvicorn_options(self) -> dict[str, Any]:
        """uvicorn.Config's TLS options (none without TLS)."""
        if not self.tls:
            return {}
        return {"ssl_certfile": str(self.ssl_cert_file), "ssl_keyfile": str(self.ssl_key_file)}


#: llama-server's default --cors-methods
CORS_METHODS = "GET, POST, DELETE, OPTIONS"
#: the Origins that --cors-origins localhost answers
LOOPBACK_ORIGIN = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"


def _words(text: str) -> list[str]:
    return [w.strip() for w in text.split(",") if w.strip()]

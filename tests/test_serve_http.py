"""serve's HTTP server flags: --api-key-file (keys merged with --api-key), --ssl-key-file and
--ssl-cert-file (HTTPS only), --threads-http (the event loop's thread pool). One real server
on the tiny target over HTTPS, with a self-signed certificate made here (the `cryptography`
package, else the `openssl` program; skipped when neither is there)."""

from __future__ import annotations

import asyncio
import datetime
import http.client
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from specgguf.errors import UsageError
from specgguf.server import runner
from specgguf.server.api_keys import MAX_KEY_FILE, api_keys, read_key_file
from specgguf.server.http_settings import HttpSettings
from tests.serve_helpers import FAST, serving

KEY_FILE = Path(__file__).parent / "data" / "api-keys.txt"  # key-one, key-two, a comment


def _self_signed_with_cryptography(cert: Path, key: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    import ipaddress

    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(private.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(private, hashes.SHA256())
    )  # fmt: skip
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))  # fmt: skip


def self_signed(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1, valid for a day."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    try:
        _self_signed_with_cryptography(cert, key)
    except ImportError:
        if shutil.which("openssl") is None:
            pytest.skip("neither the cryptography package nor openssl is installed")
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
             "-keyout", str(key), "-out", str(cert)],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
    return cert, key


@pytest.fixture(scope="module")
def pem(tmp_path_factory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def server(tiny_target, pem):
    cert, key = pem
    client = ssl.create_default_context(cafile=str(cert))
    yield from serving(
        ["-m", str(tiny_target), *FAST, "-c", "256", "--spec-type", "none",
         "--api-key", "key-zero", "--api-key-file", str(KEY_FILE),
         "--ssl-cert-file", str(cert), "--ssl-key-file", str(key), "--threads-http", "2"],
        tls=client,
    )  # fmt: skip


def test_serves_https_with_the_keys_of_both_flags(server) -> None:
    assert "listening on https://" in server.err.decode()
    for key in ("key-zero", "key-one", "key-two"):
        status, _, _ = server.request("GET", "/props", key=key)
        assert status == 200, key
    for key in (None, "# the keys of tests/test_flag_table.py and tests/test_serve_http.py"):
        status, _, body = server.request("GET", "/props", key=key)
        assert status == 401 and body["error"]["code"] == "invalid_api_key"


def test_plain_http_gets_no_answer(server) -> None:
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            c.request("GET", "/health")
            c.getresponse()
    finally:
        c.close()


def test_key_file_lines(tmp_path: Path) -> None:
    f = tmp_path / "keys"
    f.write_bytes(b"# comment\r\n  a  \r\n\r\nb\n#c\nb\n")
    assert read_key_file(f) == ("a", "b", "b")
    assert api_keys("x, a", f) == ("x", "a", "b")  # merged, each once, in order
    f.write_bytes(b"# only a comment\n\n")
    with pytest.raises(UsageError, match="no key in it"):
        api_keys(None, f)
    f.write_bytes(b"k" * (MAX_KEY_FILE + 1))
    with pytest.raises(UsageError, match="larger than"):
        read_key_file(f)
    with pytest.raises(UsageError, match="--api-key-file"):
        read_key_file(tmp_path / "missing")


def test_tls_files_are_checked_before_loading(pem, tmp_path: Path) -> None:
    cert, key = pem
    HttpSettings(ssl_cert_file=cert, ssl_key_file=key).check()
    with pytest.raises(UsageError, match="go together"):
        HttpSettings(ssl_cert_file=cert).check()
    with pytest.raises(UsageError, match="no such file"):
        HttpSettings(ssl_cert_file=tmp_path / "none.pem", ssl_key_file=key).check()
    with pytest.raises(UsageError, match="not a PEM certificate"):
        HttpSettings(ssl_cert_file=key, ssl_key_file=cert).check()


class _Recording:
    """Stands in for uvicorn's server: what the loop's thread limiter is when it starts."""

    tokens: float | None = None

    async def serve(self, sockets) -> None:
        import anyio.to_thread

        self.tokens = anyio.to_thread.current_default_thread_limiter().total_tokens


def test_threads_http_sizes_the_loops_thread_pool() -> None:
    for threads, expected in ((3, 3), (-1, 40)):
        server = _Recording()
        asyncio.run(runner.serving(server, None, threads))  # type: ignore[arg-type]
        assert server.tokens == expected


# -- CORS, --api-prefix and --path: in-process, over ASGI (no model: /health and files only) --


def _ask(http: HttpSettings, method: str, path: str, headers: dict[str, str] | None = None,
         keys: tuple[str, ...] = ()) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    """One request through the ASGI stack the runner serves: (status, headers, body)."""
    from specgguf.server.app import App, ServerConfig

    app = App(None, None, ServerConfig(model_id="m", model_path="m.gguf", api_keys=keys,  # type: ignore[arg-type]
                                       http=http))  # fmt: skip
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "server": ("127.0.0.1", 8080), "client": ("127.0.0.1", 50000),
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
    }  # fmt: skip
    out: dict = {"body": b"", "headers": {}}

    sent = False

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client stays
        raise AssertionError("unreachable")

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["headers"] = {k.decode().lower(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    try:
        asyncio.run(http.with_cors(app)(scope, receive, send))
    finally:
        app.close()
    return out["status"], out["headers"], out["body"]


WEB = "http://example.org"


def test_no_cors_answer_without_a_cors_flag() -> None:
    _, headers, _ = _ask(HttpSettings(), "GET", "/health", {"Origin": WEB})
    assert "access-control-allow-origin" not in headers


def test_cors_defaults_are_llama_servers() -> None:
    http = HttpSettings(cors_credentials=True)
    _, headers, _ = _ask(http, "GET", "/health", {"Origin": WEB})
    assert headers["access-control-allow-origin"] == WEB  # origins * with credentials: echoed
    assert headers["access-control-allow-credentials"] == "true"
    # a preflight carries no key: answered before the key check
    status, headers, _ = _ask(http, "OPTIONS", "/v1/chat/completions", {
        "Origin": WEB, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization"}, keys=("k",))  # fmt: skip
    assert status == 200 and headers["access-control-allow-origin"] == WEB
    assert headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"


def test_cors_localhost_and_lists() -> None:
    http = HttpSettings(cors_origins="localhost")
    _, headers, _ = _ask(http, "GET", "/health", {"Origin": "http://localhost:5173"})
    assert headers["access-control-allow-origin"] == "http://localhost:5173"
    _, headers, _ = _ask(http, "GET", "/health", {"Origin": WEB})
    assert "access-control-allow-origin" not in headers
    http = HttpSettings(cors_origins="https://a.example, https://b.example", cors_methods="POST",
                        cors_credentials=False)  # fmt: skip
    status, headers, _ = _ask(http, "OPTIONS", "/completion", {
        "Origin": "https://b.example", "Access-Control-Request-Method": "POST"})  # fmt: skip
    assert status == 200 and headers["access-control-allow-origin"] == "https://b.example"
    assert headers["access-control-allow-methods"] == "POST"
    assert "access-control-allow-credentials" not in headers
    status, _, _ = _ask(http, "OPTIONS", "/completion", {
        "Origin": WEB, "Access-Control-Request-Method": "POST"})  # fmt: skip
    assert status == 400  # an origin not listed


def test_api_prefix_serves_everything_under_it_only() -> None:
    http = HttpSettings(api_prefix="/llm")
    status, _, body = _ask(http, "GET", "/llm/health")
    assert status == 200 and b"ok" in body
    for outside in ("/health", "/llmhealth", "/other/health"):
        status, _, _ = _ask(http, "GET", outside)
        assert status == 404, outside
    status, _, body = _ask(http, "GET", "/llm/")  # the page under the prefix
    assert status == 200 and b"<html" in body.lower()
    # the key check sees the path under the prefix: /health stays public
    assert _ask(http, "GET", "/llm/health", keys=("k",))[0] == 200
    assert _ask(http, "POST", "/llm/tokenize", keys=("k",))[0] == 401


def test_path_serves_static_files_in_the_pages_place(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<html>mine</html>")
    (tmp_path / "app.js").write_text("let x = 1;")
    http = HttpSettings(static_path=tmp_path)
    status, _, body = _ask(http, "GET", "/")
    assert status == 200 and body == b"<html>mine</html>"
    status, _, body = _ask(http, "GET", "/app.js")
    assert status == 200 and body == b"let x = 1;"
    assert _ask(http, "GET", "/health")[0] == 200  # the endpoints come first
    assert _ask(http, "GET", "/missing.js")[0] == 404
    with pytest.raises(UsageError, match="no such directory"):
        HttpSettings(static_path=tmp_path / "app.js").check_paths()

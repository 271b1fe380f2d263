"""serve --reuse-port: the listening socket is bound with SO_REUSEPORT, so a second server
bound so may listen on the same port; without it the port stays the first one's."""

from __future__ import annotations

import pytest

from specgguf.errors import SpecggufError
from specgguf.server.runner import bind
from tests.serve_helpers import FAST, serving


def test_two_sockets_share_a_port_only_when_both_ask():
    first = bind("127.0.0.1", 0, reuse_port=True)
    port = first.getsockname()[1]
    try:
        with pytest.raises(SpecggufError, match="cannot listen"):
            bind("127.0.0.1", port).close()
        second = bind("127.0.0.1", port, reuse_port=True)
        assert second.getsockname()[1] == port
        second.close()
    finally:
        first.close()


@pytest.fixture(scope="module")
def server(tiny_target):
    yield from serving(["-m", str(tiny_target), *FAST, "--reuse-port"])


def test_the_served_port_takes_another_reusing_socket(server):
    with pytest.raises(SpecggufError, match="cannot listen"):
        bind("127.0.0.1", server.port).close()
    other = bind("127.0.0.1", server.port, reuse_port=True)  # another server's socket
    other.close()
    status, _, _ = server.request("GET", "/health")
    assert status == 200

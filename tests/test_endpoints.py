"""The server's endpoints are one table (specgguf.server.app.ENDPOINTS): the routes, the
public paths, the README's endpoint list and `serve --help` all agree with it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("starlette")

from specgguf.server.app import ENDPOINTS, PUBLIC  # noqa: E402

README = Path(__file__).resolve().parent.parent / "docs" / "server.md"


def _readme_endpoints() -> set[tuple[str, str]]:
    text = README.read_text(encoding="utf-8")
    section = text.split("**Endpoints.**", 1)[1].split("\n\n", 2)[1]  # the table
    return set(re.findall(r"`(GET|POST) (/[^`]*)`", section))


def test_readme_endpoint_table_lists_exactly_the_endpoints() -> None:
    assert _readme_endpoints() == {(e.method, e.path) for e in ENDPOINTS}


def test_readme_names_every_alias() -> None:
    text = README.read_text(encoding="utf-8")
    for e in ENDPOINTS:
        for alias in e.aliases:
            assert f"`{alias}`" in text, alias


def test_serve_help_names_every_endpoint() -> None:
    from specgguf_cli.serve_cmd import serve

    doc = " ".join(serve.__doc__.split())
    for e in ENDPOINTS:
        if e.path != "/":
            assert re.search(re.escape(e.path) + r"(?![\w/-])", doc), e.path


def test_public_paths_are_the_public_rows() -> None:
    assert {"/", "/health", "/v1/health", "/models", "/v1/models"} == PUBLIC
    assert all(e.method == "GET" for e in ENDPOINTS if e.public)

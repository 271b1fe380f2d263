"""`specgguf serve` on the real pulled pair (select with `-m real`): a greedy chat answer
through the server is the text `specgguf run` prints for the same message.

Both use a fixed draft length: under `auto` the draft lengths follow measured timings, and
on a CPU a wider verify pass may round a near-tie the other way, so two auto runs need not
agree token for token (see test_real_pair.py); with the same lengths they must.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specgguf.backend.models import DRAFT, TARGET, is_present
from tests.serve_helpers import ROOT, Server, env

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(
        not (is_present(TARGET) and is_present(DRAFT)), reason="run `specgguf pull` first"
    ),
]

COMMON = ["-t", "1", "-c", "2048", "--temp", "0", "--spec-draft-n-max", "3"]
MESSAGE = "Write a Python function that returns the n-th Fibonacci number."
N = 48


def test_greedy_chat_through_the_server_equals_run():
    run = subprocess.run(
        [sys.executable, "-m", "specgguf_cli.app", "run", *COMMON, "-n", str(N), "--json",
         "-p", MESSAGE],
        capture_output=True, text=True, cwd=ROOT, env=env(), timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    expected = json.loads(run.stdout)["text"]
    server = Server(COMMON, timeout=600)
    try:
        body = {"messages": [{"role": "user", "content": MESSAGE}], "max_tokens": N}
        answer = server.post("/v1/chat/completions", body)
        streamed = []
        conn, resp = server.stream("/v1/chat/completions", {**body, "stream": True})
        from tests.serve_helpers import sse_events

        for e in sse_events(resp):
            if e != "[DONE]" and e["choices"]:
                streamed.append(e["choices"][0]["delta"].get("content") or "")
        conn.close()
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert answer["choices"][0]["message"]["content"] == expected
    assert "".join(streamed) == expected
    assert answer["timings"]["draft_n"] > 0  # it did speculate

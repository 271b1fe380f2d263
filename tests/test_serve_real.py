"""`specgguf serve` on the real pulled pair (select with `-m real`): a greedy chat answer
through the server is the text `specgguf run` prints for the same message, both plain greedy
decoding's text.

Both use a fixed draft length. Even so, a pass's numbers depend on where in the KV cache its
rows sit and how the prompt was split (a server's cells are not a fresh run's), so either may
part from plain decoding where the target's two best tokens nearly tie; a divergence is
accepted only there (as in test_real_pair.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from specgguf.loading.session import LoadOptions, Session, SpecOptions
from specgguf.modelfiles.models import DRAFT, TARGET, is_present, model_path
from tests.near_tie import REAL_NEAR_TIE, greedy, top_two
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


def assert_text_same_or_near_tie(
    plain: Session, prompt: list[int], ref: list[int], text: str, label: str
) -> None:
    """`text` is what plain decoding's tokens `ref` spell, or parts from them at a token
    where the target's best two logits are within REAL_NEAR_TIE and `text` goes on with the
    second one (its bytes: another decoder's tokens may split the same text otherwise). The
    token-level check (tests.near_tie) cannot serve: the server's answer is text, not tokens."""
    piece = plain.target_model.piece
    data = text.encode()
    if data == b"".join(piece(t) for t in ref):
        return
    plain.target.truncate(0)
    rows = np.array(plain.target.decode(prompt + ref, 0, outputs="all"))[len(prompt) - 1 :]
    done = b""
    for k, token in enumerate(ref):
        if not data.startswith(done):
            break
        best, second, gap = top_two(rows[k])
        if best == token and gap < REAL_NEAR_TIE and data[len(done) :].startswith(piece(second)):
            print(f"{label}: parts from plain decoding at token {k}, top-2 logit gap {gap:.3f}")
            return
        done += piece(token)
    raise AssertionError(f"{label}: parts from plain decoding away from a near-tie: {text!r}")


def test_greedy_chat_through_the_server_equals_run_or_parts_at_a_near_tie():
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
        prompt_text = server.post("/apply-template", body)["prompt"]
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert answer["timings"]["draft_n"] > 0  # it did speculate
    # the streamed request reuses the first one's prompt cache: only its last token is
    # evaluated again, in a pass of another width than the first request's
    texts = {
        "run": expected,
        "serve": answer["choices"][0]["message"]["content"],
        "serve, streamed": "".join(streamed),
    }
    if len(set(texts.values())) == 1:
        return
    load = LoadOptions(model=model_path(TARGET), n_ctx=2048, threads=1)
    plain = Session(load, SpecOptions(types=[]))
    try:
        prompt = plain.target_model.tokenize(prompt_text)
        ref, _ = greedy(plain, prompt, N)
        for label, text in texts.items():
            assert_text_same_or_near_tie(plain, prompt, ref, text, label)
    finally:
        plain.close()

"""`specgguf serve -np 8` on the tiny models: the slots decode in shared passes.

8 clients of mixed prompt and answer lengths at once, speculation on and off, each get the
text the same request gets alone; /metrics shows passes holding several sequences; /slots
reports each request's drafts; a client that disconnects or a SIGTERM mid-stream never leaves
the other streams waiting. (The tiny models never choose EOS greedily: lengths are exact.)
"""

from __future__ import annotations

import signal
import threading
import time

import pytest

from tests.serve_helpers import FAST, Server, sse_events
from tests.test_batched import WORDS

N_SLOTS = 8


@pytest.fixture(scope="module")
def server(tiny_target, tiny_draft):
    # no corpus of earlier outputs for `suffix`: what it drafts then depends on the request
    # alone, so the pass widths, and with them the tiny model's rounding at its near ties,
    # are the same alone and in company, and the texts can be compared exactly
    s = Server(
        ["-m", str(tiny_target), "-md", str(tiny_draft), *FAST, "-c", str(512 * N_SLOTS),
         "-np", str(N_SLOTS), "--spec-suffix-cache-tokens", "0"]
    )  # fmt: skip
    yield s
    s.stop_cleanly()


def body(i: int, spec: bool, sampling: dict) -> dict:
    n_words = [1, 30, 4, 60, 2, 12, 8, 45][i]
    text = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(n_words))
    # with speculation a fixed draft length (a request's speculative.n_max), so that the
    # draft model does draft in the shared passes whatever auto would choose for 8 slots
    speculative = {"n_max": 3} if spec else False
    return {"prompt": text, "n_predict": 6 + 3 * i, "speculative": speculative,
            "cache_prompt": False, **sampling}  # fmt: skip


def complete(server, b: dict) -> dict:
    return server.post("/completion", b)


SEEDED = {"temperature": 0.8, "seed": 42}  # (one-hot drafts: auto's default)


@pytest.mark.parametrize(
    "spec, sampling", [(True, {}), (False, {}), (True, SEEDED)], ids=["spec", "plain", "seeded"]
)
def test_eight_concurrent_clients_get_their_answers_alone(server, spec, sampling):
    bodies = [body(i, spec, sampling) for i in range(N_SLOTS)]
    alone = [complete(server, b)["content"] for b in bodies]
    assert len(set(alone)) == N_SLOTS  # negative control: the answers differ
    before = server.metrics()
    got: list[str | None] = [None] * N_SLOTS
    errors: list[BaseException] = []
    start = threading.Barrier(N_SLOTS)

    def client(i: int) -> None:
        try:
            start.wait()
            got[i] = complete(server, bodies[i])["content"]
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(N_SLOTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert got == alone
    after = server.metrics()

    def delta(name: str) -> float:
        return after[f"llamacpp:{name}"] - before[f"llamacpp:{name}"]

    # the passes mixed the clients: more sequences than passes
    assert delta("batch_seqs_total") > 1.5 * delta("batch_steps_total") > 0
    assert delta("batch_tokens_total") >= delta("batch_seqs_total")
    assert delta("tokens_generated_total") == sum(b["n_predict"] for b in bodies)
    if spec:
        assert delta("draft_batch_seqs_total") > delta("draft_batch_steps_total") > 0


def test_slots_report_each_requests_drafts_and_the_passes(server):
    b = {"prompt": "the cat", "n_predict": 100000, "ignore_eos": True, "stream": True,
         "speculative.n_max": 3}  # fmt: skip (a fixed length: drafts from the first round)
    conn, resp = server.stream("/completion", b)
    events = sse_events(resp)
    for _ in range(4):
        next(events)
    status, _, slots = server.request("GET", "/slots")
    conn.sock.close()
    conn.close()
    assert status == 200
    busy = [s for s in slots if s["is_processing"]]
    assert len(busy) == 1
    spec = busy[0]["speculative_stats"]
    assert spec["n_drafted"] > 0 and 0 <= spec["n_accepted"] <= spec["n_drafted"]
    assert busy[0]["batch"]["steps"] > 0 and busy[0]["batch"]["seqs_per_step"] >= 1


def test_a_client_leaving_mid_prompt_does_not_hold_up_the_others(server):
    """A long prompt is cut off by its client while other streams run: they finish, and the
    slot is free again."""
    long = {"prompt": "dog " * 100, "n_predict": 4, "stream": True, "cache_prompt": False}
    conn, resp = server.stream("/completion", long)
    short = complete(server, {"prompt": "the mat", "n_predict": 8})
    conn.sock.close()
    conn.close()
    assert short["timings"]["predicted_n"] == 8
    deadline = time.monotonic() + 20
    while server.metrics()["llamacpp:requests_processing"] > 0:
        assert time.monotonic() < deadline, "a request went on after its client left"
        time.sleep(0.1)


def test_sigterm_ends_every_stream(tiny_target, tiny_draft):
    s = Server(["-m", str(tiny_target), "-md", str(tiny_draft), *FAST, "-c", "2048",
                "-np", "4"])  # fmt: skip
    try:
        long = {"prompt": "go", "n_predict": 100000, "ignore_eos": True, "stream": True}
        streams = [s.stream("/completion", {**long, "prompt": f"go {i}"}) for i in range(3)]
        events = [sse_events(r) for _, r in streams]
        for e in events:
            assert next(e)["stop"] is False
        s.proc.send_signal(signal.SIGTERM)
        for (conn, _), e in zip(streams, events, strict=True):
            rest = list(e)
            conn.close()
            assert rest and rest[-1]["stop"] is True
        s.stop_cleanly()
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


def test_the_page_reads_metrics_that_exist(server):
    """The page's live aggregate is computed from /metrics counters: every one it names must
    be there (a renamed metric would leave the page showing nothing)."""
    import re

    from specgguf.server.page import PAGE

    names = set(re.findall(r"\bm\.(\w+)", PAGE))
    assert {"tokens_generated_total", "batch_steps_total", "requests_processing"} <= names
    have = {k.removeprefix("llamacpp:") for k in server.metrics()}
    assert names <= have, names - have

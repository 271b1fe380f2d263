"""`specgguf serve` end to end on the tiny models: a real server process on 127.0.0.1, driven by
the official openai client and by raw HTTP, compared with what `specgguf run` prints.

One server (4 slots, an API key) answers most tests; a second one (1 slot, a queue of 1) is
filled to get 503 and then stopped with SIGTERM mid-stream. The tiny models never choose EOS
greedily, so every answer runs to its max_tokens: lengths and texts are deterministic.
"""

from __future__ import annotations

import io
import json
import re
import signal
import threading
import time

import pytest
from specgguf_cli.app import run_cli
from specgguf_cli.serve_cmd import MAX_QUEUE

from tests.serve_helpers import FAST, Server, openai_client, serving, sse_events

KEY = "test-key"
N = 16  # tokens per answer


@pytest.fixture(scope="module")
def server(tiny_target, tiny_draft):
    yield from serving(
        ["-m", str(tiny_target), "-md", str(tiny_draft), *FAST, "-c", "2048", "-np", "4",
         "--api-key", KEY, "-a", "tiny", "--tags", " tool, chat,,tool"]
    )  # fmt: skip


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server, KEY)


def run_json(target, draft, capsys, *args) -> dict:
    """`specgguf run ... --json` in-process: the reference a server answer must equal."""
    argv = ["run", "-m", str(target), "-md", str(draft), *FAST, "-c", "512", "--json"]
    code = run_cli([*argv, *map(str, args)])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def chat(server, content: str, **extra) -> dict:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": N, **extra}
    return server.post("/v1/chat/completions", body, key=KEY)


# -- the openai client -------------------------------------------------------------------------


def test_openai_chat_equals_run(server, client, tiny_target, tiny_draft, capsys):
    ref = run_json(tiny_target, tiny_draft, capsys, "--chat", "-n", N, "-p", "the cat sat")
    r = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "the cat sat"}], max_tokens=N
    )
    assert r.choices[0].message.content == ref["text"] and ref["text"]
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == N
    assert r.usage.prompt_tokens == ref["tokens_evaluated"]
    assert r.model == "tiny"
    timings = r.model_extra["timings"]
    assert timings["predicted_n"] == N and "cache_n" in timings and "draft_n" in timings

    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "the cat sat"}],
            max_tokens=N,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ref["text"]
    finals = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finals[-1] == "length" and all(f is None for f in finals[:-1])
    assert chunks[-1].usage.completion_tokens == N and not chunks[-1].choices


def test_openai_completions_equals_run(server, client, tiny_target, tiny_draft, capsys):
    ref = run_json(tiny_target, tiny_draft, capsys, "-n", N, "-p", "once upon a time")
    r = client.completions.create(model="tiny", prompt="once upon a time", max_tokens=N)
    assert r.choices[0].text == ref["text"] and r.choices[0].finish_reason == "length"
    stream = client.completions.create(
        model="tiny", prompt="once upon a time", max_tokens=N, stream=True
    )
    assert "".join(c.choices[0].text for c in stream) == ref["text"]
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny"]


def test_models_has_llama_servers_shape(server, tiny_target):
    import gguf

    from tests.tiny_models import N_VOCAB

    status, _, obj = server.request("GET", "/v1/models")
    assert status == 200 and obj["object"] == "list"
    # the Ollama-style list llama-server writes beside `data` (what its web UI reads)
    (entry,) = obj["models"]
    assert entry["name"] == entry["model"] == "tiny" and entry["type"] == "model"
    assert entry["capabilities"] == ["completion"] and entry["details"]["format"] == "gguf"
    assert {"modified_at", "size", "digest", "description", "tags", "parameters"} <= set(entry)
    assert set(entry["details"]) == {"parent_model", "format", "family", "families",
                                     "parameter_size", "quantization_level"}  # fmt: skip
    (model,) = obj["data"]
    assert model["id"] == "tiny" and model["object"] == "model"
    assert model["aliases"] == [] and model["tags"] == ["chat", "tool"]  # --tags, as kept
    # meta: libllama's figures of the model, checked against the file itself
    tensors = gguf.GGUFReader(tiny_target).tensors
    assert model["meta"] == {
        "vocab_type": 2,  # LLAMA_VOCAB_TYPE_BPE: the tiny models' byte-level BPE
        "n_vocab": N_VOCAB,
        "n_ctx": 2048 // 4,  # a slot's (-c 2048, -np 4)
        "n_ctx_train": 2048,
        "n_embd": 64,
        "n_params": sum(int(t.n_elements) for t in tensors),
        "size": sum(int(t.n_bytes) for t in tensors),
        "ftype": "all F32",
    }


def test_seeded_sampling_is_reproducible(server):
    body = {"temperature": 1.0, "seed": 1234, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    a = chat(server, "roll a die", **body)["choices"][0]["message"]["content"]
    b = chat(server, "roll a die", **body)["choices"][0]["message"]["content"]
    c = chat(server, "roll a die", **{**body, "seed": 99})["choices"][0]["message"]["content"]
    assert a == b
    assert a != c  # negative control: the seed matters


# -- llama-server's native API, raw HTTP --------------------------------------------------------


def test_native_completion(server, tiny_target, tiny_draft, capsys):
    ref = run_json(tiny_target, tiny_draft, capsys, "-n", N, "-p", "hello there")
    obj = server.post(
        "/completion", {"prompt": "hello there", "n_predict": N, "return_tokens": True}, key=KEY
    )
    assert obj["content"] == ref["text"] and obj["stop"] is True
    assert obj["stop_type"] == "limit" and obj["tokens_predicted"] == N
    assert len(obj["tokens"]) == N and obj["model"] == "tiny"
    for k in ("cache_n", "prompt_n", "prompt_ms", "predicted_n", "predicted_ms",
              "predicted_per_second", "draft_n", "draft_n_accepted"):  # fmt: skip
        assert k in obj["timings"], k

    conn, resp = server.stream("/completion", {"prompt": "hello there", "n_predict": N,
                                               "stream": True}, key=KEY)  # fmt: skip
    events = list(sse_events(resp))
    conn.close()
    assert "[DONE]" not in events  # llama-server's native stream has no [DONE]
    assert all(e["stop"] is False for e in events[:-1]) and events[-1]["stop"] is True
    assert "".join(e["content"] for e in events) == ref["text"]
    assert sum(len(e["tokens"]) for e in events[:-1]) == N


def test_tokenize_detokenize_template_props(server):
    toks = server.post("/tokenize", {"content": "hello world"}, key=KEY)["tokens"]
    assert toks and all(isinstance(t, int) for t in toks)
    pieces = server.post("/tokenize", {"content": "hello", "with_pieces": True}, key=KEY)
    assert "".join(p["piece"] for p in pieces["tokens"]) == "hello"
    assert server.post("/detokenize", {"tokens": toks}, key=KEY)["content"] == "hello world"
    prompt = server.post(
        "/apply-template", {"messages": [{"role": "user", "content": "hi"}]}, key=KEY
    )["prompt"]
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    status, _, health = server.request("GET", "/health")  # public: no key
    assert status == 200 and health == {"status": "ok"}
    status, _, props = server.request("GET", "/props", key=KEY)
    assert props["total_slots"] == 4 and props["default_generation_settings"]["n_ctx"] == 512
    assert "im_start" in props["chat_template"]
    status, _, slots = server.request("GET", "/slots", key=KEY)
    assert [s["id"] for s in slots] == [0, 1, 2, 3] and slots[0]["n_ctx"] == 512


def test_page_is_self_contained(server):
    status, headers, html = server.request("GET", "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert "<script>" in html and "/v1/chat/completions" in html
    assert "src=" not in html and "https://" not in html and "http://" not in html


# -- bad input -----------------------------------------------------------------------------------


def _error(server, method, path, body=None, *, key=KEY, raw=None):
    status, _, obj = server.request(method, path, body, key=key, raw=raw)
    assert set(obj) == {"error"} and set(obj["error"]) == {"message", "type", "param", "code"}, obj
    return status, obj["error"]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (None, "invalid_json"),
        ({"messages": "hi"}, "invalid_value"),
        ({}, "missing_field"),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": -1}, "invalid_value"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "5"}, "invalid_value"),
        ({"messages": [{"role": "user", "content": "x"}], "stop": [1]}, "invalid_value"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 17}, "invalid_value"),
        ({"messages": [{"role": "user", "content": "x"}], "speculative": {"n_max": -1}},
         "invalid_value"),
        ({"messages": [{"role": "user", "content": "x"}],
          "speculative": {"draft_sampling": "maybe"}}, "invalid_value"),
        ({"messages": [{"role": "user"}]}, "invalid_value"),
    ],
)  # fmt: skip
def test_bad_requests_get_400(server, body, code):
    raw = b"{not json" if body is None else None
    status, err = _error(server, "POST", "/v1/chat/completions", body, raw=raw)
    assert status == 400 and err["code"] == code and err["type"] == "invalid_request_error"


def test_prompt_longer_than_the_context(server):
    status, err = _error(server, "POST", "/completion", {"prompt": "x " * 600, "n_predict": 1})
    assert status == 400 and err["code"] == "context_length_exceeded"
    status, err = _error(server, "POST", "/completion", {"prompt": [5] * 600})
    assert status == 400 and err["code"] == "context_length_exceeded"
    status, err = _error(server, "POST", "/completion", {"prompt": [10**9]})
    assert status == 400


def test_auth_404_413(server):
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
    status, err = _error(server, "POST", "/v1/chat/completions", body, key=None)
    assert status == 401 and err["type"] == "authentication_error"
    status, err = _error(server, "POST", "/v1/chat/completions", body, key="wrong")
    assert status == 401
    status, _, obj = server.request("POST", "/v1/chat/completions", body, key=KEY)
    assert status == 200  # negative control: the right key passes
    status, err = _error(server, "GET", "/no/such/path")
    assert status == 404 and err["code"] == "not_found"
    big = b'{"prompt": "' + b"a" * (9 << 20) + b'"}'
    status, err = _error(server, "POST", "/completion", raw=big)
    assert status == 413 and err["code"] == "request_too_large"
    status, _, health = server.request("GET", "/health")
    assert status == 200  # still alive after all of it


# -- stop strings and per-request speculation -----------------------------------------------------


def test_stop_strings_cut_the_text(server):
    full = chat(server, "tell me", max_tokens=32)["choices"][0]["message"]["content"]
    word = full[10:13]
    assert len(word) == 3 and word in full
    cut = chat(server, "tell me", max_tokens=32, stop=[word])
    text = cut["choices"][0]["message"]["content"]
    assert text == full[: full.index(word)] and cut["choices"][0]["finish_reason"] == "stop"
    native = server.post("/completion", {"prompt": "abc", "n_predict": 32}, key=KEY)["content"]
    w = native[5:8]
    obj = server.post("/completion", {"prompt": "abc", "n_predict": 32, "stop": [w]}, key=KEY)
    assert obj["content"] == native[: native.index(w)]
    assert obj["stop_type"] == "word" and obj["stopping_word"] == w
    # streamed, the text never shows the stop string either
    conn, resp = server.stream(
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "tell me"}], "max_tokens": 32,
         "stop": [word], "stream": True},
        key=KEY,
    )  # fmt: skip
    events = list(sse_events(resp))
    conn.close()
    streamed = "".join(
        e["choices"][0]["delta"].get("content", "") for e in events if e != "[DONE]"
    )
    assert streamed == text and events[-1] == "[DONE]"


def test_speculative_fields(server):
    base = chat(server, "the dog", max_tokens=24)
    off = chat(server, "the dog", max_tokens=24, speculative=False)
    fixed = chat(server, "the dog", max_tokens=24, **{"speculative.n_max": 2})
    nested = chat(server, "the dog", max_tokens=24, speculative={"n_max": 3})
    texts = {r["choices"][0]["message"]["content"] for r in (base, off, fixed, nested)}
    assert len(texts) == 1  # lossless, whatever the drafting
    assert off["timings"]["draft_n"] == 0
    assert fixed["timings"]["draft_n"] > 0 and fixed["timings"]["n_draft_max"] == 2
    assert len(fixed["timings"]["per_position_acceptance"]) <= 2
    assert nested["timings"]["draft_n"] > 0
    assert len(nested["timings"]["per_position_acceptance"]) <= 3
    zero = chat(server, "the dog", max_tokens=24, **{"speculative.n_max": 0})
    assert zero["timings"]["draft_n"] == 0


def test_greedy_draft_sampling_prints_what_plain_decoding_prints_for_a_seed(server):
    """At temperature > 0 a request's fixed n_max drafts probabilistically unless it asks
    for one-hot drafts: then the seeded text is plain decoding's with that seed."""
    hot = {"temperature": 1.2, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 7,
           "cache_prompt": False}  # fmt: skip
    greedy = {"n_max": 4, "draft_sampling": "greedy"}

    def text(r: dict) -> str:
        return r["choices"][0]["message"]["content"]

    for prompt in ("the dog", "once upon a time", "the cat sat on"):
        plain = chat(server, prompt, max_tokens=40, speculative=False, **hot)
        drafted = chat(server, prompt, max_tokens=40, speculative=greedy, **hot)
        assert text(drafted) == text(plain), prompt
        assert drafted["timings"]["draft_n"] > 0

    def drawn(**fields) -> str:
        body = {"prompt": "the dog", "n_predict": 2, **hot, "speculative.n_max": 4, **fields}
        settings = server.post("/completion", body, key=KEY)["generation_settings"]
        return settings["speculative.draft_sampling"]

    assert drawn() == "probabilistic"  # a fixed n_max at temperature > 0, as documented
    assert drawn(**{"speculative.draft_sampling": "greedy"}) == "greedy"  # the flat spelling


def test_stream_chunks_mark_accepted_drafts(server):
    conn, resp = server.stream(
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "the dog"}], "max_tokens": 24,
         "stream": True, "speculative.n_max": 3},
        key=KEY,
    )  # fmt: skip
    events = [e for e in sse_events(resp) if e != "[DONE]"]
    conn.close()
    content = [e for e in events if e["choices"] and e["choices"][0]["delta"].get("content")]
    assert content
    for e in content:
        spans = e["specgguf"]["spans"]
        assert sum(n for n, _ in spans) == len(e["choices"][0]["delta"]["content"])
    drafted = sum(n for e in content for n, flag in e["specgguf"]["spans"] if flag)
    last = events[-1]
    assert last["timings"]["draft_n_accepted"] > 0 and drafted > 0
    assert content[-1]["specgguf"]["accepted_total"] == last["timings"]["draft_n_accepted"]


# -- concurrency, disconnects, metrics ------------------------------------------------------------


def test_concurrent_clients_get_sequential_answers(server):
    prompts = [f"story number {i}" for i in range(8)]
    expected = {p: chat(server, p)["choices"][0]["message"]["content"] for p in prompts}
    assert len(set(expected.values())) > 1  # negative control: answers differ by prompt
    got: dict[str, list[str]] = {p: [] for p in prompts}
    errors: list[BaseException] = []

    def client_thread(p: str) -> None:
        try:
            for _ in range(3):
                got[p].append(chat(server, p)["choices"][0]["message"]["content"])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=client_thread, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for p in prompts:
        assert got[p] == [expected[p]] * 3, p


def test_disconnect_frees_the_slot(server):
    body = {"prompt": "forever", "n_predict": 100000, "ignore_eos": True, "stream": True}
    conn, resp = server.stream("/completion", body, key=KEY)
    events = sse_events(resp)
    for _ in range(3):
        assert next(events)["stop"] is False
    busy = server.metrics(KEY)["llamacpp:requests_processing"]
    assert busy >= 1
    conn.sock.close()
    conn.close()
    deadline = time.monotonic() + 20
    while server.metrics(KEY)["llamacpp:requests_processing"] > 0:
        assert time.monotonic() < deadline, "the generation went on after the client left"
        time.sleep(0.1)
    assert chat(server, "after")["choices"][0]["finish_reason"] == "length"


def test_metrics_add_up(server):
    before = server.metrics(KEY)
    answers = [chat(server, f"count {i}", max_tokens=8 + i) for i in range(3)]
    answers.append(server.post("/completion", {"prompt": "x", "n_predict": 5}, key=KEY))
    after = server.metrics(KEY)

    def delta(name):
        return after[f"llamacpp:{name}"] - before.get(f"llamacpp:{name}", 0)

    t = [a["timings"] for a in answers]
    assert delta("tokens_predicted_total") == sum(x["predicted_n"] for x in t) == 8 + 9 + 10 + 5
    assert delta("prompt_tokens_total") == sum(x["prompt_n"] for x in t)
    assert delta("spec_decode_num_draft_tokens_total") == sum(x["draft_n"] for x in t)
    assert delta("spec_decode_num_accepted_tokens_total") == sum(x["draft_n_accepted"] for x in t)
    assert delta("spec_decode_num_drafts_total") == sum(x["rounds"] for x in t)
    assert delta("prompt_tokens_cached_total") == sum(x["cache_n"] for x in t)
    assert delta("tokens_predicted_seconds_total") == pytest.approx(
        sum(x["predicted_ms"] for x in t) / 1e3, abs=1e-3
    )
    assert delta("prompt_seconds_total") == pytest.approx(
        sum(x["prompt_ms"] for x in t) / 1e3, abs=1e-3
    )
    assert after["llamacpp:requests_processing"] == 0
    assert after["llamacpp:requests_deferred"] == 0


# -- a full queue, then SIGTERM --------------------------------------------------------------------


def test_full_queue_503_then_sigterm_ends_streams(tiny_target, tiny_draft):
    s = Server(["-m", str(tiny_target), "-md", str(tiny_draft), *FAST, "-c", "512",
                "--max-queue", "1"])  # fmt: skip
    try:
        long = {"prompt": "go", "max_tokens": 100000, "ignore_eos": True, "stream": True}
        conn_a, resp_a = s.stream("/v1/completions", long)
        events_a = sse_events(resp_a)
        assert next(events_a)["choices"][0]["finish_reason"] is None
        result_b: dict = {}

        def queued() -> None:
            result_b["r"] = s.request("POST", "/v1/completions", {**long, "stream": False,
                                                                  "max_tokens": 4})  # fmt: skip

        tb = threading.Thread(target=queued)
        tb.start()
        deadline = time.monotonic() + 20
        while s.metrics()["llamacpp:requests_deferred"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        status, headers, obj = s.request("POST", "/v1/completions", {**long, "stream": False})
        assert status == 503 and headers.get("retry-after") == "1"
        assert obj["error"]["type"] == "unavailable_error"
        assert s.request("GET", "/health")[0] == 200  # answers while generating

        s.proc.send_signal(signal.SIGTERM)
        rest = list(events_a)
        conn_a.close()
        assert rest[-1] == "[DONE]"
        assert rest[-2]["choices"][0]["finish_reason"] == "length"
        assert "timings" in rest[-2]
        tb.join(30)
        status_b = result_b["r"][0]
        assert status_b in (200, 503)  # finished before the signal, or refused by it
        code, err = s.stop()
        assert code == 0, err
        assert "Traceback" not in err
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


def test_system_prompt_reaches_the_model_alike_in_run_cnv_and_the_server(
    tiny_target, tiny_draft, capsys, monkeypatch
):
    """-sys is put into the conversation by one builder for `run -cnv` and for the server's
    chat endpoint: the same first turn gives the same prompt tokens and the same answer."""
    models = ["-m", str(tiny_target), "-md", str(tiny_draft), *FAST, "-c", "512"]
    s = Server([*models, "-sys", "be brief"])
    try:
        turn = [{"role": "user", "content": "hi"}]
        answer = s.post("/v1/chat/completions", {"messages": turn, "max_tokens": N})
        prompt = s.post("/apply-template", {"messages": turn})["prompt"]
    finally:
        code, err = s.stop()
    assert code == 0, err
    assert prompt.startswith("<|im_start|>system\nbe brief<|im_end|>\n")
    text = answer["choices"][0]["message"]["content"]

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"hi\n")))
    assert run_cli(["run", *models, "-cnv", "-sys", "be brief", "-n", str(N)]) == 0
    out = capsys.readouterr()
    assert out.out == (text if text.endswith("\n") else text + "\n") and text
    (n_prompt,) = re.findall(r"prompt (\d+) tokens", out.err)
    assert int(n_prompt) == answer["usage"]["prompt_tokens"]


# -- the command line ---------------------------------------------------------------------------


def test_serve_usage_errors(tiny_target, capsys):
    assert run_cli(["serve", "-m", str(tiny_target), "-np", "0"]) == 1
    assert "-np/--parallel" in capsys.readouterr().err
    # before: accepted, a queue as good as unbounded
    assert run_cli(["serve", "-m", str(tiny_target), "--max-queue", "99999999999999999999"]) == 1
    assert f"--max-queue: 99999999999999999999 (must be 0..{MAX_QUEUE})" in capsys.readouterr().err
    assert run_cli(["serve", "-m", str(tiny_target), "--draft-max", "4"]) == 1
    assert "corrected: specgguf serve -m" in capsys.readouterr().err
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = run_cli(["serve", "-m", str(tiny_target), "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 11 and "cannot listen" in err and err.count("\n") == 1


def test_serve_checks_lookup_caches_before_loading(tiny_target, tmp_path, capsys, monkeypatch):
    """-lcs/-lcd are checked before any weight is read, as `run` does: a missing static cache
    used to surface only at the first request, after the server was up."""
    import specgguf.server.runner as runner

    listened = []
    monkeypatch.setattr(runner, "serve", lambda *a, **k: listened.append(1) or 0)
    missing = tmp_path / "missing.bin"
    code = run_cli(["serve", "-m", str(tiny_target), "--port", "0", *FAST,
                    "--spec-type", "ngram-cache", "-lcs", str(missing)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and not listened
    assert err.startswith(f"error: cannot read lookup cache {missing}") and err.count("\n") == 1


def test_auto_stays_on_unless_a_request_fixes_n_max(server):
    def auto_ks(**extra) -> set:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6,
                "stream": True, **extra}  # fmt: skip
        conn, resp = server.stream("/v1/chat/completions", body, key=KEY)
        ks = {e["specgguf"]["auto_k"] for e in sse_events(resp)
              if e != "[DONE]" and "auto_k" in e.get("specgguf", {})}  # fmt: skip
        conn.close()
        return ks

    assert None not in auto_ks()  # the server's default: auto chooses every round
    assert None not in auto_ks(**{"speculative.p_min": 0.5})
    assert auto_ks(**{"speculative.n_max": 3}) == {None}
    assert auto_ks(speculative=False) == {None}


def test_prefix_reuse_across_turns(server):
    turn1 = [{"role": "user", "content": "tell me a story about a cat"}]
    a1 = server.post("/v1/chat/completions", {"messages": turn1, "max_tokens": N}, key=KEY)
    turn2 = [*turn1, {"role": "assistant", "content": a1["choices"][0]["message"]["content"]},
             {"role": "user", "content": "and then?"}]  # fmt: skip
    body = {"messages": turn2, "max_tokens": N}
    warm = server.post("/v1/chat/completions", body, key=KEY)
    cold = server.post("/v1/chat/completions", {**body, "cache_prompt": False}, key=KEY)
    w, c = warm["timings"], cold["timings"]
    total = warm["usage"]["prompt_tokens"]
    assert w["cache_n"] > total // 2 and w["prompt_n"] + w["cache_n"] == total
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] == w["cache_n"]
    assert c["cache_n"] == 0 and c["prompt_n"] == total  # negative control
    assert warm["choices"][0]["message"]["content"] == cold["choices"][0]["message"]["content"]


def test_embeddings_without_the_flag_are_501(server) -> None:
    for path in ("/v1/embeddings", "/embedding"):
        status, _, err = server.request("POST", path, {"input": "x"}, key=KEY)
        assert status == 501 and "--embeddings" in err["error"]["message"]
        assert err["error"]["type"] == "not_supported_error"

"""Token probabilities and several choices through `specgguf serve` on the tiny pair: OpenAI's
chat `logprobs`/`top_logprobs` and legacy `logprobs` (read by the openai client), and
llama-server's `n_probs`/`post_sampling_probs` on /completion, whole and streamed, each equal
to the same request's without speculation (`"speculative": false`); `n` > 1 as choices with
seeds seed, seed + 1, ... and the usage summed."""

from __future__ import annotations

import pytest

from tests.serve_helpers import FAST, openai_client, serving, sse_events

N = 16
TOL = 1e-3
MSG = [{"role": "user", "content": "the cat sat"}]


@pytest.fixture(scope="module")
def server(tiny_target, tiny_draft):
    yield from serving(
        ["-m", str(tiny_target), "-md", str(tiny_draft), *FAST, "-c", "1024", "-np", "2",
         "--spec-draft-n-max", "4"]
    )  # fmt: skip


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server)


def close(a: list[float], b: list[float]) -> None:
    assert len(a) == len(b)
    assert max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0) <= TOL, (a, b)


def chat_entries(server, stream: bool = False, **body) -> tuple[str, list[dict]]:
    req = {"messages": MSG, "max_tokens": N, "logprobs": True, "top_logprobs": 3, **body}
    if not stream:
        obj = server.post("/v1/chat/completions", req)
        choice = obj["choices"][0]
        return choice["message"]["content"], choice["logprobs"]["content"]
    c, r = server.stream("/v1/chat/completions", {**req, "stream": True})
    text, entries = "", []
    for ev in sse_events(r):
        if ev == "[DONE]" or not ev["choices"]:
            continue
        choice = ev["choices"][0]
        text += choice["delta"].get("content") or ""
        if choice.get("logprobs"):
            entries += choice["logprobs"]["content"]
    c.close()
    return text, entries


def test_chat_logprobs_with_speculation_equal_without(server, client):
    r = client.chat.completions.create(
        model="x", messages=MSG, max_tokens=N, temperature=0, logprobs=True, top_logprobs=3,
    )  # fmt: skip
    content = r.choices[0].logprobs.content
    assert len(content) == N == r.usage.completion_tokens
    assert "".join(e.token for e in content) == r.choices[0].message.content
    assert all(len(e.top_logprobs) == 3 for e in content)
    assert all(e.top_logprobs[0].logprob >= e.logprob - 1e-9 for e in content)
    spec = r.model_extra["timings"]
    assert spec.get("draft_n", 0) > 0 and spec.get("draft_n_accepted", 0) > 0
    text, plain = chat_entries(server, speculative=False)
    assert text == r.choices[0].message.content
    close([e["logprob"] for e in plain], [e.logprob for e in content])
    close([t["logprob"] for e in plain for t in e["top_logprobs"]],
          [t.logprob for e in content for t in e.top_logprobs])  # fmt: skip


def test_streamed_chat_logprobs_are_the_whole_answers(server):
    text, whole = chat_entries(server)
    streamed_text, streamed = chat_entries(server, stream=True)
    assert streamed_text == text
    assert [e["id"] for e in streamed] == [e["id"] for e in whole]
    close([e["logprob"] for e in streamed], [e["logprob"] for e in whole])


def test_legacy_completion_logprobs(server, client):
    r = client.completions.create(model="x", prompt="the cat", max_tokens=N, temperature=0,
                                  logprobs=2)  # fmt: skip
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == N
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(N)]
    assert all(len(top) <= 2 for top in lp.top_logprobs)
    body = {"prompt": "the cat", "max_tokens": N, "logprobs": 2, "speculative": False}
    plain = server.post("/v1/completions", body)["choices"][0]["logprobs"]
    close(plain["token_logprobs"], lp.token_logprobs)
    c, resp = server.stream("/v1/completions", {**body, "speculative": True, "stream": True})
    values, offsets = [], []
    for ev in sse_events(resp):
        if ev != "[DONE]" and ev["choices"] and ev["choices"][0]["logprobs"]:
            values += ev["choices"][0]["logprobs"]["token_logprobs"]
            offsets += ev["choices"][0]["logprobs"]["text_offset"]
    c.close()
    close(values, lp.token_logprobs)
    assert offsets == lp.text_offset


@pytest.mark.parametrize("post", [False, True])
def test_native_completion_probabilities(server, post):
    body = {"prompt": "def main():", "n_predict": N, "n_probs": 4, "temperature": 0.8,
            "seed": 11, "post_sampling_probs": post,
            # one-hot drafts: seeded text is then plain decoding's token for token
            "speculative.draft_sampling": "greedy"}  # fmt: skip
    got = server.post("/completion", body)
    ref = server.post("/completion", {**body, "speculative": False})
    assert got["content"] == ref["content"]
    key, top = ("prob", "top_probs") if post else ("logprob", "top_logprobs")
    probs, plain = got["completion_probabilities"], ref["completion_probabilities"]
    assert len(probs) == got["tokens_predicted"] == N
    assert all(set(e) == {"id", "token", "bytes", key, top} for e in probs)
    close([e[key] for e in probs], [e[key] for e in plain])
    if post:  # what the chain left: probabilities, at most n_probs, none of them 0
        assert all(0 < e["prob"] <= 1 and 0 < len(e["top_probs"]) <= 4 for e in probs)
        assert all(sum(t["prob"] for t in e["top_probs"]) <= 1 + 1e-6 for e in probs)
    c, r = server.stream("/completion", {**body, "stream": True})
    streamed = [e for ev in sse_events(r) for e in ev.get("completion_probabilities", [])]
    c.close()
    assert [e["id"] for e in streamed] == [e["id"] for e in probs]
    close([e[key] for e in streamed], [e[key] for e in probs])


def test_no_probabilities_unless_asked(server):
    obj = server.post("/completion", {"prompt": "x", "n_predict": 4})
    assert "completion_probabilities" not in obj
    obj = server.post("/v1/chat/completions", {"messages": MSG, "max_tokens": 4})
    assert "logprobs" not in obj["choices"][0] or obj["choices"][0]["logprobs"] is None


def test_n_choices_each_with_its_own_seed(server, client):
    kw = dict(model="x", messages=MSG, max_tokens=N, temperature=1.0, seed=5)
    r = client.chat.completions.create(n=2, **kw)
    assert [c.index for c in r.choices] == [0, 1]
    one = [client.chat.completions.create(**{**kw, "seed": s}) for s in (5, 6)]
    assert [c.message.content for c in r.choices] == [o.choices[0].message.content for o in one]
    assert r.choices[0].message.content != r.choices[1].message.content
    assert r.usage.completion_tokens == sum(o.usage.completion_tokens for o in one)
    assert r.usage.prompt_tokens == one[0].usage.prompt_tokens
    legacy = client.completions.create(model="x", prompt="the cat", max_tokens=N, n=3, seed=1)
    assert [c.index for c in legacy.choices] == [0, 1, 2]


def test_streamed_n_choices(server):
    body = {"messages": MSG, "max_tokens": N, "temperature": 1.0, "seed": 5, "n": 2,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    c, r = server.stream("/v1/chat/completions", body)
    events = list(sse_events(r))
    c.close()
    assert events.count("[DONE]") == 1 and events[-1] == "[DONE]"
    texts = {0: "", 1: ""}
    for ev in events[:-1]:
        for choice in ev["choices"]:
            texts[choice["index"]] += choice["delta"].get("content") or ""
    whole = server.post("/v1/chat/completions", {**body, "stream": False})
    assert [texts[0], texts[1]] == [ch["message"]["content"] for ch in whole["choices"]]
    usage = [ev["usage"] for ev in events[:-1] if ev.get("usage") and not ev["choices"]]
    assert len(usage) == 1 and usage[0]["completion_tokens"] == 2 * N


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": MSG, "top_logprobs": 2}),
        ("/v1/chat/completions", {"messages": MSG, "logprobs": True, "top_logprobs": 101}),
        ("/v1/chat/completions", {"messages": MSG, "logprobs": 3}),
        ("/v1/chat/completions", {"messages": MSG, "post_sampling_probs": True, "n_probs": 2}),
        ("/v1/chat/completions", {"messages": MSG, "n": 17}),
        ("/v1/chat/completions", {"messages": MSG, "n": 0}),
        ("/v1/completions", {"prompt": "x", "logprobs": True}),
        ("/v1/completions", {"prompt": "x", "top_logprobs": 2}),
        ("/completion", {"prompt": "x", "logprobs": 2}),
        ("/completion", {"prompt": "x", "n": 2}),
        ("/completion", {"prompt": "x", "n_probs": -1}),
    ],
)  # fmt: skip
def test_bad_probability_fields_get_400(server, path, body):
    status, _, obj = server.request("POST", path, body)
    assert status == 400, obj
    assert obj["error"]["type"] == "invalid_request_error"

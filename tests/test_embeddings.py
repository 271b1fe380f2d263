"""serve --embeddings: /v1/embeddings in OpenAI's shape (the official client reads it) and
/embedding in llama-server's, from a context of the target's own with embeddings on."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from specgguf.server import embeddings as emb
from specgguf.server.protocol import ApiError
from tests.serve_helpers import FAST, openai_client, serving

N_EMBD = 64  # the tiny models' width


@pytest.fixture(scope="module")
def model(tiny_target):
    pytest.importorskip("llama_cpp")
    from specgguf.binding import engine

    engine.init_backend(False)
    m = engine.Model(tiny_target)
    yield m
    m.close()


def _embedder(model, pooling):
    from specgguf.binding.embedder import Embedder

    return Embedder(model, 32, threads=1, pooling=pooling)


def test_mean_pooling_is_the_mean_of_the_token_rows(model) -> None:
    tokens = model.tokenize("the quick brown fox")
    rows, mean = _embedder(model, 0), _embedder(model, 1)
    try:
        per_token = rows.embed(tokens)
        pooled = mean.embed(tokens)
        assert len(per_token) == len(tokens) and len(pooled) == 1
        assert not rows.pooled and mean.pooled
        np.testing.assert_allclose(pooled[0], np.mean(per_token, axis=0), rtol=1e-3, atol=1e-4)
        np.testing.assert_array_equal(mean.embed(tokens)[0], pooled[0])  # nothing left behind
        assert not np.allclose(mean.embed(tokens[:2])[0], pooled[0])
    finally:
        rows.close()
        mean.close()


def test_an_input_longer_than_the_context_is_refused(model) -> None:
    from specgguf.binding.embedder import InputTooLong

    e = _embedder(model, 1)
    try:
        with pytest.raises(InputTooLong, match="holds 32"):
            e.embed([5] * 40)
    finally:
        e.close()


def test_requests_are_read_as_llama_server_reads_them() -> None:
    r = emb.parse({"input": ["a", [1, 2]], "encoding_format": "base64"}, 2, N_EMBD)
    assert r.inputs == ["a", [1, 2]] and r.oai and r.base64 and r.normalize == 2
    r = emb.parse({"content": "a", "embd_normalize": -1}, 2, N_EMBD)
    assert r.inputs == ["a"] and not r.oai and r.normalize == -1
    assert emb.parse({"input": [3, 4]}, 2, N_EMBD).inputs == [[3, 4]]
    for body in ({}, {"input": []}, {"input": [{"type": "image_url"}]}, {"input": 3},
                 {"input": "a", "encoding_format": "int8"}, {"input": "a", "dimensions": 8},
                 {"input": "a", "embd_normalize": "2"}):  # fmt: skip
        with pytest.raises(ApiError) as e:
            emb.parse(body, 2, N_EMBD)
        assert e.value.status == 400


def test_normalization_follows_llama_cpp() -> None:
    v = np.array([3.0, -4.0], dtype=np.float32)
    np.testing.assert_allclose(emb.normalized(v, 2), [0.6, -0.8])
    np.testing.assert_allclose(emb.normalized(v, 1), [3 / 7, -4 / 7])
    np.testing.assert_allclose(emb.normalized(v, -1), v)
    np.testing.assert_allclose(emb.normalized(v, 0), v * 32760 / 4, rtol=1e-6)
    np.testing.assert_allclose(emb.normalized(v, 3), v / (27 + 64) ** (1 / 3), rtol=1e-6)


@pytest.fixture(scope="module")
def mean_server(tiny_target):
    yield from serving(["-m", str(tiny_target), *FAST, "-c", "256", "--spec-type", "none",
                        "--embeddings", "--pooling", "mean"])  # fmt: skip


@pytest.fixture(scope="module")
def rows_server(tiny_target):
    """--embedding (the older spelling) with the model's own pooling: none."""
    yield from serving(["-m", str(tiny_target), *FAST, "-c", "256", "--spec-type", "none",
                        "--embedding"])  # fmt: skip


def test_openai_client_reads_v1_embeddings(mean_server) -> None:
    client = openai_client(mean_server)
    got = client.embeddings.create(model="any", input=["hello world", "goodbye"])
    assert [d.index for d in got.data] == [0, 1] and got.model == "any"
    vecs = [np.array(d.embedding) for d in got.data]  # the client asked for base64
    assert all(v.shape == (N_EMBD,) for v in vecs)
    assert all(np.linalg.norm(v) == pytest.approx(1.0, abs=1e-4) for v in vecs)  # euclidean
    assert not np.allclose(vecs[0], vecs[1])
    assert got.usage.prompt_tokens == got.usage.total_tokens > 2
    floats = mean_server.post("/v1/embeddings", {"input": "hello world",
                                                 "encoding_format": "float"})  # fmt: skip
    np.testing.assert_allclose(floats["data"][0]["embedding"], vecs[0], rtol=1e-5, atol=1e-6)
    assert floats["object"] == "list" and floats["data"][0]["object"] == "embedding"


def test_base64_is_little_endian_float32(mean_server) -> None:
    b = mean_server.post("/v1/embeddings", {"input": "x", "encoding_format": "base64"})
    f = mean_server.post("/v1/embeddings", {"input": "x"})
    raw = np.frombuffer(base64.b64decode(b["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_array_equal(raw, np.array(f["data"][0]["embedding"], dtype=np.float32))


def test_native_shape_and_normalize_field(mean_server) -> None:
    out = mean_server.post("/embedding", {"content": "hello world", "embd_normalize": -1})
    assert [o["index"] for o in out] == [0] and len(out[0]["embedding"]) == 1
    raw = np.array(out[0]["embedding"][0])
    unit = np.array(mean_server.post("/embeddings", {"content": "hello world"})[0]["embedding"][0])
    np.testing.assert_allclose(raw / np.linalg.norm(raw), unit, rtol=1e-4, atol=1e-6)
    # `content` on the OpenAI path answers in llama-server's shape, as llama-server does
    assert isinstance(mean_server.post("/v1/embeddings", {"content": "a"}), list)


def test_too_long_and_bad_ids_are_400(mean_server) -> None:
    status, _, err = mean_server.request("POST", "/v1/embeddings", {"input": "word " * 400})
    assert status == 400 and "embeddings context holds" in err["error"]["message"]
    status, _, err = mean_server.request("POST", "/v1/embeddings", {"input": [10**9]})
    assert status == 400


def test_reranking_needs_rerank(mean_server) -> None:
    """Embeddings on, but not rank pooling: /rerank answers llama-server's 501."""
    status, _, err = mean_server.request("POST", "/v1/rerank", {"query": "a", "documents": ["b"]})
    assert status == 501 and "--reranking" in err["error"]["message"]


def test_pooling_none_gives_a_vector_per_token(rows_server) -> None:
    tokens = rows_server.post("/tokenize", {"content": "hello world"})["tokens"]
    out = rows_server.post("/embedding", {"content": "hello world"})
    assert len(out[0]["embedding"]) == len(tokens) + 0 and len(out[0]["embedding"][0]) == N_EMBD
    status, _, err = rows_server.request("POST", "/v1/embeddings", {"input": "hello"})
    assert status == 400 and "not OAI compatible" in err["error"]["message"]

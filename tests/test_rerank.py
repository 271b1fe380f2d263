"""serve --rerank: /rerank scores documents against a query through a reranker's classifier
head (the tiny qwen3 reranker of tests.tiny_reranker), answered in llama-server's shapes; a
model without a classifier head is refused at start, a server without --rerank answers 501."""

from __future__ import annotations

import numpy as np
import pytest
from specgguf_cli.app import run_cli

from specgguf.binding.rerank_prompt import RerankFormat, has_classifier
from specgguf.errors import ExitCode
from specgguf.server import rerank
from specgguf.server.protocol import ApiError
from tests.serve_helpers import FAST, serving
from tests.tiny_reranker import RERANK_TEMPLATE, build_tiny_reranker

QUERY = "the cat"
DOCS = ["the cat sat on the mat", "a dog ran far away", "the cat", "ships at sea"]


@pytest.fixture(scope="module")
def reranker(tiny_models_dir):
    return build_tiny_reranker(tiny_models_dir / "reranker.gguf")


def _fake_tokenize(text: str, special: bool) -> list[int]:
    """One id per character (special parsing marked by an offset): enough to see the layout."""
    return [ord(c) + (1000 if special else 0) for c in text]


def test_pairs_are_laid_out_as_llama_server_lays_them() -> None:
    plain = RerankFormat(None, bos=1, eos=2, sep=3, add_bos=True, add_eos=True, add_sep=True)
    assert plain.tokens("q", "dd", _fake_tokenize) == [1, ord("q"), 2, 3, ord("d"), ord("d"), 2]
    bare = RerankFormat(None, bos=1, eos=2, sep=3, add_bos=False, add_eos=False, add_sep=True)
    assert bare.tokens("q", "d", _fake_tokenize) == [ord("q"), 3, ord("d")]
    templated = RerankFormat("<{query}|{document}>", 1, 2, 3, True, True, True)
    assert templated.tokens("q", "d", _fake_tokenize) == [1000 + ord(c) for c in "<q|d>"]


def test_requests_are_read_as_llama_server_reads_them() -> None:
    r = rerank.parse({"query": "q", "documents": ["a", "b"], "top_n": 1, "model": "m"})
    assert (r.query, r.documents, r.top_n, r.tei, r.model) == ("q", ["a", "b"], 1, False, "m")
    assert rerank.parse({"query": "q", "documents": ["a", "b"]}).top_n == 2
    t = rerank.parse({"query": "q", "texts": ["a"], "return_text": True})
    assert t.tei and t.return_text and t.documents == ["a"]
    for body in ([], {"documents": ["a"]}, {"query": 3, "documents": ["a"]},
                 {"query": "q"}, {"query": "q", "documents": []},
                 {"query": "q", "documents": [{"text": "a"}]}, {"query": "q", "documents": "a"},
                 {"query": "q", "documents": ["a"], "top_n": -1},
                 {"query": "q", "documents": ["a"], "top_n": "2"},
                 {"query": "q", "documents": ["a"] * (rerank.MAX_DOCUMENTS + 1)}):  # fmt: skip
        with pytest.raises(ApiError) as e:
            rerank.parse(body)
        assert e.value.status == 400


def test_answers_are_sorted_and_cut_as_llama_server_does() -> None:
    scored = [rerank.Scored(0.2, 5), rerank.Scored(0.9, 6), rerank.Scored(0.5, 7)]
    req = rerank.parse({"query": "q", "documents": ["a", "b", "c"], "top_n": 2})
    out = rerank.answer(req, "tiny", scored)
    assert out["results"] == [{"index": 1, "relevance_score": 0.9},
                              {"index": 2, "relevance_score": 0.5}]  # fmt: skip
    assert out["model"] == "tiny" and out["object"] == "list"
    assert out["usage"] == {"prompt_tokens": 18, "total_tokens": 18}  # every pair counted
    tei = rerank.parse({"query": "q", "texts": ["a", "b", "c"], "return_text": True})
    assert rerank.answer(tei, "tiny", scored) == [
        {"index": 1, "score": 0.9, "text": "b"}, {"index": 2, "score": 0.5, "text": "c"},
        {"index": 0, "score": 0.2, "text": "a"}]  # fmt: skip


def test_only_a_model_with_a_classifier_head_reranks(reranker, tiny_target) -> None:
    from specgguf.modelfiles.gguf_info import read_gguf_info

    assert has_classifier(read_gguf_info(reranker).tensor_names)
    assert not has_classifier(read_gguf_info(tiny_target).tensor_names)


def test_a_model_that_cannot_rerank_is_refused_in_one_line(tiny_target, reranker, capfd) -> None:
    assert run_cli(["serve", "-m", str(tiny_target), "--rerank", "--spec-type", "none",
                    "-q"]) == 1  # fmt: skip
    err = capfd.readouterr().err.strip()
    assert "is not a reranker" in err and "\n" not in err and "Traceback" not in err
    assert run_cli(["serve", "-m", str(reranker), "--reranking", "--pooling", "mean",
                    "--spec-type", "none"]) == ExitCode.USAGE  # fmt: skip
    assert "--rerank pools by rank" in capfd.readouterr().err


def _expected_scores(path) -> list[float]:
    """Each document's score computed here, from the model's template and rank pooling."""
    from specgguf.binding import engine
    from specgguf.binding.embedder import POOLING_RANK, Embedder

    engine.init_backend(False)
    model = engine.Model(path)
    e = Embedder(model, 256, threads=1, pooling=POOLING_RANK)
    try:
        assert e.n_embd == 2  # the classifier's outputs ("yes", "no"), not a hidden state
        out = []
        for doc in DOCS:
            prompt = RERANK_TEMPLATE.replace("{query}", QUERY).replace("{document}", doc)
            tokens = model.tokenize(prompt, add_special=False, parse_special=True)
            out.append(float(e.embed(tokens)[0][0]))
        return out
    finally:
        e.close()
        model.close()


@pytest.fixture(scope="module")
def rerank_server(reranker):
    yield from serving(["-m", str(reranker), *FAST, "-c", "256", "--spec-type", "none",
                        "--rerank"])  # fmt: skip


def test_rerank_scores_and_orders_the_documents(rerank_server, reranker) -> None:
    expected = _expected_scores(reranker)
    assert len({round(s, 6) for s in expected}) == len(DOCS)  # the test can see an order
    assert all(0.0 < s < 1.0 for s in expected)  # a softmax's probability, not a hidden value
    out = rerank_server.post("/v1/rerank", {"query": QUERY, "documents": DOCS, "model": "x"})
    got = out["results"]
    assert [r["index"] for r in got] == sorted(range(len(DOCS)), key=lambda i: -expected[i])
    np.testing.assert_allclose([r["relevance_score"] for r in got],
                               sorted(expected, reverse=True), rtol=1e-4)  # fmt: skip
    assert out["model"] == "x" and out["object"] == "list"
    n = out["usage"]["prompt_tokens"]
    assert n == out["usage"]["total_tokens"] > len(DOCS) * len(RERANK_TEMPLATE) // 2
    for path in ("/rerank", "/reranking", "/v1/reranking"):
        top = rerank_server.post(path, {"query": QUERY, "documents": DOCS, "top_n": 1})
        assert [r["index"] for r in top["results"]] == [got[0]["index"]]
    tei = rerank_server.post("/rerank", {"query": QUERY, "texts": DOCS[:2], "return_text": True})
    assert sorted(r["text"] for r in tei) == sorted(DOCS[:2]) and "score" in tei[0]


def test_bad_requests_are_400(rerank_server) -> None:
    status, _, err = rerank_server.request("POST", "/rerank", {"query": QUERY, "documents": []})
    assert status == 400 and "non-empty string array" in err["error"]["message"]
    long = {"query": QUERY, "documents": ["word " * 400]}
    status, _, err = rerank_server.request("POST", "/rerank", long)
    assert status == 400 and "embeddings context holds" in err["error"]["message"]

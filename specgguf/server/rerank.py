"""serve --rerank: POST /rerank (and /reranking, /v1/rerank, /v1/reranking), read and answered
as llama-server does; the scores come from the target's embeddings context, which pools by
rank (specgguf.binding.embedder), on the scheduler's worker thread.

The request: `query` (a string), `documents` (strings; `texts` in the TEI shape), `top_n`
(how many results to return, default all). The answer (Jina's shape): `results`, each
`{index, relevance_score}`, highest score first, cut to top_n, with `model`, `object`
("list") and `usage` (the tokens evaluated over all pairs). A body that names `texts` is
answered in the TEI shape instead: the bare list of `{index, score}` (and `text` with
`return_text`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specgguf.server.protocol import ApiError, bad

#: documents one request may carry (each pair is evaluated in turn)
MAX_DOCUMENTS = 2048


@dataclass(frozen=True)
class RerankRequest:
    query: str
    documents: list[str]
    top_n: int
    tei: bool  # the TEI shape (`texts`): a bare list answered, `score` for the score
    return_text: bool  # TEI's return_text: each result carries its document
    model: str | None


def parse(body: Any) -> RerankRequest:
    """The request, or a 400 naming its field (llama-server's messages where it has them)."""
    if not isinstance(body, dict):
        raise bad("the body must be a JSON object")
    if "query" not in body:
        raise bad('"query" must be provided', "missing_field")
    query = body["query"]
    if not isinstance(query, str):
        raise bad('"query" must be a string')
    tei = "texts" in body
    docs = body["documents"] if "documents" in body else body.get("texts")
    if not isinstance(docs, list) or not docs or not all(isinstance(d, str) for d in docs):
        raise bad('"documents" must be a non-empty string array')
    if len(docs) > MAX_DOCUMENTS:
        raise bad(f"at most {MAX_DOCUMENTS} documents per request, not {len(docs)}")
    top_n = body.get("top_n", len(docs))
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 0:
        raise bad("'top_n' must be a whole number, 0 or more")
    return_text = body.get("return_text", False)
    if not isinstance(return_text, bool):
        raise bad("'return_text' must be true or false")
    model = body.get("model")
    return RerankRequest(query, list(docs), top_n, tei, tei and return_text,
                         model if isinstance(model, str) else None)  # fmt: skip


@dataclass(frozen=True)
class Scored:
    """One document's score and the tokens its pair was."""

    score: float
    n_tokens: int


def answer(req: RerankRequest, model_id: str, scored: list[Scored]) -> Any:
    """The answer: results by score, highest first (equal scores in document order), the first
    top_n of them; in Jina's shape, or TEI's bare list."""
    label = "score" if req.tei else "relevance_score"
    order = sorted(range(len(scored)), key=lambda i: -scored[i].score)[: req.top_n]
    results: list[dict[str, Any]] = []
    for i in order:
        item: dict[str, Any] = {"index": i, label: scored[i].score}
        if req.return_text:
            item["text"] = req.documents[i]
        results.append(item)
    if req.tei:
        return results
    n = sum(s.n_tokens for s in scored)
    return {"model": req.model or model_id, "object": "list",
            "usage": {"prompt_tokens": n, "total_tokens": n}, "results": results}  # fmt: skip


def not_enabled() -> ApiError:
    """llama-server's answer where reranking was not asked for at start."""
    return ApiError(501, "This server does not support reranking. Start it with `--reranking`",
                    "not_supported")  # fmt: skip

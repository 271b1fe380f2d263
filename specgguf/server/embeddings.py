"""serve --embeddings: /v1/embeddings (OpenAI's shape) and /embedding (llama-server's), the
requests read and the answers shaped here; the vectors come from specgguf.binding.embedder on
the scheduler's worker thread.

The request, as llama-server reads it: `input` (OpenAI) or `content` (llama-server's own
shape, answered in that shape on either path): a string, a list of token ids, or a list of
either; `encoding_format` float or base64 (OpenAI's Python client asks for base64);
`embd_normalize` (-1 none, 0 max absolute scaled to int16, 1 taxicab, 2 euclidean, p > 2
p-norm) over pooled vectors only; `dimensions` only as the model's own width."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from specgguf.server.protocol import ApiError, bad

#: inputs one request may carry (each is embedded in turn)
MAX_INPUTS = 2048


@dataclass(frozen=True)
class EmbeddingRequest:
    inputs: list[str | list[int]]
    oai: bool  # OpenAI's shape (`input`), else llama-server's (`content`)
    base64: bool
    normalize: int
    model: str | None


def _is_ids(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in v)  # fmt: skip


def parse(body: Any, default_normalize: int, n_embd: int) -> EmbeddingRequest:
    """The request, or a 400 naming its field."""
    if not isinstance(body, dict):
        raise bad("the body must be a JSON object")
    if "input" in body:
        prompt, oai = body["input"], True
    elif "content" in body:
        prompt, oai = body["content"], False
    else:
        raise bad('"input" or "content" must be provided', "missing_field")
    if isinstance(prompt, str) or _is_ids(prompt):
        inputs = [prompt]
    elif isinstance(prompt, list) and all(isinstance(p, str) or _is_ids(p) for p in prompt):
        inputs = list(prompt)
    else:
        raise bad("'input' must be a string, a list of token ids, or a list of either "
                  "(text only: no images or audio)")  # fmt: skip
    if not inputs:
        raise bad('"input" must not be empty')
    if len(inputs) > MAX_INPUTS:
        raise bad(f"at most {MAX_INPUTS} inputs per request, not {len(inputs)}")
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise bad("'encoding_format' must be float or base64")
    normalize = body.get("embd_normalize", default_normalize)
    if isinstance(normalize, bool) or not isinstance(normalize, int) or normalize < -1:
        raise bad("'embd_normalize' must be a whole number, -1 or more")
    dims = body.get("dimensions")
    if dims is not None and dims != n_embd:
        raise bad(f"'dimensions' must be the model's own, {n_embd}: vectors are not shortened",
                  "unsupported")  # fmt: skip
    model = body.get("model")
    return EmbeddingRequest(inputs, oai, fmt == "base64", normalize,
                            model if isinstance(model, str) else None)  # fmt: skip


def normalized(vec: np.ndarray, norm: int) -> np.ndarray:
    """A pooled vector scaled as llama.cpp's embd_normalize says."""
    x = vec.astype(np.float64)
    if norm == -1:
        scale = 1.0
    elif norm == 0:
        scale = float(np.max(np.abs(x), initial=0.0)) / 32760.0
    elif norm == 2:
        scale = float(np.sqrt(np.sum(x * x)))
    else:
        scale = float(np.sum(np.abs(x) ** norm) ** (1.0 / norm))
    return (x * (1.0 / scale if scale > 0 else 0.0)).astype(np.float32)


@dataclass(frozen=True)
class Embedded:
    """One input's answer: its vectors (one if pooled) and how many tokens it was."""

    vectors: list[np.ndarray]
    n_tokens: int


def embed_all(req: EmbeddingRequest, tokenize: Callable[[str], list[int]],
              check_ids: Callable[[list[int]], None], embedder: Any) -> list[Embedded]:  # fmt: skip
    """On the worker thread: every input's vectors from `embedder` (binding.embedder.Embedder),
    pooled ones normalized."""
    out = []
    for item in req.inputs:
        tokens = tokenize(item) if isinstance(item, str) else item
        if not isinstance(item, str):
            check_ids(tokens)
        if not tokens:
            raise bad("Input content cannot be empty")
        vectors = embedder.embed(tokens)
        if embedder.pooled:
            vectors = [normalized(v, req.normalize) for v in vectors]
        out.append(Embedded(vectors, len(tokens)))
    return out


def oai_answer(req: EmbeddingRequest, model_id: str, results: list[Embedded]) -> dict:
    """OpenAI's list object."""
    data = []
    for i, r in enumerate(results):
        vec = r.vectors[0]
        item: dict[str, Any] = {"object": "embedding", "index": i}
        if req.base64:
            item["embedding"] = base64.b64encode(vec.astype("<f4").tobytes()).decode("ascii")
            item["encoding_format"] = "base64"
        else:
            item["embedding"] = vec.tolist()
        data.append(item)
    n = sum(r.n_tokens for r in results)
    return {"model": req.model or model_id, "object": "list", "data": data,
            "usage": {"prompt_tokens": n, "total_tokens": n}}  # fmt: skip


def native_answer(results: list[Embedded]) -> list[dict]:
    """llama-server's /embedding: per input, its vectors (one pooled, or one per token)."""
    return [{"index": i, "embedding": [v.tolist() for v in r.vectors]}
            for i, r in enumerate(results)]  # fmt: skip


def not_enabled() -> ApiError:
    return ApiError(501, "This server does not support embeddings. Start it with `--embeddings`",
                    "not_supported")  # fmt: skip


NOT_OAI = "Pooling type 'none' is not OAI compatible. Please use a different pooling type"

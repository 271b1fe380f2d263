"""A tiny GGUF reranker in llama.cpp's `qwen3` layout, the way a converted Qwen3 reranker is
laid out: rank pooling in its header, two classifier labels ("yes", "no"), a `cls.output`
head of two rows, and a chat template named "rerank" with {query} and {document} in it.

llama.cpp scores a pair with such a model by reading the last token's hidden state through
the head and a softmax over the two rows: the score is the first one's probability, so it
lies in (0, 1) and changes with the text. Tokenizer, bias channel and
suppressed rows are tests.tiny_models'; weights Gaussian, F32."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.tiny_models import (
    N_EMBD,
    N_FF,
    N_HEAD,
    N_HEAD_KV,
    N_VOCAB,
    _raw_weights,
    prepared,
    write_bytes_model,
    write_hparams,
)

#: the template a converted Qwen3 reranker carries, shortened: where the pair goes
RERANK_TEMPLATE = "<|im_start|>user\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"
SEED = 4321


def build_tiny_reranker(path: str | Path, *, seed: int = SEED) -> Path:
    """Write the tiny qwen3 reranker to `path`."""
    import gguf  # deferred: only the tests that build models need it

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dims = dict(n_vocab=N_VOCAB, n_embd=N_EMBD, n_layer=2, n_head=N_HEAD,
                n_head_kv=N_HEAD_KV, n_ff=N_FF)  # fmt: skip
    w = prepared(lambda rng: _raw_weights(rng, **dims), seed, None, 0.0, -40.0)
    head_dim = N_EMBD // N_HEAD
    for i in range(2):
        w[f"blk.{i}.attn_q_norm.weight"] = np.ones(head_dim, dtype=np.float32)
        w[f"blk.{i}.attn_k_norm.weight"] = np.ones(head_dim, dtype=np.float32)
    writer = gguf.GGUFWriter(path, arch="qwen3")
    writer.add_name("tiny-reranker")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    write_hparams(writer, n_ctx_train=2048, n_embd=N_EMBD, n_layer=2, n_ff=N_FF,
                  n_head=N_HEAD, n_head_kv=N_HEAD_KV, n_vocab=N_VOCAB)  # fmt: skip
    writer.add_pooling_type(gguf.PoolingType.RANK)
    writer.add_classifier_output_labels(["yes", "no"])
    # small rows: the two logits stay within a few units, so the scores differ visibly
    rng = np.random.default_rng(seed + 1)
    w["cls.output.weight"] = (rng.standard_normal((2, N_EMBD)) * 0.15).astype(np.float32)
    writer.add_chat_template([{"name": "rerank", "template": RERANK_TEMPLATE}])
    write_bytes_model(writer, w)
    return path

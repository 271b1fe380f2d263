"""Small GGUF files for the header-reader tests: valid ones from gguf-py's GGUFWriter, and
raw byte builders for the hostile ones GGUFWriter would refuse to write.

Valid files are a tiny "llama" model (two F32 tensors, a few KiB) whose tokenizer keys can be
set one by one, so every vocabulary rule and compatibility clause can be exercised.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFValueType, GGUFWriter

from tests.tiny_models import write_file

#: where the lead's `specgguf pull` puts the real models (tests marked `real` skip without them)
MODELS = Path(os.environ.get("SPECGGUF_MODELS", Path.home() / ".cache/specgguf/models"))
QWEN_15 = MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN_05 = MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
SMOLLM = MODELS / "smollm2-135m-instruct-q4_1.gguf"


def need_models(*paths: Path) -> None:
    """Skip the calling test unless every real model file is there."""
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        pytest.skip(f"not in {MODELS}: {', '.join(missing)}")


#: sentinel: leave the key out of the file
ABSENT = object()


def default_tokens(n: int = 40) -> list[str]:
    """SPM-looking specials at 0..2, then plain words."""
    return ["<unk>", "<s>", "</s>"] + [f"tok{i}" for i in range(3, n)]


def _add_given(pairs) -> None:
    """Each (value, GGUFWriter adder) whose value is given (not None)."""
    for value, adder in pairs:
        if value is not None:
            adder(value)


def write_gguf(
    path: str | Path,
    *,
    arch: str = "llama",
    tokens: Sequence[str] | None = None,
    tokenizer_model: str | None = "llama",
    pre: str | None = None,
    bos_id: object = 1,
    eos_id: object = 2,
    eot_id: object = ABSENT,
    add_bos: object = ABSENT,
    add_eos: object = ABSENT,
    chat_template: str | None = None,
    context_length: int = 2048,
    block_count: int = 2,
    embedding_length: int = 8,
    head_count: int = 2,
    head_count_kv: int | Sequence[int] = 1,
    file_type: int | None = None,
    name: str | None = "tiny test model",
    size_label: str | None = "1K",
    extra: dict[str, object] | None = None,
    with_tensors: bool = True,
) -> Path:
    """Write a small valid GGUF and return its path. ABSENT leaves a key out."""
    path = Path(path)
    tokens = list(tokens) if tokens is not None else default_tokens()
    w = GGUFWriter(str(path), arch)
    _add_given(((name, w.add_name), (size_label, w.add_size_label),
                (file_type, w.add_file_type)))  # fmt: skip
    w.add_context_length(context_length)
    w.add_block_count(block_count)
    w.add_embedding_length(embedding_length)
    w.add_head_count(head_count)
    w.add_head_count_kv(head_count_kv)
    _add_given(((tokenizer_model, w.add_tokenizer_model), (pre, w.add_tokenizer_pre)))
    w.add_token_list(tokens)
    for value, adder in (
        (bos_id, w.add_bos_token_id),
        (eos_id, w.add_eos_token_id),
        (eot_id, w.add_eot_token_id),
        (add_bos, w.add_add_bos_token),
        (add_eos, w.add_add_eos_token),
    ):
        if value is not ABSENT:
            adder(value)
    _add_given(((chat_template, w.add_chat_template),))
    for key, value in (extra or {}).items():
        if isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_uint32(key, int(value))
    if with_tensors:
        rng = np.random.default_rng(0)
        w.add_tensor(
            "token_embd.weight",
            rng.standard_normal((len(tokens), embedding_length)).astype(np.float32),
        )
        w.add_tensor("output_norm.weight", np.ones(embedding_length, dtype=np.float32))
    write_file(w)
    return path


# --- raw builders for files GGUFWriter would not write ---------------------------------------


def gguf_str(value: str | bytes, length: int | None = None) -> bytes:
    """A GGUF string; `length` overrides the declared length (to lie about it)."""
    data = value.encode() if isinstance(value, str) else value
    return struct.pack("<Q", len(data) if length is None else length) + data


def header(n_tensors: int, n_kv: int, version: int = 3, magic: bytes = b"GGUF") -> bytes:
    return magic + struct.pack("<Iqq", version, n_tensors, n_kv)


def kv_raw(key: str, vtype: int, payload: bytes) -> bytes:
    return gguf_str(key) + struct.pack("<I", vtype) + payload


def kv_str(key: str, value: str) -> bytes:
    return kv_raw(key, GGUFValueType.STRING, gguf_str(value))


def kv_u32(key: str, value: int) -> bytes:
    return kv_raw(key, GGUFValueType.UINT32, struct.pack("<I", value))


def kv_array(key: str, elem_type: int, n: int, payload: bytes) -> bytes:
    """An array KV with a declared length `n` that need not match the payload."""
    return kv_raw(key, GGUFValueType.ARRAY, struct.pack("<IQ", elem_type, n) + payload)


def tensor_info(name: str, dims: Sequence[int], ggml_type: int = 0, offset: int = 0) -> bytes:
    return (
        gguf_str(name)
        + struct.pack("<I", len(dims))
        + b"".join(struct.pack("<q", d) for d in dims)
        + struct.pack("<iQ", ggml_type, offset)
    )


def minimal_kvs(arch: str = "llama", tokens: Sequence[str] = ("a", "b", "c")) -> list[bytes]:
    """The keys a file needs to get past the reader's semantic checks."""
    return [
        kv_str("general.architecture", arch),
        kv_str("tokenizer.ggml.model", "llama"),
        kv_array(
            "tokenizer.ggml.tokens",
            GGUFValueType.STRING,
            len(tokens),
            b"".join(gguf_str(t) for t in tokens),
        ),
    ]


def raw_gguf(
    kvs: Sequence[bytes],
    tensors: Sequence[bytes] = (),
    data: bytes = b"",
    version: int = 3,
    alignment: int = 32,
) -> bytes:
    """Header, KVs, tensor infos, padding to `alignment`, then `data`."""
    body = header(len(tensors), len(kvs), version) + b"".join(kvs) + b"".join(tensors)
    if tensors:
        body += b"\0" * (-len(body) % alignment)
    return body + data

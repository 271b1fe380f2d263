"""gguf_info: valid files read right, and every hostile file ends in ONE ModelFileError line
(exit code 3) that names the file and the problem, fast and without big allocations."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest
from gguf import GGUFValueType
from gguf_factory import (
    ABSENT,
    QWEN_05,
    QWEN_15,
    SMOLLM,
    default_tokens,
    gguf_str,
    header,
    kv_array,
    kv_raw,
    kv_u32,
    minimal_kvs,
    need_models,
    raw_gguf,
    tensor_info,
    write_gguf,
)

from specgguf.errors import ExitCode, ModelFileError
from specgguf.modelfiles import gguf_info
from specgguf.modelfiles.gguf_info import estimate_memory, read_gguf_info


def expect_error(path: Path, *fragments: str) -> str:
    with pytest.raises(ModelFileError) as exc:
        read_gguf_info(path)
    msg = str(exc.value)
    assert exc.value.code == ExitCode.MODEL
    assert msg.startswith(f"{path}: "), msg
    assert "\n" not in msg
    for fragment in fragments:
        assert fragment in msg, msg
    return msg


def write_bytes(tmp_path: Path, data: bytes, name: str = "model.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# --- valid files ------------------------------------------------------------------------------


def test_reads_tiny_model(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", chat_template="{{ messages }}", file_type=15)
    info = read_gguf_info(path)
    assert info.path == str(path)
    assert info.file_size == path.stat().st_size
    assert info.version == 3
    assert info.architecture == "llama"
    assert info.name == "tiny test model"
    assert info.size_label == "1K"
    assert info.quantization == "Q4_K_M" and info.file_type == 15
    assert info.dominant_type == "F32"
    assert info.context_length == 2048
    assert (info.block_count, info.embedding_length) == (2, 8)
    assert (info.head_count, info.head_count_kv) == (2, 1)
    assert info.chat_template == "{{ messages }}"
    assert info.n_tensors == 2
    assert info.n_params == 40 * 8 + 8
    assert info.tensor_bytes == 4 * (40 * 8 + 8)
    assert info.metadata["general.architecture"] == "llama"
    assert info.metadata["tokenizer.ggml.tokens"] == "<array of 40 string>"
    v = info.vocab
    assert v.model == "llama" and v.type == "SPM"
    assert v.tokens == tuple(default_tokens())
    assert v.n_vocab == 40
    assert (v.bos_id, v.eos_id, v.eot_id) == (1, 2, None)


def test_quantization_falls_back_to_dominant_tensor_type(tmp_path):
    info = read_gguf_info(write_gguf(tmp_path / "m.gguf"))
    assert info.file_type is None and info.quantization == "F32"


def test_vocab_only_file(tmp_path):
    info = read_gguf_info(write_gguf(tmp_path / "m.gguf", with_tensors=False))
    assert info.n_tensors == 0 and info.tensor_bytes == 0 and info.n_params == 0


def test_long_strings_truncated_for_display_but_template_kept(tmp_path):
    template = "x" * 5000
    info = read_gguf_info(write_gguf(tmp_path / "m.gguf", chat_template=template))
    assert info.chat_template == template
    assert len(info.metadata["tokenizer.chat_template"]) <= 120


def test_estimate_memory_formula(tmp_path):
    info = read_gguf_info(
        write_gguf(
            tmp_path / "m.gguf", block_count=3, embedding_length=16, head_count=4, head_count_kv=2
        )
    )
    mem = estimate_memory(info, 1000)
    head_dim = 16 // 4
    assert mem.kv_bytes == 2 * 3 * 1000 * 2 * head_dim * 2
    assert mem.weights_bytes == info.tensor_bytes
    assert mem.total_bytes == mem.weights_bytes + mem.kv_bytes


def test_estimate_memory_per_layer_kv_heads_and_key_length(tmp_path):
    info = read_gguf_info(
        write_gguf(
            tmp_path / "m.gguf",
            block_count=3,
            head_count_kv=[2, 0, 1],
            extra={"llama.attention.key_length": 10, "llama.attention.value_length": 6},
        )
    )
    assert info.head_count_kv == 2 and info.head_count_kv_per_layer == (2, 0, 1)
    assert estimate_memory(info, 100).kv_bytes == 100 * (2 + 0 + 1) * (10 + 6) * 2


# --- vocabulary defaults as llama.cpp derives them --------------------------------------------


@pytest.mark.parametrize(
    ("model", "pre", "add_bos", "add_eos"),
    [
        ("llama", None, True, False),  # SPM
        ("gpt2", "qwen2", False, False),  # BPE
        ("gpt2", "llama-bpe", True, False),  # BPE, llama3 pre-tokenizer adds BOS
        ("gpt2", "tekken", True, False),
        ("t5", None, False, True),  # UGM
        ("bert", None, True, False),  # WPM
        ("rwkv", None, False, False),
    ],
)
def test_add_bos_eos_defaults(tmp_path, model, pre, add_bos, add_eos):
    path = write_gguf(tmp_path / "m.gguf", tokenizer_model=model, pre=pre)
    v = read_gguf_info(path).vocab
    assert (v.add_bos, v.add_eos) == (add_bos, add_eos)


def test_add_keys_override_defaults(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", tokenizer_model="llama", add_bos=False, add_eos=True)
    v = read_gguf_info(path).vocab
    assert (v.add_bos, v.add_eos) == (False, True)


def test_gemma4_pre_forces_add_bos(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", tokenizer_model="gpt2", pre="gemma4", add_bos=False)
    assert read_gguf_info(path).vocab.add_bos is True


def test_special_id_defaults_and_ranges(tmp_path):
    # SPM defaults (1, 2) apply when the keys are absent
    v = read_gguf_info(write_gguf(tmp_path / "a.gguf", bos_id=ABSENT, eos_id=ABSENT)).vocab
    assert (v.bos_id, v.eos_id) == (1, 2)
    # an out-of-range key keeps the default
    v = read_gguf_info(write_gguf(tmp_path / "b.gguf", bos_id=999, eos_id=3)).vocab
    assert (v.bos_id, v.eos_id) == (1, 3)
    # an out-of-range default becomes "none": BPE's default 11 in a 10-token vocab
    v = read_gguf_info(
        write_gguf(
            tmp_path / "c.gguf",
            tokenizer_model="gpt2",
            tokens=default_tokens(10),
            bos_id=ABSENT,
            eos_id=ABSENT,
            eot_id=7,
        )
    ).vocab
    assert (v.bos_id, v.eos_id, v.eot_id) == (None, None, 7)


def test_empty_token_renamed_like_llama_cpp(tmp_path):
    tokens = default_tokens(10)
    tokens[6] = ""
    v = read_gguf_info(write_gguf(tmp_path / "m.gguf", tokens=tokens)).vocab
    assert v.tokens[6] == "[EMPTY_6]"


def test_non_utf8_token_bytes_stay_distinct(tmp_path):
    kvs = minimal_kvs()
    kvs[2] = kv_array(
        "tokenizer.ggml.tokens",
        GGUFValueType.STRING,
        2,
        gguf_str(b"\xff\xfe") + gguf_str(b"\xff\xfd"),
    )
    v = read_gguf_info(write_bytes(tmp_path, raw_gguf(kvs))).vocab
    assert v.tokens[0] != v.tokens[1]


def test_150k_token_vocab_reads_fast(tmp_path):
    tokens = [f"token_{i:06d}" for i in range(150_000)]
    path = write_gguf(
        tmp_path / "big.gguf",
        tokenizer_model="gpt2",
        pre="qwen2",
        tokens=tokens,
        embedding_length=1,
    )
    start = time.monotonic()
    info = read_gguf_info(path)
    elapsed = time.monotonic() - start
    assert info.vocab.n_vocab == 150_000 and info.vocab.tokens[-1] == "token_149999"
    assert elapsed < 1.0, f"reading a 150k-token vocab took {elapsed:.2f} s"


# --- hostile files: one test per case ---------------------------------------------------------


def test_missing_file(tmp_path):
    expect_error(tmp_path / "nope.gguf", "no such file")


def test_directory(tmp_path):
    d = tmp_path / "dir.gguf"
    d.mkdir()
    expect_error(d, "is a directory")


def test_permission_denied_simulated(tmp_path, monkeypatch):
    path = write_gguf(tmp_path / "m.gguf")

    def deny(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(gguf_info, "open", deny, raising=False)
    expect_error(path, "permission denied")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads anything")
def test_permission_denied_real(tmp_path):
    path = write_gguf(tmp_path / "m.gguf")
    path.chmod(0)
    try:
        expect_error(path, "permission denied")
    finally:
        path.chmod(0o644)


def test_not_a_gguf(tmp_path):
    path = write_bytes(tmp_path, b"PK\x03\x04 this is a zip, not a model" * 4)
    expect_error(path, "not a GGUF file (bad magic")


def test_empty_file(tmp_path):
    expect_error(write_bytes(tmp_path, b""), "not a GGUF file (only 0 bytes)")


def test_truncated_mid_header(tmp_path):
    data = write_gguf(tmp_path / "ok.gguf").read_bytes()
    expect_error(
        write_bytes(tmp_path, data[:13]),
        "truncated: the header ends at byte 24 but the file has 13 bytes",
    )


def test_truncated_mid_metadata(tmp_path):
    data = write_gguf(tmp_path / "ok.gguf").read_bytes()
    expect_error(write_bytes(tmp_path, data[:200]), "truncated")


def test_truncated_mid_tensor_info(tmp_path):
    info = read_gguf_info(write_gguf(tmp_path / "ok.gguf"))
    data = (tmp_path / "ok.gguf").read_bytes()
    # the tensor infos end where the padding before the data section starts; cut 10 bytes in
    cut = data[: info.data_offset - 40]
    expect_error(write_bytes(tmp_path, cut), "truncated")


def test_truncated_mid_tensor_data(tmp_path):
    info = read_gguf_info(write_gguf(tmp_path / "ok.gguf"))
    data = (tmp_path / "ok.gguf").read_bytes()
    cut = info.data_offset + 100
    data_end = info.data_offset + 32 * ((40 * 8 * 4 + 31) // 32) + 8 * 4
    expect_error(
        write_bytes(tmp_path, data[:cut]),
        f"truncated: tensor data ends at byte {data_end} but the file has {cut} bytes",
    )


def test_absurd_string_length(tmp_path):
    kvs = [*minimal_kvs(), kv_raw("general.name", GGUFValueType.STRING, gguf_str("hi", 1 << 62))]
    path = write_bytes(tmp_path, raw_gguf(kvs))
    start = time.monotonic()
    expect_error(path, "key 'general.name'", f"declares a string of {1 << 62} bytes", "remain")
    assert time.monotonic() - start < 0.5


def test_absurd_array_length(tmp_path):
    kvs = [*minimal_kvs(), kv_array("llama.bogus", GGUFValueType.UINT32, 1 << 60, b"\0" * 16)]
    expect_error(
        write_bytes(tmp_path, raw_gguf(kvs)),
        f"key 'llama.bogus' declares an array of {1 << 60} uint32 values",
    )


def test_absurd_string_array_length(tmp_path):
    kvs = minimal_kvs()
    kvs[2] = kv_array("tokenizer.ggml.tokens", GGUFValueType.STRING, 1 << 40, gguf_str("a"))
    expect_error(
        write_bytes(tmp_path, raw_gguf(kvs)),
        f"key 'tokenizer.ggml.tokens' declares an array of {1 << 40} strings",
    )


def test_unknown_value_type(tmp_path):
    kvs = [*minimal_kvs(), kv_raw("general.weird", 99, b"\0" * 8)]
    expect_error(
        write_bytes(tmp_path, raw_gguf(kvs)),
        "corrupt: key 'general.weird' has unknown value type 99",
    )


def test_nested_array(tmp_path):
    kvs = [*minimal_kvs(), kv_array("general.nested", GGUFValueType.ARRAY, 1, b"\0" * 16)]
    expect_error(write_bytes(tmp_path, raw_gguf(kvs)), "array of arrays")


def test_unsupported_architecture(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", arch="foo")
    expect_error(path, "unsupported architecture 'foo'")


def test_clip_is_not_a_text_model(tmp_path):
    expect_error(write_gguf(tmp_path / "m.gguf", arch="clip"), "unsupported architecture 'clip'")


def test_too_many_dims(tmp_path):
    tensors = [tensor_info("t", [1, 1, 1, 1, 1])]
    expect_error(
        write_bytes(tmp_path, raw_gguf(minimal_kvs(), tensors)),
        "tensor 't' has 5 dimensions (at most 4)",
    )


def test_absurd_counts(tmp_path):
    data = header(1 << 40, 1 << 50) + b"\0" * 64
    expect_error(write_bytes(tmp_path, data), "cannot fit in the 64 bytes after the header")


def test_negative_counts(tmp_path):
    expect_error(write_bytes(tmp_path, header(-1, 0) + b"\0" * 8), "negative counts")


@pytest.mark.parametrize("version", [0, 1, 4, 0x03000000])
def test_bad_version(tmp_path, version):
    expect_error(
        write_bytes(tmp_path, raw_gguf(minimal_kvs(), version=version)), "unsupported GGUF version"
    )


def test_gguf_v2_accepted(tmp_path):
    info = read_gguf_info(write_bytes(tmp_path, raw_gguf(minimal_kvs(), version=2)))
    assert info.version == 2 and info.vocab.tokens == ("a", "b", "c")


def test_duplicate_key(tmp_path):
    kvs = [*minimal_kvs(), kv_u32("general.x", 1), kv_u32("general.x", 2)]
    expect_error(write_bytes(tmp_path, raw_gguf(kvs)), "duplicate key 'general.x'")


def test_unknown_tensor_type(tmp_path):
    tensors = [tensor_info("t", [4], ggml_type=999)]
    expect_error(
        write_bytes(tmp_path, raw_gguf(minimal_kvs(), tensors, b"\0" * 64)),
        "tensor 't' has unknown tensor type 999",
    )


def test_tensor_offset_not_contiguous(tmp_path):
    tensors = [tensor_info("a", [4], offset=0), tensor_info("b", [4], offset=48)]
    expect_error(
        write_bytes(tmp_path, raw_gguf(minimal_kvs(), tensors, b"\0" * 128)),
        "tensor 'b' has data offset 48, expected 32",
    )


def test_tensor_shape_overflow(tmp_path):
    tensors = [tensor_info("t", [1 << 40, 1 << 40])]
    expect_error(write_bytes(tmp_path, raw_gguf(minimal_kvs(), tensors)), "overflows")


def test_huge_tensor_is_truncation_not_allocation(tmp_path):
    tensors = [tensor_info("t", [1 << 20, 1 << 20])]
    data_offset = len(raw_gguf(minimal_kvs(), tensors))
    expect_error(
        write_bytes(tmp_path, raw_gguf(minimal_kvs(), tensors, b"\0" * 32)),
        f"tensor data ends at byte {data_offset + (1 << 40) * 4} but the file has "
        f"{data_offset + 32} bytes",
    )


def test_bad_alignment(tmp_path):
    kvs = [*minimal_kvs(), kv_u32("general.alignment", 24)]
    expect_error(write_bytes(tmp_path, raw_gguf(kvs)), "alignment 24 is not a power of 2")


def test_missing_architecture(tmp_path):
    expect_error(write_bytes(tmp_path, raw_gguf(minimal_kvs()[1:])), "no architecture")


def test_missing_tokenizer(tmp_path):
    kvs = minimal_kvs()
    expect_error(write_bytes(tmp_path, raw_gguf([kvs[0], kvs[2]])), "no tokenizer")


def test_unknown_tokenizer_model(tmp_path):
    expect_error(
        write_gguf(tmp_path / "m.gguf", tokenizer_model="sentencepiece9"),
        "unknown tokenizer 'sentencepiece9'",
    )


def test_header_value_of_wrong_type_is_ignored_not_crashing(tmp_path):
    kvs = [*minimal_kvs(), kv_raw("llama.context_length", GGUFValueType.STRING, gguf_str("big"))]
    info = read_gguf_info(write_bytes(tmp_path, raw_gguf(kvs)))
    assert info.context_length is None
    assert estimate_memory(info, 512).kv_bytes is None


def test_string_count_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf_info, "MAX_STRINGS", 2)
    expect_error(write_bytes(tmp_path, raw_gguf(minimal_kvs())), "more than 2 strings")


def test_metadata_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(gguf_info, "MAX_METADATA_BYTES", 64)
    monkeypatch.setattr(gguf_info, "_FIRST_READ", 16)
    kvs = [*minimal_kvs(), kv_raw("general.desc", GGUFValueType.STRING, gguf_str("x" * 200))]
    expect_error(write_bytes(tmp_path, raw_gguf(kvs)), "metadata is larger than 64 bytes")


def test_struct_sanity():
    # the raw builders and the reader agree on the header layout
    assert len(header(0, 0)) == 24 and struct.unpack("<4sIqq", header(1, 2))[2:] == (1, 2)


# --- the real models, when the lead has assembled them ----------------------------------------


@pytest.mark.real
def test_real_qwen_pair_headers():
    need_models(QWEN_15, QWEN_05)
    for path in (QWEN_15, QWEN_05):
        start = time.monotonic()
        info = read_gguf_info(path)
        # 150k tokens and 150k merges; generous for loaded CI (about 0.2 s on an idle core)
        assert time.monotonic() - start < 2.0
        assert info.architecture == "qwen2"
        assert info.quantization == "Q4_K_M"
        assert info.vocab.type == "BPE" and info.vocab.n_vocab == 151936
        assert info.vocab.eos_id == 151645 and not info.vocab.add_bos
        assert info.chat_template


@pytest.mark.real
def test_real_smollm_header():
    need_models(SMOLLM)
    info = read_gguf_info(SMOLLM)
    assert info.architecture == "llama" and info.quantization == "Q4_1"
    assert info.vocab.n_vocab == 49152

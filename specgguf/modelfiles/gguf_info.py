"""Read what `specgguf check` needs from a GGUF file's header, never its tensor data.

Why a parser of our own instead of gguf-py's GGUFReader: that reader memory-maps the whole
file, trusts every length it finds and builds numpy views for every array element, so a
hostile header can make it allocate gigabytes, and a 150k-token vocabulary takes seconds.
Here every length is checked against the bytes actually left in the file before anything is
allocated, the metadata region is read through one growing buffer with a hard cap, and
numeric arrays nobody needs are skipped in O(1). The `gguf` package is used for its
constants only (value types, tensor types and their block sizes, key names).

The structural checks follow ggml's gguf.cpp (`gguf_init_from_file_impl`): magic, version
2 or 3, non-negative counts, non-empty unique keys, known value types and no nested arrays,
`general.alignment` a power of two, tensor names < 64 bytes and unique, at most 4 dims,
no element-count overflow, rows a multiple of the block size, tensor offsets contiguous and
aligned, and (as llama.cpp's model loader does) every tensor's data inside the file.
The vocabulary rules (default BOS/EOS ids and add_bos/add_eos per tokenizer model and
pre-tokenizer, empty tokens renamed "[EMPTY_i]") follow src/llama-vocab.cpp, so
compat.check_compatible sees what llama.cpp's `common_speculative_are_compatible` sees.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, Keys, LlamaFileType

from specgguf.errors import ModelFileError

__all__ = [
    "GGUFInfo",
    "MemoryEstimate",
    "TensorMeta",
    "SUPPORTED_ARCHITECTURES",
    "VocabInfo",
    "estimate_memory",
    "kv_row_elements",
    "read_gguf_info",
    "vocab_type",
]

# --- limits ---------------------------------------------------------------------------------

SUPPORTED_VERSIONS = (2, 3)  # v1 used 32-bit lengths and llama.cpp refuses it
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_TENSOR_NAME = 64  # GGML_MAX_NAME, including the NUL: names must be shorter
#: Real metadata is 1-30 MiB (a 256k vocab with merges); anything past this is hostile or not
#: a model, and refusing it keeps memory bounded whatever the header claims.
MAX_METADATA_BYTES = 256 * 1024 * 1024
#: Walking a string array costs Python time per element; cap the total so a file of 2^28 empty
#: strings cannot keep `check` busy for minutes. Real files hold well under a million.
MAX_STRINGS = 8 * 1024 * 1024
#: Numeric arrays up to this length are decoded (per-layer head counts and the like); longer
#: ones (token types, scores) are skipped without reading them.
MAX_DECODED_NUMBERS = 65536
_FIRST_READ = 1024 * 1024
_DISPLAY_CHARS = 120

_HEADER_BYTES = 4 + 4 + 8 + 8  # magic, version, tensor count, key count
# smallest possible encodings, to reject counts the file cannot hold before looping over them
_MIN_KV_BYTES = 8 + 1 + 4 + 1  # key length, 1-byte key, value type, 1-byte value
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # name length, n_dims, type, offset

#: llama.cpp's LLM_ARCH_NAMES (src/llama-arch.cpp of the pinned llama-cpp-python 0.3.36),
#: without "clip" (a dummy used by llama-quantize) and "(unknown)".
_ARCH_NAMES = """
    llama llama4 deci falcon grok gpt2 gptj gptneox mpt baichuan starcoder refact bert
    modern-bert nomic-bert nomic-bert-moe neo-bert jina-bert-v2 jina-bert-v3 eurobert bloom
    stablelm qwen qwen2 qwen2moe qwen2vl qwen3 qwen3moe qwen3next qwen3vl qwen3vlmoe qwen35
    qwen35moe qwen4exp phi2 phi3 phimoe plamo plamo2 plamo3 codeshell orion internlm2 minicpm
    minicpm3 gemma gemma2 gemma3 gemma3n gemma4 gemma4-assistant gemma-embedding starcoder2
    mamba mamba2 maple jamba falcon-h1 xverse command-r cohere2 cohere2moe dbrx olmo olmo2
    olmoe muse-glimmer openelm arctic deepseek deepseek2 deepseek2-ocr deepseek32 deepseek4
    chatglm glm4 glm4moe glm-dsa bitnet t5 t5encoder jais jais2 nemotron nemotron_h
    nemotron_h_moe exaone exaone4 exaone-moe rwkv6 rwkv6qwen2 rwkv7 arwkv7 granite granitemoe
    granitehybrid graniteswitch granite_swa chameleon wavtokenizer-dec plm bailingmoe
    bailingmoe2 bailingmoe3 dots1 dots3note arcee afmoe laguna ernie4_5 ernie4_5-moe
    hunyuan-moe hunyuan-dense hunyuan_vl hy_v3 hy_v4 smollm3 gpt-oss lfm2 lfm2moe dream
    smallthinker llada llada-moe seed_oss grovemoe apertus minimax-01 hrm_text minimax-m2
    minimax-m3 cogvlm rnd1 pangu-embedded mistral3 eagle3 dflash mistral4 paddleocr mimo2
    step35 spark2_5 llama-embed maincoder kimi-linear kimi-k3 glm5-next talkie mellum
    nanbeige qwen3tts pockettts
"""
SUPPORTED_ARCHITECTURES: frozenset[str] = frozenset(_ARCH_NAMES.split())

# --- vocabulary semantics (src/llama-vocab.cpp, llama_vocab::impl::load) -------------------

#: tokenizer.ggml.model -> llama_vocab_type name (llama_vocab::type_name)
VOCAB_TYPES: dict[str, str] = {
    "no_vocab": "none",
    "none": "none",
    "llama": "SPM",
    "bert": "WPM",
    "gpt2": "BPE",
    "hybriddna": "BPE",
    "whitespace": "BPE",
    "gemma4": "BPE",
    "t5": "UGM",
    "rwkv": "RWKV",
    "test": "TEST",
    "plamo2": "PLaMo2",
}
# default (bos, eos) ids per tokenizer model, before the file's keys are applied
_DEFAULT_SPECIAL: dict[str, tuple[int | None, int | None]] = {
    "llama": (1, 2),
    "bert": (101, None),
    "gpt2": (11, 11),
    "hybriddna": (11, 11),
    "whitespace": (11, 11),
    "t5": (None, 1),
    "rwkv": (None, None),
    "test": (None, None),
    "plamo2": (1, 2),
    "gemma4": (None, None),
}
# default (add_bos, add_eos) per vocab type; BPE and the rest start from (False, False)
_DEFAULT_ADD = {
    "SPM": (True, False),
    "WPM": (True, False),
    "UGM": (False, True),
    "RWKV": (False, False),
}
# BPE pre-tokenizers for which llama.cpp turns add_bos on before reading the keys
_BPE_PRE_ADD_BOS = frozenset(
    {
        "llama3",
        "llama-v3",
        "llama-bpe",
        "falcon3",
        "falcon-h1",
        "pixtral",
        "midm-2.0",
        "lfm2",
        "jina-v5-nano",
        "tekken",
        "chameleon",
    }
)
# BPE pre-tokenizers whose default BOS id is "none"
_BPE_PRE_NO_BOS = frozenset({"chatglm-bpe", "glm4", "glm5"})
# BPE pre-tokenizers of type GEMMA4: add_bos is forced on even against the file's key
_BPE_PRE_GEMMA4 = frozenset({"gemma4", "granite-embed-multi-311m"})


def vocab_type(tokenizer_model: str) -> str:
    """The llama_vocab_type llama.cpp derives from `tokenizer.ggml.model` ("BPE", "SPM", ...)."""
    return VOCAB_TYPES.get(tokenizer_model, f"unknown ({tokenizer_model})")


@dataclass(frozen=True)
class VocabInfo:
    """The vocabulary as llama.cpp's loader ends up with it; ids are None where llama.cpp
    has LLAMA_TOKEN_NULL. `tokens` may hold lone surrogates (surrogateescape) for bytes
    that are not UTF-8, so that different bytes always compare different."""

    model: str
    pre: str | None
    tokens: tuple[str, ...]
    n_vocab: int
    add_bos: bool
    bos_id: int | None
    add_eos: bool
    eos_id: int | None
    eot_id: int | None = None

    @property
    def type(self) -> str:
        return vocab_type(self.model)


@dataclass(frozen=True)
class TensorMeta:
    """One tensor as the header describes it: what a loader would check its shape and type
    against (a drafter head's tensors), and where its data lies, for the few small tensors
    whose values must be checked before llama.cpp reads them (an EAGLE-3 head's d2t)."""

    shape: tuple[int, ...]  # ggml's ne order: shape[0] is the row length
    type: str  # the GGML type name, e.g. "F32", "I64", "Q4_K"
    offset: int  # absolute byte offset of the data in the file
    n_bytes: int


@dataclass
class GGUFInfo:
    """What a GGUF header says about a model; no tensor data was read to build it."""

    path: str
    file_size: int
    version: int
    architecture: str
    name: str | None
    size_label: str | None
    n_params: int
    file_type: int | None  # general.file_type, a llama_ftype
    quantization: str  # the file type's name (Q4_K_M), else the dominant tensor type
    dominant_type: str | None  # tensor type holding the most bytes
    context_length: int | None
    block_count: int | None
    embedding_length: int | None
    head_count: int | None
    head_count_kv: int | None  # the largest per-layer value when the file stores an array
    head_count_kv_per_layer: tuple[int, ...] | None
    key_length: int | None
    value_length: int | None
    vocab: VocabInfo
    chat_template: str | None
    n_tensors: int
    tensor_bytes: int
    alignment: int
    data_offset: int
    metadata: dict[str, object] = field(default_factory=dict)
    #: every tensor by name (the header's description; no data read)
    tensors: dict[str, TensorMeta] = field(default_factory=dict)
    #: the numeric arrays the reader decoded (those of at most MAX_DECODED_NUMBERS values,
    #: the tokenizer's left out), which `metadata` only summarises: e.g. an EAGLE-3 head's
    #: target layers
    arrays: dict[str, tuple[int | float, ...]] = field(default_factory=dict)

    @property
    def tensor_names(self) -> frozenset[str]:
        """Every tensor's name: what a header check needs to find a model's optional layers
        (its NextN layers: specgguf.heads.mtp_info) without reading any weight."""
        return frozenset(self.tensors)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a model needs at a context size: weights as stored, plus an f16 KV cache.
    `kv_bytes` is None when the header lacks the shapes (recurrent models, odd archs)."""

    n_ctx: int
    weights_bytes: int
    kv_bytes: int | None

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + (self.kv_bytes or 0)


def estimate_memory(info: GGUFInfo, n_ctx: int) -> MemoryEstimate:
    """Weights plus K and V in f16 for every layer. An upper bound: sliding-window layers and
    quantised caches need less, and llama.cpp's compute buffers are not counted."""
    row = kv_row_elements(info)
    kv = n_ctx * sum(row) * 2 if row is not None and n_ctx >= 0 else None
    return MemoryEstimate(n_ctx, info.tensor_bytes, kv)


def kv_row_elements(info: GGUFInfo) -> tuple[int, int] | None:
    """(K, V) elements one token adds to the KV cache, summed over the layers: per layer, its
    KV head count times the key (value) head size, which defaults to n_embd / n_head as in
    llama.cpp. None when the header lacks the shapes (recurrent models, odd archs)."""
    n_layer = info.block_count
    if not n_layer or not info.head_count:
        return None
    per_layer = info.head_count_kv_per_layer
    if per_layer is None or len(per_layer) != n_layer:
        n_kv = info.head_count_kv if info.head_count_kv is not None else info.head_count
        per_layer = (n_kv,) * n_layer
    head_dim = info.embedding_length // info.head_count if info.embedding_length else None
    k_dim = info.key_length or head_dim
    v_dim = info.value_length or head_dim
    if not k_dim or not v_dim:
        return None
    heads = sum(per_layer)
    return heads * k_dim, heads * v_dim


# --- reading --------------------------------------------------------------------------------

_U8 = struct.Struct("<B")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")


def _show(text: str, limit: int = 80) -> str:
    """Text from the file made safe for a one-line message: control characters and
    undecodable bytes escaped, long text cut."""
    out = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return out if len(out) <= limit else out[: limit - 1] + "…"


_SCALAR_FORMATS: dict[int, str] = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}
_SCALAR_STRUCTS = {t: struct.Struct("<" + f) for t, f in _SCALAR_FORMATS.items()}
_TYPE_NAMES = {int(t): t.name.lower() for t in GGUFValueType}

_FTYPE_NAMES: dict[int, str] = {
    int(ft): ft.name.removeprefix("MOSTLY_").removeprefix("ALL_")
    for ft in LlamaFileType
    if ft is not LlamaFileType.GUESSED
}

# string arrays whose elements we keep; all others are only walked
_KEEP_STRING_ARRAYS = frozenset({Keys.Tokenizer.LIST})


@dataclass(frozen=True)
class _Array:
    """An array value: its element type and length, and its elements where they were kept."""

    elem_type: int
    n: int
    values: tuple | None


class _Cursor:
    """A read position over the file, backed by one buffer holding the file from byte 0.

    The buffer grows (doubling, capped by the file size and MAX_METADATA_BYTES) only when a
    read needs bytes it does not have yet, so positions are plain file offsets."""

    __slots__ = ("path", "file", "size", "buf", "pos", "n_strings")

    def __init__(self, path: str, file, size: int) -> None:
        self.path = path
        self.file = file
        self.size = size
        self.buf = bytearray()
        self.pos = 0
        self.n_strings = 0

    def fail(self, message: str) -> ModelFileError:
        return ModelFileError(f"{self.path}: {message}")

    def truncated(self, what: str, end: int, size: int) -> ModelFileError:
        return self.fail(f"truncated: {what} ends at byte {end} but the file has {size} bytes")

    def need(self, n: int, what: str) -> None:
        """Make bytes [pos, pos+n) available, or fail saying what was being read."""
        end = self.pos + n
        if end <= len(self.buf):
            return
        if end > self.size:
            raise self.truncated(what, end, self.size)
        if end > MAX_METADATA_BYTES:
            raise self.fail(
                f"the GGUF metadata is larger than {MAX_METADATA_BYTES} bytes "
                f"(still reading {what} at byte {self.pos}); not a model specgguf can read"
            )
        want = min(self.size, MAX_METADATA_BYTES, max(end, 2 * len(self.buf), _FIRST_READ))
        try:
            chunk = self.file.read(want - len(self.buf))
        except OSError as err:
            raise self.fail(f"read error: {err.strerror or err}") from None
        self.buf += chunk
        if len(self.buf) < end:  # the file shrank under us
            raise self.truncated(what, end, len(self.buf))

    def remaining(self) -> int:
        return self.size - self.pos

    def unpack(self, st: struct.Struct, what: str):
        self.need(st.size, what)
        (value,) = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return value

    def string(self, what: str) -> bytes:
        n = self.unpack(_U64, f"{what} (length)")
        if n > self.remaining():
            raise self.fail(
                f"truncated or corrupt: {what} declares a string of {n} bytes "
                f"but only {self.remaining()} bytes remain in the file"
            )
        self.need(n, what)
        value = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return value

    def strings(self, n: int, what: str, keep: bool) -> tuple[str, ...] | None:
        """Walk n length-prefixed strings: the hot loop of a 150k-token vocab and its merges,
        so the buffer checks are inlined and only run when a string crosses its end."""
        self.n_strings += n
        if self.n_strings > MAX_STRINGS:
            raise self.fail(f"{what} brings the file to more than {MAX_STRINGS} strings; refusing")
        out: list[str] = []
        append = out.append if keep else None
        unpack = _U64.unpack_from
        buf, pos, end, size = self.buf, self.pos, len(self.buf), self.size
        for i in range(n):
            if pos + 8 > end:
                self.pos = pos
                self.need(8, f"{what}[{i}] (length)")
                buf, end = self.buf, len(self.buf)
            (length,) = unpack(buf, pos)
            pos += 8
            if pos + length > end:
                if length > size - pos:
                    raise self.fail(
                        f"truncated or corrupt: {what}[{i}] declares a string of {length} bytes "
                        f"but only {size - pos} bytes remain in the file"
                    )
                self.pos = pos
                self.need(length, f"{what}[{i}]")
                buf, end = self.buf, len(self.buf)
            if append is not None:
                # surrogateescape: bytes that are not UTF-8 still compare exactly
                append(buf[pos : pos + length].decode("utf-8", "surrogateescape"))
            pos += length
        self.pos = pos
        return tuple(out) if keep else None


def _value_type(cur: _Cursor, raw: int, label: str, in_array: bool) -> int:
    if in_array and raw == GGUFValueType.ARRAY:
        raise cur.fail(f"corrupt: key '{label}' is an array of arrays, which GGUF does not allow")
    if raw not in _TYPE_NAMES:
        kind = "array element type" if in_array else "value type"
        raise cur.fail(f"corrupt: key '{label}' has unknown {kind} {raw}")
    return raw


def _read_value(cur: _Cursor, vtype: int, key: str, label: str):
    """One value; `label` is the key made printable, for messages."""
    if vtype == GGUFValueType.STRING:
        return cur.string(f"the value of key '{label}'").decode("utf-8", "surrogateescape")
    if vtype != GGUFValueType.ARRAY:
        return cur.unpack(_SCALAR_STRUCTS[vtype], f"the value of key '{label}'")
    etype = _value_type(cur, cur.unpack(_U32, f"the array type of key '{label}'"), label, True)
    n = cur.unpack(_U64, f"the array length of key '{label}'")
    what = f"the array of key '{label}'"
    if etype == GGUFValueType.STRING:
        if n * 8 > cur.remaining():
            raise cur.fail(
                f"truncated or corrupt: key '{label}' declares an array of {n} strings "
                f"(at least {n * 8} bytes) but only {cur.remaining()} bytes remain in the file"
            )
        return _Array(etype, n, cur.strings(n, what, keep=key in _KEEP_STRING_ARRAYS))
    st = _SCALAR_STRUCTS[etype]
    nbytes = n * st.size
    if nbytes > cur.remaining():
        raise cur.fail(
            f"truncated or corrupt: key '{label}' declares an array of {n} "
            f"{_TYPE_NAMES[etype]} values "
            f"({nbytes} bytes) but only {cur.remaining()} bytes remain in the file"
        )
    values = None
    if n <= MAX_DECODED_NUMBERS:
        cur.need(nbytes, what)
        values = struct.unpack_from(f"<{n}{_SCALAR_FORMATS[etype]}", cur.buf, cur.pos)
    cur.pos += nbytes  # skipped arrays are never read: the buffer grows only when needed
    return _Array(etype, n, values)


def _read_kvs(cur: _Cursor, n_kv: int) -> dict[str, object]:
    kvs: dict[str, object] = {}
    for i in range(n_kv):
        key = cur.string(f"the name of key #{i}").decode("utf-8", "surrogateescape")
        label = _show(key)
        if not key:
            raise cur.fail(f"corrupt: key #{i} has an empty name")
        if key in kvs:
            raise cur.fail(f"corrupt: duplicate key '{label}'")
        vtype = _value_type(cur, cur.unpack(_U32, f"the type of key '{label}'"), label, False)
        kvs[key] = _read_value(cur, vtype, key, label)
    return kvs


@dataclass(frozen=True)
class _Tensor:
    name: str  # printable, for messages
    raw_name: bytes
    shape: tuple[int, ...]
    type: GGMLQuantizationType
    offset: int
    n_elements: int
    n_bytes: int


def _read_tensor(cur: _Cursor, i: int) -> _Tensor:
    raw_name = cur.string(f"the name of tensor #{i}")
    name = _show(raw_name.decode("utf-8", "surrogateescape"))  # for messages only
    if len(raw_name) >= MAX_TENSOR_NAME:
        raise cur.fail(f"corrupt: tensor #{i} has a {len(raw_name)}-byte name (the limit is 63)")
    n_dims = cur.unpack(_U32, f"the dimension count of tensor '{name}'")
    if n_dims > MAX_DIMS:
        raise cur.fail(f"corrupt: tensor '{name}' has {n_dims} dimensions (at most {MAX_DIMS})")
    shape = tuple(cur.unpack(_I64, f"the shape of tensor '{name}'") for _ in range(n_dims))
    if any(d < 0 for d in shape):
        raise cur.fail(f"corrupt: tensor '{name}' has a negative dimension {shape}")
    n_elements = 1
    for d in shape:
        n_elements *= d
    if n_elements >= 2**63:
        raise cur.fail(f"corrupt: tensor '{name}' shape {shape} overflows 64-bit element counts")
    raw_type = cur.unpack(_I32, f"the type of tensor '{name}'")
    try:
        ttype = GGMLQuantizationType(raw_type)
        block, type_size = GGML_QUANT_SIZES[ttype]
    except (ValueError, KeyError):
        raise cur.fail(f"corrupt: tensor '{name}' has unknown tensor type {raw_type}") from None
    row = shape[0] if shape else 1
    if row % block:
        raise cur.fail(
            f"corrupt: tensor '{name}' of type {ttype.name} has rows of {row} elements, "
            f"not a multiple of its block size {block}"
        )
    offset = cur.unpack(_U64, f"the data offset of tensor '{name}'")
    n_bytes = n_elements // block * type_size
    return _Tensor(name, raw_name, shape, ttype, offset, n_elements, n_bytes)


def _pad(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def _alignment(cur: _Cursor, kvs: dict[str, object]) -> int:
    value = kvs.get(Keys.General.ALIGNMENT)
    if value is None:
        return DEFAULT_ALIGNMENT
    if isinstance(value, _Array) or not isinstance(value, int) or isinstance(value, bool):
        raise cur.fail(f"corrupt: '{Keys.General.ALIGNMENT}' must be a uint32")
    if value <= 0 or value & (value - 1):
        raise cur.fail(f"corrupt: alignment {value} is not a power of 2")
    return value


def _check_tensor_data(cur: _Cursor, tensors: list[_Tensor], data_offset: int, alignment: int):
    """gguf.cpp demands contiguous, aligned offsets; llama.cpp's loader demands the data be
    inside the file. Truncation is reported by where the data would end."""
    expected = 0
    data_end = data_offset
    seen: set[bytes] = set()
    for t in tensors:
        if t.raw_name in seen:
            raise cur.fail(f"corrupt: duplicate tensor name '{t.name}'")
        seen.add(t.raw_name)
        if t.offset != expected:
            raise cur.fail(
                f"corrupt: tensor '{t.name}' has data offset {t.offset}, expected {expected}"
            )
        expected += _pad(t.n_bytes, alignment)
        data_end = max(data_end, data_offset + t.offset + t.n_bytes)
    if data_end > cur.size:
        raise cur.truncated("tensor data", data_end, cur.size)


@contextmanager
def _unusable(path: str) -> Iterator[None]:
    """The OS's refusals of `path` as one ModelFileError each."""
    try:
        yield
    except FileNotFoundError:
        raise ModelFileError(f"{path}: no such file") from None
    except PermissionError:
        raise ModelFileError(f"{path}: permission denied") from None
    except IsADirectoryError:
        raise ModelFileError(f"{path}: is a directory, not a GGUF file") from None
    except OSError as err:
        raise ModelFileError(f"{path}: cannot read: {err.strerror or err}") from None


def _open(path: str):
    """Open for reading, turning every way a path can be unusable into one ModelFileError.
    stat() first: opening a FIFO would block, and a directory is not an I/O error."""
    with _unusable(path):
        st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise ModelFileError(f"{path}: is a directory, not a GGUF file")
    if not stat.S_ISREG(st.st_mode):
        raise ModelFileError(f"{path}: not a regular file")
    with _unusable(path):
        return open(path, "rb")  # noqa: SIM115 - the caller closes it


def read_gguf_info(path: str | os.PathLike[str]) -> GGUFInfo:
    """Parse and validate a GGUF header. Every failure is a ModelFileError naming the file."""
    spath = os.fspath(path)
    with _open(spath) as f:
        size = os.fstat(f.fileno()).st_size
        cur = _Cursor(spath, f, size)
        return _parse(cur)


def _parse(cur: _Cursor) -> GGUFInfo:
    size = cur.size
    if size < 4:
        raise cur.fail(f"not a GGUF file (only {size} bytes)")
    cur.need(4, "the magic")
    if bytes(cur.buf[:4]) != b"GGUF":
        raise cur.fail(f"not a GGUF file (bad magic {bytes(cur.buf[:4])!r})")
    cur.pos = 4
    cur.need(_HEADER_BYTES - 4, "the header")
    version = cur.unpack(_U32, "the header")
    if version and version & 0xFFFF == 0:
        raise cur.fail(f"unsupported GGUF version {version:#x} (a big-endian file?)")
    if version not in SUPPORTED_VERSIONS:
        raise cur.fail(f"unsupported GGUF version {version} (specgguf reads versions 2 and 3)")
    n_tensors = cur.unpack(_I64, "the header")
    n_kv = cur.unpack(_I64, "the header")
    if n_tensors < 0 or n_kv < 0:
        raise cur.fail(f"corrupt header: negative counts ({n_tensors} tensors, {n_kv} keys)")
    if n_kv * _MIN_KV_BYTES + n_tensors * _MIN_TENSOR_INFO_BYTES > cur.remaining():
        raise cur.fail(
            f"truncated or corrupt header: {n_kv} keys and {n_tensors} tensors cannot fit in the "
            f"{cur.remaining()} bytes after the header"
        )
    kvs = _read_kvs(cur, n_kv)
    alignment = _alignment(cur, kvs)
    tensors = [_read_tensor(cur, i) for i in range(n_tensors)]
    data_offset = _pad(cur.pos, alignment) if n_tensors else cur.pos
    if data_offset > size:
        raise cur.fail(
            f"truncated: the tensor data section starts at byte {data_offset} "
            f"but the file has {size} bytes"
        )
    _check_tensor_data(cur, tensors, data_offset, alignment)
    return _build_info(cur, version, kvs, tensors, alignment, data_offset)


# --- interpretation -------------------------------------------------------------------------


def _get_str(kvs: dict[str, object], key: str) -> str | None:
    value = kvs.get(key)
    return value if isinstance(value, str) else None


def _get_int(kvs: dict[str, object], key: str) -> int | None:
    """A non-negative integer scalar, or None: hostile files may store anything anywhere."""
    value = kvs.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _get_int_or_layers(
    kvs: dict[str, object], key: str
) -> tuple[int | None, tuple[int, ...] | None]:
    """A hyperparameter llama.cpp reads with get_key_or_arr: a scalar, or one per layer."""
    value = kvs.get(key)
    if isinstance(value, _Array):
        nums = value.values or ()
        if nums and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in nums):
            return max(nums), tuple(nums)
        return None, None
    return _get_int(kvs, key), None


def _get_bool(kvs: dict[str, object], key: str) -> bool | None:
    value = kvs.get(key)
    return bool(value) if isinstance(value, int) else None


def _display(value: object) -> object:
    if isinstance(value, _Array):
        return f"<array of {value.n} {_TYPE_NAMES.get(value.elem_type, '?')}>"
    if isinstance(value, str):
        text = value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        return text if len(text) <= _DISPLAY_CHARS else text[: _DISPLAY_CHARS - 1] + "…"
    return value


def _build_vocab(cur: _Cursor, kvs: dict[str, object], arch: str) -> VocabInfo:
    model = _get_str(kvs, Keys.Tokenizer.MODEL)
    if model is None:
        raise cur.fail(f"no tokenizer: '{Keys.Tokenizer.MODEL}' is missing or not a string")
    if model not in VOCAB_TYPES:
        raise cur.fail(f"unknown tokenizer '{_show(model)}' ({Keys.Tokenizer.MODEL})")
    pre = _get_str(kvs, Keys.Tokenizer.PRE)
    vtype = VOCAB_TYPES[model]
    if vtype == "none":  # llama.cpp stops here: dummy tokens, no special ids, nothing added
        n = _get_int(kvs, Keys.LLM.VOCAB_SIZE.format(arch=arch)) or 0
        return VocabInfo(model, pre, (), n, False, None, False, None, None)

    arr = kvs.get(Keys.Tokenizer.LIST)
    if not isinstance(arr, _Array) or arr.elem_type != GGUFValueType.STRING or arr.values is None:
        raise cur.fail(f"no tokenizer vocab: '{Keys.Tokenizer.LIST}' is missing or not strings")
    tokens = tuple(t if t else f"[EMPTY_{i}]" for i, t in enumerate(arr.values))
    n_vocab = len(tokens)

    if model == "gemma4":
        pre = "gemma4"
    bos, eos = _DEFAULT_SPECIAL[model]
    add_bos, add_eos = _DEFAULT_ADD.get(vtype, (False, False))
    if vtype == "BPE":
        if pre in _BPE_PRE_ADD_BOS:
            add_bos = True
        if pre in _BPE_PRE_NO_BOS:
            bos = None

    def special(default: int | None, key: str) -> int | None:
        # out-of-range defaults are disabled; an out-of-range key keeps the default
        if default is not None and default >= n_vocab:
            default = None
        value = _get_int(kvs, key)
        return value if value is not None and value < n_vocab else default

    bos = special(bos, Keys.Tokenizer.BOS_ID)
    eos = special(eos, Keys.Tokenizer.EOS_ID)
    eot = special(None, Keys.Tokenizer.EOT_ID)
    key_bos = _get_bool(kvs, Keys.Tokenizer.ADD_BOS)
    key_eos = _get_bool(kvs, Keys.Tokenizer.ADD_EOS)
    add_bos = add_bos if key_bos is None else key_bos
    add_eos = add_eos if key_eos is None else key_eos
    if vtype == "BPE" and pre in _BPE_PRE_GEMMA4:
        add_bos = True  # llama.cpp's Gemma 4 workaround overrides the file
    return VocabInfo(model, pre, tokens, n_vocab, add_bos, bos, add_eos, eos, eot)


def _build_info(
    cur: _Cursor,
    version: int,
    kvs: dict[str, object],
    tensors: list[_Tensor],
    alignment: int,
    data_offset: int,
) -> GGUFInfo:
    arch = _get_str(kvs, Keys.General.ARCHITECTURE)
    if arch is None:
        raise cur.fail(f"no architecture: '{Keys.General.ARCHITECTURE}' is missing or not a string")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise cur.fail(f"unsupported architecture '{_show(arch)}'")
    vocab = _build_vocab(cur, kvs, arch)

    by_type: dict[str, int] = {}
    for t in tensors:
        by_type[t.type.name] = by_type.get(t.type.name, 0) + t.n_bytes
    dominant = max(by_type, key=by_type.__getitem__) if by_type else None
    file_type = _get_int(kvs, Keys.General.FILE_TYPE)
    quantization = _FTYPE_NAMES.get(file_type) if file_type is not None else None
    if quantization is None:
        quantization = dominant or "unknown"

    def arch_key(template: str) -> str:
        return template.format(arch=arch)

    head_count, _ = _get_int_or_layers(kvs, arch_key(Keys.Attention.HEAD_COUNT))
    head_count_kv, kv_layers = _get_int_or_layers(kvs, arch_key(Keys.Attention.HEAD_COUNT_KV))
    template = _get_str(kvs, Keys.Tokenizer.CHAT_TEMPLATE)
    if template is not None:
        template = template.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    name = _get_str(kvs, Keys.General.NAME)
    size_label = _get_str(kvs, Keys.General.SIZE_LABEL)
    return GGUFInfo(
        path=cur.path,
        file_size=cur.size,
        version=version,
        architecture=arch,
        name=_display(name) if name is not None else None,  # type: ignore[arg-type]
        size_label=_display(size_label) if size_label is not None else None,  # type: ignore[arg-type]
        n_params=sum(t.n_elements for t in tensors),
        file_type=file_type,
        quantization=quantization,
        dominant_type=dominant,
        context_length=_get_int(kvs, arch_key(Keys.LLM.CONTEXT_LENGTH)),
        block_count=_get_int(kvs, arch_key(Keys.LLM.BLOCK_COUNT)),
        embedding_length=_get_int(kvs, arch_key(Keys.LLM.EMBEDDING_LENGTH)),
        head_count=head_count,
        head_count_kv=head_count_kv,
        head_count_kv_per_layer=kv_layers,
        key_length=_get_int(kvs, arch_key(Keys.Attention.KEY_LENGTH)),
        value_length=_get_int(kvs, arch_key(Keys.Attention.VALUE_LENGTH)),
        vocab=vocab,
        chat_template=template,
        n_tensors=len(tensors),
        tensor_bytes=sum(t.n_bytes for t in tensors),
        alignment=alignment,
        data_offset=data_offset,
        metadata={k: _display(v) for k, v in kvs.items()},
        tensors={
            t.raw_name.decode("utf-8", "surrogateescape"): TensorMeta(
                t.shape, t.type.name, data_offset + t.offset, t.n_bytes
            )
            for t in tensors
        },
        arrays={
            k: tuple(v.values)
            for k, v in kvs.items()
            if isinstance(v, _Array)
            and v.elem_type != GGUFValueType.STRING
            and not k.startswith("tokenizer.")
            and v.values is not None
        },
    )

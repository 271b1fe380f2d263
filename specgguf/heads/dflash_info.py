"""Recognise a DFlash (or DSpark) drafter GGUF and check it against its target, from headers.

A DFlash drafter (architecture `dflash`) proposes a block of tokens in one pass: its KV cache
holds K/V made from the target's hidden states at every target position (the inputs of the
target layers named by `dflash.target_layers`, concatenated, so each row is as wide as the
drafter times that count), and a pass over [the last token, mask...] reads the draft of every
mask position at once. DSpark is the same architecture with a Markov head (`markov_w1`,
`markov_w2`: each position's logits biased by the previous position's choice, inside the
graph) and an optional confidence head, drafting from the anchor's own row when
`dflash.sample_from_anchor` (the default) says so; llama.cpp tells the two apart by the
Markov head's tensor, and so does this module.

llama.cpp's loader and graph assert on what a wrong file holds (tensors of other shapes, a
width other than the target's, a target whose graph does not record layer inputs); an assert
aborts the process. Everything they would assert on is checked here first, in one line each:
a drafter malformed in itself is a model-file error (exit 3), one made for another target an
incompatible pair (exit 4). Keys and tensors are those of llama.cpp's dflash loader
(src/models/dflash.cpp of the pinned llama-cpp-python 0.3.36), shapes in ggml's ne order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specgguf.binding.llama_ext import require_layer_inputs
from specgguf.errors import IncompatibleModelsError, ModelFileError
from specgguf.heads.head_checks import (
    HeardHead,
    attention_widths,
    check_d2t_targets,
    check_heard_layers,
    check_vocab_size,
    d2t_meta,
    expect_output,
    expect_tensor,
)
from specgguf.modelfiles.gguf_info import GGUFInfo

#: the architecture name of a DFlash / DSpark drafter GGUF
DFLASH_ARCH = "dflash"
#: the tensor that makes a dflash file a DSpark drafter (llama.cpp's own test)
MARKOV_TENSOR = "markov_w1.weight"
#: llama.cpp's block size when the file does not say (DFlash only: DSpark's graph needs the key)
DEFAULT_BLOCK_SIZE = 16
#: the key of the mask token the block's draft positions hold
MASK_KEY = "tokenizer.ggml.mask_token_id"


@dataclass(frozen=True)
class DflashHead(HeardHead):
    """What a DFlash or DSpark drafter needs of its target, read from its header."""

    n_layer: int
    block_size: int
    mask_token: int
    #: DSpark: the rank of its Markov head (0: a DFlash drafter)
    markov_rank: int
    has_confidence: bool
    #: DSpark: the anchor's own row is the first draft token (else a bonus slot, as DFlash)
    sample_from_anchor: bool
    #: attention inside the block is causal (llama.cpp's default for DFlash: not)
    causal: bool

    @property
    def spec_type(self) -> str:
        return "draft-dspark" if self.markov_rank else "draft-dflash"

    @property
    def anchor_drafts(self) -> bool:
        """Whether the block's first row (the last token's) gives the first draft token: a
        DSpark drafter sampling from its anchor; DFlash reads the mask rows only."""
        return bool(self.markov_rank) and self.sample_from_anchor

    @property
    def max_draft(self) -> int:
        """The most tokens one pass drafts: the block's mask rows (llama.cpp clamps
        --spec-draft-n-max to this)."""
        return self.block_size if self.anchor_drafts else self.block_size - 1

    def describe(self) -> str:
        """One phrase for `check`: which target layers it reads, its block, what it borrows."""
        kind = "DSpark drafter" if self.markov_rank else "DFlash drafter"
        layers = ", ".join(map(str, self.target_layers))
        borrowed = self.borrows
        return (
            f"{kind} over {len(self.target_layers)} target layers ({layers}), "
            f"{self.n_layer} layers of width {self.n_embd}, block of {self.block_size} "
            f"(at most {self.max_draft} draft tokens a pass)"
            + (f", Markov head of rank {self.markov_rank}" if self.markov_rank else "")
            + (f", a {self.n_draft_vocab}-token draft vocabulary (d2t)" if self.has_d2t else "")
            + (f"; borrows the target's {' and '.join(borrowed)}" if borrowed else "")
        )


def is_dflash(info: GGUFInfo) -> bool:
    """Whether a draft GGUF is a DFlash or DSpark drafter."""
    return info.architecture == DFLASH_ARCH


def dflash_type_of(info: GGUFInfo) -> str:
    """draft-dspark for a dflash file with a Markov head, else draft-dflash (llama.cpp's
    rule for taking the type from the file)."""
    return "draft-dspark" if MARKOV_TENSOR in info.tensors else "draft-dflash"


def _what(info: GGUFInfo) -> str:
    return "the DSpark drafter" if MARKOV_TENSOR in info.tensors else "the DFlash drafter"


def _int(info: GGUFInfo, key: str, default: int | None = None) -> int:
    value = info.metadata.get(key, default)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ModelFileError(f"{info.path}: {_what(info)} needs the key '{key}' (an integer)")


def _flag(info: GGUFInfo, name: str, default: bool) -> bool:
    value = info.metadata.get(f"{DFLASH_ARCH}.{name}", default)
    return value if isinstance(value, bool) else str(value).lower() == "true"


def read_dflash_head(info: GGUFInfo) -> DflashHead:
    """The drafter's keys and tensors checked as llama.cpp's loader and graph would (exit 3
    on what they would refuse or assert on)."""
    path, what = info.path, _what(info)
    dspark = MARKOV_TENSOR in info.tensors
    layers_raw = info.arrays.get(f"{DFLASH_ARCH}.target_layers")
    if not layers_raw or not all(isinstance(x, int) for x in layers_raw):
        raise ModelFileError(
            f"{path}: {what} needs '{DFLASH_ARCH}.target_layers' (the target layers it reads, "
            "a non-empty integer array)"
        )
    layers = tuple(int(x) for x in layers_raw)
    if info.metadata.get(f"{DFLASH_ARCH}.hyper_connection_count"):
        raise ModelFileError(
            f"{path}: a DeepSeek-V4 DSpark drafter (hyper-connection stages) is not supported "
            "by specgguf; its target, deepseek4, is not either"
        )
    if "selector_hidden.weight" in info.tensors:
        raise ModelFileError(
            f"{path}: a DFlash2 drafter (a candidate selector over the block) is not supported "
            "by specgguf yet; a DFlash or DSpark drafter is"
        )
    block_key = f"{DFLASH_ARCH}.block_size"
    block = _int(info, block_key, None if dspark else DEFAULT_BLOCK_SIZE)
    if block < 2:
        raise ModelFileError(f"{path}: {what}'s '{block_key}' is {block}: no room to draft")
    n_vocab = info.vocab.n_vocab
    mask = _int(info, MASK_KEY)
    if mask >= n_vocab:
        raise ModelFileError(
            f"{path}: {what}'s mask token {mask} is outside its vocabulary of {n_vocab}"
        )
    n_embd, n_head, n_layer = info.embedding_length, info.head_count, info.block_count
    if not n_embd or not n_head or n_embd % n_head or not n_layer:
        raise ModelFileError(
            f"{path}: {what}'s width {n_embd} is not a whole number of its {n_head} heads "
            f"over {n_layer} layers"
        )
    head_k, n_kv = attention_widths(info, what)
    n_ff = _int(info, f"{DFLASH_ARCH}.feed_forward_length")
    d2t = d2t_meta(info, what)
    n_draft_vocab = d2t.shape[0] if d2t is not None and d2t.shape else n_vocab
    expected: dict[str, tuple[int, ...] | None] = {
        "fc.weight": (len(layers) * n_embd, n_embd),
        "enc.output_norm.weight": (n_embd,),
        "output_norm.weight": (n_embd,),
    }
    for i in range(n_layer):
        expected |= {
            f"blk.{i}.attn_norm.weight": (n_embd,),
            f"blk.{i}.attn_q.weight": (n_embd, head_k * n_head),
            f"blk.{i}.attn_k.weight": (n_embd, n_kv),
            f"blk.{i}.attn_v.weight": (n_embd, n_kv) if f"blk.{i}.attn_v.weight" in info.tensors
            else None,
            f"blk.{i}.attn_output.weight": (head_k * n_head, n_embd),
            f"blk.{i}.attn_q_norm.weight": (head_k,),
            f"blk.{i}.attn_k_norm.weight": (head_k,),
            f"blk.{i}.ffn_norm.weight": (n_embd,),
            f"blk.{i}.ffn_gate.weight": (n_embd, n_ff),
            f"blk.{i}.ffn_up.weight": (n_embd, n_ff),
            f"blk.{i}.ffn_down.weight": (n_ff, n_embd),
        }  # fmt: skip
    rank = 0
    if dspark:
        w1 = info.tensors[MARKOV_TENSOR]
        rank = w1.shape[0] if w1.shape else 0
        expected |= {MARKOV_TENSOR: (rank, n_vocab), "markov_w2.weight": (rank, n_draft_vocab)}
    for name, shape in expected.items():
        expect_tensor(info, name, shape, what)
    conf = dspark and "conf_proj.weight" in info.tensors
    if conf:
        expect_tensor(info, "conf_proj.weight", (n_embd + rank, 1), what)
    output = expect_output(info, what, n_embd, n_draft_vocab)
    tok = expect_tensor(info, "token_embd.weight", None, what)
    if tok is not None and tok.shape != (n_embd, n_vocab):
        raise ModelFileError(
            f"{path}: {what}'s tensor 'token_embd.weight' has shape {list(tok.shape)}, "
            f"expected {[n_embd, n_vocab]}"
        )
    if d2t is not None and output is None:
        raise ModelFileError(
            f"{path}: {what} maps a {n_draft_vocab}-token draft vocabulary (d2t) but has no "
            "lm_head of its own ('output.weight') to score it"
        )
    return DflashHead(
        path=path, target_layers=layers, n_embd=n_embd, n_draft_vocab=n_draft_vocab,
        has_d2t=d2t is not None, own_output=output is not None, own_token_embd=tok is not None,
        n_layer=n_layer, block_size=block, mask_token=mask, markov_rank=rank, has_confidence=conf,
        sample_from_anchor=_flag(info, "sample_from_anchor", True),
        causal=_flag(info, "attention.causal", False),
    )  # fmt: skip


def check_dflash_pair(head_info: GGUFInfo, target: GGUFInfo) -> DflashHead:
    """The drafter checked in itself (exit 3), then against the target (exit 4): the target
    records the layers it reads, every layer exists, widths and vocabularies agree, d2t stays
    in the target's vocabulary."""
    head = read_dflash_head(head_info)
    what = _what(head_info)
    where = f"{head.path} over {target.path}"
    require_layer_inputs(target.architecture, where)
    n_embd_t = target.embedding_length
    if head.n_embd != n_embd_t:
        # its fc reads len(layers) rows of its own width: the target's rows must be as wide
        raise IncompatibleModelsError(
            f"{where}: {what} reads target rows of its width {head.n_embd}, this target's "
            f"hidden size is {n_embd_t}"
        )
    check_heard_layers(where, head.target_layers, target)
    n_vocab_t = check_vocab_size(where, head_info, what, target)
    check_d2t_targets(where, head_info, what, n_vocab_t)
    return head


#: what `check_dflash_pair` reads of a file, by --spec-type (for the roles table)
KINDS: Mapping[str, str] = {"draft-dflash": "a DFlash drafter", "draft-dspark": "a DSpark drafter"}

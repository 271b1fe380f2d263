"""Recognise an EAGLE-3 head GGUF and check it against its target, from the headers alone.

llama.cpp's loader and graph for the `eagle3` architecture assert on what a wrong file holds
(a head of another width, a layer count other than one, a draft-to-target map pointing past
the vocabulary, a target whose graph does not record layer inputs), and an assert aborts the
whole process. Everything they would assert on is checked here first, in one line each:
a head that is malformed in itself is a model-file error (exit 3); a head that is fine but
was not made for this target is an incompatible pair (exit 4).

The keys and tensors are those of llama.cpp's eagle3 loader (src/models/eagle3.cpp of the
pinned llama-cpp-python 0.3.36); shapes are in ggml's ne order (row length first).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from specgguf.backend.gguf_info import GGUFInfo, TensorMeta
from specgguf.backend.llama_ext import LAST_STATE_ARCHS, require_layer_inputs
from specgguf.backend.mtp_info import MTP_DRAFTERS
from specgguf.errors import IncompatibleModelsError, ModelFileError, UsageError

#: the architecture name of an EAGLE-3 head GGUF
EAGLE3_ARCH = "eagle3"
#: how many target layers an EAGLE-3 head fuses (llama.cpp refuses any other count)
N_TARGET_LAYERS = 3



@dataclass(frozen=True)
class Eagle3Head:
    """What an EAGLE-3 head needs of its target, read from its header."""

    path: str
    target_layers: tuple[int, ...]
    target_hidden_size: int
    n_embd: int
    #: rows of the head's lm_head (its draft vocabulary): len(d2t) when it has a map
    n_draft_vocab: int
    has_d2t: bool
    own_output: bool
    own_token_embd: bool

    @property
    def borrows(self) -> list[str]:
        """What the head takes from the target's model through the target's context."""
        own = (("token embeddings", self.own_token_embd), ("lm_head", self.own_output))
        return [name for name, has in own if not has]

    def describe(self) -> str:
        """One phrase for `check`: which target layers it reads and what it borrows."""
        borrowed = self.borrows
        layers = ", ".join(map(str, self.target_layers))
        return (
            f"EAGLE-3 head over {len(self.target_layers)} target layers ({layers}) of hidden "
            f"size {self.target_hidden_size}, width {self.n_embd}"
            + (f", a {self.n_draft_vocab}-token draft vocabulary (d2t)" if self.has_d2t else "")
            + (f"; borrows the target's {' and '.join(borrowed)}" if borrowed else "")
        )


def is_eagle3(info: GGUFInfo) -> bool:
    """Whether a draft GGUF is an EAGLE-3 head (its type is then draft-eagle3 without
    --spec-type)."""
    return info.architecture == EAGLE3_ARCH


#: the --spec-type a -md file of each drafter architecture makes (any other: draft-simple)
DRAFTER_TYPES: dict[str, str] = {
    EAGLE3_ARCH: "draft-eagle3",
    **dict.fromkeys(MTP_DRAFTERS, "draft-mtp"),
}


def draft_type_of(info: GGUFInfo) -> str:
    """The --spec-type a -md file makes when none is given: an EAGLE-3 head drafts as
    draft-eagle3, a separate MTP drafter as draft-mtp, any other model as draft-simple."""
    return DRAFTER_TYPES.get(info.architecture, "draft-simple")


def check_target_role(target: GGUFInfo) -> None:
    """A drafter head (an EAGLE-3 head, a Gemma-4 assistant) given as the target (-m): one line
    before any weight is read. Neither decodes alone: an EAGLE-3 head reads the target's hidden
    states and an assistant its KV cache, so llama.cpp would fail to create a context of its
    own and the user would be told of memory instead of the mix-up."""
    kind = DRAFTER_TYPES.get(target.architecture)
    if kind is None:
        return
    what = "an EAGLE-3 head" if kind == "draft-eagle3" else f"a {target.architecture} MTP drafter"
    raise ModelFileError(
        f"-m {target.path} is {what}, a drafter for a target model, not a model of its own: "
        f"give it after -md (-m TARGET -md {target.path})"
    )


def check_draft_role(types: list[str], draft: GGUFInfo | None) -> None:
    """A head asked to draft as a model, or a model asked to draft as a head: one line (a
    head cannot decode without the target's hidden states; a model has no encoder). A -md
    that no type uses beside draft-mtp (a plain model or an EAGLE-3 head with draft-mtp alone)
    would be ignored: refused instead."""
    if draft is None:
        return
    kind = DRAFTER_TYPES.get(draft.architecture)
    if kind is not None and "draft-simple" in types:
        what = "an EAGLE-3 head" if kind == "draft-eagle3" else "an MTP drafter"
        raise UsageError(
            f"-md {draft.path} is {what}, not a draft model: use --spec-type {kind} (or "
            "leave --spec-type out)"
        )
    head = kind == "draft-eagle3"
    if "draft-mtp" in types and (kind or "draft-simple") not in types:  # no type would use it
        raise UsageError(
            f"-md {draft.path} is a {draft.architecture} model, not an MTP drafter: draft-mtp "
            "drafts with the target's own NextN layers (leave -md out) or with a "
            f"{' or '.join(MTP_DRAFTERS)} file"
        )
    if not head and "draft-eagle3" in types:
        raise ModelFileError(
            f"--spec-type draft-eagle3 needs an EAGLE-3 head GGUF (architecture "
            f"{EAGLE3_ARCH}); -md {draft.path} is a {draft.architecture} model"
        )


def _key(info: GGUFInfo, name: str) -> object:
    return info.metadata.get(f"{EAGLE3_ARCH}.{name}")


def _int_key(info: GGUFInfo, name: str, *, required: bool = True) -> int | None:
    value = _key(info, name)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if required:
        raise ModelFileError(
            f"{info.path}: an EAGLE-3 head needs the key '{EAGLE3_ARCH}.{name}' (an integer)"
        )
    return None


def _expect(info: GGUFInfo, name: str, shape: tuple[int, ...] | None) -> TensorMeta | None:
    """The tensor `name` of the head, of `shape` (None: optional and absent is fine)."""
    t = info.tensors.get(name)
    if t is None:
        if shape is None:
            return None
        raise ModelFileError(f"{info.path}: the EAGLE-3 head lacks the tensor '{name}'")
    if shape is not None and t.shape != shape:
        raise ModelFileError(
            f"{info.path}: the EAGLE-3 head's tensor '{name}' has shape {list(t.shape)}, "
            f"its keys make it {list(shape)}"
        )
    return t


def read_eagle3_head(info: GGUFInfo) -> Eagle3Head:
    """The head's keys and tensors checked as llama.cpp's loader and graph would (exit 3 on
    what they would refuse or assert on)."""
    path = info.path
    layers_raw = info.arrays.get(f"{EAGLE3_ARCH}.target_layers")
    if layers_raw is None or not all(isinstance(x, int) for x in layers_raw):
        raise ModelFileError(
            f"{path}: an EAGLE-3 head needs '{EAGLE3_ARCH}.target_layers' (the target layers "
            "it reads, an integer array)"
        )
    layers = tuple(int(x) for x in layers_raw)
    if len(layers) != N_TARGET_LAYERS:
        raise ModelFileError(
            f"{path}: an EAGLE-3 head reads exactly {N_TARGET_LAYERS} target layers, "
            f"'{EAGLE3_ARCH}.target_layers' names {len(layers)}"
        )
    hidden = _int_key(info, "target_hidden_size")
    assert hidden is not None
    n_layer = info.block_count
    if n_layer != 1:
        raise ModelFileError(
            f"{path}: an EAGLE-3 head has one decoder layer, this one declares {n_layer}"
        )
    n_embd, n_head = info.embedding_length, info.head_count
    n_ff = _int_key(info, "feed_forward_length")
    if not n_embd or not n_head or n_embd % n_head:
        raise ModelFileError(
            f"{path}: the EAGLE-3 head's width {n_embd} is not a whole number of its {n_head} heads"
        )
    head_k = info.key_length or n_embd // n_head
    head_v = info.value_length or n_embd // n_head
    if head_k != head_v:
        raise ModelFileError(
            f"{path}: the EAGLE-3 head's key and value head sizes differ ({head_k}, {head_v})"
        )
    n_kv = (info.head_count_kv if info.head_count_kv is not None else n_head) * head_k
    d2t = _expect(info, "d2t", None)
    n_draft_vocab = d2t.shape[0] if d2t is not None and d2t.shape else info.vocab.n_vocab
    if d2t is not None and (len(d2t.shape) != 1 or d2t.type != "I64"):
        raise ModelFileError(
            f"{path}: the EAGLE-3 head's 'd2t' must be one row of I64 target ids, it is "
            f"{d2t.type} of shape {list(d2t.shape)}"
        )
    enc = N_TARGET_LAYERS * hidden
    attn = 2 * n_embd
    expected: Mapping[str, tuple[int, ...]] = {
        "fc.weight": (enc, n_embd),
        "output_norm.weight": (n_embd,),
        "blk.0.attn_norm.weight": (n_embd,),
        "blk.0.attn_norm_2.weight": (n_embd,),
        "blk.0.attn_q.weight": (attn, head_k * n_head),
        "blk.0.attn_k.weight": (attn, n_kv),
        "blk.0.attn_v.weight": (attn, n_kv),
        "blk.0.attn_output.weight": (head_k * n_head, n_embd),
        "blk.0.ffn_norm.weight": (n_embd,),
        "blk.0.ffn_gate.weight": (n_embd, n_ff),
        "blk.0.ffn_up.weight": (n_embd, n_ff),
        "blk.0.ffn_down.weight": (n_ff, n_embd),
    }
    if info.metadata.get(f"{EAGLE3_ARCH}.norm_before_fc"):
        expected = {**expected, "enc.output_norm.weight": (enc,)}
    for name, shape in expected.items():
        _expect(info, name, shape)
    output = _expect(info, "output.weight", None)
    if output is not None and output.shape != (n_embd, n_draft_vocab):
        raise ModelFileError(
            f"{path}: the EAGLE-3 head's tensor 'output.weight' has shape {list(output.shape)}, "
            f"expected {[n_embd, n_draft_vocab]}"
        )
    tok = _expect(info, "token_embd.weight", None)
    if tok is not None and (len(tok.shape) != 2 or tok.shape[0] != n_embd):
        raise ModelFileError(
            f"{path}: the EAGLE-3 head's tensor 'token_embd.weight' has shape "
            f"{list(tok.shape)}, expected rows of {n_embd}"
        )
    return Eagle3Head(
        path, layers, hidden, n_embd, n_draft_vocab, d2t is not None, output is not None,
        tok is not None,
    )  # fmt: skip


def read_d2t(info: GGUFInfo) -> np.ndarray | None:
    """The head's draft-to-target map (absolute target ids), read from the file: a small
    tensor (8 bytes per draft token), bounded by the header's own description of it."""
    t = info.tensors.get("d2t")
    if t is None:
        return None
    n = t.shape[0]
    with open(info.path, "rb") as f:
        f.seek(t.offset)
        data = f.read(n * 8)
    if len(data) != n * 8:
        raise ModelFileError(f"{info.path}: the EAGLE-3 head's 'd2t' data is truncated")
    return np.frombuffer(data, dtype="<i8")


def check_eagle3_pair(head_info: GGUFInfo, target: GGUFInfo) -> Eagle3Head:
    """The head checked in itself (exit 3), then against the target (exit 4): every layer it
    reads exists and is heard, widths and vocabularies agree, d2t stays in the vocabulary."""
    head = read_eagle3_head(head_info)
    where = f"{head.path} over {target.path}"
    require_layer_inputs(target.architecture, where)
    n_embd_t, n_layer_t = target.embedding_length, target.block_count or 0
    if head.target_hidden_size != n_embd_t:
        raise IncompatibleModelsError(
            f"{where}: the head was made for a target of hidden size "
            f"{head.target_hidden_size}, this target's is {n_embd_t}"
        )
    bad = [lid for lid in head.target_layers if not 0 <= lid <= n_layer_t]
    if bad:
        raise IncompatibleModelsError(
            f"{where}: the head reads target layer {bad[0]}, the target has {n_layer_t} layers"
        )
    if n_layer_t in head.target_layers and target.architecture not in LAST_STATE_ARCHS:
        raise IncompatibleModelsError(
            f"{where}: the head reads target layer {n_layer_t} (the last layer's output), which "
            f"this libllama does not hand over for a {target.architecture} target"
        )
    n_vocab_t = target.vocab.n_vocab
    if head_info.vocab.n_vocab != n_vocab_t:
        raise IncompatibleModelsError(
            f"{where}: the head's vocabulary has {head_info.vocab.n_vocab} tokens, the "
            f"target's {n_vocab_t}"
        )
    borrows = head.borrows
    if borrows and head.n_embd != n_embd_t:
        raise IncompatibleModelsError(
            f"{where}: the head borrows the target's {' and '.join(borrows)}, but its width "
            f"{head.n_embd} is not the target's {n_embd_t}"
        )
    if head.has_d2t and not head.own_output and head.n_draft_vocab != n_vocab_t:
        raise IncompatibleModelsError(
            f"{where}: the head's d2t maps {head.n_draft_vocab} draft tokens but it borrows "
            f"the target's lm_head of {n_vocab_t}"
        )
    d2t = read_d2t(head_info)
    if d2t is not None and d2t.size and (int(d2t.min()) < 0 or int(d2t.max()) >= n_vocab_t):
        worst = int(d2t.max()) if int(d2t.max()) >= n_vocab_t else int(d2t.min())
        raise IncompatibleModelsError(
            f"{where}: the head's d2t maps a draft token to target id {worst}, outside the "
            f"target's vocabulary of {n_vocab_t}"
        )
    return head

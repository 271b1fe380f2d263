"""The header checks every drafter head that hears the target shares (EAGLE-3, DFlash).

A head file names the target layers it reads, may map a smaller draft vocabulary to target
ids (`d2t`) and must hold tensors of the shapes its own keys imply; llama.cpp asserts on each
of these when they are wrong, and an assert aborts the whole process. The checks are here once,
worded for the head they check (`what`: "the EAGLE-3 head", "the DFlash drafter"), so that
each head's module (eagle3_info, dflash_info) states only what is its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specgguf.binding.llama_ext import LAST_STATE_ARCHS
from specgguf.errors import IncompatibleModelsError, ModelFileError
from specgguf.modelfiles.gguf_info import GGUFInfo, TensorMeta


@dataclass(frozen=True)
class HeardHead:
    """What every head that hears the target reads of its own header (an EAGLE-3 head, a
    DFlash or DSpark drafter); each head's own facts are a subclass's fields."""

    path: str
    target_layers: tuple[int, ...]
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


def expect_tensor(
    info: GGUFInfo, name: str, shape: tuple[int, ...] | None, what: str
) -> TensorMeta | None:
    """The tensor `name` of the head, of `shape` (None: optional, and absent is fine)."""
    t = info.tensors.get(name)
    if t is None:
        if shape is None:
            return None
        raise ModelFileError(f"{info.path}: {what} lacks the tensor '{name}'")
    if shape is not None and t.shape != shape:
        raise ModelFileError(
            f"{info.path}: {what}'s tensor '{name}' has shape {list(t.shape)}, "
            f"its keys make it {list(shape)}"
        )
    return t


def attention_widths(info: GGUFInfo, what: str) -> tuple[int, int]:
    """(the head size, the width of a K or V row): key and value heads must be of one size
    (exit 3), each taken from its key where the file has one, else the width over the heads.
    The width and head count are checked first by the caller."""
    n_embd, n_head = info.embedding_length, info.head_count
    head_k = info.key_length or n_embd // n_head
    head_v = info.value_length or n_embd // n_head
    if head_k != head_v:
        raise ModelFileError(
            f"{info.path}: {what}'s key and value head sizes differ ({head_k}, {head_v})"
        )
    n_head_kv = info.head_count_kv if info.head_count_kv is not None else n_head
    return head_k, n_head_kv * head_k


def expect_output(
    info: GGUFInfo, what: str, n_embd: int, n_draft_vocab: int
) -> TensorMeta | None:
    """The head's own lm_head, if it has one, scoring its draft vocabulary (exit 3)."""
    output = expect_tensor(info, "output.weight", None, what)
    if output is not None and output.shape != (n_embd, n_draft_vocab):
        raise ModelFileError(
            f"{info.path}: {what}'s tensor 'output.weight' has shape {list(output.shape)}, "
            f"expected {[n_embd, n_draft_vocab]}"
        )
    return output


def d2t_meta(info: GGUFInfo, what: str) -> TensorMeta | None:
    """The head's `d2t` tensor, checked to be one row of I64 target ids (None: no map)."""
    d2t = info.tensors.get("d2t")
    if d2t is not None and (len(d2t.shape) != 1 or d2t.type != "I64"):
        raise ModelFileError(
            f"{info.path}: {what}'s 'd2t' must be one row of I64 target ids, it is "
            f"{d2t.type} of shape {list(d2t.shape)}"
        )
    return d2t


def read_d2t(info: GGUFInfo, what: str = "the EAGLE-3 head") -> np.ndarray | None:
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
        raise ModelFileError(f"{info.path}: {what}'s 'd2t' data is truncated")
    return np.frombuffer(data, dtype="<i8")


def check_heard_layers(where: str, layers: Sequence[int], target: GGUFInfo) -> None:
    """Every layer the head reads exists in the target, and its last layer's output (id ==
    n_layer) only where this libllama hands it over (exit 4)."""
    n_layer_t = target.block_count or 0
    bad = [lid for lid in layers if not 0 <= lid <= n_layer_t]
    if bad:
        raise IncompatibleModelsError(
            f"{where}: the head reads target layer {bad[0]}, the target has {n_layer_t} layers"
        )
    if n_layer_t in layers and target.architecture not in LAST_STATE_ARCHS:
        raise IncompatibleModelsError(
            f"{where}: the head reads target layer {n_layer_t} (the last layer's output), which "
            f"this libllama does not hand over for a {target.architecture} target"
        )


def check_d2t_targets(where: str, head_info: GGUFInfo, what: str, n_vocab_t: int) -> None:
    """Every id the head's d2t maps to lies inside the target's vocabulary (exit 4)."""
    d2t = read_d2t(head_info, what)
    if d2t is not None and d2t.size and (int(d2t.min()) < 0 or int(d2t.max()) >= n_vocab_t):
        worst = int(d2t.max()) if int(d2t.max()) >= n_vocab_t else int(d2t.min())
        raise IncompatibleModelsError(
            f"{where}: the head's d2t maps a draft token to target id {worst}, outside the "
            f"target's vocabulary of {n_vocab_t}"
        )


def check_vocab_size(where: str, head_info: GGUFInfo, what: str, target: GGUFInfo) -> int:
    """The head drafts in the target's vocabulary: the same number of tokens (exit 4).
    Returns that number."""
    n_vocab_t = target.vocab.n_vocab
    if head_info.vocab.n_vocab != n_vocab_t:
        raise IncompatibleModelsError(
            f"{where}: {what}'s vocabulary has {head_info.vocab.n_vocab} tokens, the "
            f"target's {n_vocab_t}"
        )
    return n_vocab_t

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

from specgguf.binding.llama_ext import require_layer_inputs
from specgguf.errors import IncompatibleModelsError, ModelFileError, UsageError
from specgguf.heads.dflash_info import DFLASH_ARCH, dflash_type_of, is_dflash
from specgguf.heads.dflash_info import KINDS as DFLASH_KINDS
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
from specgguf.heads.mtp_info import MTP_DRAFTERS
from specgguf.modelfiles.gguf_info import GGUFInfo, TensorMeta

#: the architecture name of an EAGLE-3 head GGUF
EAGLE3_ARCH = "eagle3"
#: how many target layers an EAGLE-3 head fuses (llama.cpp refuses any other count)
N_TARGET_LAYERS = 3
#: how the messages name it
WHAT = "the EAGLE-3 head"


@dataclass(frozen=True)
class Eagle3Head(HeardHead):
    """What an EAGLE-3 head needs of its target, read from its header."""

    target_hidden_size: int

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


#: the --spec-type a -md file of each drafter architecture makes (any other: draft-simple; a
#: dflash file makes draft-dspark instead when it has a Markov head: `draft_type_of`)
DRAFTER_TYPES: dict[str, str] = {
    EAGLE3_ARCH: "draft-eagle3",
    DFLASH_ARCH: "draft-dflash",
    **dict.fromkeys(MTP_DRAFTERS, "draft-mtp"),
}
#: the drafter heads, which hear the target and draft only as their own type: how a message
#: names each
HEAD_KINDS: dict[str, str] = {"draft-eagle3": "an EAGLE-3 head", **DFLASH_KINDS}


def draft_type_of(info: GGUFInfo) -> str:
    """The --spec-type a -md file makes when none is given: an EAGLE-3 head drafts as
    draft-eagle3, a DFlash or DSpark drafter as draft-dflash or draft-dspark, a separate MTP
    drafter as draft-mtp, any other model as draft-simple."""
    if is_dflash(info):
        return dflash_type_of(info)
    return DRAFTER_TYPES.get(info.architecture, "draft-simple")


def _kind_name(info: GGUFInfo, kind: str) -> str:
    return HEAD_KINDS.get(kind, f"a {info.architecture} MTP drafter")


def check_target_role(target: GGUFInfo) -> None:
    """A drafter head (an EAGLE-3 head, a DFlash drafter, a Gemma-4 assistant) given as the
    target (-m): one line before any weight is read. None decodes alone: a head reads the
    target's hidden states and an assistant its KV cache, so llama.cpp would fail to create a
    context of its own and the user would be told of memory instead of the mix-up."""
    if target.architecture not in DRAFTER_TYPES:
        return
    what = _kind_name(target, draft_type_of(target))
    raise ModelFileError(
        f"-m {target.path} is {what}, a drafter for a target model, not a model of its own: "
        f"give it after -md (-m TARGET -md {target.path})"
    )


def check_draft_role(types: list[str], draft: GGUFInfo | None) -> None:
    """A head asked to draft as a model or as another head, or a model asked to draft as a
    head: one line (a head cannot decode without the target's hidden states; a model has no
    encoder). A -md that no type uses beside draft-mtp (a plain model or a head with
    draft-mtp alone) would be ignored: refused instead."""
    if draft is None:
        return
    kind = draft_type_of(draft) if draft.architecture in DRAFTER_TYPES else None
    if kind is not None and "draft-simple" in types:
        what = HEAD_KINDS.get(kind, "an MTP drafter")
        raise UsageError(
            f"-md {draft.path} is {what}, not a draft model: use --spec-type {kind} (or "
            "leave --spec-type out)"
        )
    if "draft-mtp" in types and (kind or "draft-simple") not in types:  # no type would use it
        raise UsageError(
            f"-md {draft.path} is a {draft.architecture} model, not an MTP drafter: draft-mtp "
            "drafts with the target's own NextN layers (leave -md out) or with a "
            f"{' or '.join(MTP_DRAFTERS)} file"
        )
    for wanted, what in HEAD_KINDS.items():
        if wanted in types and kind != wanted:
            arch = EAGLE3_ARCH if wanted == "draft-eagle3" else DFLASH_ARCH
            other = f" ({HEAD_KINDS[kind]})" if kind in HEAD_KINDS else ""
            raise ModelFileError(
                f"--spec-type {wanted} needs {what} GGUF (architecture {arch}); -md "
                f"{draft.path} is a {draft.architecture} model{other}"
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
    return expect_tensor(info, name, shape, WHAT)


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
    head_k, n_kv = attention_widths(info, WHAT)
    d2t = d2t_meta(info, WHAT)
    n_draft_vocab = d2t.shape[0] if d2t is not None and d2t.shape else info.vocab.n_vocab
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
    output = expect_output(info, WHAT, n_embd, n_draft_vocab)
    tok = _expect(info, "token_embd.weight", None)
    if tok is not None and (len(tok.shape) != 2 or tok.shape[0] != n_embd):
        raise ModelFileError(
            f"{path}: the EAGLE-3 head's tensor 'token_embd.weight' has shape "
            f"{list(tok.shape)}, expected rows of {n_embd}"
        )
    return Eagle3Head(
        path=path, target_layers=layers, target_hidden_size=hidden, n_embd=n_embd,
        n_draft_vocab=n_draft_vocab, has_d2t=d2t is not None, own_output=output is not None,
        own_token_embd=tok is not None,
    )  # fmt: skip


def check_eagle3_pair(head_info: GGUFInfo, target: GGUFInfo) -> Eagle3Head:
    """The head checked in itself (exit 3), then against the target (exit 4): every layer it
    reads exists and is heard, widths and vocabularies agree, d2t stays in the vocabulary."""
    head = read_eagle3_head(head_info)
    where = f"{head.path} over {target.path}"
    require_layer_inputs(target.architecture, where)
    n_embd_t = target.embedding_length
    if head.target_hidden_size != n_embd_t:
        raise IncompatibleModelsError(
            f"{where}: the head was made for a target of hidden size "
            f"{head.target_hidden_size}, this target's is {n_embd_t}"
        )
    check_heard_layers(where, head.target_layers, target)
    n_vocab_t = check_vocab_size(where, head_info, "the head", target)
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
    check_d2t_targets(where, head_info, WHAT, n_vocab_t)
    return head

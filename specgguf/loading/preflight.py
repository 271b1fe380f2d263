"""Refuse what cannot work before any weight is read: unreadable files, incompatible pairs.

Metadata comes from the bounded GGUF reader (specgguf.modelfiles.gguf_info), so a broken or
hostile file costs milliseconds and one clear line instead of a crash inside llama.cpp.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specgguf.heads.dflash_info import DflashHead, check_dflash_pair, is_dflash
from specgguf.heads.eagle3_info import (
    Eagle3Head,
    check_eagle3_pair,
    check_target_role,
    is_eagle3,
)
from specgguf.heads.mtp_info import MtpDrafterFile, check_mtp_drafter_pair, is_mtp_drafter
from specgguf.modelfiles.compat import check_compatible, require_compatible
from specgguf.modelfiles.gguf_info import GGUFInfo, read_gguf_info

#: The context size when -c is not given, capped at the model's training context. llama.cpp
#: long defaulted to 4096: enough for a prompt and a long answer, while -c 0 (the training
#: context, 32k for Qwen2.5) costs an f16 KV cache eight times larger and a slower first token.
DEFAULT_N_CTX = 4096


@dataclass(frozen=True)
class Preflight:
    target: GGUFInfo
    draft: GGUFInfo | None
    #: the draft's vocabulary differs from the target's: it drafts through text
    cross_vocab: bool = False
    #: the draft is an EAGLE-3 head, checked against the target (specgguf.heads.eagle3_info)
    eagle3: Eagle3Head | None = None
    #: the draft is a DFlash or DSpark drafter, checked against the target (dflash_info)
    dflash: DflashHead | None = None
    #: the draft is a separate MTP drafter, checked against the target (mtp_info)
    mtp_drafter: MtpDrafterFile | None = None


def preflight(target: Path, draft: Path | None, *, strict_vocab: bool = False) -> Preflight:
    """Read both headers; an incompatible pair is refused (exit 4) only with `strict_vocab`
    (--spec-vocab-strict, llama.cpp's rule), else it is marked for cross-vocabulary drafting.
    A draft that is an EAGLE-3 head is checked against the target instead (exit 3 or 4, see
    specgguf.heads.eagle3_info): it drafts in the target's own vocabulary; so are a DFlash
    or DSpark drafter (specgguf.heads.dflash_info) and a separate MTP drafter (exit 4,
    specgguf.heads.mtp_info). A drafter head given as the target is refused first (exit 3:
    it belongs after -md)."""
    t = read_gguf_info(target)
    check_target_role(t)
    d = read_gguf_info(draft) if draft is not None else None
    cross = False
    if d is not None and is_eagle3(d):
        return Preflight(t, d, eagle3=check_eagle3_pair(d, t))
    if d is not None and is_dflash(d):
        return Preflight(t, d, dflash=check_dflash_pair(d, t))
    if d is not None and is_mtp_drafter(d):
        return Preflight(t, d, mtp_drafter=check_mtp_drafter_pair(d, t))
    if d is not None:
        if strict_vocab:
            require_compatible(t.vocab, d.vocab)
        else:
            cross = not check_compatible(t.vocab, d.vocab).ok
    return Preflight(t, d, cross)


def draft_kind(draft: GGUFInfo, target: GGUFInfo) -> str:
    """What `check` says a -md file is: an EAGLE-3 head, a DFlash or DSpark drafter or a
    separate MTP drafter described once checked against the target as `run` checks it (exit
    3 or 4), else "draft model"."""
    if is_eagle3(draft):
        return check_eagle3_pair(draft, target).describe()
    if is_dflash(draft):
        return check_dflash_pair(draft, target).describe()
    if is_mtp_drafter(draft):
        return check_mtp_drafter_pair(draft, target).describe()
    return "draft model"


def resolve_n_ctx(requested: int | None, n_ctx_train: int | None) -> tuple[int, str | None]:
    """The context size to create and, when -c asks for more than the model was trained on, a
    one-line warning (llama.cpp warns too: positions beyond training may not be handled).

    None (no -c): DEFAULT_N_CTX, capped at the training context. 0: the training context
    (llama.cpp's own meaning of -c 0; 0 is passed on when the GGUF does not say it). Pure: the
    training context comes from the GGUF header, read before any weight is loaded.
    """
    train = n_ctx_train if n_ctx_train and n_ctx_train > 0 else None
    if requested is None:
        return (min(DEFAULT_N_CTX, train) if train else DEFAULT_N_CTX), None
    if requested == 0:
        return (train or 0), None
    if train and requested > train:
        return requested, (
            f"-c {requested} is larger than the model's training context ({train} tokens): "
            f"text past position {train} may degrade"
        )
    return requested, None



def slot_pool(requested: int | None, n_ctx: int, parallel: int, per_slot: int) -> int:
    """serve --kv-unified-per-slot N: the context to create for `parallel` slots, where `n_ctx`
    is what resolve_n_ctx made of -c (`requested`); N <= 0: unset, `n_ctx` as it was.

    llama-server's rule: without -c the shared pool is -np x N tokens; with -c (0 too) the
    pool is -c and no slot holds more than N (Session caps each slot). Here every slot holds
    a fixed share of the pool (-c / -np), so where that share is above N the pool is made
    -np x N: the cells no slot could reach are not allocated."""
    if per_slot <= 0:
        return n_ctx
    if requested is None or n_ctx // parallel > per_slot:
        return parallel * per_slot
    return n_ctx

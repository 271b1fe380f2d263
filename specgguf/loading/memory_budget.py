"""Refuse a context that cannot fit in memory, before llama.cpp allocates it.

llama.cpp allocates a context's whole KV cache when the context is created, and clears it.
On Linux the allocation succeeds far beyond physical memory (overcommit) and the clearing then
commits page after page, so `-c 2000000000` grows until the kernel kills the process (and maybe
others) with no message. Here the bytes a set of contexts will hold are estimated from the GGUF
header (layers, KV heads, head sizes, the -ctk/-ctv cache types) plus compute-buffer margins,
and compared with what the machine can give them: /proc/meminfo's MemAvailable, plus the free
memory of the GPUs when layers are offloaded (an upper bound on where the cache can go, so a
context that fits somewhere is never refused). Weights are not counted: they are memory-mapped
file pages the kernel can drop and re-read, not anonymous memory.

The arithmetic (`context_bytes`, `total_bytes`, `tokens_that_fit`) is pure; `available_bytes`
reads the machine; `check_session` is what Session calls, `require_fits` what it ends in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from specgguf.errors import ExitCode, SpecggufError
from specgguf.heads.mtp_info import mtp_layers
from specgguf.modelfiles.ggml_types import KV_CACHE_TYPES
from specgguf.modelfiles.gguf_info import GGUFInfo, kv_row_elements

#: bytes of memory the machine may give (overrides /proc/meminfo): for tests, and for a
#: container whose limit MemAvailable does not show
AVAILABLE_ENV = "SPECGGUF_MEM_AVAILABLE"
MEMINFO = "/proc/meminfo"
#: llama.cpp rounds a context up to a multiple of this many cells
CTX_PAD = 256
#: per context: graph scratch beyond the logits and attention rows counted below
GRAPH_MARGIN = 64 << 20
_F32 = 4


def kv_type_bytes(cache_type: str, n_elements: int) -> int:
    """Bytes `n_elements` take in a KV cache of `cache_type` (f16: 2 each; q8_0: 34 per 32)."""
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(KV_CACHE_TYPES[cache_type])]
    return -(-n_elements // block) * size


@dataclass(frozen=True)
class ContextPlan:
    """One llama.cpp context to be created: whose model, how many cells, which cache types."""

    role: str  # "target" or "draft", for the message
    info: GGUFInfo
    n_ctx: int  # cells per context (already divided between slots)
    count: int  # how many such contexts (one per slot)
    type_k: str
    type_v: str


def _padded(n_ctx: int) -> int:
    return -(-n_ctx // CTX_PAD) * CTX_PAD


def context_bytes(plan: ContextPlan, *, n_ubatch: int, flash_attn: str) -> int | None:
    """Bytes of one context of `plan`: its KV cache, a margin for the graph's scratch and (with
    flash attention off) one micro-batch's attention scores over the whole cache; None when the
    header does not give the cache's shape. The cache is an upper bound (sliding-window layers
    need less); the margins only keep "fits exactly" from passing."""
    row = kv_row_elements(plan.info)
    if row is None or plan.n_ctx <= 0:
        return None
    cells = _padded(plan.n_ctx)
    kv = kv_type_bytes(plan.type_k, cells * row[0]) + kv_type_bytes(plan.type_v, cells * row[1])
    compute = GRAPH_MARGIN
    if flash_attn == "off" and plan.info.head_count:
        compute += n_ubatch * cells * plan.info.head_count * _F32
    return kv + compute


def logits_bytes(plan: ContextPlan, n_ubatch: int) -> int:
    """A micro-batch's logits, the largest tensor of a model's graph: counted once per model,
    not per slot, since the slots decode one at a time and an idle context's untouched
    buffer pages are never committed."""
    return n_ubatch * plan.info.vocab.n_vocab * _F32


def total_bytes(plans: Sequence[ContextPlan], *, n_ubatch: int, flash_attn: str) -> int | None:
    """Bytes of every context of `plans`; None when any of them cannot be estimated."""
    total = 0
    for plan in plans:
        one = context_bytes(plan, n_ubatch=n_ubatch, flash_attn=flash_attn)
        if one is None:
            return None
        total += one * plan.count + logits_bytes(plan, n_ubatch)
    return total


def tokens_that_fit(
    plans: Sequence[ContextPlan], n_ctx: int, available: int, *, n_ubatch: int, flash_attn: str
) -> int:
    """The largest -c below `n_ctx`, a multiple of CTX_PAD, whose contexts fit in `available`
    (0: not even CTX_PAD does). The cost grows with the context, so a bisection finds it."""

    def fits(c: int) -> bool:
        scaled = [_rescale(p, c, n_ctx) for p in plans]
        need = total_bytes(scaled, n_ubatch=n_ubatch, flash_attn=flash_attn)
        return need is not None and need <= available

    lo, hi = 0, n_ctx // CTX_PAD  # in units of CTX_PAD: lo fits (or is 0), hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid * CTX_PAD):
            lo = mid
        else:
            hi = mid
    return lo * CTX_PAD


def _rescale(plan: ContextPlan, n_ctx: int, asked: int) -> ContextPlan:
    """`plan` as it would be for a total context of `n_ctx` instead of `asked`."""
    per = max(plan.n_ctx * n_ctx // max(asked, 1), 1)
    return ContextPlan(plan.role, plan.info, per, plan.count, plan.type_k, plan.type_v)


def available_bytes(env: Mapping[str, str] | None = None, meminfo: str = MEMINFO) -> int | None:
    """Memory this process may still take: AVAILABLE_ENV when set, else MemAvailable from
    /proc/meminfo (which counts reclaimable page cache, not only free pages); None where
    neither says (no /proc: the check is then skipped)."""
    env = os.environ if env is None else env
    forced = env.get(AVAILABLE_ENV)
    if forced:
        try:
            return int(forced)
        except ValueError:
            raise SpecggufError(
                f"{AVAILABLE_ENV}={forced!r}: expected a number of bytes", ExitCode.USAGE
            ) from None
    try:
        with open(meminfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def gib(n: float) -> str:
    """Bytes for a message: 1.5 GiB, 730 MiB, 12.3 TiB."""
    for unit, shift in (("TiB", 40), ("GiB", 30)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n / (1 << 20):.0f} MiB"


def require_fits(
    plans: Sequence[ContextPlan],
    n_ctx: int,
    *,
    n_ubatch: int,
    flash_attn: str,
    device_free: int = 0,
    available: int | None = None,
) -> None:
    """Raise one line (exit 7, RUNTIME) when the contexts of `plans` cannot fit in the host's
    available memory plus `device_free` (the offload devices' free memory). Nothing is refused
    when either side cannot be estimated."""
    need = total_bytes(plans, n_ubatch=n_ubatch, flash_attn=flash_attn)
    host = available if available is not None else available_bytes()
    if need is None or host is None:
        return
    have = host + device_free
    if need <= have:
        return
    where = f"{gib(host)} available"
    if device_free:
        where += f" + {gib(device_free)} free on GPUs"
    parts = ", ".join(
        f"{p.role}{f' x{p.count} slots' if p.count > 1 else ''}" for p in plans if p.count
    )
    fit = tokens_that_fit(plans, n_ctx, have, n_ubatch=n_ubatch, flash_attn=flash_attn)
    hint = f"try -c {fit} or less" if fit else "not even the smallest context fits"
    raise SpecggufError(
        f"-c {n_ctx} needs about {gib(need)} for the KV caches and compute buffers ({parts}), "
        f"more than this machine has ({where}): {hint}",
        ExitCode.RUNTIME,
    )


def offload_free_bytes() -> int:
    """Free memory of the GPUs layers may be offloaded to (0 without GPU offload). Asking a
    GPU initialises it, so this runs only when layers are to be offloaded."""
    from specgguf.binding import engine

    if not engine.gpu_offload_supported():
        return 0
    return sum(d.free for d in engine.backend_devices(memory=True) if d.kind in ("gpu", "igpu"))


def nextn_blocks(info: GGUFInfo) -> GGUFInfo | None:
    """The target's header as its MTP head's context holds it: the NextN blocks only (the
    head's KV cache has those layers and no others, as llama.cpp's MTP context filters
    them); None when the header declares none. The target's own estimate counts them too
    (its block count includes them), which keeps both an upper bound."""
    layers = mtp_layers(info)
    if layers is None:
        return None
    per_layer = info.head_count_kv_per_layer
    return replace(
        info,
        block_count=layers.count,
        head_count_kv_per_layer=per_layer[layers.first_block :] if per_layer else None,
    )


def check_session(
    pre,  # noqa: ANN001
    n_ctx: int,
    parallel: int,
    load,  # noqa: ANN001
    *,
    offload: bool,
    mtp_head: bool = False,
) -> None:
    """Session's check before any weight is read: the target's and (when one is used) the
    draft's contexts for every slot, of -c divided between the slots as Session divides it,
    and with `mtp_head` (draft-mtp over the target's own NextN layers) each slot's MTP
    context. `pre` is a preflight.Preflight, `load` a session.LoadOptions (not imported: no
    cycle)."""
    if n_ctx <= 0:  # -c 0 and a header without a training context: llama.cpp decides
        return
    per_slot = n_ctx // parallel if parallel > 1 else n_ctx
    plans = [
        ContextPlan(
            "target", pre.target, per_slot, parallel, load.cache_type_k, load.cache_type_v
        )
    ]
    # the contexts with the draft's cache types: a draft model's, an MTP head's (a separate
    # MTP drafter file has no cache of its own)
    drafts = {
        "draft": pre.draft if pre.mtp_drafter is None else None,
        "MTP head": nextn_blocks(pre.target) if mtp_head else None,
    }
    for role, info in drafts.items():
        if info is not None:
            plans.append(
                ContextPlan(
                    role, info, per_slot, parallel, load.cache_type_k_draft, load.cache_type_v_draft
                )
            )
    kw = {"n_ubatch": min(load.n_ubatch, load.n_batch), "flash_attn": load.flash_attn}
    need = total_bytes(plans, **kw)
    host = available_bytes()
    if need is None or host is None or need <= host:
        return  # the common case asks no GPU anything
    device_free = offload_free_bytes() if offload else 0
    require_fits(plans, n_ctx, device_free=device_free, available=host, **kw)

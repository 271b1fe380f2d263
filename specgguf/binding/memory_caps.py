"""What a context's memory can forget, found once at load: the fact a rollback depends on.

Speculative decoding rolls the cache back after every rejected proposal. An attention KV cache
drops any suffix of positions; a recurrent state (Mamba's SSM, a gated delta net) holds no
history per position, so it can only be dropped whole, and a hybrid model (attention layers
and recurrent ones) inherits that limit. llama.cpp's server finds out which case a context is
in by trying: it evaluates two tokens and asks the memory to drop the second. This module
does the same (`probe_removal`), and, for `check`, which reads no weights, says what the
architecture named in the GGUF header leads to expect (`expected_removal`).

No llama_cpp here: the probe goes through the context's own primitives (engine.Context).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from specgguf.errors import SpecggufError

#: the memory drops any suffix of positions (attention KV): rollback is one call
PARTIAL = "partial"
#: the memory drops only whole sequences (recurrent or hybrid): rollback restores a checkpoint
FULL = "full"
#: no memory, or it failed the probe: nothing can be rolled back, so nothing speculated
NONE = "none"

#: each answer: how a rollback is done under it, in a few words and in a sentence (check,
#: run --json and the README say them)
REMOVAL: dict[str, tuple[str, str]] = {
    PARTIAL: ("in place", "drops any suffix of positions: a rejection costs one cache call"),
    FULL: (
        "by checkpoints",
        "drops only whole sequences: a rejection restores the state saved before the verify "
        "pass and evaluates the accepted tokens again",
    ),
    NONE: ("impossible", "cannot drop positions: speculative decoding is not possible"),
}

#: llama.cpp's purely recurrent architectures (llm_arch_is_recurrent, as GGUF names them)
RECURRENT_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
#: llama.cpp's hybrid architectures: recurrent layers beside attention ones (llm_arch_is_hybrid)
HYBRID_ARCHS = frozenset({
    "jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h",
    "nemotron_h_moe", "qwen3next", "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next",
    "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "minimax-01",
})  # fmt: skip


def memory_kind(architecture: str) -> str:
    """What the layers of this architecture keep: "recurrent", "hybrid" or "attention"."""
    if architecture in RECURRENT_ARCHS:
        return "recurrent"
    return "hybrid" if architecture in HYBRID_ARCHS else "attention"


def expected_removal(architecture: str) -> str:
    """What the probe will find for a model of this architecture (check reads no weights)."""
    return PARTIAL if memory_kind(architecture) == "attention" else FULL


class Probeable(Protocol):
    """What the probe needs of a context (specgguf.binding.engine.Context has it)."""

    memory: Any  # None: the context has no memory at all

    def clear(self) -> None: ...

    def decode(self, tokens: Sequence[int], pos0: int, *, outputs: str = "last") -> object: ...

    def remove_from(self, p0: int) -> bool: ...


def probe_removal(ctx: Probeable) -> str:
    """PARTIAL, FULL or NONE for this context, by trying: evaluate two tokens, ask the
    memory to forget the second. Leaves the memory empty (call it before anything is cached).
    """
    if not ctx.memory:
        return NONE
    ctx.clear()
    try:
        ctx.decode([0, 0], 0, outputs="last")
    except SpecggufError:
        ctx.clear()
        return NONE
    removal = PARTIAL if ctx.remove_from(1) else FULL
    ctx.clear()
    return removal


def describe(removal: str, architecture: str) -> dict[str, str]:
    """The --json / check object for one model's memory."""
    short, sentence = REMOVAL[removal]
    return {
        "kind": memory_kind(architecture),
        "removal": removal,
        "rollback": short,
        "means": sentence,
    }

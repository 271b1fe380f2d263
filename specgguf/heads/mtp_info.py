"""What a target GGUF's header says about its own multi-token-prediction (NextN) layers, and
what a separate MTP drafter file's header says about the target it can draft for (the second
half of this module), read before any weight is loaded, for `--spec-type draft-mtp` and
`check`.

A model with MTP layers (Qwen3.5 and Qwen3-Next, the GLM-4.5 family, DeepSeek V3 and later,
MiMo and others) stores them as its last blocks: `{arch}.block_count` counts them,
`{arch}.nextn_predict_layers` says how many of the last blocks they are, and each carries
`blk.N.nextn.eh_proj` / `enorm` / `hnorm` (the projection of [norm(token embedding);
norm(the trunk's last hidden state)] back to the model width) beside a decoder block. llama.cpp
runs them only in a context of type MTP, through the architecture's own MTP graph; that graph
asserts what it needs (the layer count, those three tensors) and would abort the process, so
every such condition is checked here and refused in one line (exit 4) instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from specgguf.errors import IncompatibleModelsError
from specgguf.modelfiles.gguf_info import GGUFInfo


@dataclass(frozen=True)
class MtpGraph:
    """What an architecture's MTP graph in this libllama asserts about the file."""

    #: the most NextN layers it accepts (1: exactly one; None: any count, chained)
    most: int | None = 1
    #: tensors every NextN block needs beyond REQUIRED_TENSORS (the loader would let them be
    #: missing, and the graph would abort)
    needs: tuple[str, ...] = ()


#: the tensors of a NextN block every MTP graph requires (the others are optional: own token
#: embeddings, own output head and norm fall back to the trunk's)
REQUIRED_TENSORS = ("nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight")
_ONE, _CHAINED = MtpGraph(), MtpGraph(most=None)
#: the architectures whose graph has an MTP branch (src/models/*.cpp build a DECODER_MTP
#: graph), and what each asserts
MTP_GRAPHS: dict[str, MtpGraph] = {
    "qwen35": _ONE, "qwen35moe": _ONE, "qwen3next": _ONE, "glm4moe": _ONE, "glm-dsa": _ONE,
    "deepseek2": _ONE, "deepseek32": _ONE, "deepseek4": _ONE, "nemotron_h_moe": _ONE,
    "bailingmoe3": _ONE, "cohere2moe": _ONE, "step35": _CHAINED, "hy_v3": _CHAINED,
    "mimo2": MtpGraph(most=None, needs=("attn_qkv.weight",)),  # its fused projection
}  # fmt: skip


@dataclass(frozen=True)
class MtpLayers:
    """A target's NextN layers: how many, and the block index of the first (== the trunk's
    layer count, the id of the hidden state they read: the trunk's last output)."""

    count: int
    first_block: int

    @property
    def blocks(self) -> range:
        return range(self.first_block, self.first_block + self.count)

    def describe(self) -> str:
        """What `check` prints: "1 MTP layer (block 2)"."""
        s = "" if self.count == 1 else "s"
        if self.count == 1:
            where = f"block {self.first_block}"
        else:
            where = f"blocks {self.first_block}-{self.first_block + self.count - 1}"
        return f"{self.count} MTP layer{s} ({where})"


def mtp_layers(info: GGUFInfo) -> MtpLayers | None:
    """The NextN layers the header declares, or None when it declares none (or nonsense: a
    count that is not a positive integer no larger than the block count)."""
    count = info.metadata.get(f"{info.architecture}.nextn_predict_layers")
    blocks = info.block_count
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0 or not blocks:
        return None
    if count >= blocks:  # no trunk left (a file of MTP layers only: a separate drafter)
        return None
    return MtpLayers(count, blocks - count)


def mtp_problem(info: GGUFInfo) -> str | None:
    """Why draft-mtp cannot run on this target (one line), or None when it can."""
    layers = mtp_layers(info)
    arch = info.architecture
    if layers is None:
        return (
            f"{info.path}: this target has no MTP layers ({arch}.nextn_predict_layers is "
            "missing or 0): draft-mtp drafts with a model's own NextN layers; use draft-simple "
            "with a draft model (-md) or an ngram-* type"
        )
    if arch not in MTP_GRAPHS:
        return (
            f"{info.path}: the {arch} architecture has no MTP graph in this llama.cpp, "
            "although the file declares MTP layers"
        )
    graph = MTP_GRAPHS[arch]
    if graph.most is not None and layers.count > graph.most:
        return (
            f"{info.path}: {layers.count} MTP layers, but llama.cpp's {arch} MTP graph runs "
            f"exactly {graph.most}"
        )
    missing = [
        f"blk.{b}.{t}"
        for b in layers.blocks
        for t in (*REQUIRED_TENSORS, *graph.needs)
        if f"blk.{b}.{t}" not in info.tensor_names
    ]
    if missing:
        return f"{info.path}: its MTP layers lack the tensor(s) {', '.join(missing)}"
    return None


def require_mtp(info: GGUFInfo) -> MtpLayers:
    """The target's NextN layers, or an IncompatibleModelsError (exit 4) saying why
    draft-mtp cannot use them."""
    problem = mtp_problem(info)
    if problem is not None:
        raise IncompatibleModelsError(problem)
    layers = mtp_layers(info)
    assert layers is not None
    return layers


# -- a separate MTP drafter file (-md) ----------------------------------------------------------
#
# Some models ship their multi-token predictor as a file of its own: a Gemma-4 "assistant"
# (architecture gemma4-assistant) is a few NextN layers and nothing else. It has no KV cache of
# its own: its sliding layers attend over the target's second-to-last layer's cache, its full
# layers over the target's last layer's, so llama.cpp creates its context (of type MTP) with the
# target's context as `ctx_other` (and throws without it). Every draft step of a round is a row
# at the SAME position (the one after the target's cache) carrying the previous step's token and
# the head's own output state; nothing is fed between rounds. Its graph reads the target's token
# embeddings and writes rows of the target's width, and llama.cpp checks almost none of what
# follows from that: each condition is checked here, from the two headers.


@dataclass(frozen=True)
class DrafterGraph:
    """What a separate MTP drafter architecture's loader and graph in this libllama need."""

    #: the target architectures whose cache it can share
    targets: tuple[str, ...]
    #: tensors every file needs, and those every layer needs (`{i}`: the layer)
    tensors: tuple[str, ...]
    layer_tensors: tuple[str, ...]
    #: what a layer that attends fully needs besides (its rope frequencies)
    full_tensors: tuple[str, ...] = ()


#: the separate MTP drafter architectures (a -md of one of these selects draft-mtp)
MTP_DRAFTERS: dict[str, DrafterGraph] = {
    "gemma4-assistant": DrafterGraph(
        targets=("gemma4",),
        tensors=(
            "token_embd.weight", "output_norm.weight", "nextn.pre_projection.weight",
            "nextn.post_projection.weight",
        ),
        layer_tensors=tuple(
            f"blk.{{i}}.{t}.weight"
            for t in (
                "attn_norm", "attn_q", "attn_output", "attn_q_norm", "post_attention_norm",
                "layer_output_scale", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down",
                "post_ffw_norm",
            )
        ),
        full_tensors=("rope_freqs.weight",),
    ),
}  # fmt: skip


def is_mtp_drafter(info: GGUFInfo) -> bool:
    """Whether a -md file is a separate MTP drafter (its type is then draft-mtp)."""
    return info.architecture in MTP_DRAFTERS


@dataclass(frozen=True)
class MtpDrafterFile:
    """A separate MTP drafter checked against its target: what `check` says of it."""

    path: str
    architecture: str
    n_layers: int
    n_embd: int
    #: the width of the rows it reads and writes: the target's
    target_embd: int

    def describe(self) -> str:
        s = "" if self.n_layers == 1 else "s"
        return (
            f"{self.architecture} MTP drafter: {self.n_layers} layer{s} of width {self.n_embd} "
            f"over the target's last two layers' KV cache, reading and writing rows of "
            f"{self.target_embd}"
        )


def _layer_shape(info: GGUFInfo, n: int) -> tuple[tuple[bool, ...], list[tuple[int, int]]] | str:
    """Which of the first `n` layers slide, and each one's (head size, KV heads), or why the
    header does not say (one phrase)."""
    arch = info.architecture
    pattern = info.arrays.get(f"{arch}.attention.sliding_window_pattern")
    if pattern is None or len(pattern) < n:
        return f"'{arch}.attention.sliding_window_pattern' does not cover its {n} layers"
    swa = tuple(bool(x) for x in pattern[:n])
    kv_layers = info.head_count_kv_per_layer
    kv_default = info.head_count_kv if info.head_count_kv is not None else info.head_count
    shapes = []
    for i, sliding in enumerate(swa):
        suffix = "_swa" if sliding else ""
        k = info.metadata.get(f"{arch}.attention.key_length{suffix}")
        v = info.metadata.get(f"{arch}.attention.value_length{suffix}")
        if not isinstance(k, int) or k <= 0 or k != v:
            what = "sliding" if sliding else "full"
            return f"its {what} layers' key and value head sizes are missing or differ"
        n_kv = kv_layers[i] if kv_layers is not None and i < len(kv_layers) else kv_default
        shapes.append((k, n_kv or 0))
    return swa, shapes


def mtp_drafter_problem(drafter: GGUFInfo, target: GGUFInfo) -> str | None:
    """Why this separate MTP drafter cannot draft for this target (one line), or None."""
    arch = drafter.architecture
    graph = MTP_DRAFTERS[arch]
    where = f"{drafter.path} over {target.path}"
    if target.architecture not in graph.targets:
        return (
            f"{where}: a {arch} drafter shares the KV cache of a {' or '.join(graph.targets)} "
            f"target, this target is {target.architecture}"
        )
    n = drafter.block_count or 0
    if n <= 0 or drafter.metadata.get(f"{arch}.nextn_predict_layers") != n:
        return (
            f"{where}: every layer of a {arch} file is a NextN layer, but "
            f"'{arch}.nextn_predict_layers' is not its block count"
        )
    width, out = drafter.embedding_length, drafter.metadata.get(f"{arch}.embedding_length_out")
    if not isinstance(out, int) or out == width:
        return (
            f"{where}: '{arch}.embedding_length_out' (the target's width) is missing or "
            "equals the drafter's own width"
        )
    if out != target.embedding_length:
        return (
            f"{where}: the drafter was made for a target of width {out}, this target's is "
            f"{target.embedding_length}"
        )
    if drafter.vocab.n_vocab != target.vocab.n_vocab:
        return (
            f"{where}: the drafter's vocabulary has {drafter.vocab.n_vocab} tokens, the "
            f"target's {target.vocab.n_vocab}"
        )
    n_target = target.block_count or 0
    mine, theirs = _layer_shape(drafter, n), _layer_shape(target, n_target)
    if isinstance(mine, str):
        return f"{where}: the drafter's {mine}"
    if isinstance(theirs, str) or n_target < 2:
        return f"{where}: the target's header does not describe its last two layers"
    # the drafter's sliding layers read the target's layer n-2, its full layers layer n-1
    shared = {True: n_target - 2, False: n_target - 1}
    for i, (sliding, shape) in enumerate(zip(mine[0], mine[1], strict=True)):
        j = shared[sliding]
        if theirs[0][j] != sliding:
            kind = "sliding" if sliding else "full"
            return (
                f"{where}: the drafter's {kind}-attention layer {i} would read target layer "
                f"{j}, which is not {kind}-attention"
            )
        if shape != theirs[1][j]:
            return (
                f"{where}: the drafter's layer {i} has heads of {shape[0]} with {shape[1]} KV "
                f"heads, target layer {j} (whose cache it reads) {theirs[1][j][0]} with "
                f"{theirs[1][j][1]}"
            )
    if not drafter.head_count or not mine[1][0][1] or drafter.head_count % mine[1][0][1]:
        return f"{where}: the drafter's {drafter.head_count} heads are no multiple of its KV heads"
    window = "{}.attention.sliding_window"
    if drafter.metadata.get(window.format(arch)) != target.metadata.get(
        window.format(target.architecture)
    ):
        return f"{where}: the drafter's sliding window is not the target's"
    names = list(graph.tensors)
    names += [t.format(i=i) for i in range(n) for t in graph.layer_tensors]
    if not all(mine[0]):
        names += list(graph.full_tensors)
    missing = [t for t in names if t not in drafter.tensor_names]
    if missing:
        return f"{drafter.path}: the {arch} drafter lacks the tensor(s) {', '.join(missing)}"
    return None


def check_mtp_drafter_pair(drafter: GGUFInfo, target: GGUFInfo) -> MtpDrafterFile:
    """The drafter checked against its target, or an IncompatibleModelsError (exit 4)."""
    problem = mtp_drafter_problem(drafter, target)
    if problem is not None:
        raise IncompatibleModelsError(problem)
    return MtpDrafterFile(
        drafter.path,
        drafter.architecture,
        drafter.block_count or 0,
        drafter.embedding_length or 0,
        target.embedding_length or 0,
    )

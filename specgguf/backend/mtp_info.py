"""What a target GGUF's header says about its own multi-token-prediction (NextN) layers, read
before any weight is loaded, for `--spec-type draft-mtp` and `check`.

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

from specgguf.backend.gguf_info import GGUFInfo
from specgguf.errors import IncompatibleModelsError


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

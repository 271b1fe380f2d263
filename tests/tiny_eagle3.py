"""Tiny EAGLE-3 head GGUFs (architecture "eagle3") over the tiny llama targets of tiny_models.

An EAGLE-3 head is one decoder layer that reads three of the target's hidden layers: an
encoder (`fc`) fuses the three layer inputs of a target row into one row of the head's width,
and the decoder layer takes, at position P, the (normed) embedding of the token at P+1 next to
the (normed) fused row of P, i.e. an attention input twice the head's width. Its output norm
and lm_head give the draft logits; without its own `output` (or `token_embd`) it borrows the
target's through the target's context. `d2t` maps a smaller draft vocabulary to absolute
target ids (I64).

Shapes below are numpy's (n_out, n_in), the reverse of ggml's ne order that llama.cpp's loader
names; keys and tensor names are those llama.cpp's eagle3 loader reads. Weights are random
(seeded): such a head rarely agrees with the target, which is what the plumbing tests want
(every rejection path is exercised); equality with plain decoding never depends on agreement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specgguf.errors import ExitCode
from tests.tiny_models import (
    N_VOCAB,
    build_tiny_model,
    write_file,
    write_hparams,
    write_tokenizer,
)

#: the tiny target the heads are built for: the tiny llama model with three layers, so three
#: distinct layer inputs can be heard (llama's graph records every layer's input)
TARGET_LAYERS_N = 3
HEAD_TARGET_LAYERS = (0, 1, 2)
TARGET_EMBD = 64


#: build_eagle3_head keyword arguments that make a head refused from its header, and the
#: exit code it is refused with
BAD_EAGLE3_HEADS = [
    (dict(target_hidden_size=48), ExitCode.INCOMPATIBLE),  # made for another target
    (dict(omit=["blk.0.ffn_up.weight"]), ExitCode.MODEL),  # lacks tensors
    (dict(d2t=[3, 10_000]), ExitCode.INCOMPATIBLE),  # d2t outside the vocabulary
]


def build_eagle3_target(path: str | Path, *, seed: int, arch: str = "llama") -> Path:
    """The tiny llama target with TARGET_LAYERS_N layers (tiny_models' weights)."""
    return build_tiny_model(path, seed=seed, n_layer=TARGET_LAYERS_N, n_embd=TARGET_EMBD)


def build_eagle3_head(
    path: str | Path,
    *,
    seed: int = 7,
    target_layers: Sequence[int] = HEAD_TARGET_LAYERS,
    target_hidden_size: int = TARGET_EMBD,
    n_embd: int = TARGET_EMBD,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    own_output: bool = True,
    own_token_embd: bool = False,
    d2t: Sequence[int] | None = None,
    omit: Sequence[str] = (),
    block_count: int = 1,
    fc_in: int | None = None,
    gain: float = 1.0,
    tokenizer_from: str | Path | None = None,
    f16: bool = False,
) -> Path:
    """Write an EAGLE-3 head GGUF and return its path.

    `d2t`: a draft vocabulary of len(d2t) tokens mapped to these target ids (the head's own
    `output` then has len(d2t) rows). `omit`: tensor names left out (a head lacking tensors).
    `fc_in` overrides fc's input width (a head whose shapes disagree with its own keys).
    `block_count` other than 1 makes a head llama.cpp's graph would abort on.
    `tokenizer_from`: a real target GGUF whose tokenizer the head carries (as llama.cpp's
    converter copies the target's), instead of the tiny targets'. `f16`: matrices in F16 (as
    a converted head's are), norms in F32.
    """
    path = Path(path)
    draw = HeadDraw.start(path, seed, gain, tokenizer_from)
    rng, g, reader, n_vocab = draw.rng, draw.g, draw.reader, draw.n_vocab
    head_dim, n_kv, ones = n_embd // n_head, n_head_kv * (n_embd // n_head), draw.ones(n_embd)
    n_draft_vocab = len(d2t) if d2t is not None else n_vocab
    enc_in = fc_in if fc_in is not None else len(target_layers) * target_hidden_size
    w: dict[str, np.ndarray] = {
        "fc.weight": g((n_embd, enc_in), enc_in),
        "output_norm.weight": ones.copy(),
        "blk.0.attn_norm.weight": ones.copy(),
        "blk.0.attn_norm_2.weight": ones.copy(),
        "blk.0.attn_q.weight": g((n_head * head_dim, 2 * n_embd), 2 * n_embd),
        "blk.0.attn_k.weight": g((n_kv, 2 * n_embd), 2 * n_embd),
        "blk.0.attn_v.weight": g((n_kv, 2 * n_embd), 2 * n_embd),
        "blk.0.attn_output.weight": g((n_embd, n_head * head_dim), n_head * head_dim),
        "blk.0.ffn_norm.weight": ones.copy(),
        "blk.0.ffn_gate.weight": g((n_ff, n_embd), n_embd),
        "blk.0.ffn_up.weight": g((n_ff, n_embd), n_embd),
        "blk.0.ffn_down.weight": g((n_embd, n_ff), n_ff),
    }
    if own_output:
        w["output.weight"] = g((n_draft_vocab, n_embd), n_embd) * 4.0
    if own_token_embd:
        w["token_embd.weight"] = (rng.standard_normal((n_vocab, n_embd))).astype(np.float32)

    writer = head_writer(
        path, "eagle3", seed, f16=f16, n_embd=n_embd, n_layer=block_count, n_ff=n_ff,
        n_head=n_head, n_head_kv=n_head_kv, n_vocab=n_vocab,
    )  # fmt: skip
    writer.add_array("eagle3.target_layers", [int(x) for x in target_layers])
    writer.add_uint32("eagle3.target_hidden_size", target_hidden_size)
    return finish_head(writer, path, reader, w, omit=omit, d2t=d2t, f16=f16)


@dataclass
class HeadDraw:
    """Where a tiny head's random weights come from: one seeded generator, drawn in the order
    the builder asks, and the vocabulary (the tiny targets', or a real target's whose
    tokenizer the head carries: `reader` reads that file)."""

    rng: np.random.Generator
    gain: float
    reader: object | None
    n_vocab: int

    @classmethod
    def start(
        cls, path: Path, seed: int, gain: float, tokenizer_from: str | Path | None
    ) -> HeadDraw:
        """The draw of a head to be written at `path` (its folder made)."""
        import gguf

        path.parent.mkdir(parents=True, exist_ok=True)
        reader, n_vocab = None, N_VOCAB
        if tokenizer_from is not None:
            reader = gguf.GGUFReader(str(tokenizer_from))
            n_vocab = len(reader.fields["tokenizer.ggml.tokens"].contents())
        return cls(np.random.default_rng(seed), gain, reader, n_vocab)

    def g(self, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        """A random matrix scaled by gain / sqrt(fan_in)."""
        return (self.rng.standard_normal(shape) * self.gain / np.sqrt(fan_in)).astype(np.float32)

    @staticmethod
    def ones(n: int) -> np.ndarray:
        """A norm's weights: all ones."""
        return np.ones(n, dtype=np.float32)


def head_writer(
    path: Path,
    arch: str,
    seed: int,
    *,
    f16: bool,
    **hparams: int,
):  # noqa: ANN201 - gguf.GGUFWriter
    """A GGUFWriter for a tiny head of `arch` with the hyperparameters every head's header
    carries (`hparams`: write_hparams's sizes; the architecture's own keys are the caller's)."""
    import gguf

    writer = gguf.GGUFWriter(path, arch=arch)
    writer.add_name(f"tiny-{arch}-seed{seed}")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)
    write_hparams(writer, n_ctx_train=2048, **hparams)
    return writer


def finish_head(
    writer,  # noqa: ANN001 - gguf.GGUFWriter
    path: Path,
    reader,  # noqa: ANN001 - gguf.GGUFReader or None
    tensors: dict[str, np.ndarray],
    *,
    omit: Sequence[str],
    d2t: Sequence[int] | None,
    f16: bool,
) -> Path:
    """The tokenizer (the tiny targets', or `reader`'s file's), the tensors but those in
    `omit` (with `f16`, matrices of more than one row in F16, the rest F32) and `d2t`; the
    file written: its path."""
    if reader is None:
        write_tokenizer(writer, "bytes", None)
    else:
        copy_tokenizer(reader, writer)
    for name, value in tensors.items():
        if name not in omit:
            dtype = np.float16 if f16 and value.ndim == 2 and value.shape[0] > 1 else np.float32
            writer.add_tensor(name, np.ascontiguousarray(value, dtype=dtype))
    if d2t is not None and "d2t" not in omit:
        writer.add_tensor("d2t", np.asarray(d2t, dtype=np.int64))
    write_file(writer)
    return path


def copy_tokenizer(reader, writer) -> None:
    """Every tokenizer.* key of a GGUFReader's file into a GGUFWriter."""
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub)


def write_qwen2_target_header(path: str | Path) -> Path:
    """A qwen2 GGUF of the tiny target's shapes and tokenizer, without weights: its graph
    records no layer inputs in this libllama, so a head over it is refused from the header
    alone, before anything is loaded (the file could not be loaded anyway)."""
    import gguf

    path = Path(path)
    writer = gguf.GGUFWriter(path, arch="qwen2")
    writer.add_context_length(2048)
    writer.add_embedding_length(TARGET_EMBD)
    writer.add_block_count(TARGET_LAYERS_N)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    write_tokenizer(writer, "bytes", None)
    writer.add_tensor("token_embd.weight", np.zeros((N_VOCAB, TARGET_EMBD), dtype=np.float32))
    write_file(writer)
    return path

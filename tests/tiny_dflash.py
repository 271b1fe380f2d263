"""Tiny DFlash (and DSpark) drafter GGUFs (architecture "dflash") over the tiny llama targets.

A DFlash drafter is a small stack of decoder layers that proposes a whole block in one pass:
its KV cache holds, at every target position, K and V projected from the target's hidden
states there (the inputs of the target layers it reads, concatenated, fused by `fc` and
`enc.output_norm`); a pass over [the last token, mask, mask, ...] at the next positions,
with attention over that cache and (non-causally) over the block, gives the draft logits of
every mask position at once. Without its own `token_embd` / `output` it borrows the target's
through the target's context; `d2t` maps a smaller draft vocabulary to absolute target ids.
A DSpark drafter adds a Markov head (`markov_w1`, `markov_w2`) that biases each position's
logits by the previous position's choice, and optionally a confidence head (`conf_proj`).

Shapes below are numpy's (n_out, n_in), the reverse of ggml's ne order that llama.cpp's loader
names; keys and tensor names are those llama.cpp's dflash loader reads. Weights are random
(seeded): such a head rarely agrees with the target, which is what the plumbing tests want;
equality with plain decoding never depends on agreement.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specgguf.errors import ExitCode
from tests.tiny_eagle3 import HEAD_TARGET_LAYERS, TARGET_EMBD, HeadDraw, finish_head, head_writer

#: the mask token of the tiny heads: a byte token the tiny targets rarely emit
MASK_TOKEN = 200


#: build_dflash_head keyword arguments that make a drafter refused from its header, and the
#: exit code it is refused with
BAD_DFLASH_HEADS = [
    (dict(n_embd=32), ExitCode.INCOMPATIBLE),  # made for a target of another width
    (dict(target_layers=(0, 1, 9)), ExitCode.INCOMPATIBLE),  # a layer it lacks
    (dict(omit=["blk.1.ffn_up.weight"]), ExitCode.MODEL),  # lacks tensors
    (dict(d2t=[3, 10_000]), ExitCode.INCOMPATIBLE),  # d2t outside the vocabulary
]


def build_dflash_head(
    path: str | Path,
    *,
    seed: int = 11,
    target_layers: Sequence[int] = HEAD_TARGET_LAYERS,
    n_embd: int = TARGET_EMBD,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    block_size: int = 8,
    mask_token: int | None = MASK_TOKEN,
    own_output: bool = True,
    own_token_embd: bool = False,
    d2t: Sequence[int] | None = None,
    markov_rank: int = 0,
    confidence: bool = False,
    sample_from_anchor: bool | None = None,
    causal: bool | None = None,
    omit: Sequence[str] = (),
    extra: dict[str, np.ndarray] | None = None,
    gain: float = 1.0,
    tokenizer_from: str | Path | None = None,
    f16: bool = False,
) -> Path:
    """Write a DFlash drafter GGUF and return its path.

    `d2t`: a draft vocabulary of len(d2t) tokens mapped to these target ids (the head's own
    `output` then has len(d2t) rows). `markov_rank` > 0 adds DSpark's Markov head (and with
    `confidence` its confidence head); `sample_from_anchor` and `causal` write those keys when
    given. `omit`: tensor names left out (a head lacking tensors); `extra`: tensors added (a
    DFlash2 selector). `tokenizer_from`: a real target GGUF whose tokenizer the head carries
    (as llama.cpp's converter copies the target's). `f16`: matrices in F16, norms in F32.
    """
    path = Path(path)
    draw = HeadDraw.start(path, seed, gain, tokenizer_from)
    rng, g, reader, n_vocab = draw.rng, draw.g, draw.reader, draw.n_vocab
    head_dim, n_kv, ones = n_embd // n_head, n_head_kv * (n_embd // n_head), draw.ones(n_embd)
    n_draft_vocab = len(d2t) if d2t is not None else n_vocab
    enc_in = len(target_layers) * n_embd
    w: dict[str, np.ndarray] = {
        "fc.weight": g((n_embd, enc_in), enc_in),
        "enc.output_norm.weight": ones.copy(),
        "output_norm.weight": ones.copy(),
    }
    for i in range(n_layer):
        w |= {
            f"blk.{i}.attn_norm.weight": ones.copy(),
            f"blk.{i}.attn_q.weight": g((n_head * head_dim, n_embd), n_embd),
            f"blk.{i}.attn_k.weight": g((n_kv, n_embd), n_embd),
            f"blk.{i}.attn_v.weight": g((n_kv, n_embd), n_embd),
            f"blk.{i}.attn_output.weight": g((n_embd, n_head * head_dim), n_head * head_dim),
            f"blk.{i}.attn_q_norm.weight": np.ones(head_dim, dtype=np.float32),
            f"blk.{i}.attn_k_norm.weight": np.ones(head_dim, dtype=np.float32),
            f"blk.{i}.ffn_norm.weight": ones.copy(),
            f"blk.{i}.ffn_gate.weight": g((n_ff, n_embd), n_embd),
            f"blk.{i}.ffn_up.weight": g((n_ff, n_embd), n_embd),
            f"blk.{i}.ffn_down.weight": g((n_embd, n_ff), n_ff),
        }
    if own_output:
        w["output.weight"] = g((n_draft_vocab, n_embd), n_embd) * 4.0
    if own_token_embd:
        w["token_embd.weight"] = rng.standard_normal((n_vocab, n_embd)).astype(np.float32)
    if markov_rank:
        w["markov_w1.weight"] = g((n_vocab, markov_rank), 1)
        w["markov_w2.weight"] = g((n_draft_vocab, markov_rank), markov_rank) * 4.0
        if confidence:
            w["conf_proj.weight"] = g((1, n_embd + markov_rank), n_embd + markov_rank)
            w["conf_proj.bias"] = np.zeros(1, dtype=np.float32)
    w |= extra or {}

    writer = head_writer(
        path, "dflash", seed, f16=f16, n_embd=n_embd, n_layer=n_layer, n_ff=n_ff,
        n_head=n_head, n_head_kv=n_head_kv, n_vocab=n_vocab,
    )  # fmt: skip
    writer.add_uint32("dflash.block_size", block_size)
    writer.add_array("dflash.target_layers", [int(x) for x in target_layers])
    if sample_from_anchor is not None:
        writer.add_bool("dflash.sample_from_anchor", sample_from_anchor)
    if causal is not None:
        writer.add_bool("dflash.attention.causal", causal)
    if markov_rank:
        writer.add_bool("dflash.has_confidence_head", confidence)
    if mask_token is not None:
        writer.add_uint32("tokenizer.ggml.mask_token_id", mask_token)
    return finish_head(writer, path, reader, w, omit=omit, d2t=d2t, f16=f16)

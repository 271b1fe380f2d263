"""Tiny GGUFs whose memory drops only whole sequences, for the tests of rollback by
checkpoints (specgguf.binding.checkpoints): a hybrid in llama.cpp's `qwen35` layout (one
gated-delta-net layer, one attention layer) and a purely recurrent `mamba` (two SSM layers).

Layer 0 is a gated delta net (a recurrent state per sequence: its memory cannot drop its last
positions), layer 1 full attention with gated queries and q/k norms, as Qwen3.5's
(`general.architecture = qwen35`, `full_attention_interval = 2`). With `nextn=1` the file also
carries one multi-token-prediction (NextN) layer after them, as Qwen3.5's own GGUFs do: the
block count counts it, `qwen35.nextn_predict_layers` says how many of the last blocks are such
layers, and block 2 holds an attention block plus `blk.2.nextn.{eh_proj,enorm,hnorm}` (the
projection of [norm(token embedding); norm(target hidden state)] back to the model width).
llama.cpp runs it only in a context of type MTP, never in the target's own pass; only one such
layer is allowed for this architecture (its MTP graph asserts it). Tokenizer, bias channel and
suppressed rows are tests.tiny_models' (same vocab: a tiny llama model drafts for it, and the
other way round); weights are Gaussian, about 0.5 MB of F32.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np

from tests import tiny_models as tiny

HEAD_DIM = 16
# the gated delta net: 2 key heads and 4 value heads of 16, a 4-wide causal convolution
SSM_STATE = 16  # head size of keys and values (ssm.state_size)
SSM_GROUPS = 2  # key heads (ssm.group_count)
SSM_V_HEADS = 4  # value heads (ssm.time_step_rank)
SSM_INNER = SSM_STATE * SSM_V_HEADS  # value width (ssm.inner_size)
SSM_CONV = 4
#: the state's decay, -exp(A_log): -0.5 keeps a long memory; LOOPY_SSM_A forgets at once, so
#: greedy text settles into short cycles (what the n-gram drafters need to find anything)
SSM_A = -0.5
LOOPY_SSM_A = -20.0
#: rotary dimensions per section (text positions use the first three), summing to HEAD_DIM / 2
ROPE_SECTIONS = (3, 3, 2, 0)


def _attention_block(g, i: int) -> dict[str, np.ndarray]:
    """Block i's gated-query attention and its FFN (the trunk's layer 1, or an MTP layer)."""
    se = 1.0 / np.sqrt(tiny.N_EMBD)
    ones = np.ones
    p = f"blk.{i}."
    return {
        p + "attn_norm.weight": ones(tiny.N_EMBD, dtype=np.float32),
        p + "post_attention_norm.weight": ones(tiny.N_EMBD, dtype=np.float32),
        p + "attn_q.weight": g((2 * HEAD_DIM * tiny.N_HEAD, tiny.N_EMBD), tiny.QK_GAIN * se),
        p + "attn_k.weight": g((HEAD_DIM * tiny.N_HEAD_KV, tiny.N_EMBD), tiny.QK_GAIN * se),
        p + "attn_v.weight": g((HEAD_DIM * tiny.N_HEAD_KV, tiny.N_EMBD), tiny.V_GAIN * se),
        p + "attn_output.weight": g((tiny.N_EMBD, HEAD_DIM * tiny.N_HEAD), se),
        p + "attn_q_norm.weight": ones(HEAD_DIM, dtype=np.float32),
        p + "attn_k_norm.weight": ones(HEAD_DIM, dtype=np.float32),
    }


def _ffn(g, i: int) -> dict[str, np.ndarray]:
    se = 1.0 / np.sqrt(tiny.N_EMBD)
    return {
        f"blk.{i}.ffn_gate.weight": g((tiny.N_FF, tiny.N_EMBD), tiny.FFN_GAIN * se),
        f"blk.{i}.ffn_up.weight": g((tiny.N_FF, tiny.N_EMBD), tiny.FFN_GAIN * se),
        f"blk.{i}.ffn_down.weight": g((tiny.N_EMBD, tiny.N_FF), 1.0 / np.sqrt(tiny.N_FF)),
    }


def _nextn_block(g, i: int) -> dict[str, np.ndarray]:
    """An MTP layer at block i: an attention block whose input is eh_proj([enorm(embedding of
    the token); hnorm(the target's hidden state)])."""
    return (
        _attention_block(g, i)
        | _ffn(g, i)
        | {
            f"blk.{i}.nextn.eh_proj.weight": g(
                (tiny.N_EMBD, 2 * tiny.N_EMBD), 1.0 / np.sqrt(2 * tiny.N_EMBD)
            ),
            f"blk.{i}.nextn.enorm.weight": np.ones(tiny.N_EMBD, dtype=np.float32),
            f"blk.{i}.nextn.hnorm.weight": np.ones(tiny.N_EMBD, dtype=np.float32),
        }
    )


def _weights(rng: np.random.Generator, ssm_a: float, nextn: int = 0) -> dict[str, np.ndarray]:
    def g(shape: tuple[int, ...], std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    se = 1.0 / np.sqrt(tiny.N_EMBD)
    conv_dim = 2 * SSM_STATE * SSM_GROUPS + SSM_INNER
    w: dict[str, np.ndarray] = {
        "token_embd.weight": g((tiny.N_VOCAB, tiny.N_EMBD), 1.0),
        "output.weight": g((tiny.N_VOCAB, tiny.N_EMBD), tiny.LOGIT_GAIN * se),
        "output_norm.weight": ones(tiny.N_EMBD),
    }
    # layer 0: gated delta net
    w |= {
        "blk.0.attn_norm.weight": ones(tiny.N_EMBD),
        "blk.0.post_attention_norm.weight": ones(tiny.N_EMBD),
        "blk.0.attn_qkv.weight": g((conv_dim, tiny.N_EMBD), tiny.QK_GAIN * se),
        "blk.0.attn_gate.weight": g((SSM_INNER, tiny.N_EMBD), se),
        "blk.0.ssm_conv1d.weight": g((conv_dim, SSM_CONV), 0.5),
        "blk.0.ssm_dt.bias": np.zeros(SSM_V_HEADS, dtype=np.float32),
        "blk.0.ssm_a": np.full(SSM_V_HEADS, ssm_a, dtype=np.float32),
        "blk.0.ssm_beta.weight": g((SSM_V_HEADS, tiny.N_EMBD), se),
        "blk.0.ssm_alpha.weight": g((SSM_V_HEADS, tiny.N_EMBD), se),
        "blk.0.ssm_norm.weight": ones(SSM_STATE),
        "blk.0.ssm_out.weight": g((tiny.N_EMBD, SSM_INNER), 1.0 / np.sqrt(SSM_INNER)),
    }
    # layer 1: attention (the query projection also yields the output gate: 2x wide)
    w |= _attention_block(g, 1)
    for i in range(2):
        w |= _ffn(g, i)
    for i in range(2, 2 + nextn):  # the MTP layers, drawn after the trunk's
        w |= _nextn_block(g, i)
    return w


def _write(
    path: str | Path, arch: str, w: dict[str, np.ndarray], hparams, n_blocks: int = 2
) -> Path:
    """A model of `arch` (2 trunk layers, `n_blocks` blocks in all) with the tiny tokenizer:
    the keys every architecture reads, then `hparams(writer)` for its own, then the tensors."""
    import gguf  # deferred: only the tests that build models need it

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(path, arch=arch)
    writer.add_name(f"tiny-{arch}")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(2048)
    writer.add_embedding_length(tiny.N_EMBD)
    writer.add_block_count(n_blocks)
    writer.add_ssm_conv_kernel(SSM_CONV)
    hparams(writer)
    writer.add_vocab_size(tiny.N_VOCAB)
    tiny.write_bytes_model(writer, w)
    return path


def build_tiny_qwen35(
    path: str | Path,
    *,
    seed: int,
    perturb_from_seed: int | None = None,
    perturb_scale: float = 0.0,
    eos_logit_bias: float = -40.0,
    ssm_a: float = SSM_A,
    nextn: int = 0,
    drop: tuple[str, ...] = (),
) -> Path:
    """Write the tiny qwen35 model to ``path`` and return it (the arguments as
    tests.tiny_models.build_tiny_model's; `ssm_a` the recurrent state's decay; `nextn` the
    MTP layers it carries after its two trunk layers; `drop` tensors left out: a broken file)."""

    def hparams(writer) -> None:
        writer.add_feed_forward_length(tiny.N_FF)
        writer.add_head_count(tiny.N_HEAD)
        writer.add_head_count_kv(tiny.N_HEAD_KV)
        writer.add_rope_dimension_count(HEAD_DIM)
        writer.add_rope_dimension_sections(list(ROPE_SECTIONS))
        writer.add_rope_freq_base(10000.0)
        writer.add_layer_norm_rms_eps(1e-6)
        writer.add_ssm_inner_size(SSM_INNER)
        writer.add_ssm_state_size(SSM_STATE)
        writer.add_ssm_time_step_rank(SSM_V_HEADS)
        writer.add_ssm_group_count(SSM_GROUPS)
        writer.add_full_attention_interval(2)  # layer 0 recurrent, layer 1 attention
        if nextn:
            writer.add_nextn_predict_layers(nextn)

    make = partial(_weights, ssm_a=ssm_a, nextn=nextn)
    w = tiny.prepared(make, seed, perturb_from_seed, perturb_scale, eos_logit_bias)
    w = {k: v for k, v in w.items() if k not in drop}
    return _write(path, "qwen35", w, hparams, n_blocks=2 + nextn)


# the tiny mamba: two selective-scan layers of 2 x N_EMBD channels (llama.cpp's only expansion)
MAMBA_INNER = 2 * tiny.N_EMBD
MAMBA_STATE = 16
MAMBA_DT_RANK = 4


def _mamba_weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def g(shape: tuple[int, ...], std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    se = 1.0 / np.sqrt(tiny.N_EMBD)
    si = 1.0 / np.sqrt(MAMBA_INNER)
    w: dict[str, np.ndarray] = {
        "token_embd.weight": g((tiny.N_VOCAB, tiny.N_EMBD), 1.0),
        "output.weight": g((tiny.N_VOCAB, tiny.N_EMBD), tiny.LOGIT_GAIN * se),
        "output_norm.weight": np.ones(tiny.N_EMBD, dtype=np.float32),
    }
    # A = -(1..state) per channel, as Mamba initialises it (S4D-real)
    a = -np.tile(np.arange(1, MAMBA_STATE + 1, dtype=np.float32), (MAMBA_INNER, 1))
    for i in range(2):
        p = f"blk.{i}."
        w |= {
            p + "attn_norm.weight": np.ones(tiny.N_EMBD, dtype=np.float32),
            p + "ssm_in.weight": g((2 * MAMBA_INNER, tiny.N_EMBD), se),
            p + "ssm_conv1d.weight": g((MAMBA_INNER, SSM_CONV), 0.5),
            p + "ssm_conv1d.bias": np.zeros(MAMBA_INNER, dtype=np.float32),
            p + "ssm_x.weight": g((MAMBA_DT_RANK + 2 * MAMBA_STATE, MAMBA_INNER), si),
            p + "ssm_dt.weight": g((MAMBA_INNER, MAMBA_DT_RANK), 0.5),
            p + "ssm_dt.bias": np.full(MAMBA_INNER, -2.0, dtype=np.float32),
            p + "ssm_a": a.copy(),
            p + "ssm_d": np.ones(MAMBA_INNER, dtype=np.float32),
            p + "ssm_out.weight": g((tiny.N_EMBD, MAMBA_INNER), si),
        }
    return w


def build_tiny_mamba(
    path: str | Path,
    *,
    seed: int,
    perturb_from_seed: int | None = None,
    perturb_scale: float = 0.0,
    eos_logit_bias: float = -40.0,
) -> Path:
    """Write the tiny mamba model to ``path`` and return it (arguments as build_tiny_qwen35's)."""

    def hparams(writer) -> None:
        writer.add_feed_forward_length(0)
        writer.add_head_count(0)
        writer.add_layer_norm_rms_eps(1e-5)
        writer.add_ssm_inner_size(MAMBA_INNER)
        writer.add_ssm_state_size(MAMBA_STATE)
        writer.add_ssm_time_step_rank(MAMBA_DT_RANK)

    w = tiny.prepared(_mamba_weights, seed, perturb_from_seed, perturb_scale, eos_logit_bias)
    return _write(path, "mamba", w, hparams)

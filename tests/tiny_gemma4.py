"""A tiny GGUF in llama.cpp's `gemma4` layout, and a tiny `gemma4-assistant` drafter over it.

The target: four layers alternating a sliding window and full attention (the last full, the one
before it sliding: the two layers an assistant's attention reads), full layers with a wider head
than sliding ones (gemma4's own shape), per-head query/key norms, post-attention and post-FFN
norms, a GELU FFN and the shared `rope_freqs` of the full layers; no per-layer embeddings and
no shared KV layers unless asked (`shared_kv`: the last layers reuse earlier layers' caches).

The assistant: its own width (A_EMBD), reading rows of the target's width
(`embedding_length_out`), two layers that are all NextN layers (`nextn_predict_layers` equals
the block count: no trunk), each an attention block with a query projection only (its keys and
values are the target's last two layers' cache), its own token embeddings as its output head,
and `nextn.pre_projection` / `nextn.post_projection` between the two widths. Tokenizer, bias
channel and suppressed rows are tests.tiny_models'; weights Gaussian, F32.

An `echo` assistant is built to agree with its target sometimes (random heads never do): its
projections carry the target's hidden state through unchanged (the target's width is a slice
of its own), its layers add only a small random part (so that what it reads of the target's
cache and of the token still changes its rows), and its output head is the target's. It so
predicts the token the target's state already predicted, again: accepted wherever the target
repeats a token, which the tiny targets do.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np

from tests.tiny_models import (
    FFN_GAIN,
    LOGIT_GAIN,
    N_EMBD,
    N_FF,
    N_HEAD,
    N_HEAD_KV,
    N_VOCAB,
    QK_GAIN,
    V_GAIN,
    prepared,
    write_bytes_model,
)

HEAD_FULL = 32  # the full-attention layers' head size
HEAD_SWA = 16  # the sliding layers'
SWA = 32  # the sliding window
#: which target layers slide: the last attends fully, the one before it slides
TARGET_SWA = (True, False, True, False)
A_EMBD = 96  # the assistant's own width (llama.cpp requires it to differ from the target's)
ASSISTANT_SWA = (True, False)


def _g(rng: np.random.Generator, shape: tuple[int, ...], std: float) -> np.ndarray:
    return (rng.standard_normal(shape) * std).astype(np.float32)


def _ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)


def _block(
    rng: np.random.Generator, p: str, width: int, hd: int, *, gain: float
) -> dict[str, np.ndarray]:
    """A layer's attention-and-FFN tensors but its keys and values (`gain`: the post-norms'
    weights, how much the layer adds to the rows)."""
    q, s = hd * N_HEAD, 1.0 / np.sqrt(width)
    return {
        p + "attn_norm.weight": _ones(width),
        p + "attn_q.weight": _g(rng, (q, width), QK_GAIN * s),
        p + "attn_output.weight": _g(rng, (width, q), 1.0 / np.sqrt(q)),
        p + "attn_q_norm.weight": _ones(hd),
        p + "post_attention_norm.weight": _ones(width) * gain,
        p + "ffn_norm.weight": _ones(width),
        p + "ffn_gate.weight": _g(rng, (N_FF, width), FFN_GAIN * s),
        p + "ffn_up.weight": _g(rng, (N_FF, width), FFN_GAIN * s),
        p + "ffn_down.weight": _g(rng, (width, N_FF), 1.0 / np.sqrt(N_FF)),
        p + "post_ffw_norm.weight": _ones(width) * gain,
        p + "layer_output_scale.weight": _ones(1),
    }


def _target_weights(
    rng: np.random.Generator, shared_kv: int, pattern: tuple[bool, ...]
) -> dict[str, np.ndarray]:
    se = 1.0 / np.sqrt(N_EMBD)
    w: dict[str, np.ndarray] = {
        "token_embd.weight": _g(rng, (N_VOCAB, N_EMBD), 1.0 / np.sqrt(N_EMBD)),
        "output.weight": _g(rng, (N_VOCAB, N_EMBD), LOGIT_GAIN * se),
        "output_norm.weight": _ones(N_EMBD),
        "rope_freqs.weight": _ones(HEAD_FULL // 2),
    }
    for i, swa in enumerate(pattern):
        p = f"blk.{i}."
        hd = HEAD_SWA if swa else HEAD_FULL
        kv = hd * N_HEAD_KV
        w |= _block(rng, p, N_EMBD, hd, gain=1.0)
        if i < len(pattern) - shared_kv:  # a layer with a cache of its own
            w |= {
                p + "attn_k.weight": _g(rng, (kv, N_EMBD), QK_GAIN * se),
                p + "attn_v.weight": _g(rng, (kv, N_EMBD), V_GAIN * se),
                p + "attn_k_norm.weight": _ones(hd),
            }
    return w


def _read_weights(path: Path) -> dict[str, np.ndarray]:
    """A tiny target's tensors, as numpy arrays in the writer's layout."""
    import gguf

    reader = gguf.GGUFReader(path)
    return {
        t.name: np.array(t.data, dtype=np.float32).reshape(tuple(reversed(t.shape.tolist())))
        for t in reader.tensors
    }


def _writer(path: str | Path, arch: str, n_embd: int, pattern: tuple[bool, ...]):  # noqa: ANN202
    """A GGUFWriter at `path` with the keys both files share (`pattern`: which layers slide)."""
    import gguf  # deferred: only the tests that build models need it

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(path, arch=arch)
    writer.add_name(f"tiny-{arch}")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    n_blocks = len(pattern)
    writer.add_context_length(2048)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_blocks)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_key_length(HEAD_FULL)
    writer.add_value_length(HEAD_FULL)
    writer.add_key_length_swa(HEAD_SWA)
    writer.add_value_length_swa(HEAD_SWA)
    writer.add_rope_dimension_count(HEAD_FULL)
    writer.add_rope_dimension_count_swa(HEAD_SWA)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_freq_base_swa(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_sliding_window(SWA)
    writer.add_sliding_window_pattern(list(pattern))
    writer.add_vocab_size(N_VOCAB)
    return writer


def build_tiny_gemma4(
    path: str | Path,
    *,
    seed: int,
    shared_kv: int = 0,
    eos_logit_bias: float = -40.0,
    pattern: tuple[bool, ...] = TARGET_SWA,
) -> Path:
    """Write the tiny gemma4 target to ``path`` and return it (`shared_kv`: how many of its
    last layers reuse an earlier layer's cache, gemma4's `attention.shared_kv_layers`;
    `pattern`: which layers slide)."""
    make = partial(_target_weights, shared_kv=shared_kv, pattern=pattern)
    w = prepared(make, seed, None, 0.0, eos_logit_bias)
    writer = _writer(path, "gemma4", N_EMBD, pattern)
    writer.add_shared_kv_layers(shared_kv)
    writer.add_embedding_length_per_layer_input(0)
    write_bytes_model(writer, w)
    return Path(path)


#: how much of an echo assistant's rows its own layers write (the rest is the target's state)
ECHO_GAIN = 0.05


def _assistant_weights(
    rng: np.random.Generator,
    target_embd: int,
    echo: dict[str, np.ndarray] | None,
    pattern: tuple[bool, ...],
) -> dict[str, np.ndarray]:
    sa = 1.0 / np.sqrt(A_EMBD)
    w: dict[str, np.ndarray] = {
        "token_embd.weight": _g(rng, (N_VOCAB, A_EMBD), LOGIT_GAIN * sa),
        "output_norm.weight": _ones(A_EMBD),
        "rope_freqs.weight": _ones(HEAD_FULL // 2),
        "nextn.pre_projection.weight": _g(
            rng, (A_EMBD, 2 * target_embd), 1.0 / np.sqrt(target_embd)
        ),
        "nextn.post_projection.weight": _g(rng, (target_embd, A_EMBD), sa),
    }
    gain = 1.0
    if echo is not None:  # [token; h] -> h in the first channels, and back; the target's head
        gain = ECHO_GAIN
        pre = w["nextn.pre_projection.weight"] * gain
        pre[:target_embd, target_embd:] += np.eye(target_embd, dtype=np.float32)
        post = np.zeros((target_embd, A_EMBD), dtype=np.float32)
        post[:, :target_embd] = np.eye(target_embd, dtype=np.float32)
        head = np.zeros((N_VOCAB, A_EMBD), dtype=np.float32)
        head[:, :target_embd] = echo["output.weight"]
        w |= {
            "nextn.pre_projection.weight": pre,
            "nextn.post_projection.weight": post,
            "token_embd.weight": head,
        }
    for i, swa in enumerate(pattern):
        w |= _block(rng, f"blk.{i}.", A_EMBD, HEAD_SWA if swa else HEAD_FULL, gain=gain)
    return w


def build_tiny_assistant(
    path: str | Path,
    *,
    seed: int,
    target_embd: int = N_EMBD,
    drop: tuple[str, ...] = (),
    pattern: tuple[bool, ...] = ASSISTANT_SWA,
    echo: Path | None = None,
) -> Path:
    """Write a tiny gemma4-assistant for a target of width `target_embd` to ``path`` (another
    width: an assistant made for another target; `drop`: tensors left out; `echo`: the target
    file whose predictions it repeats, module docstring)."""
    theirs = _read_weights(echo) if echo is not None else None
    w = _assistant_weights(np.random.default_rng(seed), target_embd, theirs, pattern)
    w = {k: v for k, v in w.items() if k not in drop}
    writer = _writer(path, "gemma4-assistant", A_EMBD, pattern)
    writer.add_embedding_length_out(target_embd)
    writer.add_nextn_predict_layers(len(pattern))
    write_bytes_model(writer, w)
    return Path(path)

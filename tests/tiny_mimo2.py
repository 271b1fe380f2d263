"""A tiny GGUF in llama.cpp's `mimo2` layout with several MTP (NextN) layers: the one
architecture family here whose MTP graph runs any of its NextN layers (selected by
llama_set_nextn_layer_offset), so a model can chain them, one trained head per draft step.

Two trunk layers (the first full attention, the second a sliding window of SWA tokens, by
`mimo2.attention.sliding_window_pattern`) and `nextn` NextN layers after them: each an
attention block with llama.cpp's fused query-key-value projection (which mimo2's MTP graph
requires) and a dense FFN, plus `blk.N.nextn.{eh_proj,enorm,hnorm}`. Tokenizer, bias channel
and suppressed rows are tests.tiny_models'; weights Gaussian, F32.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests import tiny_models as tiny

HEAD_DIM = 16
N_TRUNK = 2
SWA = 64  # the sliding window of the trunk's second layer


def _weights(rng: np.random.Generator, nextn: int) -> dict[str, np.ndarray]:
    def g(shape: tuple[int, ...], std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    se = 1.0 / np.sqrt(tiny.N_EMBD)
    q, kv = HEAD_DIM * tiny.N_HEAD, HEAD_DIM * tiny.N_HEAD_KV
    w: dict[str, np.ndarray] = {
        "token_embd.weight": g((tiny.N_VOCAB, tiny.N_EMBD), 1.0),
        "output.weight": g((tiny.N_VOCAB, tiny.N_EMBD), tiny.LOGIT_GAIN * se),
        "output_norm.weight": ones(tiny.N_EMBD),
    }
    for i in range(N_TRUNK + nextn):
        p = f"blk.{i}."
        qkv = np.concatenate(
            [
                g((q, tiny.N_EMBD), tiny.QK_GAIN * se),
                g((kv, tiny.N_EMBD), tiny.QK_GAIN * se),
                g((kv, tiny.N_EMBD), tiny.V_GAIN * se),
            ]
        )
        w |= {
            p + "attn_norm.weight": ones(tiny.N_EMBD),
            p + "attn_qkv.weight": qkv,
            p + "attn_output.weight": g((tiny.N_EMBD, q), se),
            p + "ffn_norm.weight": ones(tiny.N_EMBD),
            p + "ffn_gate.weight": g((tiny.N_FF, tiny.N_EMBD), tiny.FFN_GAIN * se),
            p + "ffn_up.weight": g((tiny.N_FF, tiny.N_EMBD), tiny.FFN_GAIN * se),
            p + "ffn_down.weight": g((tiny.N_EMBD, tiny.N_FF), 1.0 / np.sqrt(tiny.N_FF)),
        }
        if i >= N_TRUNK:
            w |= {
                p + "nextn.eh_proj.weight": g(
                    (tiny.N_EMBD, 2 * tiny.N_EMBD), 1.0 / np.sqrt(2 * tiny.N_EMBD)
                ),
                p + "nextn.enorm.weight": ones(tiny.N_EMBD),
                p + "nextn.hnorm.weight": ones(tiny.N_EMBD),
            }
    return w


def build_tiny_mimo2(
    path: str | Path,
    *,
    seed: int,
    nextn: int = 2,
    eos_logit_bias: float = -40.0,
    drop: tuple[str, ...] = (),
) -> Path:
    """Write the tiny mimo2 model with `nextn` NextN layers to ``path`` and return it
    (`drop`: tensors left out, a broken file)."""
    import gguf  # deferred: only the tests that build models need it

    w = tiny.prepared(lambda rng: _weights(rng, nextn), seed, None, 0.0, eos_logit_bias)
    w = {k: v for k, v in w.items() if k not in drop}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n_blocks = N_TRUNK + nextn
    writer = gguf.GGUFWriter(path, arch="mimo2")
    writer.add_name("tiny-mimo2")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(2048)
    writer.add_embedding_length(tiny.N_EMBD)
    writer.add_block_count(n_blocks)
    writer.add_feed_forward_length(tiny.N_FF)
    writer.add_expert_feed_forward_length(tiny.N_FF)
    writer.add_head_count(tiny.N_HEAD)
    writer.add_head_count_kv(tiny.N_HEAD_KV)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_sliding_window(SWA)
    # per block: the trunk's second layer slides, every other block attends fully
    writer.add_sliding_window_pattern([i == 1 for i in range(n_blocks)])
    writer.add_nextn_predict_layers(nextn)
    writer.add_vocab_size(tiny.N_VOCAB)
    tiny.write_bytes_model(writer, w)
    return path

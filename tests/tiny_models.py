"""Tiny GGUF models built on the fly for fast tests of the speculative decoder.

``build_tiny_model`` writes a llama-architecture GGUF (F32 tensors, a few hundred KiB) that
llama.cpp loads and runs in milliseconds:

* tokenizer: gpt2-style byte-level BPE (pre-tokenizer "gpt-2"), the 256 byte tokens at ids
  0..255 (so any text, including multi-byte UTF-8, round-trips), a few merges, then three
  control tokens ``<|endoftext|>`` (BOS/PAD), ``<|im_start|>``, ``<|im_end|>`` (EOS/EOT).
  No BOS is added on tokenisation.
* ``vocab="other"``: the same layout with the byte tokens rotated, so token texts differ
  for ids >= 5 and llama.cpp's draft/target compatibility check fails.
* ``vocab="xvocab"``: a second tokenizer of the same size for cross-vocabulary drafting: the
  same byte tokens, other merges (among them " \xc3", which splits "é" and other two-byte
  characters across tokens, and merges that cross the target's token boundaries) and the
  control tokens in another order (so their ids differ). Built with the target's seed and no
  noise it shares the target's weights row for row, so its drafts agree with the target where
  both spell text the same way and disagree elsewhere.
* weights: Gaussian from ``numpy.random.default_rng(seed)``. Residual channel 0 is a constant
  "bias" channel (set in every embedding row, never written by the layers) through which
  the output rows of the control tokens (and, with ``ascii_only``, of the non-printable and
  non-ASCII bytes) get a strongly negative logit, so greedy decoding never emits EOS unless
  ``eos_logit_bias`` says otherwise, and generated text is plain ASCII.
* ``perturb_from_seed``: the weights of that seed plus Gaussian noise of relative size
  ``perturb_scale`` (times each tensor's own std) drawn from ``seed``. ``DRAFT_PERTURB`` gives
  greedy agreement with the unperturbed target of about 0.6 (measured 0.58-0.70 per prompt).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specgguf.modelfiles.vocab_overlap import gpt2_byte_to_char

DEFAULT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Relative noise added to the target's weights to make the draft model.
DRAFT_PERTURB = 0.12
# Initialisation gains (std multipliers over 1/sqrt(fan_in)), see _raw_weights.
LOGIT_GAIN = 4.0
QK_GAIN = 1.5
V_GAIN = 0.5
FFN_GAIN = 1.0
# Output row of token t gets -ANTI_REPEAT * unit(embedding of t): discourages t -> t fixed points.
ANTI_REPEAT = 1.0
# Bias-channel weight of the byte tokens that ascii_only=True keeps out of generated text.
SUPPRESSED_LOGIT_BIAS = -40.0
#: the tensors whose output is added to the residual stream: their row 0 stays zero, so the
#: bias channel is never written by a layer (attention, gated delta net, FFN)
RESIDUAL_WRITERS = (".attn_output.weight", ".ssm_out.weight", ".ffn_down.weight")
# Seeds the conftest fixtures use.
#: the sizes every tiny architecture shares (llama's defaults; hybrid, mimo2 and gemma4 too)
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
TARGET_SEED = 1234
DRAFT_SEED = 99


def _merge_rules(text: str) -> tuple[tuple[str, str], ...]:
    """BPE merge rules written as a merges.txt writes them, "left right", several to a line."""
    parts = text.split()
    return tuple(zip(parts[::2], parts[1::2], strict=True))


MERGES = _merge_rules("""
    Ġ t   h e   i n   Ġ a   e r   o n   Ġt he   r e   Ġ s   a t   e n   o r
    Ġ w   e s   i s   Ġ o   i t   a n   Ġ c   e d   in g   Ġ b   Ġ f   Ġ i
""")
#: the second tokenizer's merges (vocab="xvocab"): same count, other pairs
XMERGES = _merge_rules("""
    Ġ Ã   t h   th e   Ġ the   e n   a n   an d   Ġ and   o u   r e   Ġ re   Ã ©
    e r   er s   o n   on e   Ġ one   Ġ o   l l   e s   Ġ d   Ġ m   a t   Ġ p
""")
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: vocab="xvocab" keeps its control tokens in this order
XSPECIAL_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|im_start|>")
N_BYTE_TOKENS = 256
N_VOCAB = N_BYTE_TOKENS + len(MERGES) + len(SPECIAL_TOKENS)
ENDOFTEXT_ID = N_BYTE_TOKENS + len(MERGES)
IM_START_ID = ENDOFTEXT_ID + 1
IM_END_ID = ENDOFTEXT_ID + 2
BOS_ID = ENDOFTEXT_ID
EOS_ID = IM_END_ID
EOT_ID = IM_END_ID

_TOKEN_TYPE_NORMAL = 1
_TOKEN_TYPE_CONTROL = 3


#: GPT-2's reversible byte -> printable unicode character mapping (the BPE vocabulary's)
byte_to_unicode = gpt2_byte_to_char


def _byte_order(vocab: str) -> list[int]:
    """byte_order[i] = the byte that token id i stands for (i < 256)."""
    if vocab in ("bytes", "xvocab"):
        return list(range(256))
    if vocab == "other":
        return [(b + 7) % 256 for b in range(256)]
    raise ValueError(f"unknown vocab {vocab!r}")


def vocab_tokens(vocab: str = "bytes") -> tuple[list[str], list[int], list[str]]:
    """(token texts, token types, merges) of the tiny BPE vocab."""
    b2u = byte_to_unicode()
    byte_order = _byte_order(vocab)
    pairs = XMERGES if vocab == "xvocab" else MERGES
    specials = XSPECIAL_TOKENS if vocab == "xvocab" else SPECIAL_TOKENS
    tokens = [b2u[b] for b in byte_order] + [a + b for a, b in pairs] + list(specials)
    types = [_TOKEN_TYPE_NORMAL] * (N_BYTE_TOKENS + len(pairs)) + [_TOKEN_TYPE_CONTROL] * len(
        specials
    )
    merges = [f"{a} {b}" for a, b in pairs]
    assert len(tokens) == N_VOCAB and len(set(tokens)) == N_VOCAB
    return tokens, types, merges


def _raw_weights(
    rng: np.random.Generator,
    *,
    n_vocab: int,
    n_embd: int,
    n_layer: int,
    n_head: int,
    n_head_kv: int,
    n_ff: int,
) -> dict[str, np.ndarray]:
    """Unscaled-structure Gaussian weights, numpy shape (n_out, n_in) as gguf expects."""
    head_dim = n_embd // n_head
    n_kv = n_head_kv * head_dim

    def g(shape: tuple[int, ...], std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    se = 1.0 / np.sqrt(n_embd)
    w: dict[str, np.ndarray] = {
        "token_embd.weight": g((n_vocab, n_embd), 1.0),
        "output.weight": g((n_vocab, n_embd), LOGIT_GAIN * se),
        "output_norm.weight": np.ones(n_embd, dtype=np.float32),
    }
    for i in range(n_layer):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = np.ones(n_embd, dtype=np.float32)
        w[p + "attn_q.weight"] = g((n_embd, n_embd), QK_GAIN * se)
        w[p + "attn_k.weight"] = g((n_kv, n_embd), QK_GAIN * se)
        w[p + "attn_v.weight"] = g((n_kv, n_embd), V_GAIN * se)
        w[p + "attn_output.weight"] = g((n_embd, n_embd), 1.0 / np.sqrt(n_embd))
        w[p + "ffn_norm.weight"] = np.ones(n_embd, dtype=np.float32)
        w[p + "ffn_gate.weight"] = g((n_ff, n_embd), FFN_GAIN * se)
        w[p + "ffn_up.weight"] = g((n_ff, n_embd), FFN_GAIN * se)
        w[p + "ffn_down.weight"] = g((n_embd, n_ff), 1.0 / np.sqrt(n_ff))
    return w


def special_ids(vocab: str = "bytes") -> dict[str, int]:
    """Ids of the control tokens in a tiny vocab, by text."""
    specials = XSPECIAL_TOKENS if vocab == "xvocab" else SPECIAL_TOKENS
    return {t: N_BYTE_TOKENS + len(MERGES) + i for i, t in enumerate(specials)}


def fim_ids(vocab: str = "bytes") -> dict[str, int]:
    """The fill-in-the-middle tokens of a model built with `fim=True`, by role: tokens the
    model never writes (the suppressed control tokens and byte tokens 1-3), so that the
    layout is visible in the prompt and nothing in the output ends early (llama.cpp counts
    the repository and file-separator tokens as end of generation)."""
    ids = special_ids(vocab)
    return {"pre": ids["<|im_start|>"], "suf": ids["<|endoftext|>"], "mid": 1, "rep": 2, "sep": 3}


def _apply_structure(
    w: dict[str, np.ndarray],
    *,
    bias_channel: float,
    eos_logit_bias: float,
    suppressed_ids: list[int],
    vocab: str = "bytes",
) -> None:
    """Bias channel 0 (constant in embeddings, never written by layers) + control-token rows."""
    emb = w["token_embd.weight"]
    emb[:, 0] = bias_channel
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    w["output.weight"] -= (ANTI_REPEAT * unit).astype(np.float32)
    for name, t in w.items():
        if name.endswith(RESIDUAL_WRITERS):
            t[0, :] = 0.0
    out = w["output.weight"]
    out[:, 0] = 0.0
    out[suppressed_ids, 0] = SUPPRESSED_LOGIT_BIAS
    ids = special_ids(vocab)
    for text, tid in ids.items():
        out[tid, :] = 0.0
        out[tid, 0] = eos_logit_bias if text == "<|im_end|>" else SUPPRESSED_LOGIT_BIAS


def _is_plain_ascii(b: int) -> bool:
    return 32 <= b < 127 or b in (9, 10)


def build_tiny_model(
    path: str | Path,
    *,
    seed: int,
    perturb_from_seed: int | None = None,
    perturb_scale: float = 0.0,
    vocab: str = "bytes",
    chat_template: str | None = DEFAULT_TEMPLATE,
    n_embd: int = N_EMBD,
    n_layer: int = 2,
    n_head: int = N_HEAD,
    n_head_kv: int = N_HEAD_KV,
    n_ff: int = N_FF,
    n_ctx_train: int = 2048,
    eos_logit_bias: float = -40.0,
    ascii_only: bool = True,
    name: str | None = None,
    fim: bool = False,
) -> Path:
    """Write a tiny llama-architecture GGUF to ``path`` and return it.

    ``eos_logit_bias`` multiplies the (positive, ~0.5-1) bias channel in the output row of EOS
    (<|im_end|>): -40 makes it practically never chosen; +40 gives a model that ends at once. The
    other two control tokens are always suppressed. ``ascii_only`` likewise suppresses the byte
    tokens other than printable ASCII, "\\n" and "\\t" in generated text (so it is valid UTF-8
    at every token boundary); prompts may still contain any text.
    """
    import gguf  # deferred: only the tests that build models need it

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dims = dict(
        n_vocab=N_VOCAB, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
        n_head_kv=n_head_kv, n_ff=n_ff,
    )  # fmt: skip
    w = perturbed(lambda rng: _raw_weights(rng, **dims), seed, perturb_from_seed, perturb_scale)
    structure(w, vocab=vocab, eos_logit_bias=eos_logit_bias, ascii_only=ascii_only)

    writer = gguf.GGUFWriter(path, arch="llama")
    writer.add_name(name or f"tiny-{vocab}-seed{seed}")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    write_hparams(
        writer, n_ctx_train=n_ctx_train, n_embd=n_embd, n_layer=n_layer, n_ff=n_ff,
        n_head=n_head, n_head_kv=n_head_kv, n_vocab=N_VOCAB,
    )  # fmt: skip

    write_tokenizer(writer, vocab, chat_template)
    if fim:
        for role, token in fim_ids(vocab).items():
            writer.add_uint32(f"tokenizer.ggml.fim_{role}_token_id", token)

    write_tensors(writer, w)
    return path


def perturbed(make, seed: int, perturb_from_seed: int | None, scale: float):
    """Weights `make(rng)` of `seed`; or those of `perturb_from_seed` plus Gaussian noise of
    relative size `scale` (times each tensor's own std) drawn from `seed`."""
    if perturb_from_seed is None:
        return make(np.random.default_rng(seed))
    w = make(np.random.default_rng(perturb_from_seed))
    rng = np.random.default_rng(seed)
    for k in w:  # sorted-by-insertion: deterministic order
        std = float(w[k].std())
        noise = rng.standard_normal(w[k].shape).astype(np.float32)
        w[k] = (w[k] + scale * std * noise).astype(np.float32)
    return w


def structure(
    w: dict[str, np.ndarray], *, vocab: str, eos_logit_bias: float, ascii_only: bool
) -> None:
    """The bias channel and the suppressed output rows (see the module docstring)."""
    suppressed = []
    if ascii_only:
        order = _byte_order(vocab)
        suppressed = [i for i in range(N_BYTE_TOKENS) if not _is_plain_ascii(order[i])]
    _apply_structure(
        w,
        bias_channel=1.0,
        eos_logit_bias=eos_logit_bias,
        suppressed_ids=suppressed,
        vocab=vocab,
    )


def write_tokenizer(writer, vocab: str, chat_template: str | None) -> None:
    """The tiny byte-level BPE tokenizer's keys (and the chat template) into `writer`."""
    tokens, types, merges = vocab_tokens(vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    ids = special_ids(vocab)
    writer.add_bos_token_id(ids["<|endoftext|>"])
    writer.add_eos_token_id(ids["<|im_end|>"])
    writer.add_eot_token_id(ids["<|im_end|>"])
    writer.add_pad_token_id(ids["<|endoftext|>"])
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)


def write_tensors(writer, w: dict[str, np.ndarray]) -> None:
    """The F32 tensors, then the file."""
    for k, v in w.items():
        writer.add_tensor(k, np.ascontiguousarray(v, dtype=np.float32))
    write_file(writer)


def write_file(writer) -> None:
    """A GGUFWriter's header, keys and tensors to its file, and the file closed."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_hparams(
    writer,  # noqa: ANN001 - gguf.GGUFWriter
    *,
    n_ctx_train: int,
    n_embd: int,
    n_layer: int,
    n_ff: int,
    n_head: int,
    n_head_kv: int,
    n_vocab: int,
) -> None:
    """The hyperparameters every tiny llama-like GGUF's header carries (a target's or a
    head's): sizes, RoPE over a whole head, RMS norm."""
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)


def prepared(make, seed: int, perturb_from_seed: int | None, scale: float, eos_logit_bias: float):
    """Weights of `make(rng)` as build_tiny_model prepares its own (noise, bias channel, rows)
    for the bytes vocabulary, ASCII only: what every tiny architecture's builder draws."""
    w = perturbed(make, seed, perturb_from_seed, scale)
    structure(w, vocab="bytes", eos_logit_bias=eos_logit_bias, ascii_only=True)
    return w


def write_bytes_model(writer, w: dict[str, np.ndarray]) -> None:
    """The bytes tokenizer with the default chat template, then the tensors `w`."""
    write_tokenizer(writer, "bytes", DEFAULT_TEMPLATE)
    write_tensors(writer, w)

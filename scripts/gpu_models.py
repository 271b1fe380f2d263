#!/usr/bin/env python3
"""Write a synthetic target/draft GGUF pair whose greedy agreement is set by construction.

Real weights cannot travel to a borrowed GPU machine (a 7B model is gigabytes), so the GPU
check builds its models there: a target shaped like Qwen2.5-7B (hidden 3584, 28 layers, 28
heads, 4 KV heads, FFN 18944, vocabulary 152064, f16) and a cheap draft with the same
vocabulary. Timing needs only the shapes; acceptance needs a draft that agrees with the
target often but not always, and that is arranged like this:

* The hidden dimensions are split in two halves, A and B. Token embeddings live in A only
  (random, unit variance); every layer writes into B only (its output projections have zero
  rows for A), with small weights, so the residual stream stays dominated by the embedding.
* The output head gives each word token two successors: its A half is
  g / d_A * (E[pred1(j)] + E[pred2(j)]), so after token w the two tokens succ1(w) and
  succ2(w) get a logit of about g * sqrt(d / d_A), far above the rest. Its B half is random,
  so which of the two wins is decided by what the layers wrote into B: the context.
* The draft IS the target's embedding, output head and first `--draft-layers` layers. The
  target's choice depends on the sum S + U of what the shared layers (S) and the upper
  layers (U) wrote, the draft's on S alone; for a Gaussian decision variable they agree
  with probability 1 - arccos(rho) / pi, rho = std(S) / std(S + U). The per-layer scales are
  set from the wanted agreement (`--agreement`); the acceptance actually obtained is
  measured by the GPU check and reported.

Weights are windows of one pool of Gaussian numbers at offsets derived from the tensor's
name, so writing 15 GB takes about as long as the disk needs, and a tensor the draft shares
with the target is bit for bit the same in both files.

    python scripts/gpu_models.py --out DIR --shape 7b      # DIR/target.gguf, DIR/draft.gguf
    python scripts/gpu_models.py --out DIR --shape tiny    # the same design, tiny (CPU smoke)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

#: expected E[silu(g)^2] for g ~ N(0, 1): the FFN activation's mean square
SILU_MS = 0.3553
#: assumed share of a value's variance left after attention averages over positions
ATTN_KEEP = 0.5
#: bump when the construction changes, so that stale files are rewritten
FORMAT = 2


@dataclass(frozen=True)
class Shape:
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int = 32768


SHAPES = {
    # Qwen2.5-7B's dimensions (its vocabulary size includes the padding rows)
    "7b": Shape(3584, 28, 28, 4, 18944, 152064),
    # small enough for a CPU in seconds, large enough for byte tokens plus many words
    "tiny": Shape(512, 4, 8, 2, 512, 4096, 4096),
}


@dataclass(frozen=True)
class Design:
    shape: str = "7b"
    draft_layers: int = 2
    agreement: float = 0.8  # wanted greedy agreement per token
    gain: float = 14.0  # g: the two successors' logit is about g * sqrt(2)
    resid_share: float = 0.05  # |what the layers write|^2 / |embedding|^2
    noise_share: float = 0.1  # std of the B part of a logit / the successors' logit
    qk_gain: float = 1.5  # q and k std per dimension: how peaked attention is
    seed: int = 0
    format: int = FORMAT


class Pool:
    """Gaussian float32 numbers, cut into tensors at offsets derived from their names."""

    def __init__(self, seed: int, size: int) -> None:
        self.data = np.random.default_rng(seed).standard_normal(size, dtype=np.float32)

    def scaled(self, std: float) -> Pool:
        """This pool times `std`, in f16, made once per std (a handful of them): a tensor is
        then a view of it, written without another pass over its numbers."""
        cache = self.__dict__.setdefault("_scaled", {})
        if std not in cache:
            p = object.__new__(Pool)
            p.data = (self.data * np.float32(std)).astype(np.float16)
            cache[std] = p
        return cache[std]

    def take(self, name: str, n: int) -> np.ndarray:
        """n numbers (a view when they fit in one window), the same for the same name."""
        size = self.data.size
        off = zlib.crc32(name.encode()) % max(1, size - min(n, size))
        if n <= size - off:
            return self.data[off : off + n]
        parts, left, i = [], n, 0
        while left:
            o = zlib.crc32(f"{name}#{i}".encode()) % (size // 2)
            m = min(left, size - o)
            parts.append(self.data[o : o + m])
            left -= m
            i += 1
        return np.concatenate(parts)


def layer_scales(d: Design, shape: Shape) -> tuple[float, float]:
    """Per-layer output std for the shared layers and for the target's upper layers."""
    rho = math.cos(math.pi * (1.0 - d.agreement))
    total = d.resid_share / (1.0 + ATTN_KEEP)  # sum over layers of s^2 (B dims ~ A dims)
    shared = min(d.draft_layers, shape.n_layer)
    upper = shape.n_layer - shared
    s_shared = math.sqrt(rho**2 * total / shared) if shared else 0.0
    s_upper = math.sqrt((1.0 - rho**2) * total / upper) if upper else 0.0
    if not upper:  # the draft is the whole target: everything is shared
        s_shared = math.sqrt(total / shared)
    return s_shared, s_upper


def vocabulary(n_vocab: int) -> tuple[list[str], list[int], list[str], int, int]:
    """gpt2-style byte-level BPE: 256 byte tokens, " w", words " k0", " k1", ..., and an
    end-of-text control token. Returns (tokens, types, merges, first word id, eos id)."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_tok = dict(zip(bs, (chr(c) for c in cs), strict=True))
    tokens = [byte_tok[b] for b in range(256)] + ["Ġw"]
    first_word = len(tokens)
    n_words = n_vocab - first_word - 1
    tokens += [f"Ġk{i}" for i in range(n_words)]
    eos = len(tokens)
    tokens.append("<|endoftext|>")
    types = [1] * eos + [3]
    return tokens, types, ["Ġ w"], first_word, eos


def tensor_plan(shape: Shape, n_layer: int) -> list[tuple[str, tuple[int, ...], type]]:
    """(name, numpy shape, dtype) in file order."""
    d, hd = shape.n_embd, shape.n_embd // shape.n_head
    kv = shape.n_head_kv * hd
    plan = [
        ("token_embd.weight", (shape.n_vocab, d), np.float16),
        ("output_norm.weight", (d,), np.float32),
        ("output.weight", (shape.n_vocab, d), np.float16),
    ]
    for i in range(n_layer):
        p = f"blk.{i}."
        plan += [
            (p + "attn_norm.weight", (d,), np.float32),
            (p + "attn_q.weight", (d, d), np.float16),
            (p + "attn_q.bias", (d,), np.float32),
            (p + "attn_k.weight", (kv, d), np.float16),
            (p + "attn_k.bias", (kv,), np.float32),
            (p + "attn_v.weight", (kv, d), np.float16),
            (p + "attn_v.bias", (kv,), np.float32),
            (p + "attn_output.weight", (d, d), np.float16),
            (p + "ffn_norm.weight", (d,), np.float32),
            (p + "ffn_gate.weight", (shape.n_ff, d), np.float16),
            (p + "ffn_up.weight", (shape.n_ff, d), np.float16),
            (p + "ffn_down.weight", (d, shape.n_ff), np.float16),
        ]
    return plan


class Weights:
    """Every tensor of the design, computed on demand (the big ones are never all in memory)."""

    def __init__(self, d: Design, shape: Shape, first_word: int) -> None:
        self.d, self.shape = d, shape
        self.d_a = shape.n_embd // 2
        n = shape.n_embd * shape.n_ff
        self.pool = Pool(d.seed, max(1 << 20, min(1 << 27, 2 * n)))
        self.first_word = first_word
        self.s_shared, self.s_upper = layer_scales(d, shape)
        rng = np.random.default_rng(d.seed + 1)
        n_words = shape.n_vocab - first_word - 1
        words = np.arange(first_word, first_word + n_words)
        self.succ1 = rng.permutation(words)  # succ1[w - first_word]: a successor of word w
        self.succ2 = rng.permutation(words)
        self._emb: np.ndarray | None = None

    def embeddings_a(self) -> np.ndarray:
        """The A half of the embeddings, (n_vocab, d_A) float32 (kept: the head needs it)."""
        if self._emb is None:
            v, a = self.shape.n_vocab, self.d_a
            self._emb = self.pool.take("token_embd", v * a).reshape(v, a)
        return self._emb

    def tensor(self, name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
        if name.endswith("norm.weight"):
            return np.ones(shape, np.float32)
        if name.endswith(".bias"):
            return np.zeros(shape, np.float32)
        if name == "token_embd.weight":
            out = np.zeros(shape, np.float16)
            out[:, : self.d_a] = self.embeddings_a()
            return out
        if name == "output.weight":
            return self._output_head(shape)
        layer = int(name.split(".")[1])
        scale = self.s_shared if layer < self.d.draft_layers else self.s_upper
        rows, cols = shape
        if name.endswith(("attn_q.weight", "attn_k.weight")):
            std = self.d.qk_gain / math.sqrt(cols)
        elif name.endswith(("attn_v.weight", "ffn_gate.weight", "ffn_up.weight")):
            std = 1.0 / math.sqrt(cols)
        elif name.endswith("attn_output.weight"):
            std = scale / math.sqrt(cols)
        else:  # ffn_down
            std = scale / math.sqrt(cols * SILU_MS)
        pool = self.pool.scaled(std)
        if name.endswith(("attn_output.weight", "ffn_down.weight")):
            out = np.zeros(shape, np.float16)  # the layers write into the B half only
            b = rows - self.d_a
            out[self.d_a :] = pool.take(name, b * cols).reshape(b, cols)
            return out
        return pool.take(name, rows * cols).reshape(rows, cols)

    def _output_head(self, shape: tuple[int, ...]) -> np.ndarray:
        v, d = shape
        emb = self.embeddings_a()
        fw, n_words = self.first_word, self.succ1.size
        out = np.zeros(shape, np.float16)
        a_part = np.zeros((v, self.d_a), np.float32)
        words = emb[fw : fw + n_words] * (self.d.gain / self.d_a)
        a_part[self.succ1] += words  # permutations: no index repeats within one assignment
        a_part[self.succ2] += words
        out[:, : self.d_a] = a_part
        del a_part
        # B half: a logit's B part has std noise_share * (successors' logit)
        b = d - self.d_a
        sigma = self.d.noise_share * self.d.gain / math.sqrt(self.d.resid_share * self.d_a)
        out[:fw + n_words, self.d_a :] = (
            self.pool.take("output.B", (fw + n_words) * b).reshape(fw + n_words, b) * sigma
        ).astype(np.float16)
        return out


def write_model(path: Path, w: Weights, n_layer: int, name: str) -> None:
    import gguf

    s = w.shape
    tokens, types, merges, _, eos = vocabulary(s.n_vocab)
    writer = gguf.GGUFWriter(str(path), arch="qwen2")
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(s.n_ctx_train)
    writer.add_embedding_length(s.n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(s.n_ff)
    writer.add_head_count(s.n_head)
    writer.add_head_count_kv(s.n_head_kv)
    writer.add_rope_freq_base(1000000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(s.n_vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(eos)
    writer.add_eos_token_id(eos)
    writer.add_pad_token_id(eos)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    plan = tensor_plan(s, n_layer)
    for tname, shape, dtype in plan:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        writer.add_tensor_info(tname, shape, np.dtype(dtype), nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tname, shape, dtype in plan:
        writer.write_tensor_data(np.ascontiguousarray(w.tensor(tname, shape, dtype)))
    writer.close()


def build(out: Path, design: Design) -> dict:
    """Write out/target.gguf and out/draft.gguf (unless this design is already there)."""
    out.mkdir(parents=True, exist_ok=True)
    stamp = out / "design.json"
    target, draft = out / "target.gguf", out / "draft.gguf"
    want = asdict(design)
    if stamp.is_file() and target.is_file() and draft.is_file():
        try:
            if json.loads(stamp.read_text()).get("design") == want:
                return {"target": str(target), "draft": str(draft), "reused": True, **want}
        except (OSError, ValueError):
            pass
    stamp.unlink(missing_ok=True)
    shape = SHAPES[design.shape]
    t0 = time.perf_counter()
    _, _, _, first_word, _ = vocabulary(shape.n_vocab)
    w = Weights(design, shape, first_word)
    write_model(draft, w, design.draft_layers, f"synthetic-{design.shape}-draft")
    write_model(target, w, shape.n_layer, f"synthetic-{design.shape}-target")
    info = {
        "target": str(target),
        "draft": str(draft),
        "reused": False,
        "seconds": round(time.perf_counter() - t0, 1),
        "target_bytes": target.stat().st_size,
        "draft_bytes": draft.stat().st_size,
        "layer_scales": layer_scales(design, shape),
        **want,
    }
    stamp.write_text(json.dumps({"design": want, "info": info}))
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="7b")
    ap.add_argument("--draft-layers", type=int, default=Design.draft_layers)
    ap.add_argument("--agreement", type=float, default=Design.agreement)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not 0.5 <= args.agreement <= 1.0:
        print("error: --agreement must be within 0.5..1", file=sys.stderr)
        return 1
    shape = SHAPES[args.shape]
    if not 1 <= args.draft_layers <= shape.n_layer:
        print(f"error: --draft-layers must be within 1..{shape.n_layer}", file=sys.stderr)
        return 1
    design = Design(args.shape, args.draft_layers, args.agreement, seed=args.seed)
    print(json.dumps(build(args.out, design)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

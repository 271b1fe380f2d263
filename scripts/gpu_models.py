#!/usr/bin/env python3
"""Write a synthetic target, draft and EAGLE-3 head whose greedy agreement is set by construction.

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

The EAGLE-3 head (head.gguf) is one decoder layer of the target's width, heads and FFN that
borrows the target's token embeddings and output head (it has neither, as a converted head
without its own vocabulary has neither; both come through the target's context). At
position P it reads the token at P+1 and the target's rows at P, and should name the token
at P+2, which the target picks among succ1/succ2 of the token at P+1:

* Its attention carries the token's embedding: q and k are the same projection of the
  embedding's A half in every head, so a row's score with itself (SELF_SCORE) is far above
  any other's and every row attends to itself alone; the values are k orthonormal rows R of
  the A half, and the output projection writes R^T of them back into A. The pre-norm state's
  A half is then the embedding projected onto k of the d_A dimensions, enough for the
  target's output head to rank the two successors far above every other token.
* From its second draft step on, its input row is its own previous pre-norm state, whose A
  half holds the previous token: the value projection subtracts that (its rows read the
  state's A half with weight -RMS of the state), so each step's A half holds its own token.
* fc passes the B half of the last target layer it reads into B (`head_b_gain`: as heavy
  against the successors' logit as the target's B half is). That half is the target's
  context at row P, while the target decides at row P+1 from that row's own layers; in this
  design the two are nearly uncorrelated, so the head picks the right one of the two
  candidates about half the time: its greedy agreement per token is about 1/2 by
  construction (the wrong candidate is the other successor, never an arbitrary token), and
  the acceptance actually obtained is measured by the GPU check.
* Its FFN is there at full size (its step costs what a trained head's does) and adds
  nothing (ffn_down is zero).

Weights are windows of one pool of Gaussian numbers at offsets derived from the tensor's
name, so writing 15 GB takes about as long as the disk needs, and a tensor the draft shares
with the target is bit for bit the same in both files (the head shares by borrowing).
All three files are architecture llama (the head: eagle3), whose graph records the layer
inputs an EAGLE-3 head reads; Qwen2.5-7B's own architecture, qwen2, does not in this
libllama, and without its q/k/v biases the model costs the same.

    python scripts/gpu_models.py --out DIR --shape 7b      # DIR/{target,draft,head}.gguf
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
FORMAT = 3
#: rope base and norm epsilon of all three files
ROPE_BASE = 1000000.0
RMS_EPS = 1e-6


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
    head_b_gain: float = 1.0  # the EAGLE-3 head's B half against the target's, in weight
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
            (p + "attn_k.weight", (kv, d), np.float16),
            (p + "attn_v.weight", (kv, d), np.float16),
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


#: the synthetic models' architecture: llama's graph records every layer's input, which an
#: EAGLE-3 head reads (qwen2's, the shapes' origin, does not in this libllama); without q/k/v
#: biases a 7B-shaped llama costs what the qwen2 model does
ARCH = "llama"


def _writer(path: Path, arch: str, name: str, s: Shape, n_layer: int):
    """A GGUF writer with the keys all three files share: the shape's, and the vocabulary
    (the target, the draft and the head carry the same one)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch=arch)
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(s.n_ctx_train)
    writer.add_embedding_length(s.n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(s.n_ff)
    writer.add_head_count(s.n_head)
    writer.add_head_count_kv(s.n_head_kv)
    writer.add_rope_freq_base(ROPE_BASE)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    _add_vocabulary(writer, s.n_vocab)
    return writer


def _add_vocabulary(writer, n_vocab: int) -> None:
    """The tokenizer keys: gpt2-style byte-level BPE over vocabulary()'s tokens."""
    tokens, types, merges, _, eos = vocabulary(n_vocab)
    writer.add_vocab_size(n_vocab)
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


def _write_tensors(writer, plan: list[tuple[str, tuple[int, ...], type]], make) -> None:
    """Header, then every tensor of `plan` made one at a time by make(name, shape, dtype)."""
    for tname, shape, dtype in plan:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        writer.add_tensor_info(tname, shape, np.dtype(dtype), nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tname, shape, dtype in plan:
        writer.write_tensor_data(np.ascontiguousarray(make(tname, shape, dtype)))
    writer.close()


def write_model(path: Path, w: Weights, n_layer: int, name: str) -> None:
    s = w.shape
    writer = _writer(path, ARCH, name, s, n_layer)
    _write_tensors(writer, tensor_plan(s, n_layer), w.tensor)


# -- the EAGLE-3 head ------------------------------------------------------------------------

#: the head's attention score of a row with itself: far above any other row's, so that each
#: row attends to itself alone (other tokens' scores have std SELF_SCORE / sqrt(head dim))
SELF_SCORE = 80.0


def head_layers(n_layer: int) -> tuple[int, int, int]:
    """The three target layers the head reads (low, middle, the last layer's input)."""
    return (1, n_layer // 2, n_layer - 1)


def head_plan(shape: Shape) -> list[tuple[str, tuple[int, ...], type]]:
    """The head's tensors (numpy shapes, file order): one decoder layer of the target's
    width, heads and FFN; no token_embd, no output: it borrows the target's."""
    d, hd = shape.n_embd, shape.n_embd // shape.n_head
    kv = shape.n_head_kv * hd
    return [
        ("fc.weight", (d, 3 * d), np.float16),
        ("output_norm.weight", (d,), np.float32),
        ("blk.0.attn_norm.weight", (d,), np.float32),
        ("blk.0.attn_norm_2.weight", (d,), np.float32),
        ("blk.0.attn_q.weight", (shape.n_head * hd, 2 * d), np.float16),
        ("blk.0.attn_k.weight", (kv, 2 * d), np.float16),
        ("blk.0.attn_v.weight", (kv, 2 * d), np.float16),
        ("blk.0.attn_output.weight", (d, shape.n_head * hd), np.float16),
        ("blk.0.ffn_norm.weight", (d,), np.float32),
        ("blk.0.ffn_gate.weight", (shape.n_ff, d), np.float16),
        ("blk.0.ffn_up.weight", (shape.n_ff, d), np.float16),
        ("blk.0.ffn_down.weight", (d, shape.n_ff), np.float16),
    ]


class HeadWeights:
    """The EAGLE-3 head of the design (see the module docstring): what each tensor holds."""

    def __init__(self, w: Weights) -> None:
        self.w, s, d = w, w.shape, w.d
        self.hd = s.n_embd // s.n_head
        self.k = s.n_head_kv * self.hd  # the value width: what attention can carry
        self.d_a = w.d_a
        rng = np.random.default_rng(d.seed + 2)
        # orthonormal value rows R (k x d_A): R^T R is a projection onto k of the A dims
        q, _ = np.linalg.qr(rng.standard_normal((self.d_a, self.k)).astype(np.float32))
        self.r = q.T
        # the B half the head writes: as decisive against its successors' logit as the
        # target's own B half, times head_b_gain
        self.hb_norm = d.head_b_gain * math.sqrt(2 * d.resid_share / self.d_a) * self.k
        # the B half of the last layer the head reads, as the target writes it
        s_shared, s_upper = w.s_shared, w.s_upper
        top = head_layers(s.n_layer)[-1]
        per_layer = [(s_shared if i < d.draft_layers else s_upper) ** 2 for i in range(top)]
        #: std of a B entry of that layer's input
        self.feature_b_std = math.sqrt(max(sum(per_layer) * (1.0 + ATTN_KEEP), 1e-12))
        self.fc_gain = self.hb_norm / (self.feature_b_std * math.sqrt(s.n_embd - self.d_a))
        # the RMS of the head's own pre-norm state, which feeds its next step
        self.state_rms = math.sqrt((2 * self.k + self.hb_norm**2) / s.n_embd)

    def tensor(self, name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
        s, a, n = self.w.shape, self.d_a, self.w.shape.n_embd
        if name.endswith("norm.weight") or name.endswith("norm_2.weight"):
            return np.ones(shape, np.float32)
        out = np.zeros(shape, np.float16)
        if name == "fc.weight":  # the B half of the last read layer's input, to B
            i = np.arange(a, n)
            out[i, 2 * n + i] = self.fc_gain
        elif name in ("blk.0.attn_q.weight", "blk.0.attn_k.weight"):
            std = math.sqrt(SELF_SCORE / (math.sqrt(self.hd) * n))
            m = self.w.pool.scaled(std).take("head.qk", self.hd * a).reshape(self.hd, a)
            for h in range(shape[0] // self.hd):  # every head alike: any head-to-group map
                out[h * self.hd : (h + 1) * self.hd, :a] = m
        elif name == "blk.0.attn_v.weight":  # R (token embedding) - R (previous state)
            out[:, :a] = self.r
            out[:, n : n + a] = -self.state_rms * self.r
        elif name == "blk.0.attn_output.weight":  # the first head of each group: R^T, to A
            group = s.n_head // s.n_head_kv
            for g in range(s.n_head_kv):
                h = g * group
                out[:a, h * self.hd : (h + 1) * self.hd] = self.r[g * self.hd : (g + 1) * self.hd].T
        elif name in ("blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"):
            rows, cols = shape
            return self.w.pool.scaled(1.0 / math.sqrt(cols)).take(name, rows * cols).reshape(shape)
        # ffn_down stays zero: the FFN adds nothing (and costs what a trained head's does)
        return out


def write_head(path: Path, w: Weights, name: str) -> None:
    s = w.shape
    writer = _writer(path, "eagle3", name, s, 1)  # one decoder layer
    writer.add_array("eagle3.target_layers", list(head_layers(s.n_layer)))
    writer.add_uint32("eagle3.target_hidden_size", s.n_embd)
    _write_tensors(writer, head_plan(s), HeadWeights(w).tensor)


def build(out: Path, design: Design) -> dict:
    """Write out/target.gguf, out/draft.gguf and out/head.gguf (unless this design is there)."""
    out.mkdir(parents=True, exist_ok=True)
    stamp = out / "design.json"
    files = {k: out / f"{k}.gguf" for k in ("target", "draft", "head")}
    paths = {k: str(p) for k, p in files.items()}
    want = asdict(design)
    if stamp.is_file() and all(p.is_file() for p in files.values()):
        try:
            if json.loads(stamp.read_text()).get("design") == want:
                return {**paths, "reused": True, **want}
        except (OSError, ValueError):
            pass
    stamp.unlink(missing_ok=True)
    shape = SHAPES[design.shape]
    t0 = time.perf_counter()
    _, _, _, first_word, _ = vocabulary(shape.n_vocab)
    w = Weights(design, shape, first_word)
    write_model(files["draft"], w, design.draft_layers, f"synthetic-{design.shape}-draft")
    write_model(files["target"], w, shape.n_layer, f"synthetic-{design.shape}-target")
    write_head(files["head"], w, f"synthetic-{design.shape}-eagle3")
    info = {
        **paths,
        "reused": False,
        "seconds": round(time.perf_counter() - t0, 1),
        **{f"{k}_bytes": p.stat().st_size for k, p in files.items()},
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

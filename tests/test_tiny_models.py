"""The tiny GGUF models of tests/tiny_models.py have the properties the decoder tests rely on.

Uses llama-cpp-python's low-level API only.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tests.tiny_models import EOS_ID, N_VOCAB, build_tiny_model, vocab_tokens

llama_cpp = pytest.importorskip("llama_cpp")


@llama_cpp.llama_log_callback
def _quiet_log(level, text, user_data):
    pass


# The module-level name keeps the ctypes callback alive for the whole session.
llama_cpp.llama_log_set(_quiet_log, ctypes.c_void_p(0))
llama_cpp.llama_backend_init()

PROMPTS = [
    "Hello, world! The quick brown fox",
    "def main():\n    return 42",
    "Café au lait, 日本語のテキスト, ü",
    "<|im_start|>user\nWrite a poem<|im_end|>\n<|im_start|>assistant\n",
]


class Runner:
    """Minimal low-level llama.cpp driver: one model, one context, one sequence."""

    def __init__(self, path, n_ctx: int = 512, n_batch: int = 64):
        mparams = llama_cpp.llama_model_default_params()
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), mparams)
        assert self.model, f"failed to load {path}"
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = 1
        cparams.n_threads = 1
        cparams.n_threads_batch = 1
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        assert self.ctx, "failed to create context"
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self.n_batch = n_batch

    def close(self) -> None:
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)

    def tokenize(self, text: str, parse_special: bool = False) -> list[int]:
        data = text.encode()
        buf = (llama_cpp.llama_token * (len(data) + 8))()
        n = llama_cpp.llama_tokenize(
            self.vocab, data, len(data), buf, len(buf), False, parse_special
        )
        assert n >= 0
        return list(buf[:n])

    def piece(self, token: int, special: bool = False) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        assert n >= 0
        return buf.raw[:n]

    def detokenize(self, tokens: list[int], special: bool = False) -> str:
        return b"".join(self.piece(t, special) for t in tokens).decode("utf-8")

    def clear(self, p0: int = 0) -> None:
        assert llama_cpp.llama_memory_seq_rm(self.mem, 0, p0, -1)

    def eval(self, tokens: list[int], pos: int, all_logits: bool = False) -> np.ndarray:
        """Decode tokens at positions pos..; logits rows for all tokens or only the last."""
        assert 0 < len(tokens) <= self.n_batch
        b = self.batch
        b.n_tokens = len(tokens)
        for i, t in enumerate(tokens):
            b.token[i] = t
            b.pos[i] = pos + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = all_logits or i == len(tokens) - 1
        rc = llama_cpp.llama_decode(self.ctx, b)
        assert rc == 0, rc
        idx = range(len(tokens)) if all_logits else [len(tokens) - 1]
        rows = [
            np.ctypeslib.as_array(
                llama_cpp.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,)
            )
            for i in idx
        ]
        return np.array(rows)

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        self.clear()
        logits = self.eval(prompt, 0)[-1]
        out: list[int] = []
        pos = len(prompt)
        for _ in range(n):
            t = int(np.argmax(logits))
            out.append(t)
            logits = self.eval([t], pos)[-1]
            pos += 1
        return out

    def argmax_teacher_forced(self, tokens: list[int]) -> list[int]:
        """argmax after each prefix tokens[:i+1], evaluated in batches."""
        self.clear()
        out: list[int] = []
        for s in range(0, len(tokens), self.n_batch):
            chunk = tokens[s : s + self.n_batch]
            out.extend(int(r) for r in self.eval(chunk, s, all_logits=True).argmax(axis=1))
        return out


@pytest.fixture(scope="module")
def target(tiny_target):
    r = Runner(tiny_target)
    yield r
    r.close()


@pytest.fixture(scope="module")
def draft(tiny_draft):
    r = Runner(tiny_draft)
    yield r
    r.close()


@pytest.fixture(scope="module")
def other(tiny_other_vocab):
    r = Runner(tiny_other_vocab)
    yield r
    r.close()


def test_loads_with_expected_vocab(target):
    assert target.n_vocab == N_VOCAB
    assert llama_cpp.llama_vocab_eos(target.vocab) == EOS_ID
    assert llama_cpp.llama_vocab_eot(target.vocab) == EOS_ID
    assert llama_cpp.llama_vocab_get_add_bos(target.vocab) is False
    tmpl = llama_cpp.llama_model_chat_template(target.model, None)
    assert tmpl is not None and b"<|im_start|>" in tmpl


@pytest.mark.parametrize("text", PROMPTS + ["", " ", "\n\n\t x", "the theorem ing éé 日本"])
def test_text_round_trips(target, text):
    toks = target.tokenize(text)
    assert all(0 <= t < N_VOCAB for t in toks)
    assert target.detokenize(toks) == text


def test_merges_and_special_tokens(target):
    toks = target.tokenize(" the thing")
    assert len(toks) < len(" the thing")  # merges apply
    assert target.tokenize("<|im_end|>", parse_special=True) == [EOS_ID]
    assert target.piece(EOS_ID, special=True) == b"<|im_end|>"
    assert target.piece(EOS_ID, special=False) == b""


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_generation_is_not_degenerate(target, prompt):
    out = target.greedy(target.tokenize(prompt, parse_special=True), 32)
    assert EOS_ID not in out
    assert len(set(out)) >= 4, out
    assert max(out.count(t) for t in set(out)) <= 16, out
    assert target.detokenize(out).isascii()  # ascii_only=True: valid UTF-8 at every token


def _batched_vs_sequential(r: Runner, prompt: str, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Logits of a k-token block decoded in one batch vs one token at a time (same prefix)."""
    toks = r.tokenize(prompt, parse_special=True)
    gen = r.greedy(toks, 3 + k)
    ctx, block = toks + gen[:3], gen[3:]
    r.clear()
    r.eval(ctx, 0)
    batched = r.eval(block, len(ctx), all_logits=True)
    r.clear(len(ctx))  # roll the block back, then feed it one token at a time
    seq = np.array([r.eval([t], len(ctx) + i)[-1] for i, t in enumerate(block)])
    return batched, seq


@pytest.mark.parametrize("prompt", PROMPTS + ["x", "0123456789", "Lorem ipsum dolor sit amet"])
def test_batched_argmax_equals_sequential(target, prompt):
    batched, seq = _batched_vs_sequential(target, prompt)
    assert list(batched.argmax(axis=1)) == list(seq.argmax(axis=1))
    # Not bit-identical: llama.cpp's CPU flash attention works in F16 (abs diff ~1e-3).
    np.testing.assert_allclose(batched, seq, rtol=0, atol=2e-2)


def test_greedy_winners_are_clear(target):
    """Top-2 logit gaps dwarf the batch-vs-sequential noise, so k-token passes don't flip."""
    gaps, noise = [], 0.0
    for prompt in PROMPTS:
        batched, seq = _batched_vs_sequential(target, prompt, k=8)
        noise = max(noise, float(np.abs(batched - seq).max()))
        top2 = np.sort(seq, axis=1)[:, -2:]
        gaps += list((top2[:, 1] - top2[:, 0]) / np.abs(top2[:, 1]))
    assert np.mean(np.array(gaps) > 1e-3) >= 0.9
    assert np.median(gaps) > 1e-2
    assert noise < 1e-2


def test_draft_agreement_is_partial(target, draft):
    agree = []
    for prompt in PROMPTS[:2]:
        toks = target.tokenize(prompt, parse_special=True)
        gen = target.greedy(toks, 32)
        seq = toks + gen
        pred = draft.argmax_teacher_forced(seq)
        # draft's guess for each generated token vs the target's greedy choice
        agree += [pred[len(toks) - 1 + i] == g for i, g in enumerate(gen)]
    rate = float(np.mean(agree))
    assert len(agree) == 64
    assert 0.2 <= rate <= 0.9, rate


def test_other_vocab_is_incompatible(target, other):
    # llama.cpp's rule: same type, BOS/EOS, |n_vocab diff| <= 128, equal texts for ids >= 5
    assert llama_cpp.llama_vocab_type(target.vocab) == llama_cpp.llama_vocab_type(other.vocab)
    texts_t = [llama_cpp.llama_vocab_get_text(target.vocab, i) for i in range(5, N_VOCAB)]
    texts_o = [llama_cpp.llama_vocab_get_text(other.vocab, i) for i in range(5, N_VOCAB)]
    assert texts_t != texts_o
    assert texts_t == [t.encode() for t in vocab_tokens("bytes")[0][5:]]
    # ... yet the other vocab is itself a working tokenizer
    text = "Other vocab, é 日本"
    assert other.detokenize(other.tokenize(text)) == text
    assert other.tokenize(text) != target.tokenize(text)


def test_draft_vocab_is_compatible(target, draft):
    for i in range(N_VOCAB):
        a = llama_cpp.llama_vocab_get_text(target.vocab, i)
        assert a == llama_cpp.llama_vocab_get_text(draft.vocab, i)


def test_eos_logit_bias_can_make_eos_likely(tmp_path):
    r = Runner(build_tiny_model(tmp_path / "eos.gguf", seed=5, eos_logit_bias=40.0))
    try:
        assert r.greedy(r.tokenize("Hello"), 1) == [EOS_ID]
    finally:
        r.close()

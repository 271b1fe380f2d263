"""The speculative loop on a pure-numpy toy model: no llama.cpp, milliseconds per test.

The toy's logits at a position depend on the WHOLE prefix its cache holds (a rolling hash of
the tokens), so a rollback that leaves a stale token behind changes every later logit and
shows up as output that differs from plain decoding."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pytest

from specgguf.binding.engine import common_prefix_len
from specgguf.core.draft import Draft, Drafter, TargetPass
from specgguf.core.loop import SpeculativeDecoder
from specgguf.core.rounds import GenerationConfig
from specgguf.core.sampling import PositionRandom, SamplerParams

VOCAB = 48
EOS = 0


def toy_hash(prev: int | None, token: int) -> int:
    """The toy's state after `token`: a rolling hash of the whole prefix."""
    return ((prev if prev is not None else 7) * 31 + int(token) + 1) % 997


class ToyContext:
    """A KVContext (specgguf.core.context) whose 'model' is a seeded table lookup."""

    def __init__(self, n_ctx: int = 256, seed: int = 1, eos_bias: float = -4.0) -> None:
        rng = np.random.default_rng(seed)
        self.table = rng.normal(size=(997, VOCAB)).astype(np.float32)
        self.table[:, EOS] += eos_bias  # EOS is rare but reachable
        self.n_ctx = n_ctx
        self.tokens: list[int] = []
        self.hashes: list[int] = []  # rolling hash of the prefix ending at each position
        self.decodes = 0

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    #: a prompt longer than this comes to the drafters that hear in several passes
    n_batch = 1 << 30
    #: the layers `capture` was asked for; every one holds the hash (the toy's hidden state)
    captured: tuple[int, ...] = ()

    def capture(self, layers: Sequence[int]) -> None:
        self.captured = tuple(layers)

    def decode(self, tokens: Sequence[int], pos0: int, *, outputs: str = "last", hear=None):
        assert pos0 == len(self.tokens), "the loop must decode right after what the cache holds"
        assert pos0 + len(tokens) <= self.n_ctx
        assert hear is None or self.captured, "heard without capturing"
        self.decodes += 1
        rows = []
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            for t in chunk:
                self.tokens.append(int(t))
                self.hashes.append(toy_hash(self.hashes[-1] if self.hashes else None, t))
                rows.append(self.table[self.hashes[-1]])
            if hear is not None:
                state = np.array(self.hashes[-len(chunk) :], dtype=np.float32)[:, None]
                hear(TargetPass(chunk, pos0 + start, {i: state for i in self.captured}))
        if outputs == "none" or not rows:
            return None
        return np.stack(rows if outputs == "all" else rows[-1:])

    def truncate(self, n_keep: int) -> None:
        del self.tokens[n_keep:]
        del self.hashes[n_keep:]

    def keep_prefix(self, tokens: Sequence[int]) -> int:
        n = common_prefix_len(self.tokens, tokens)
        self.truncate(n)
        return n


class ToyCopyDrafter(Drafter):
    """A drafter that keeps the whole text and drafts on a private toy copy of the target."""

    history: list[int]

    def begin(self, prompt: Sequence[int]) -> None:
        self.history = list(prompt)

    def observe(self, tokens: Sequence[int]) -> None:
        self.history.extend(tokens)

    def primed_copy(self) -> tuple[ToyContext, int]:
        """A fresh toy target that has read the text but its last token, and that token."""
        ctx = ToyContext(n_ctx=10_000)
        ctx.decode(self.history[:-1], 0, outputs="none")
        return ctx, self.history[-1]


class NoisyOracle(ToyCopyDrafter):
    """Proposes the target's own greedy continuation (computed on a private toy copy), with
    each token replaced by a wrong one with probability `p_wrong`."""

    name = "ngram-simple"
    cheap = True

    def __init__(self, p_wrong: float, max_draft: int, seed: int = 0) -> None:
        self.p_wrong = p_wrong
        self.max_draft = max_draft
        self.rng = random.Random(seed)
        self.history = []

    def propose(self, n_max: int) -> Draft:
        ctx, last = self.primed_copy()
        out = []
        for _ in range(n_max):
            row = ctx.decode([last], ctx.n_past)
            tok = int(np.argmax(row[0]))
            if self.rng.random() < self.p_wrong:
                tok = (tok + 1 + self.rng.randrange(VOCAB - 1)) % VOCAB
            out.append(tok)
            last = tok
        return Draft(out)


GREEDY = SamplerParams(temp=0.0)


def run(drafters, prompt, n, *, n_ctx=256, sampler=GREEDY, seed=3, eos=-4.0, **decoder_kw):
    """Generate n tokens on a fresh toy target; `decoder_kw` go to the SpeculativeDecoder."""
    target = ToyContext(n_ctx=n_ctx, eos_bias=eos)
    dec = SpeculativeDecoder(
        target,
        drafters,
        GenerationConfig(n_predict=n, n_max=8, sampler=sampler),
        PositionRandom(seed),
        is_eog=lambda t: t == EOS,
        **decoder_kw,
    )
    out: list[int] = []
    for rnd in dec.generate(prompt):
        out.extend(rnd.emitted)
        # the rollback invariant: the cache holds the prompt and every emitted token but the
        # last one (which the next round feeds), nothing rejected
        assert target.tokens == [*prompt, *out][:-1] or rnd.eos
    return out, dec


PROMPT = [5, 9, 13, 2, 7]


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("p_wrong", [0.0, 0.3, 1.0])
def test_greedy_speculation_equals_plain_greedy(k, p_wrong):
    plain, _ = run([], PROMPT, 60)
    got, dec = run([NoisyOracle(p_wrong, k)], PROMPT, 60)
    assert got == plain
    if p_wrong == 0.0:
        assert dec.stats.n_accept == dec.stats.n_drafted > 0  # a perfect drafter: all kept
    if p_wrong == 1.0:
        assert dec.stats.n_accept == 0  # every proposal wrong, every one rejected


def test_seeded_sampling_equals_plain_sampling_whatever_was_drafted():
    warm = SamplerParams(temp=1.1)
    plain, _ = run([], PROMPT, 50, sampler=warm)
    for p_wrong in (0.0, 0.5):
        got, _ = run([NoisyOracle(p_wrong, 4)], PROMPT, 50, sampler=warm)
        assert got == plain


def test_eos_ends_the_text_and_is_not_part_of_it():
    for seed in range(40):  # find a sampled run that meets EOS
        out, dec = run([NoisyOracle(0.2, 4)], PROMPT, 200, sampler=SamplerParams(temp=1.5),
                       seed=seed, eos=1.0)  # fmt: skip
        if dec.stop_reason == "eos":
            assert EOS not in out
            plain, pdec = run([], PROMPT, 200, sampler=SamplerParams(temp=1.5), seed=seed,
                              eos=1.0)  # fmt: skip
            assert plain == out and pdec.stop_reason == "eos"
            return
    pytest.fail("no run reached EOS")


def test_the_end_of_the_context_stops_cleanly():
    plain, pdec = run([], PROMPT, -1, n_ctx=40)
    got, dec = run([NoisyOracle(0.1, 8)], PROMPT, -1, n_ctx=40)
    assert dec.stop_reason == pdec.stop_reason == "context"
    assert got == plain and len(PROMPT) + len(got) - 1 == 40


def test_a_second_prompt_reuses_the_cached_prefix():
    target = ToyContext()
    cfg = GenerationConfig(n_predict=10, n_max=4, sampler=SamplerParams(temp=0.0))
    first = SpeculativeDecoder(target, [], cfg, PositionRandom(0), is_eog=lambda t: t == EOS)
    out = [t for r in first.generate(PROMPT) for t in r.emitted]
    second = SpeculativeDecoder(target, [], cfg, PositionRandom(0), is_eog=lambda t: t == EOS)
    again = [*PROMPT, *out, 11]
    got = [t for r in second.generate(again) for t in r.emitted]
    assert second.stats.cache_n == len(PROMPT) + len(out) - 1
    assert got == run([], again, 10)[0]


def test_the_first_token_comes_from_the_prompts_pass():
    """No pass of its own: plain decoding of n tokens is n target passes (the prompt's, then
    one per further token), the first round drafts nothing and its token is the prompt's last
    row's greedy one; drafting starts with the second token. The same prompt sent again reuses
    all of it but its last token, whose row is the answer."""
    out, dec = run([], PROMPT, 12)
    assert dec.target.decodes == 12
    target = ToyContext()
    first_row = target.decode(PROMPT, 0)[0]
    rounds = list(
        SpeculativeDecoder(
            ToyContext(), [NoisyOracle(0.0, 4)], GenerationConfig(12, 4, GREEDY),
            PositionRandom(3), is_eog=lambda t: t == EOS,
        ).generate(PROMPT)
    )  # fmt: skip
    assert rounds[0].from_prompt and rounds[0].proposed == []
    assert rounds[0].emitted == [int(np.argmax(first_row))] == out[:1]
    assert rounds[1].proposed and not any(r.from_prompt for r in rounds[1:])
    again = SpeculativeDecoder(
        dec.target, [], dec.config, PositionRandom(3), is_eog=lambda t: t == EOS
    )
    assert [t for r in again.generate(PROMPT) for t in r.emitted] == out
    assert again.stats.cache_n == len(PROMPT) - 1 and again.stats.prompt_n == 1


class ToyHead(Drafter):
    """A hidden-state drafter on the toy: it reads the target's state (the hash) from the
    passes it hears, and predicts like the target from the state at the position before the
    last token plus that token (EAGLE-3's pairing), wrong with probability `p_wrong`. It
    keeps only the rows the target kept, so a bookkeeping slip (a rejected row used, a
    prompt chunk missed, a reused prefix not heard) shows as drafts a perfect head gets
    wrong."""

    name = "draft-eagle3"
    hears = (3,)

    def __init__(self, p_wrong: float, max_draft: int, seed: int = 0) -> None:
        self.p_wrong = p_wrong
        self.max_draft = max_draft
        self.rng = random.Random(seed)
        self.table = ToyContext().table
        self.history: list[int] = []
        self.state: list[int] = []  # the target's state at positions 0.. (the kept rows)
        self.heard_rows = 0

    def begin(self, prompt: Sequence[int]) -> None:
        keep = common_prefix_len(self.history, prompt)
        self.history = list(prompt)
        del self.state[keep:]

    def resume(self, kept: int) -> int:
        return min(kept, len(self.state))

    def hear(self, target_pass: TargetPass) -> None:
        assert target_pass.pos0 == len(self.state), "a pass not right after the kept rows"
        self.heard_rows += len(target_pass.tokens)
        self.state.extend(int(v) for v in target_pass.hidden[3][:, 0])

    def observe(self, tokens: Sequence[int]) -> None:
        # the loop's invariant: the target keeps every position but the last token's
        self.history.extend(tokens)
        del self.state[len(self.history) - 1 :]

    def propose(self, n_max: int) -> Draft:
        assert len(self.state) == len(self.history) - 1, "the boundary row is not the last kept"
        h = toy_hash(self.state[-1], self.history[-1])
        out: list[int] = []
        for _ in range(n_max):
            tok = int(np.argmax(self.table[h]))
            if self.rng.random() < self.p_wrong:
                tok = (tok + 1 + self.rng.randrange(VOCAB - 1)) % VOCAB
            out.append(tok)
            h = toy_hash(h, tok)
        return Draft(out)


def chunked(n_batch: int) -> type[ToyContext]:
    return type("ChunkedToy", (ToyContext,), {"n_batch": n_batch})


@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("p_wrong", [0.0, 0.4])
def test_a_drafter_that_hears_the_target_keeps_output_and_bookkeeping_right(k, p_wrong):
    plain, _ = run([], PROMPT * 3, 60)
    target = chunked(4)(n_ctx=256)  # the prompt comes in four passes, a long verify in two
    head = ToyHead(p_wrong, k)
    dec = SpeculativeDecoder(
        target,
        [head],
        GenerationConfig(n_predict=60, n_max=8, sampler=GREEDY),
        PositionRandom(3),
        is_eog=lambda t: t == EOS,
    )
    got = [t for r in dec.generate(PROMPT * 3) for t in r.emitted]
    assert got == plain
    assert target.captured == (3,)
    if p_wrong == 0.0:  # a perfect head fed the right rows drafts only what the target says
        assert dec.stats.n_accept == dec.stats.n_drafted > 0


def test_a_hearing_drafter_resumes_a_reused_prefix_and_hears_what_it_lacks():
    target = chunked(3)(n_ctx=256)
    head = ToyHead(0.0, 4)
    cfg = GenerationConfig(n_predict=12, n_max=4, sampler=GREEDY)

    def generate(prompt):
        dec = SpeculativeDecoder(target, [head], cfg, PositionRandom(0), is_eog=lambda t: t == EOS)
        return [t for r in dec.generate(prompt) for t in r.emitted], dec

    out, _ = generate(PROMPT)
    follow = [*PROMPT, *out, 11, 4]  # the next turn: the whole first sequence is reused
    got, dec = generate(follow)
    assert got == run([], follow, 12)[0]
    assert dec.stats.cache_n == len(PROMPT) + len(out) - 1  # nothing heard again
    assert dec.stats.n_accept == dec.stats.n_drafted > 0
    other = [*PROMPT[:3], 20, 21, 22]  # shares 3 tokens; a fresh head has heard nothing
    head.__init__(0.0, 4)
    got, dec = generate(other)
    assert got == run([], other, 12)[0]
    assert dec.stats.cache_n == 0  # the head lacks every row: the prompt is heard whole
    assert dec.stats.n_accept == dec.stats.n_drafted > 0

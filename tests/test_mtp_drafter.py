"""specgguf.drafters.mtp's bookkeeping on a numpy stand-in for the MTP head (no llama.cpp):
which hidden state is paired with which token, what is kept after a verdict, and where a
later prompt can resume."""

from __future__ import annotations

import numpy as np

from specgguf.core.draft import TargetPass
from specgguf.core.sampling import SamplerParams
from specgguf.drafters.draft_steps import DraftRules
from specgguf.drafters.mtp import ANCHOR_EVERY, HeadState, MtpDrafter

N_EMBD, N_VOCAB, LAYER = 4, 16, 2


class FakeHead:
    """Records what it is fed; its logits favour (token + 1) % N_VOCAB."""

    n_embd, n_ctx, hidden_layer, n_heads = N_EMBD, 4096, LAYER, 1
    shares_cache = False

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.pairs: dict[int, float] = {}  # position -> the hidden state's first value

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def feed(self, tokens, pos0, hidden) -> None:
        assert pos0 == self.n_past and hidden.shape == (len(tokens), N_EMBD)
        for j in range(len(tokens)):
            self.pairs[pos0 + j] = float(hidden[j, 0])
        self.tokens.extend(tokens)

    def step(self, token, pos, hidden):
        self.feed([token], pos, np.asarray(hidden, dtype=np.float32).reshape(1, -1))
        logits = np.zeros(N_VOCAB, dtype=np.float32)
        logits[(token + 1) % N_VOCAB] = 10.0
        return logits, np.full(N_EMBD, -1.0, dtype=np.float32)

    def truncate(self, n_keep: int) -> None:
        del self.tokens[n_keep:]
        for p in [p for p in self.pairs if p >= n_keep]:
            del self.pairs[p]

    def close(self) -> None:
        pass


def rows(pos0: int, n: int) -> np.ndarray:
    """The target's hidden state at position p: a row of p's (so pairings can be read back)."""
    return np.repeat(np.arange(pos0, pos0 + n, dtype=np.float32)[:, None], N_EMBD, axis=1)


def drafter(state: HeadState) -> MtpDrafter:
    return MtpDrafter(state, DraftRules(SamplerParams(temp=0.0), n_max=3))


def prefill(d: MtpDrafter, prompt: list[int], chunk: int) -> None:
    d.begin(prompt)
    start = d.resume(0)
    for s in range(start, len(prompt) - 1, chunk):
        e = min(len(prompt) - 1, s + chunk)
        d.hear(TargetPass(prompt[s:e], s, {LAYER: rows(s, e - s)}))


def test_each_token_is_paired_with_the_state_one_position_earlier():
    state = HeadState(FakeHead())
    d = drafter(state)
    prompt = list(range(10))
    prefill(d, prompt, chunk=4)
    head = state.head
    assert head.tokens == prompt[:-1]
    assert head.pairs == {0: 0.0, **{p: float(p - 1) for p in range(1, 9)}}  # zeros at 0
    draft = d.propose(3)
    assert draft.tokens == [10, 11, 12]  # the fake head's favourite successors
    # the first step pairs id_last (position 9) with the target's state at 8, the next ones
    # with the head's own output
    assert head.pairs[9] == 8.0 and head.pairs[10] == -1.0 and head.tokens[9] == 9
    # the verify pass [id_last, *draft]: the draft steps are replaced by what the target read
    d.hear(TargetPass([9, 10, 11, 12], 9, {LAYER: rows(9, 4)}))
    assert head.tokens == [*prompt, 10, 11, 12] and head.pairs[10] == 9.0
    d.observe([10, 5])  # one accepted, then the target's own token
    assert head.tokens == [*prompt, 10]  # kept: id_last and the accepted draft
    assert d.propose(1).tokens == [6] and head.pairs[11] == 10.0  # 5 at 11 with the state at 10


def read_prompt(d: MtpDrafter, prompt: list[int], chunk: int, first: int) -> None:
    """What the loop does: the whole prompt's passes (marked `prompt`), then the first token,
    sampled from the last one's row, observed."""
    d.begin(prompt)
    start = d.resume(0)
    for s in range(start, len(prompt), chunk):
        e = min(len(prompt), s + chunk)
        d.hear(TargetPass(prompt[s:e], s, {LAYER: rows(s, e - s)}, prompt=True))
    d.observe([first])


def test_a_later_prompt_resumes_after_a_kept_state():
    state = HeadState(FakeHead())
    d = drafter(state)
    prompt = [i % 7 for i in range(3 * ANCHOR_EVERY)]
    read_prompt(d, prompt, chunk=50, first=5)
    d.propose(1)
    # the anchors, the state before the prompt's last token (where the same prompt sent again
    # resumes) and the carried one (the last token's)
    n = len(prompt)
    assert sorted(state.states) == [ANCHOR_EVERY - 1, 2 * ANCHOR_EVERY - 1, n - 2, n - 1]
    again = drafter(state)
    again.begin(prompt[:150] + [99, 98])
    # the target keeps 150 positions: the head resumes after the anchor at 127
    assert again.resume(150) == 2 * ANCHOR_EVERY
    assert state.head.n_past == 2 * ANCHOR_EVERY
    # the whole prompt read again, then once more: all but its last token is kept
    third = drafter(state)
    read_prompt(third, prompt, chunk=50, first=5)
    third.propose(1)
    fourth = drafter(state)
    fourth.begin(prompt)
    assert fourth.resume(n - 1) == n - 1


def test_a_missed_pass_stops_drafting_until_the_next_sequence():
    state = HeadState(FakeHead())
    d = drafter(state)
    prefill(d, list(range(10)), chunk=16)
    d.hear(TargetPass([3], 20, {LAYER: rows(20, 1)}))  # rows the head never saw before it
    assert d.propose(3).tokens == []
    d2 = drafter(state)
    prefill(d2, list(range(10)), chunk=16)
    assert d2.propose(2).tokens == [10, 11]

"""What every draft-mtp test suite checks, whatever runs the MTP layers: the target's own NextN
layers (tests/test_mtp.py) or a separate drafter file (tests/test_mtp_assistant.py). Each
check takes sessions its caller made, so that one body serves both."""

from __future__ import annotations

from collections.abc import Callable

from specgguf.core.sampling import SamplerParams
from specgguf.drafters.mtp import MtpDrafter
from specgguf.loading.session import Session, SpecOptions
from tests.serve_helpers import Server, post_together

GREEDY = SamplerParams(temp=0.0)
WARM = SamplerParams(temp=0.8)
HOT = SamplerParams(temp=5.0, top_k=0, top_p=1.0, min_p=0.0)
PROMPT = "the cat sat on the mat and the cat sat on"
OTHER_PROMPT = "once upon a time there was"
N = 32


def generate(s: Session, tokens, sampler=GREEDY, n=N, seed=5, **kw):
    """(emitted tokens, each round's proposals, the decoder) of one generation."""
    dec = s.decoder(sampler, n, seed, **kw)
    dec.rounds = list(dec.generate(tokens))
    return [t for r in dec.rounds for t in r.emitted], [r.proposed for r in dec.rounds], dec


def reference(plain: Session, prompt=PROMPT, sampler=GREEDY, n=N, seed=5) -> list[int]:
    """Plain decoding's tokens for `prompt`."""
    return generate(plain, plain.tokenize(prompt), sampler, n, seed, reuse_prefix=False)[0]


def check_greedy_equals_plain(s: Session, plain: Session, k: int):
    """Greedy with drafts of up to `k` tokens: plain decoding's text, from an MtpDrafter that
    drafted up to the budget; returns the decoder for the caller's own checks."""
    spec = SpecOptions(types=["draft-mtp"], n_max=k)
    got, proposed, dec = generate(s, s.tokenize(PROMPT), spec=spec, reuse_prefix=False)
    assert got == reference(plain)
    assert isinstance(dec.drafters[0], MtpDrafter)
    assert max(map(len, proposed)) == k  # it drafted, up to the budget
    return dec


def check_seeded_sampling(s: Session, plain: Session) -> None:
    """Sampled with a seed (one-hot drafts): plain decoding's tokens, for three seeds."""
    spec = SpecOptions(types=["draft-mtp"], n_max=4, draft_sampling="greedy")
    for seed in (1, 2, 3):
        got = generate(s, s.tokenize(PROMPT), WARM, seed=seed, spec=spec, reuse_prefix=False)
        assert got[0] == reference(plain, sampler=WARM, seed=seed)


def first_draft_after(fresh: Session, history: list[int], sampler, spec) -> list[int] | None:
    """The first draft of a `fresh` session that reads history[:-1] as its prompt, when the
    token it samples from that prompt's pass is history[-1] (so it drafts after `history`);
    None when it samples another."""
    dec = fresh.decoder(sampler, 40, 11, spec=spec, reuse_prefix=False)
    rounds = dec.generate(history[:-1])
    if next(rounds).emitted != history[-1:]:
        return None
    return next(rounds).proposed


def check_rounds_match_a_fresh_session(s: Session, fresh: Session) -> None:
    """The head's state after accepted and rejected rounds alike: round r's draft equals the
    first draft of a `fresh` session given everything emitted before round r. Greedy, every
    round is compared; sampled at a high temperature with probabilistic drafts (accepted now
    and then even from a random head), the rounds after a token the fresh session samples
    too (the target's own sample at its position, randomness being keyed by position; not a
    residual's after a rejection)."""
    prompt = s.tokenize(PROMPT)
    checked = after_accepted = 0
    for sampler, drafts in ((GREEDY, "greedy"), (HOT, "probabilistic")):
        spec = SpecOptions(types=["draft-mtp"], n_max=4, draft_sampling=drafts)
        dec = s.decoder(sampler, 40, 11, spec=spec, reuse_prefix=False)
        history, accepted = list(prompt), False
        for rnd in dec.generate(prompt):
            if not rnd.from_prompt:
                theirs = first_draft_after(fresh, history, sampler, spec)
                assert theirs is not None or sampler is HOT
                if theirs is not None:  # near -n: a smaller budget, compared as a prefix
                    assert theirs[: len(rnd.proposed)] == rnd.proposed
                    checked += 1
                    after_accepted += accepted
            accepted = rnd.n_accepted > 0
            history += rnd.emitted
    assert checked > 3 and after_accepted > 0


def check_a_prompt_longer_than_one_batch(s: Session, fresh: Session, plain: Session) -> None:
    """`s` reads in batches of 16: its text is plain decoding's and its drafts those of a
    `fresh` session that read the prompt at once."""
    long_prompt = " ".join([PROMPT] * 4)
    tokens = s.tokenize(long_prompt)
    assert len(tokens) > 3 * 16
    got, proposed, _ = generate(s, tokens)
    assert got == reference(plain, long_prompt)
    assert proposed == generate(fresh, fresh.tokenize(long_prompt))[1]


def check_prefix_reuse(warm: Session, fresh: Session) -> None:
    """A second prompt that extends the first (a next turn) and one that shares only its
    start: `warm` resumes where its target's cache agrees and generates and drafts as a
    `fresh` session reading each prompt whole."""
    turn1 = warm.tokenize(PROMPT)
    out1, _, _ = generate(warm, turn1)
    turn2 = turn1 + out1 + warm.tokenize(" then the dog ran")
    got, proposed, dec = generate(warm, turn2)
    ref, ref_proposed, _ = generate(fresh, turn2, reuse_prefix=False)
    assert dec.stats.cache_n > 0  # the target (and with it the head) kept turn 1
    assert (got, proposed) == (ref, ref_proposed)  # the resumed head drafts as a fresh one
    other = warm.tokenize("the cat sat on a hat")
    got3, proposed3, _ = generate(warm, other)
    ref3, ref_proposed3, _ = generate(fresh, other, reuse_prefix=False)
    assert (got3, proposed3) == (ref3, ref_proposed3)


def check_the_context_end(small: Session, plain_small: Session) -> None:
    """Sessions of 256 positions (llama.cpp's smallest context): generation runs to its end
    as plain decoding does, each draft within the cells left."""
    tokens = small.tokenize(PROMPT)
    got, proposed, dec = generate(small, tokens, n=400)
    ref, _, ref_dec = generate(plain_small, tokens, n=400)
    assert got == ref and dec.stop_reason == ref_dec.stop_reason == "context"
    assert len(tokens) + len(got) == 257  # the cache's 256 positions and the last token
    assert proposed[-2] and len(proposed[-2]) <= 2


def check_two_slots(s: Session, plain: Session) -> None:
    """A session of two slots: each its own head, each slot's text plain decoding's."""
    a, b = s.slots
    assert a.mtp is not None and b.mtp is not None and a.mtp.head is not b.mtp.head
    got_b = generate(s, s.tokenize(OTHER_PROMPT), slot=b)[0]
    got_a = generate(s, s.tokenize(PROMPT), slot=a)[0]
    assert got_a == reference(plain) and got_b == reference(plain, OTHER_PROMPT)


def check_server_two_slots(argv: list[str], plain: Session) -> None:
    """`serve *argv` with -np 2 answering two prompts at once and one again: plain decoding's
    text each time, the repeat from the slot's cache."""
    s = Server(argv)
    prompts: list[str] = [PROMPT, OTHER_PROMPT]
    try:
        bodies = [{"prompt": p, "n_predict": 24} for p in prompts]
        answers = post_together(s, "/completion", bodies)
        again = s.post("/completion", bodies[0])
    finally:
        code, err = s.stop()
    assert code == 0 and "Traceback" not in err, err
    piece: Callable[[int], bytes] = plain.target_model.piece
    for i, p in enumerate(prompts):
        want = b"".join(piece(t) for t in reference(plain, p, n=24)).decode()
        assert answers[i]["content"] == want
    assert again["content"] == answers[0]["content"] and again["timings"]["cache_n"] > 0

"""Several slots decoded as one batch (specgguf.binding.batched, specgguf.binding.rendezvous).

On the tiny models: 8 generations of mixed prompt lengths run concurrently on an -np 8
session, each on its own thread, must give each the text the same request gives alone on a
one-slot session (greedy and seeded sampling, speculation on and off), while the steps
really mix several sequences. A different batch may round a logit differently; a divergence
is accepted only where the target's two best logits nearly tie (and is reported).

The rendezvous itself is tested with a stand-in context: a cancelled or failing member must
never leave the others waiting.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest

from specgguf.binding.rendezvous import Cancelled, Rendezvous
from tests.near_tie import assert_same_or_near_tie as near_tie_check

N_SLOTS = 8
N_PREDICT = 20
#: a logit gap under this between the target's two best tokens is a near-tie, where a
#: different batch's rounding may pick the other one
NEAR_TIE = 1e-3

WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "and",
    "then",
    "it",
    "ran",
    "off",
    "to",
    "see",
    "the",
    "dog",
    "who",
    "was",
]


def prompt(i: int) -> str:
    """Mixed lengths: a few words up to ~300 tokens (longer than a prompt chunk)."""
    n = [2, 5, 40, 9, 70, 3, 16, 1][i]
    return " ".join(WORDS[(i + j) % len(WORDS)] for j in range(n))


@pytest.fixture(scope="module")
def sessions(tiny_target, tiny_draft):
    from specgguf.loading.session import LoadOptions, Session, SpecOptions

    def make(parallel: int, draft_sampling: str = "auto") -> Session:
        return Session(
            LoadOptions(
                model=tiny_target,
                model_draft=tiny_draft,
                n_ctx=1024 * parallel,
                threads=1,
                flash_attn="off",
            ),
            SpecOptions(types=["draft-simple"], n_max=3, draft_sampling=draft_sampling),
            parallel=parallel,
        )

    one, many = make(1, "greedy"), make(N_SLOTS, "greedy")
    yield one, many
    many.close()
    one.close()


def _gen(session, sampler):
    from specgguf.generator import Generator

    return Generator(session, sampler=sampler, n_predict=N_PREDICT, seed=7, ignore_eos=True)


def tokens_of(generation) -> list[int]:
    out: list[int] = []
    for chunk in generation:
        if chunk.round is not None:
            out.extend(chunk.round.emitted)
    return out


def assert_same_or_near_tie(one, prompt_tokens, ref, got, label, near_tie=NEAR_TIE):
    """`got` equals `ref`, or parts from it where the target's two best logits nearly tie
    (tests.near_tie; as these tests always have, by the gap alone). test_batched_real and
    test_eagle3 judge their batches with it too."""
    near_tie_check(one, prompt_tokens, ref, got, near_tie, label=label, between_top_two=False)


def concurrently(gen, prompts: list[list[int]], params) -> list[list[int]]:
    """Each prompt generated on slot i by a thread of its own, all at once (every thread a
    member before any decodes: a thread started late on a busy machine would otherwise find
    the others' short generations over)."""
    rv = gen.rendezvous
    got: list[list[int] | None] = [None] * len(prompts)
    errors: list[BaseException] = []
    everyone = threading.Barrier(len(prompts))

    def work(i: int) -> None:
        try:
            with rv.member():
                everyone.wait(60)
                got[i] = tokens_of(gen.generate(prompts[i], params, slot=i))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors
    assert all(g is not None for g in got)
    return got  # type: ignore[return-value]


@pytest.mark.parametrize(
    "temp, spec", [(0.0, True), (0.0, False), (0.8, True)], ids=["greedy", "plain", "seeded"]
)
def test_concurrent_slots_give_each_request_its_text_alone(sessions, temp, spec):
    from specgguf.core.sampling import SamplerParams
    from specgguf.generator import GenParams
    from specgguf.spec_plan import SpecOverrides

    one, many = sessions
    sampler = SamplerParams(temp=temp)
    params = GenParams(spec=SpecOverrides(enabled=spec))
    prompts = [one.tokenize(prompt(i)) for i in range(N_SLOTS)]
    alone = _gen(one, sampler)
    refs = [tokens_of(alone.generate(p, params)) for p in prompts]

    gen = _gen(many, sampler)
    rv = gen.rendezvous
    assert rv is not None
    before = rv.steppers[0].stats.steps, rv.steppers[0].stats.seqs
    got = concurrently(gen, prompts, params)
    for i in range(N_SLOTS):
        assert got[i] is not None and len(got[i]) == N_PREDICT
        assert_same_or_near_tie(one, prompts[i], refs[i], got[i], f"slot {i}")
    stats = rv.steppers[0].stats
    steps, seqs = stats.steps - before[0], stats.seqs - before[1]
    assert seqs / steps > 2, (steps, seqs)  # the steps mixed the slots' sequences
    assert stats.last_rows <= many.target.owner.ctx.n_batch
    if spec:
        draft = rv.steppers[1].stats
        assert draft.seqs > draft.steps  # draft steps were batched too


def test_a_long_prompt_is_evaluated_in_chunks(sessions, monkeypatch):
    """A prompt longer than the chunk takes several steps, and its text is unchanged (no
    time slice: the tiny model is so fast that a slice would take the whole prompt)."""
    from specgguf.binding import batched
    from specgguf.binding.batched import PROMPT_CHUNK
    from specgguf.core.sampling import SamplerParams

    monkeypatch.setattr(batched, "PROMPT_SLICE_S", 0.0)
    one, many = sessions
    tokens = one.tokenize(" ".join(WORDS * 20))
    assert len(tokens) > 2 * PROMPT_CHUNK
    ref = tokens_of(_gen(one, SamplerParams(temp=0.0)).generate(tokens))
    stats = many.target.owner.stats
    before = stats.steps
    got = tokens_of(_gen(many, SamplerParams(temp=0.0)).generate(tokens, slot=3))
    assert stats.steps - before >= len(tokens) // PROMPT_CHUNK
    assert_same_or_near_tie(one, tokens, ref, got, "long prompt")


# -- the rendezvous with a stand-in context ------------------------------------------------------


class _Req:
    def __init__(self) -> None:
        self.finished = False


class _Stepper:
    """Finishes every pending request in one step, counting steps and their widths."""

    def __init__(self) -> None:
        self.pending: list[_Req] = []
        self.widths: list[int] = []

    def has_pending(self) -> bool:
        return bool(self.pending)

    def holds(self) -> bool:
        return False

    def step(self) -> int:
        self.widths.append(len(self.pending))
        for r in self.pending:
            r.finished = True
        n = len(self.pending)
        self.pending.clear()
        return n

    def withdraw(self, req) -> None:
        self.pending.remove(req)


def _decode(rv: Rendezvous, s: _Stepper) -> None:
    r = _Req()
    rv.submit(s, r, lambda: s.pending.append(r))


def _members_decode(rv: Rendezvous, s: _Stepper, n_members: int = 3, rounds: int = 5) -> set:
    """`n_members` members that join, then each decode `rounds` times; their thread ids."""
    rv.steppers.append(s)
    ready = threading.Barrier(n_members)
    members: set[int] = set()

    def member():
        with rv.member():
            members.add(threading.get_ident())
            ready.wait()
            for _ in range(rounds):
                _decode(rv, s)

    threads = [threading.Thread(target=member) for _ in range(n_members)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return members


def test_members_step_together():
    s = _Stepper()
    _members_decode(Rendezvous(), s)
    assert s.widths == [3] * 5  # one step per round, every member in it


def test_a_cancelled_member_leaves_a_step_that_cannot_come():
    """Member B waits for a step that needs member A, which is busy elsewhere: cancelling B
    ends its wait at once, and A is not left waiting for B afterwards."""
    rv, s = Rendezvous(), _Stepper()
    rv.steppers.append(s)
    a_joined, a_go, cancel = threading.Event(), threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def a():
        with rv.member():
            a_joined.set()
            a_go.wait(10)
            _decode(rv, s)  # B is gone: A alone steps at once
            outcome["a"] = "decoded"

    def b():
        with rv.member(cancel.is_set):
            try:
                _decode(rv, s)
                outcome["b"] = "decoded"
            except Cancelled:
                outcome["b"] = "cancelled"

    ta = threading.Thread(target=a)
    ta.start()
    a_joined.wait(10)
    tb = threading.Thread(target=b)
    tb.start()
    tb.join(0.2)
    assert tb.is_alive()  # waiting for A
    cancel.set()
    rv.wake()
    tb.join(5)
    assert outcome.get("b") == "cancelled"
    assert s.pending == []  # its rows were withdrawn, never evaluated
    a_go.set()
    ta.join(5)
    assert outcome.get("a") == "decoded" and s.widths == [1]


def test_a_member_that_fails_does_not_wedge_the_others():
    rv, s = Rendezvous(), _Stepper()
    rv.steppers.append(s)
    joined = threading.Barrier(2)
    done = threading.Event()

    def failing():
        with pytest.raises(RuntimeError), rv.member():
            joined.wait()
            raise RuntimeError("a bug in one slot")

    def healthy():
        with rv.member():
            joined.wait()
            _decode(rv, s)
            done.set()

    threads = [threading.Thread(target=f) for f in (failing, healthy)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert done.is_set()


def test_a_caller_that_is_not_a_member_decodes_at_once():
    rv, s = Rendezvous(), _Stepper()
    rv.steppers.append(s)
    _decode(rv, s)
    assert s.widths == [1]


def test_a_newcomer_joins_the_steps_of_a_long_prompt():
    """A member alone steps its long prompt chunk after chunk; one that joins meanwhile gets
    its rows into the next step, not after the whole prompt."""
    rv = Rendezvous()
    joined, seen = threading.Event(), []

    class Slow(_Stepper):
        def step(self) -> int:
            widths = len(self.pending)
            seen.append(widths)
            if len(seen) == 3:
                joined.wait(5)  # (the newcomer joins during this step)
            done = 0
            for r in list(self.pending):
                r.chunks -= 1
                if r.chunks == 0:
                    r.finished = True
                    self.pending.remove(r)
                    done += 1
            return done

    s = Slow()
    rv.steppers.append(s)

    def long_prompt():
        r = _Req()
        r.chunks = 20
        with rv.member():
            rv.submit(s, r, lambda: s.pending.append(r))

    def newcomer():
        with rv.member():
            joined.set()
            r = _Req()
            r.chunks = 1
            rv.submit(s, r, lambda: s.pending.append(r))

    ta = threading.Thread(target=long_prompt)
    ta.start()
    while len(seen) < 3:
        threading.Event().wait(0.001)
    tb = threading.Thread(target=newcomer)
    tb.start()
    ta.join(5)
    tb.join(5)
    assert 2 in seen[:6], seen  # the newcomer's rows shared a step with a prompt chunk


def test_a_failed_step_fails_its_waiters_and_the_sequence_recovers(sessions, monkeypatch):
    """llama_decode failing in a step raises in the decode that waited for it (one clear
    error, not a hang); the sequence's cells are cleaned up and the next decode is as good
    as new."""
    from specgguf.errors import SpecggufError

    one, many = sessions
    view = many.extra_slots[1].target
    ctx = view.owner.ctx
    tokens = one.tokenize(prompt(2))
    view.truncate(0)
    ref = np.array(view.decode(tokens, 0, outputs="last"))
    view.truncate(0)
    real = ctx.decode_rows

    def failing(*a, **k):
        real(*a, **k)  # the cells are written, then the call reports a failure
        raise SpecggufError("llama_decode failed with status 1")

    monkeypatch.setattr(ctx, "decode_rows", failing)
    with pytest.raises(SpecggufError, match="status 1"):
        view.decode(tokens, 0, outputs="last")
    monkeypatch.setattr(ctx, "decode_rows", real)
    assert view.n_past == 0 and view.tokens == []
    again = view.decode(tokens, 0, outputs="last")
    assert np.array_equal(again, ref)
    view.truncate(0)


def test_rows_in_a_slice_follow_the_widest_step_timed():
    """The chunk of a long prompt: the rows the widest step timed (of at least the least
    chunk) would evaluate in the slice, never fewer than the least chunk."""
    from specgguf.binding.batched import StepStats

    s = StepStats()
    assert s.rows_in(0.5, at_least=64) == 64  # nothing wide timed yet
    s.timed(8, 0.001)  # narrow steps say nothing of a wide pass's rate
    assert s.rows_in(0.5, at_least=64) == 64
    s.timed(64, 1.0)  # a slow pass (a CPU): the least chunk
    assert s.rows_in(0.5, at_least=64) == 64
    s.timed(256, 0.05)  # the widest timed decides: 256 rows in 0.05 s
    assert s.rows_in(0.5, at_least=64) == 2560


def test_a_long_prompt_takes_what_a_slice_evaluates(tiny_target, monkeypatch):
    """Where a pass is fast (a GPU), a long prompt alone takes as many rows a step as the
    target evaluates in PROMPT_SLICE_S by its measured rate, up to n_batch; where it is slow,
    PROMPT_CHUNK rows. The short request's rows come first in either."""
    from specgguf.binding import batched, engine
    from specgguf.binding.batched import PROMPT_CHUNK, BatchedContext, _Request

    monkeypatch.setattr(batched, "PROMPT_SLICE_S", 0.5)
    model = engine.Model(tiny_target)
    params = engine.ContextParams(n_ctx=4096, n_threads=1, flash_attn="off", n_batch=512)
    ctx = BatchedContext(model, params, 2, Rendezvous())
    try:
        long, other = ctx.views
        ctx._pending.append(_Request(long, [7] * 3000, 0, "last"))
        for seconds, rows in ((2.0, PROMPT_CHUNK), (0.25, 128), (0.01, 512)):
            ctx.stats.seconds = {PROMPT_CHUNK: seconds}  # as measured
            ctx._pending.append(_Request(other, [9], other.n_past, "last"))
            ctx.step()
            assert ctx.stats.last_rows == 1 + min(rows, 512 - 1), seconds
    finally:
        ctx.close()
        model.close()


def test_a_long_prompt_yields_to_a_newcomer_until_its_first_token(tiny_target, monkeypatch):
    """The step plan: a long prompt takes PROMPT_CHUNK rows a step, NEWCOMER_CHUNK (none)
    while the short prompt of a request that has had no token yet waits, but never stalls a
    step that would otherwise be empty, and takes the full chunk again once that prompt's
    pass (which gives the first token) was decoded."""
    from specgguf.binding import batched, engine
    from specgguf.binding.batched import (
        NEWCOMER_CHUNK,
        PROMPT_CHUNK,
        BatchedContext,
        _Request,
    )

    monkeypatch.setattr(batched, "PROMPT_SLICE_S", 0.0)  # chunks of PROMPT_CHUNK
    model = engine.Model(tiny_target)
    params = engine.ContextParams(n_ctx=1024, n_threads=1, flash_attn="off")
    ctx = BatchedContext(model, params, 3, Rendezvous())
    pos = {}

    def stream(view) -> None:  # a sequence decoding one token a step
        pos[view.seq] = pos.get(view.seq, 40)
        ctx._pending.append(_Request(view, [9], pos[view.seq], "last"))
        pos[view.seq] += 1

    def begin(view, prompt: list[int]) -> None:  # a request begins: its prompt's pass
        view.keep_prefix(prompt[:-1])
        ctx._pending.append(_Request(view, prompt, 0, "last"))

    try:
        long, new, other = ctx.views
        begin(other, [5] * 40)
        begin(long, [7] * 900)
        ctx.step()  # a short prompt beside the long one: the long one waits
        assert ctx.stats.last_rows == 40 + NEWCOMER_CHUNK
        ctx.step()  # alone, the long prompt is never stalled
        assert ctx.stats.last_rows == PROMPT_CHUNK
        stream(other)
        ctx.step()  # other has its first token: the long prompt has the full chunk again
        assert ctx.stats.last_rows == 1 + PROMPT_CHUNK
        begin(new, [5, 6, 7])
        stream(other)
        ctx.step()
        assert ctx.stats.last_rows == 3 + 1 + NEWCOMER_CHUNK
        stream(other)
        ctx.step()  # the newcomer's prompt pass gave its token: no more waiting for it
        assert ctx.stats.last_rows == 1 + PROMPT_CHUNK
    finally:
        ctx.close()
        model.close()


def test_the_tail_of_a_long_prompt_pauses_no_other(tiny_target, monkeypatch):
    """Only a request short as a whole makes the long prompts pause for its first token: the
    last rows of a long one are taken whole beside the others' chunks, in the same step."""
    from specgguf.binding import batched, engine
    from specgguf.binding.batched import PROMPT_CHUNK, BatchedContext, _Request

    monkeypatch.setattr(batched, "PROMPT_SLICE_S", 0.0)  # chunks of PROMPT_CHUNK
    model = engine.Model(tiny_target)
    params = engine.ContextParams(n_ctx=1024, n_threads=1, flash_attn="off")
    ctx = BatchedContext(model, params, 2, Rendezvous())
    try:
        for view, n in zip(ctx.views, (900, PROMPT_CHUNK + 30), strict=True):
            view.keep_prefix([])  # each request begins, waiting for its first token
            ctx._pending.append(_Request(view, [7] * n, 0, "last"))
        ctx.step()
        assert ctx.stats.last_rows == 2 * PROMPT_CHUNK
        ctx.step()  # 30 rows left of the second: taken whole, the first not paused for it
        assert ctx.stats.last_rows == 30 + PROMPT_CHUNK
    finally:
        ctx.close()
        model.close()


def test_decode_rows_that_gives_way_keeps_nothing_of_its_batch(tiny_target):
    """An abandoned batch leaves no cell behind, in any of its sequences (the rows of its
    earlier micro-batches included): the next decode's logits equal those of a context that
    never saw it, and another sequence's cells are untouched."""
    from specgguf.binding import engine

    model = engine.Model(tiny_target)
    params = engine.ContextParams(n_ctx=1024, n_threads=1, flash_attn="off", n_seq_max=2)
    params_small = engine.ContextParams(
        n_ctx=1024, n_threads=1, flash_attn="off", n_seq_max=2, n_ubatch=16
    )
    try:
        for p in (params, params_small):
            ctx = engine.Context(model, p)
            toks = [(7 * i + 3) % 200 + 5 for i in range(200)]
            ctx.decode_rows(toks[:40], list(range(40)), [0] * 40, [False] * 40)
            ctx.decode_rows(toks[:10], list(range(10)), [1] * 10, [False] * 10)
            ref = ctx.decode_rows([toks[40], toks[10]], [40, 10], [0, 1], [True, True]).copy()
            ctx.seq_rm(0, 40)
            ctx.seq_rm(1, 10)
            calls = itertools.count()

            def late(calls=calls) -> bool:  # say "give way" well into the graph
                return next(calls) > 40

            rows = 64
            with pytest.raises(engine.GaveWay):
                ctx.decode_rows(
                    toks[40 : 40 + rows] + [toks[10]],
                    [*range(40, 40 + rows), 10],
                    [0] * rows + [1],
                    [False] * rows + [True],
                    give_way=late,
                )
            again = ctx.decode_rows([toks[40], toks[10]], [40, 10], [0, 1], [True, True])
            assert np.array_equal(again, ref)
            ctx.close()
    finally:
        model.close()


@pytest.mark.parametrize("cache_prompt", [True, False])
def test_a_long_prompt_step_gives_way_to_a_request_that_joins(sessions, monkeypatch, cache_prompt):
    """A request that joins while a long prompt's chunk is being evaluated does not wait for
    that chunk: the step is abandoned, the newcomer's prompt goes in the next step without
    the long prompt's (whether or not it may reuse a cached prefix), and both texts are what
    each gets alone."""
    from specgguf.binding import batched
    from specgguf.core.sampling import SamplerParams
    from specgguf.generator import GenParams

    monkeypatch.setattr(batched, "PROMPT_SLICE_S", 0.0)  # chunks of 64 rows
    one, many = sessions
    gen1, gen = _gen(one, SamplerParams(temp=0.0)), _gen(many, SamplerParams(temp=0.0))
    model = one.target_model
    long_tokens = model.tokenize(" ".join(WORDS[j % len(WORDS)] for j in range(300)))
    short_tokens = model.tokenize(prompt(1))
    assert len(long_tokens) > 4 * 64 and len(short_tokens) < 64
    ref_long = tokens_of(gen1.generate(long_tokens, None, slot=0))
    ref_short = tokens_of(gen1.generate(short_tokens, None, slot=0))

    target = many._batched[0]
    rv = many.rendezvous
    real = target.ctx.decode_rows
    steps: list[list[tuple[int, int]]] = []  # each step tried: (sequence, rows) per request
    got: dict[str, list[int]] = {}
    newcomer: list[threading.Thread] = []

    def short_request() -> None:
        with rv.member():
            params = GenParams(cache_prompt=cache_prompt)
            got["short"] = tokens_of(gen.generate(short_tokens, params, slot=1))

    def decode_rows(tokens, pos, seq, logits, *, give_way=None):
        steps.append([(s, seq.count(s)) for s in dict.fromkeys(seq)])
        if give_way is not None and not newcomer:  # the first long-prompt step
            joins = rv.joins
            newcomer.append(threading.Thread(target=short_request))
            newcomer[0].start()
            while rv.joins == joins:  # it joins while this step is running
                threading.Event().wait(0.001)
        return real(tokens, pos, seq, logits, give_way=give_way)

    monkeypatch.setattr(target.ctx, "decode_rows", decode_rows)
    gave_way = target.stats.gave_way
    with rv.member():  # evaluated afresh: a cached long prompt would have no chunk to abandon
        got["long"] = tokens_of(gen.generate(long_tokens, GenParams(cache_prompt=False), slot=0))
    newcomer[0].join(60)
    assert target.stats.gave_way == gave_way + 1
    i = next(i for i, s in enumerate(steps) if (0, 64) in s)  # the abandoned step
    assert [s for s, _ in steps[i + 1]] == [1], steps[: i + 3]
    assert got["short"] == ref_short and got["long"] == ref_long


def test_a_step_that_raises_fails_its_waiters_and_the_steps_go_on():
    """The step thread outlives a step that raises: each member waiting in it gets the
    exception, its rows withdrawn, and the next decode steps as usual."""
    rv = Rendezvous()

    class Broken(_Stepper):
        fail = True

        def step(self) -> int:
            if self.fail:
                self.fail = False
                raise RuntimeError("a bug in a step")
            return super().step()

    s = Broken()
    rv.steppers.append(s)
    with pytest.raises(RuntimeError, match="a bug in a step"):
        _decode(rv, s)
    assert s.pending == []
    _decode(rv, s)
    assert s.widths == [1]


def test_every_step_runs_on_one_thread():
    """Steps run on the rendezvous' own thread whichever member came last (llama.cpp's CPU
    backend keeps a worker team per calling thread)."""
    rv = Rendezvous()
    threads_seen: set[int] = set()

    class Where(_Stepper):
        def step(self) -> int:
            threads_seen.add(threading.get_ident())
            return super().step()

    members = _members_decode(rv, Where())
    assert len(threads_seen) == 1 and not threads_seen & members


def test_step_times_between_widths_are_interpolated():
    from specgguf.binding.batched import StepStats

    s = StepStats()
    s.timed(2, 0.2)
    s.timed(6, 0.6)
    assert s.seconds_at(2) == 0.2 and s.seconds_at(4) == pytest.approx(0.4)
    assert s.seconds_at(1) is None and s.seconds_at(7) is None
    s.timed(2, 0.4)  # a moving average, not the last sample
    assert 0.2 < s.seconds_at(2) < 0.4


def test_a_batched_session_times_both_models_widths_before_any_step(tiny_target, tiny_draft):
    """A server with a draft model has timed a pass of each model over 1..N rows before its
    first request (what auto prices a draft in a shared pass with), and those passes left
    nothing in the cache and no step in the statistics."""
    from specgguf.loading.session import LoadOptions, Session, SpecOptions

    load = LoadOptions(model=tiny_target, model_draft=tiny_draft, n_ctx=512 * 5, threads=1)
    many = Session(load, SpecOptions(types=["draft-simple"], n_max=3), parallel=5)
    try:
        target, draft = many._batched
        for b in (target, draft):
            assert set(b.stats.seconds) == {1, 2, 3, 4, 5} and b.stats.steps == 0
            assert b.ctx.n_past == 0 and all(v.n_past == 0 for v in b.views)
            assert ll_cells(b.ctx) == 0
        view = target.views[0]
        view.peers = 3
        assert view.draft_pass_cost() == pytest.approx(
            draft.stats.seconds_at(4) / target.stats.seconds_at(4)
        )
    finally:
        many.close()


def ll_cells(ctx) -> int:
    """Positions sequence 0 holds in a context's memory (its last position + 1)."""
    import llama_cpp

    return int(llama_cpp.llama_memory_seq_pos_max(ctx.memory, 0)) + 1

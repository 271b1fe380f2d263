"""Slots, the request queue and the threads that call llama.cpp.

The ASGI event loop only parses, validates and streams; llama.cpp is called elsewhere. Active
requests each own a slot (their own sequence of the KV caches and their own n-gram drafters
over the shared weights). Requests beyond the slots wait in a bounded queue
(`requests_deferred`); beyond that, 503.

With one slot (-np 1) the worker thread runs the request round by round, as `run` does. With
several, the slots are sequences of one context per model (specgguf.binding.batched): each
active request runs its Generation on a thread of its own, a member of the session's
Rendezvous, and every step decodes the pending rows of all of them in one pass (a prompt in
chunks, so that it does not stall the others). The worker thread then only assigns slots and
runs the small calls (tokenizing, templates) of the handlers.

A request whose client went away, or that the server's shutdown cancels, is finished before
its next round (while waiting for a step, at once): its slot is free again within one round.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgguf.binding.rendezvous import Cancelled
from specgguf.errors import ExitCode, SpecggufError
from specgguf.generator import Chunk, Generation, Generator, GenParams
from specgguf.server.protocol import ApiError
from specgguf.server.sleep import Loaded, Models


@dataclass
class RoundInfo:
    """What the page (and a curious client) sees per chunk: this round and the running totals
    of the request, captured on the worker thread."""

    draft_n: int
    draft_n_accepted: int
    drafter: str | None
    auto_k: int | None  # the draft length auto chose for this round (None: no auto)
    predicted_n: int
    predicted_ms: float
    drafted_total: int
    accepted_total: int
    rounds: int

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass
class Event:
    kind: str  # "chunk", "done", "error", or "ping" (a silent stream's keep-alive: App.events)
    chunk: Chunk | None = None
    tokens: list[int] = field(default_factory=list)  # the tokens of this round
    info: RoundInfo | None = None
    error: ApiError | None = None


class Job:
    """One generation request: its prompt and parameters, and the queue its events go to."""

    _ids = 0

    def __init__(
        self, tokens: Sequence[int], params: GenParams, loop: asyncio.AbstractEventLoop
    ) -> None:
        Job._ids += 1
        self.id = Job._ids
        self.tokens = list(tokens)
        self.params = params
        self.loop = loop
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.cancelled = threading.Event()
        self.cancel_reason = "cancelled"
        self.slot: int | None = None
        self.generation: Generation | None = None
        self.n_decoded = 0
        self.cache_n = 0
        self.ended = False  # finished or failed: its slot is free
        self.t_submit = time.perf_counter()

    def cancel(self, reason: str = "cancelled") -> None:
        if not self.cancelled.is_set():
            self.cancel_reason = reason
            self.cancelled.set()

    def emit(self, event: Event) -> None:
        # (a closed event loop: nobody is listening any more)
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)


@dataclass
class Metrics:
    """llama-server's /metrics counters, summed over finished requests (cancelled included),
    so they equal the sum of the `timings` the responses carried."""

    prompt_tokens: int = 0
    prompt_ms: float = 0.0
    predicted_tokens: int = 0
    predicted_ms: float = 0.0
    cached_tokens: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    drafts: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    n_decode: int = 0
    #: tokens streamed so far, running requests included (the page's live aggregate)
    generated: int = 0
    n_tokens_max: int = 0
    requests: int = 0
    rejected: int = 0


#: /metrics rows of batch_figures(): (key, kind, help with the model's role)
BATCH_METRICS = (
    ("steps", "counter", "Passes of the {} model, each one batch for every slot waiting."),
    ("tokens", "counter", "Tokens evaluated in those passes of the {} model."),
    ("seqs", "counter", "Sequences in those passes of the {} model, summed over passes."),
    ("tokens_per_step", "gauge", "Average tokens per pass of the {} model."),
    ("seqs_per_step", "gauge", "Average sequences per pass of the {} model."),
    ("gave_way", "counter",
     "Passes of the {} model abandoned part-way for a request that joined (evaluated again)."),
)


@dataclass(frozen=True)
class SlotSettings:
    """The flag table's `slots` rows: how a request's slot is chosen, and when the idle
    server sleeps."""

    #: --slot-prompt-similarity: a free slot is taken for the prompt it caches when the
    #: prefix it shares with the request's prompt is more than this fraction of that prompt
    #: (the longest such prefix wins); else the least recently used free slot. 0: never by
    #: the prompt, always the least recently used (llama-server's default, 0.1)
    prompt_similarity: float = 0.1
    #: --sleep-idle-seconds: after this many seconds with nothing to do, the models are
    #: freed, and loaded again for the next request (-1: never; specgguf.server.sleep)
    sleep_idle_seconds: int = -1
    #: --slot-save-path: the directory of the slots' files (specgguf.server.slot_files;
    #: None: POST /slots/{id} answers 501)
    save_path: Path | None = None
    #: --cache-idle-slots / --no-cache-idle-slots (None: not given, on): as a request starts,
    #: the idle slots' sequences are saved into --cache-ram's cache (Generator.cache_idle_slots)
    cache_idle_slots: bool | None = None


#: Scheduler.call's idle_slot that waits for every slot (and holds new requests back)
ALL_SLOTS = -1

#: a call queued for the worker thread: fn, its future and loop, the slot it waits to find idle
_Call = tuple[Callable[[], Any], asyncio.Future, asyncio.AbstractEventLoop, "int | None"]


def _settle(fut: asyncio.Future, ok: bool, value: Any) -> None:
    """(On the event loop.) A call's result or exception, unless its waiter is gone."""
    if fut.done():
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


class Scheduler:
    def __init__(
        self, gen: Generator, *, max_queue: int = 64, slots: SlotSettings = SlotSettings(),
        models: Models | None = None,
    ) -> None:  # fmt: skip
        """`models`: the owner of `gen`'s models, which may sleep (--sleep-idle-seconds): the
        worker frees them after that idle time and loads them again before the next call or
        request runs."""
        self.gen = gen
        self.max_queue = max_queue
        self.slots = slots
        self.models = models
        if models is not None:
            models.listen(lambda: None, self._woke)
        self.metrics = Metrics()
        self._lock = threading.Condition()
        self._waiting: deque[Job] = deque()
        self._active: dict[int, Job] = {}
        #: calls for the worker thread: (fn, its future, its loop, the slot it must find
        #: idle or None)
        self._calls: deque[_Call] = deque()
        self._slot_task: list[int] = [-1] * gen.n_slots
        #: when each slot was last given a request or freed (a count of those events; -1:
        #: never), for the least recently used one
        self._slot_used: list[int] = [-1] * gen.n_slots
        self._uses = 0
        self._stopping = False
        #: several slots: their Generations run on threads of their own, decoding together
        self._rv = gen.rendezvous if gen.n_slots > 1 else None
        run = self._run if self._rv is None else self._run_batched
        self._thread = threading.Thread(target=run, name="specgguf-worker", daemon=True)

    # -- the event loop's side ----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    async def call(self, fn: Callable[[], Any], *, idle_slot: int | None = None) -> Any:
        """Run fn on the worker thread (between two rounds) and return its result. With
        `idle_slot`, fn waits until no request runs in that slot, and runs before the slot
        is given another (a slot file saved or restored: as llama-server defers it); with
        ALL_SLOTS, until no request runs at all, no waiting one starting meanwhile (new
        LoRA scales: the running requests finish under the old ones)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._lock:
            if self._stopping:
                raise ApiError(503, "the server is shutting down", "shutting_down")
            self._calls.append((fn, fut, loop, idle_slot))
            self._lock.notify()
        return await fut

    def submit(self, tokens: Sequence[int], params: GenParams) -> Job:
        """Queue a generation; 503 (with Retry-After) when the queue is full."""
        if params.id_slot >= self.gen.n_slots:
            raise ApiError(400, f"id_slot {params.id_slot}: this server has {self.gen.n_slots} "
                           "slot(s), 0 to n - 1 (-1: any free one)", "invalid_request_error")
        job = Job(tokens, params, asyncio.get_running_loop())
        with self._lock:
            if self._stopping:
                raise ApiError(503, "the server is shutting down", "shutting_down")
            if len(self._waiting) >= self.max_queue:
                self.metrics.rejected += 1
                raise ApiError(
                    503,
                    f"all {self.gen.n_slots} slots are busy and {len(self._waiting)} requests "
                    "are waiting: try again later",
                    "server_busy",
                    retry_after=1,
                )
            self._waiting.append(job)
            self.metrics.requests += 1
            self._lock.notify()
        return job

    def cancel(self, job: Job, reason: str = "cancelled") -> None:
        """The client is gone: drop the job from the queue, or stop it before its next round."""
        job.cancel(reason)
        with self._lock:
            if job in self._waiting:
                self._waiting.remove(job)
            self._lock.notify()
        self._wake()

    def shutdown(self) -> None:
        """Stop taking work and end every request (each gets its final chunk)."""
        with self._lock:
            self._stopping = True
            for job in [*self._waiting, *self._active.values()]:
                job.cancel("shutdown")
            self._lock.notify()
        self._wake()

    def _wake(self) -> None:
        """A request was cancelled: a slot waiting for a step leaves it at once."""
        if self._rv is not None:
            self._rv.wake()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def processing(self) -> int:
        return len(self._active)

    @property
    def deferred(self) -> int:
        return len(self._waiting)

    def batch_figures(self) -> dict[str, dict[str, float]]:
        """Per model ("target", "draft"), what the shared passes held: passes, tokens and
        sequences in them, and their averages per pass (empty with one slot)."""
        out: dict[str, dict[str, float]] = {}
        for s in self._rv.steppers if self._rv is not None else []:
            st = s.stats
            out[s.role] = {
                "steps": st.steps,
                "tokens": st.rows,
                "seqs": st.seqs,
                "tokens_per_step": st.rows / st.steps if st.steps else 0.0,
                "seqs_per_step": st.seqs / st.steps if st.steps else 0.0,
                "gave_way": st.gave_way,
            }
        return out

    def batch_metrics(self) -> list[tuple[str, str, Any, str]]:
        """batch_figures() as /metrics rows: llamacpp:batch_* for the target,
        llamacpp:draft_batch_* for the draft model."""
        rows: list[tuple[str, str, Any, str]] = []
        for role, fig in self.batch_figures().items():
            pre = "" if role == "target" else f"{role}_"
            for key, kind, help_ in BATCH_METRICS:
                name = f"{pre}batch_{key}" + ("_total" if kind == "counter" else "")
                rows.append((name, kind, fig[key], help_.format(role)))
        return rows

    def slot_states(self, namespace: Hashable | None = None) -> list[dict[str, Any]]:
        """Per slot: busy or not, the task, tokens decoded, cached tokens (for /slots); and
        whether those figures are `namespace`'s to see (its request runs there, or its
        requests wrote the slot's cache)."""
        batch = self.batch_figures().get("target")
        with self._lock:
            busy = {j.slot: j for j in self._active.values()}
            out = []
            for i in range(self.gen.n_slots):
                job = busy.get(i)
                st = job.generation.stats if job and job.generation else None
                out.append(
                    {
                        "id": i,
                        "id_task": job.id if job else self._slot_task[i],
                        "is_processing": job is not None,
                        "n_decoded": job.n_decoded if job else 0,
                        "n_cached": self.gen.cached_tokens(i),
                        "params": job.params if job else None,
                        # this request's speculation so far: drafted and accepted tokens
                        "n_drafted": st.n_drafted if st else 0,
                        "n_accepted": st.n_accept if st else 0,
                        "batch": batch,
                        "visible": job.params.namespace == namespace
                        if job
                        else self.gen.cache_owned_by(i, namespace),
                    }
                )
            return out

    # -- the worker thread ------------------------------------------------------------------

    @property
    def sleeping(self) -> bool:
        """The models are freed (--sleep-idle-seconds) until the next request."""
        return self.models is not None and self.models.asleep

    def _woke(self, loaded: Loaded) -> None:
        """(On the worker thread, nothing running.) The models are back: a new generator."""
        with self._lock:
            self.gen = loaded.gen
            self._rv = loaded.gen.rendezvous if loaded.gen.n_slots > 1 else None

    def _idle(self) -> bool:
        return not (self._calls or self._active or self._waiting)

    def _runnable(self) -> bool:
        """(Under the lock.) A call may run now: none waits for a slot still busy."""
        return any(self._may_run(c) for c in self._calls)

    def _draining(self) -> bool:
        """(Under the lock.) A call waits for every slot: no waiting request starts."""
        return any(c[3] == ALL_SLOTS for c in self._calls)

    def _may_run(self, call: _Call) -> bool:
        """(Under the lock.) Whether the slot (or the slots) the call waits for are idle."""
        slot = call[3]
        return slot is None or (not self._active if slot == ALL_SLOTS
                                else slot not in self._active)  # fmt: skip

    def _wait(self, ready: Callable[[], bool]) -> None:
        """(Under the lock, on the worker thread.) Wait until ready(); meanwhile, once the
        server has been idle --sleep-idle-seconds, the models sleep (under the lock, so that
        /slots never reads a freed context)."""
        models = self.models
        while not ready():
            left = models.idle_left() if models is not None and self._idle() else None
            if left is None:
                self._lock.wait()
            elif models is not None and models.may_sleep():
                models.sleep()
            else:  # (an answer still held: look again once the idle time may have run out)
                self._lock.wait(left or models.idle_seconds)  # type: ignore[union-attr]

    def _awake(self) -> None:
        """(On the worker thread, outside the lock: loading takes a while, and the event
        loop keeps answering meanwhile.) The models, loaded again if they sleep."""
        if self.models is not None:
            if self.models.asleep:
                self.models.wake()
            self.models.busy()

    def _run(self) -> None:
        while True:
            with self._lock:
                self._wait(lambda: bool(self._calls or self._active or self._waiting
                                        or self._stopping))  # fmt: skip
                if self._stopping and self._idle():
                    return
            self._awake()
            with self._lock:
                calls = self._take_calls()
                self._assign()
                active = list(self._active.values())
                if self._stopping and not active and not calls:
                    return
            for fn, fut, loop, _slot in calls:
                self._do_call(fn, fut, loop)
            if calls and self.models is not None:
                self.models.busy()
            for job in active:
                self._step(job)

    def _run_batched(self) -> None:
        """Several slots: assign them and start each request's thread; run the calls."""
        while True:
            with self._lock:
                self._wait(lambda: bool(
                    self._runnable()
                    or self._stopping
                    or (self._waiting and len(self._active) < self.gen.n_slots
                        and not self._draining())
                ))  # fmt: skip
                stopping = self._stopping and not self._runnable()
            if not stopping:
                self._awake()
            with self._lock:
                calls = self._take_calls()
                started = self._assign()
                idle = [i for i in range(self.gen.n_slots) if i not in self._active]
                if self._stopping and not calls:
                    self._take_calls(everything=True)
                    while self._active:  # each thread finishes its request (final chunk)
                        self._lock.wait()
                    return
            for fn, fut, loop, _slot in calls:
                self._do_call(fn, fut, loop)
            if calls and self.models is not None:
                self.models.busy()
            if started and self.slots.cache_idle_slots is not False:
                self.gen.cache_idle_slots(idle)  # before their threads touch any slot
            for job in started:
                threading.Thread(
                    target=self._drive, args=(job,), name=f"specgguf-slot-{job.slot}", daemon=True
                ).start()

    def _drive(self, job: Job) -> None:
        """A request's thread: its rounds, each decode in the slots' shared steps."""
        assert self._rv is not None
        with self._rv.member(job.cancelled.is_set):
            while not job.ended:
                self._step(job)

    def _take_calls(self, everything: bool = False) -> list[_Call]:
        """(Under the lock.) The calls queued so far, but those waiting for a busy slot
        (`everything`: those end with a 503); when stopping, the waiting jobs end."""
        calls = [c for c in self._calls if self._may_run(c)]
        left = [c for c in self._calls if c not in calls]
        self._calls.clear()
        if everything:
            for _fn, fut, loop, _slot in left:
                shut = ApiError(503, "the server is shutting down", "shutting_down")
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_settle, fut, False, shut)
        else:
            self._calls.extend(left)
        if self._stopping:
            for job in self._waiting:
                job.cancel("shutdown")
                self._finish_unstarted(job)
            self._waiting.clear()
        return calls

    def _assign(self) -> list[Job]:
        """Give waiting jobs the free slots (under the lock, on the worker thread), each to the
        one _choose_slot picks. Returns the jobs given a slot."""
        started: list[Job] = []
        if self._draining():
            return started
        free = [i for i in range(self.gen.n_slots) if i not in self._active]
        held: list[Job] = []  # waiting for a slot of their own (id_slot) that is busy
        while free and self._waiting:
            job = self._waiting.popleft()
            if job.cancelled.is_set():
                self._finish_unstarted(job)
                continue
            wanted = job.params.id_slot
            if wanted >= 0 and wanted not in free:
                held.append(job)
                continue
            best = wanted if wanted >= 0 else self._choose_slot(free, job)
            free.remove(best)
            job.slot = best
            self._slot_task[best] = job.id
            self._active[best] = job
            self._used(best)
            started.append(job)
        self._waiting.extendleft(reversed(held))  # in their order, ahead of the rest
        return started

    def _choose_slot(self, free: list[int], job: Job) -> int:
        """llama-server's choice among the free slots: the one whose KV cache shares the
        longest prefix with the prompt, if that prefix is more than --slot-prompt-similarity
        of the prompt (so a conversation's next turn finds its earlier turns still cached);
        else the least recently used (an empty slot first; ties: the lowest index). Only
        caches its own API key wrote count (Generator.shared_prefix): which slot another
        key's prompt lands in says nothing of what this key's slots hold."""
        threshold = self.slots.prompt_similarity
        if threshold > 0 and job.tokens:
            best, best_share = None, 0.0
            for i in free:
                share = self.gen.shared_prefix(i, job.tokens, job.params.namespace) / len(
                    job.tokens
                )
                if share > best_share and share > threshold:
                    best, best_share = i, share
            if best is not None:
                return best
        return min(free, key=lambda i: (self._slot_used[i], i))

    def _used(self, slot: int) -> None:
        """(Under the lock.) The slot was given a request or freed just now."""
        self._uses += 1
        self._slot_used[slot] = self._uses
        if self.models is not None:
            self.models.busy()

    def _do_call(self, fn, fut: asyncio.Future, loop: asyncio.AbstractEventLoop) -> None:
        try:
            result = fn()
            ok = True
        except Exception as e:  # noqa: BLE001 - delivered to the awaiting handler
            result, ok = e, False
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, fut, ok, result)

    def _step(self, job: Job) -> None:
        """One round of one job (the prompt pass on its first)."""
        slot = job.slot
        assert slot is not None
        try:
            if job.generation is None:
                job.generation = self.gen.generate(job.tokens, job.params, slot=slot)
            g = job.generation
            if job.cancelled.is_set():
                chunk = g.finish(job.cancel_reason)
            else:
                try:
                    chunk = next(g)
                except StopIteration:
                    chunk = Chunk([])
                except Cancelled:  # while its rows waited for a step
                    chunk = g.finish(job.cancel_reason)
            tokens = chunk.round.emitted if chunk.round is not None else []
            job.n_decoded += len(tokens)
            if tokens:
                with self._lock:  # (several slot threads count at once)
                    self.metrics.generated += len(tokens)
            if chunk.pieces or tokens or chunk.probs:
                job.emit(Event("chunk", chunk, list(tokens), self._info(job, chunk)))
            if g.done:
                self._finish(job)
        except SpecggufError as e:  # a usage error (a grammar's dead end) is the request's
            status = 400 if e.code == ExitCode.USAGE else 500
            self._fail(job, ApiError(status, str(e), "generation_failed"))
        except Exception as e:  # noqa: BLE001 - a bug: the request fails, the server lives
            self._fail(job, ApiError(500, f"internal error: {type(e).__name__}: {e}", None))

    def _info(self, job: Job, chunk: Chunk) -> RoundInfo:
        g = job.generation
        assert g is not None
        s = g.stats
        rnd = chunk.round
        policy = self.gen.policy(job.slot or 0)
        if policy is None or g.decoder.policy is not policy:
            policy = None  # no auto for this request
        return RoundInfo(
            draft_n=len(rnd.proposed) if rnd else 0,
            draft_n_accepted=rnd.n_accepted if rnd else 0,
            drafter=rnd.drafter if rnd else None,
            auto_k=policy.chosen[-1] if policy is not None and policy.chosen else None,
            predicted_n=s.predicted_n,
            predicted_ms=round(s.predicted_ms, 3),
            drafted_total=s.n_drafted,
            accepted_total=s.n_accept,
            rounds=s.rounds,
        )

    def _finish(self, job: Job) -> None:
        g = job.generation
        assert g is not None and job.slot is not None
        s = g.stats
        job.cache_n = s.cache_n
        with self._lock:
            m = self.metrics
            m.prompt_tokens += s.prompt_n
            m.prompt_ms += round(s.prompt_ms, 3)
            m.predicted_tokens += s.predicted_n
            m.predicted_ms += round(s.predicted_ms, 3)
            m.cached_tokens += job.cache_n
            m.draft_tokens += s.n_drafted
            m.accepted_tokens += s.n_accept
            m.drafts += s.rounds
            for i, a in enumerate(s.position_accepted):
                while len(m.accepted_per_pos) <= i:
                    m.accepted_per_pos.append(0)
                m.accepted_per_pos[i] += a
            m.n_decode += s.rounds + s.plain_steps + (1 if s.prompt_n else 0)
            m.n_tokens_max = max(m.n_tokens_max, self.gen.cached_tokens(job.slot))
            del self._active[job.slot]
            self._used(job.slot)
            job.ended = True
            self._lock.notify_all()
        job.emit(Event("done"))

    def _finish_unstarted(self, job: Job) -> None:
        job.emit(
            Event("error", error=ApiError(503, "the server is shutting down", "shutting_down"))
        )

    def _fail(self, job: Job, err: ApiError) -> None:
        with self._lock:
            if job.slot is not None and self._active.get(job.slot) is job:
                del self._active[job.slot]
                self._used(job.slot)
            job.ended = True
            self._lock.notify_all()
        job.emit(Event("error", error=err))

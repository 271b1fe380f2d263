"""A server's slots as sequences of ONE llama.cpp context, decoded together.

Why: a decoding step reads every weight once however many rows it evaluates, so N slots
decoded as one batch cost far less than N separate passes (on a GPU about one pass). The
speculative loop is not changed for this: each slot sees a `SequenceView`, which satisfies
specgguf.core.context.KVContext for its own sequence id, and whose `decode` hands its rows to
the Rendezvous instead of calling llama.cpp. A step of a `BatchedContext` then builds one
batch from the pending rows of every sequence (each at its own positions, logits only where
that sequence asked), decodes it once and gives each waiter a copy of its own logit rows.

A long prompt is evaluated a chunk per step, after the short decodes of the others, so it
does not stall their streams: as many rows as the target evaluates in about PROMPT_SLICE_S
seconds, at the rate this context's own steps measured, and at least `prompt_chunk`; the rows
of one step are at most n_batch. While a newcomer's short prompt waits (its first token
comes from that prompt's pass), the long prompt pauses (`NEWCOMER_CHUNK` rows) in every step
that has other rows; and a step that holds a long prompt's rows gives way when a request
joins while it runs (llama.cpp's abort check: the step is abandoned part-way, nothing of it
kept, and its rows are evaluated again in a later step), so a short request that arrives
behind a long prompt waits for neither the chunk in flight nor the rest of the prompt.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from specgguf.binding import engine
from specgguf.binding.rendezvous import Rendezvous
from specgguf.core.context import Outputs
from specgguf.core.draft import Hear

#: the fewest rows of a long prompt evaluated in a step (and the most of a request that is
#: taken whole, a "short" one): enough to use a wide pass well (on a 2-core CPU, 64-row
#: chunks evaluate a prompt at about the rate of 512-row ones, 32-row chunks at 0.85 of it)
PROMPT_CHUNK = 64
#: seconds of a step that a long prompt's chunk may fill (at the target's measured rate): on a
#: 2-core CPU fewer rows than PROMPT_CHUNK, so the chunk stays that; where a pass over hundreds
#: of rows costs little more than a pass over a few (a GPU), a whole batch, as llama-server
#: takes, instead of one small chunk a pass
PROMPT_SLICE_S = 0.5
#: rows of a long prompt per step while another sequence waits for its first token (0: it
#: pauses, in steps that have other rows)
NEWCOMER_CHUNK = 0


#: weight of a new step's time in the moving average of steps of its width
STEP_TIME_WEIGHT = 0.2


@dataclass
class StepStats:
    """What the steps of one context evaluated: `/metrics` and the page show rows (tokens) and
    sequences per step."""

    steps: int = 0
    rows: int = 0
    seqs: int = 0
    last_rows: int = 0
    last_seqs: int = 0
    #: steps abandoned part-way for a request that joined (their rows evaluated again later)
    gave_way: int = 0
    #: seconds of a step by its width (rows), a moving average: what a pass over that many
    #: rows costs in this server now (auto prices a draft in a shared pass with it)
    seconds: dict[int, float] = field(default_factory=dict)

    def timed(self, rows: int, seconds: float) -> None:
        old = self.seconds.get(rows)
        self.seconds[rows] = seconds if old is None else old + STEP_TIME_WEIGHT * (seconds - old)

    def rows_in(self, seconds: float, *, at_least: int) -> int:
        """How many rows a step evaluates in `seconds`, at the rate of the widest step timed
        of at least `at_least` rows (`at_least` until one is: the rate of a wide pass only
        grows with its width, so the estimate errs on the small side and grows as wider
        steps are timed)."""
        wide = max((w for w in self.seconds if w >= at_least), default=None)
        if wide is None:
            return at_least
        return max(at_least, int(seconds * wide / self.seconds[wide]))

    def seconds_at(self, rows: int) -> float | None:
        """A step of `rows` rows: as timed, or on the line between the nearest widths timed
        on either side; None outside them."""
        if rows in self.seconds:
            return self.seconds[rows]
        below = max((w for w in self.seconds if w < rows), default=None)
        above = min((w for w in self.seconds if w > rows), default=None)
        if below is None or above is None:
            return None
        lo, hi = self.seconds[below], self.seconds[above]
        return lo + (hi - lo) * (rows - below) / (above - below)


@dataclass
class _Request:
    view: SequenceView
    tokens: list[int]
    pos0: int
    outputs: str  # "last", "all" or "none", as KVContext.decode
    done: int = 0  # rows evaluated so far
    rows: list[np.ndarray] = field(default_factory=list)
    error: BaseException | None = None
    finished: bool = False
    #: rows at positions and sequences of their own (a tree's nodes, a draft's branches):
    #: (positions, sequence sets), evaluated whole in one step, every row's logits returned,
    #: the view's bookkeeping left to the view; None: tokens at pos0.. of the view's sequence
    placed: tuple[list[int], list[tuple[int, ...]]] | None = None

    def wants(self, j: int) -> bool:
        if self.placed is not None:
            return True
        return self.outputs == "all" or (self.outputs == "last" and j == len(self.tokens) - 1)


class BatchedContext:
    """One context holding `n_seq` sequences over a model (unified KV cache), stepped by a
    Rendezvous. `views[i]` is sequence i, with n_ctx / n_seq positions of its own (-c is the
    total, divided between the slots as llama-server divides it)."""

    def __init__(
        self,
        model: engine.Model,
        params: engine.ContextParams,
        n_seq: int,
        rendezvous: Rendezvous,
        *,
        role: str = "target",
        holds_others: bool = False,
        prompt_chunk: int = PROMPT_CHUNK,
        branches: int = 1,
        branch_cells: int = 0,
    ) -> None:
        """`params.n_ctx` is one sequence's size; `role` names the model in /metrics.
        `holds_others` (the draft model's context): while some sequence is drafting, the
        other contexts' rows wait for it, so the sequences that verify after drafting share
        one target pass instead of verifying one by one as their drafts end. `branches`:
        KV sequences per slot for tree rounds (a target's leaves, a draft's branches; 1:
        chains), with `branch_cells` cells per slot beyond its own positions for the nodes
        a round holds until it is settled."""
        self.branches = max(1, branches)
        self.ctx = engine.Context(
            model,
            replace(
                params,
                n_ctx=(params.n_ctx + branch_cells) * n_seq,
                n_seq_max=n_seq * self.branches,
            ),
        )
        self.model = model
        self.role = role
        self.holds_others = holds_others
        self.rendezvous = rendezvous
        self.prompt_chunk = max(1, prompt_chunk)
        self.n_ctx_seq = params.n_ctx if branch_cells else self.ctx.n_ctx // n_seq
        self.stats = StepStats()
        self._pending: list[_Request] = []
        self.n_slots = n_seq
        self.views = [SequenceView(self, i) for i in range(n_seq)]
        rendezvous.steppers.append(self)

    # -- the Rendezvous' side (called under its lock) -------------------------------------------

    def has_pending(self) -> bool:
        return bool(self._pending)

    def holds(self) -> bool:
        """Whether the other contexts wait this step: a draft step is pending (a prompt
        longer than a chunk does not hold them)."""
        return self.holds_others and any(
            len(r.tokens) - r.done <= self.prompt_chunk for r in self._pending
        )

    def withdraw(self, req: _Request) -> None:
        if req in self._pending:
            self._pending.remove(req)

    def step(self) -> int:
        """One llama_decode over the pending rows: the shortest requests first (a decode step,
        a verification), then prompt chunks, at most n_batch rows. Returns how many requests
        it finished."""
        chunk = min(
            self.ctx.n_batch, self.stats.rows_in(PROMPT_SLICE_S, at_least=self.prompt_chunk)
        )
        plan = self._plan(NEWCOMER_CHUNK if self._newcomer_waits() else chunk)
        if not plan:  # only long prompts: a pause for a newcomer never stalls the step
            plan = self._plan(chunk)
        tokens: list[int] = []
        pos: list[int] = []
        seq: list[int | tuple[int, ...]] = []
        logits: list[bool] = []
        for r, a, b in plan:
            tokens.extend(r.tokens[a:b])
            if r.placed is not None:
                pos.extend(r.placed[0])
                seq.extend(r.placed[1])
            else:
                pos.extend(range(r.pos0 + a, r.pos0 + b))
                seq.extend([r.view.seq] * (b - a))
            logits.extend(r.wants(j) for j in range(a, b))
        s = self.stats
        finished = 0
        t0 = time.perf_counter()
        try:
            out = self.ctx.decode_rows(tokens, pos, seq, logits, give_way=self._give_way(plan))
            s.timed(len(tokens), time.perf_counter() - t0)
        except engine.GaveWay:
            s.gave_way += 1
            return 0
        except Exception as e:  # noqa: BLE001 - each waiter gets it; the batcher lives on
            for r, _, _ in plan:
                r.error, r.finished = e, True
                r.view._dirty = True
                self._pending.remove(r)
            return len(plan)
        s.steps += 1
        s.rows += len(tokens)
        s.seqs += len(plan)
        s.last_rows, s.last_seqs = len(tokens), len(plan)
        k = 0
        for r, a, b in plan:
            r.view.others = len(tokens) - (b - a)
            r.view.peers = len(plan) - 1
            n_out = sum(r.wants(j) for j in range(a, b))
            if n_out:
                r.rows.append(np.array(out[k : k + n_out]))  # a copy: the next step reuses it
                k += n_out
            if r.placed is None:
                r.view.tokens.extend(r.tokens[a:b])
                r.view.n_past = r.pos0 + b
            r.done = b
            if b == len(r.tokens):
                r.finished = True
                self._pending.remove(r)
                finished += 1
                if r.outputs != "none":  # its first token (if it waited) is sampled now
                    r.view.awaits_first_token = False
        return finished

    def _plan(self, chunk: int) -> list[tuple[_Request, int, int]]:
        """(request, first row, end row) of this step: the shortest requests first, whole
        (a request of at most `prompt_chunk` rows, or what is left of a longer one); then
        rows of longer prompts, `chunk` each (0: paused), within n_batch."""
        budget = self.ctx.n_batch
        plan: list[tuple[_Request, int, int]] = []
        for r in sorted(self._pending, key=lambda r: len(r.tokens) - r.done):
            if budget <= 0:
                break
            left = len(r.tokens) - r.done
            if r.placed is not None:  # placed rows go whole, in a step with room for them
                take = left if left <= budget else 0
            else:
                take = min(left, budget, left if left <= self.prompt_chunk else chunk)
            if take > 0:
                plan.append((r, r.done, r.done + take))
                budget -= take
        return plan

    def time_widths(self, widths: Sequence[int]) -> None:
        """Time a pass over each of these widths now (rows of sequence 0 at its first
        positions, removed afterwards; twice each, the first pass of a width also building
        its graph), so that auto prices a draft in a shared pass from the server's first
        step instead of drafting until its own steps have timed that width."""
        for w in widths:
            if not 0 < w <= min(self.ctx.n_batch, self.n_ctx_seq):
                continue
            for _ in range(2):
                t0 = time.perf_counter()
                self.ctx.decode_rows([0] * w, range(w), [0] * w, [False] * (w - 1) + [True])
                took = time.perf_counter() - t0
                self.ctx.seq_rm(0, 0)
            self.stats.seconds[w] = took

    def _give_way(self, plan: list[tuple[_Request, int, int]]) -> Callable[[], bool] | None:
        """The check of a step that holds rows of a long prompt: True once a request has
        joined since the step began (None for other steps: the check costs a Python call per
        graph node, worth it only where a step is long and can wait)."""
        if not any(len(r.tokens) > self.prompt_chunk for r, _, _ in plan):
            return None
        rendezvous, joins = self.rendezvous, self.rendezvous.joins
        return lambda: rendezvous.joins != joins

    def _newcomer_waits(self) -> bool:
        """Whether a sequence waits for its first token behind a short prompt (a pending
        request of no more than `prompt_chunk` rows, of a sequence that has had no logits
        since its request began). The last rows of a long prompt do not make it a short one:
        its first token is as late as the prompt was long, and pausing the other long
        prompts for it would only cut their chunks into more steps."""
        short = self.prompt_chunk
        return any(r.view.awaits_first_token and len(r.tokens) <= short for r in self._pending)

    def close(self) -> None:
        if self.rendezvous is not None and self in self.rendezvous.steppers:
            self.rendezvous.steppers.remove(self)
        self.ctx.close()


class SequenceView:
    """Sequence `seq` of a BatchedContext as a KVContext: positions, bookkeeping and rollback
    of one sequence; its decodes run in the shared steps."""

    def __init__(self, owner: BatchedContext, seq: int) -> None:
        self.owner = owner
        self.seq = seq
        #: its KV sequences: its own, then those of its tree rounds' branches (the owner's
        #: sequences past the slots', `branches - 1` each)
        n_slots, extra = owner.n_slots, owner.branches - 1
        self._seqs = [seq, *(n_slots + seq * extra + j for j in range(extra))]
        self._tree: engine.TreePass | None = None
        self.model = owner.model
        self.n_ctx = owner.n_ctx_seq
        self.n_vocab = owner.model.n_vocab
        self.n_past = 0
        #: the token at each position this sequence's cells hold (len == n_past)
        self.tokens: list[int] = []
        self._dirty = False  # a failed step may have left cells past n_past
        #: rows of other sequences in the last pass that held rows of this one, and how many
        #: sequences they were (auto prices and learns a shared pass by `peers`:
        #: auto.policy.SharedPass)
        self.others = 0
        self.peers = 0
        #: this sequence's request began and no decode of it has returned logits yet: it
        #: waits for its first token (BatchedContext._newcomer_waits)
        self.awaits_first_token = False
        #: --cache-ram: the slots' shared host-memory prompt cache (binding.prompt_cache)
        self.prompt_cache = None

    def decode(
        self,
        tokens: Sequence[int],
        pos0: int,
        *,
        outputs: Outputs = "last",
        hear: Hear | None = None,
    ) -> np.ndarray | None:
        """Evaluate tokens at pos0.. in the shared steps; the logits asked for, as rows of a
        private array (engine.Context.decode's contract, minus the zero copy). A shared
        step captures no hidden states: a drafter that hears the target gets a context of
        its own per slot (the session never builds one over a shared context)."""
        if hear is not None:
            raise ValueError("a shared-pass sequence captures no hidden states")
        n = len(tokens)
        if n == 0:
            return None
        engine.check_room(pos0 + n, self.n_ctx)
        if pos0 < len(self.tokens) or self._dirty:
            self.truncate(pos0)
        req = self._submit(_Request(self, list(tokens), pos0, outputs))
        if outputs == "none":
            return None
        return req.rows[0] if len(req.rows) == 1 else np.concatenate(req.rows)

    def _submit(self, req: _Request) -> _Request:
        """Hand `req` to the shared steps and wait for it (its error raised here)."""
        owner = self.owner
        owner.rendezvous.submit(owner, req, lambda: owner._pending.append(req))
        if req.error is not None:
            raise req.error
        return req

    def _placed(self, tokens: list[int], pos: list[int], sets: list[tuple[int, ...]]):
        """Rows at positions and sequences of their own, in the shared steps: all logits."""
        req = self._submit(_Request(self, tokens, pos[0], "all", placed=(pos, sets)))
        return req.rows[0] if len(req.rows) == 1 else np.concatenate(req.rows)

    # -- tree rounds in the shared pass (engine.TreePass over this slot's sequences) ----------

    @property
    def tree_width(self) -> int:
        """The most leaves of a tree this slot verifies in a shared pass (1: chains)."""
        return len(self._seqs)

    @property
    def n_seq(self) -> int:
        """Sequences a draft may branch into (its own is 0): `fork`, `decode_beside`."""
        return len(self._seqs)

    def decode_tree(
        self, root: int, tokens: Sequence[int], parents: Sequence[int], pos0: int
    ) -> np.ndarray:
        """engine.Context.decode_tree's contract, the tree's rows in the shared steps."""
        t = engine.TreePass.lay_out(root, tokens, parents, pos0, self._seqs)
        engine.check_room(t.end, self.n_ctx)
        if pos0 < len(self.tokens) or self._dirty:
            self.truncate(pos0)
        memory = self.owner.ctx.memory
        self.owner.rendezvous.run_locked(lambda: t.share(memory))
        try:
            out = self._placed(*t.rows())
        except BaseException:
            self.owner.rendezvous.run_locked(lambda: t.drop(memory))
            self._dirty = True
            raise
        self._tree = t
        return out

    def keep_path(self, path: Sequence[int]) -> None:
        """Settle the last decode_tree (engine.Context.keep_path's contract)."""
        t, self._tree = self._tree, None
        if t is None:
            raise ValueError("keep_path without a decode_tree")
        kept: list[int] = []
        memory = self.owner.ctx.memory
        self.owner.rendezvous.run_locked(lambda: kept.extend(t.keep(memory, path)))
        del self.tokens[t.pos0 :]
        self.tokens.extend(kept)
        self.n_past = t.pos0 + len(kept)

    def fork(self, src: int, dst: int) -> None:
        """This slot's branch `dst` becomes a copy of its sequence `src` (0: its own)."""
        a, b = self._seqs[src], self._seqs[dst]
        self.owner.rendezvous.run_locked(lambda: self.owner.ctx.fork(a, b))

    def seq_rm(self, seq: int, p0: int) -> None:
        """Forget positions >= p0 of this slot's sequence `seq` (0: its own, a rollback)."""
        if seq == 0:
            self.truncate(p0)
            return
        s = self._seqs[seq]
        self.owner.rendezvous.run_locked(lambda: self.owner.ctx.seq_rm(s, p0))

    def decode_beside(
        self, tokens: Sequence[int], pos: Sequence[int], seq: Sequence[int]
    ) -> np.ndarray:
        """engine.Context.decode_beside's contract (rows of this slot's sequences, local
        ids; rows of its own sequence extend its bookkeeping), in the shared steps."""
        own = engine.own_rows(self, tokens, pos, seq)
        sets = [(self._seqs[s],) for s in seq]
        out = self._placed(list(tokens), list(pos), sets)
        engine.record_own_rows(self, own)
        return out

    def truncate(self, n_keep: int) -> None:
        """Roll back: forget every position >= n_keep of this sequence."""
        n_keep = max(0, n_keep)
        if n_keep < self.n_past or self._dirty:
            self.owner.rendezvous.run_locked(lambda: self.owner.ctx.seq_rm(self.seq, n_keep))
            self._dirty = False
        self.n_past = min(self.n_past, n_keep)
        del self.tokens[self.n_past :]

    def draft_pass_cost(self) -> float | None:
        """A draft-model pass over as many sequences as the last pass that held this one's
        rows (one row each: every slot drafting alike), in units of a target pass over as
        many rows, both as this server's steps measured them; None where either width has
        not been timed yet, or there is no draft model. On a CPU next to a target whose
        step is weight-bound (an F16 target) the draft's pass widens far faster than the
        target's: on a 2-core CPU the 0.5B Q4 draft beside the 1.5B F16 target cost 0.18
        of a target pass alone and 0.33 of one over four rows."""
        rows = self.peers + 1
        target = self.owner.stats.seconds_at(rows)
        draft = next((s for s in self.owner.rendezvous.steppers if s.role == "draft"), None)
        seconds = None if draft is None else draft.stats.seconds_at(rows)
        if not target or seconds is None:
            return None
        return seconds / target

    def keep_prefix(self, tokens: Sequence[int]) -> int:
        """Keep the longest cached prefix equal to the start of `tokens` (prompt reuse): a
        request begins here, a newcomer until its first logits."""
        self.awaits_first_token = True
        n = engine.common_prefix_len(self.tokens, tokens)
        if self.prompt_cache is not None:
            n = self.prompt_cache.swap(self, tokens, n)
        self.truncate(n)
        return n

    def state_handle(self) -> tuple[Any, int]:
        """llama.cpp's context and this slot's sequence id (binding.prompt_cache)."""
        return self.owner.ctx.ptr, self.seq

    @property
    def dirty(self) -> bool:
        """A failed step may have left cells past n_past."""
        return self._dirty

    def close(self) -> None:
        """Nothing of its own to free: the BatchedContext owns the cells."""

"""--trace FILE: one JSON object per speculative round, flushed as it happens.

For users who want to see where their acceptance rate comes from: which drafter proposed, what
it proposed, how much the target accepted, what the target thought of each proposal, and where
the time went. The records' `n_accepted` sum to the run's n_accept (plain steps have 0).

Record keys: `round` (0-based, per generation), `drafter` (null for a plain step), `proposed`,
`n_accepted`, `emitted` (token ids; `emitted` is cut at end-of-generation like the text),
`target_probs` (the target's probability of each proposal under the run's sampler, from the
same verification pass: past the first rejected proposal it is conditioned on the rejected
prefix; null when the decoder was not built with trace_probs=True), `draft_ms`, `verify_ms`,
`rollback_ms` (the target's rollback after a rejection: a checkpoint restore and re-decode on a
recurrent or hybrid target), `grammar_ms` (of verify_ms, what the grammar's questions cost;
0 without a grammar), and, when the writer knows the vocabulary, `proposed_text` /
`emitted_text` (each token's text, lossy for tokens that are part of a multi-byte character).
Batch and conversation runs add `request`/`line`/`id` or `turn` fields set with `begin()`,
first in each record. A draft model with another vocabulary (cross-vocabulary mode) adds
`draft_tokens` (its own ids), `draft_text` (their text), `translated` (the target tokens that
text became) and `translate_ms`. A tree round (--spec-tree-topk > 1) adds `parents` (each
proposal's parent: -1 the root, else an earlier proposal's index), `path` (the accepted
proposals' indices, root down: `emitted` starts with those tokens), `depth` (its deepest
branch) and `off_chain` (true when a kept node is not its parent's first child: a branch
the drafter's best chain alone would have lost); a chain's record has none of the four, as
before trees. Under `--spec-draft-n-max auto` each record has `auto`: the draft length auto
allowed that round (`k`, 0 for a plain step), `why` (its plan; the first rounds' width
measurements; a probe burst after plain steps; a plain step that re-measures the unit; no
drafter paying at the current estimates; a draft model's catch-up that the tokens left could
not repay) and `plans` (each drafter's [k, expected speedup]).

The file is opened before any model is loaded, so an unwritable path costs nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from specgguf.errors import UsageError, open_user_file, write_failed

if TYPE_CHECKING:  # speculative imports the engine (llama_cpp); the writer does not need it
    from specgguf.core.rounds import Round


def _tree_fields(rnd: Round) -> dict[str, Any]:
    """What a tree round adds: its shape, the branch kept, and whether that branch left the
    drafter's own best chain (which is where a tree beats a chain)."""
    return {
        "parents": list(rnd.parents or ()),
        "path": list(rnd.path),
        "depth": rnd.depth,
        "off_chain": rnd.off_chain,
    }


class TraceWriter:
    def __init__(
        self, out: TextIO, *, piece: Callable[[int], bytes] | None = None, owns: bool = False
    ) -> None:
        self.out = out
        self.piece = piece  # token id -> bytes; may be set once the model is loaded
        self._owns = owns
        self._context: dict[str, Any] = {}
        self._round = 0
        self.records = 0
        self.name = "--trace"  # for the error line when a write fails
        self._failed = False

    @classmethod
    def open(cls, path: Path | str) -> TraceWriter:
        """Open (truncate) `path` for writing; "-" is not accepted (stdout carries the text)."""
        if str(path) == "-":
            raise UsageError("--trace -: stdout carries the generated text; give a file name")
        f = open_user_file(path, "--trace", "w", encoding="utf-8")  # closed by close()
        writer = cls(f, owns=True)
        writer.name = f"--trace {path}"
        return writer

    def begin(self, **context: Any) -> None:
        """Start a new generation: round numbers restart at 0 and `context` (e.g. request=3,
        id="a") is written first in each of its records."""
        self._context = dict(context)
        self._round = 0

    def _texts(self, tokens: list[int]) -> list[str]:
        assert self.piece is not None
        return [self.piece(t).decode("utf-8", "replace") for t in tokens]

    def record(self, rnd: Round) -> dict[str, Any]:
        rec: dict[str, Any] = {
            **self._context,
            "round": self._round,
            "drafter": rnd.drafter,
            "proposed": list(rnd.proposed),
            "n_accepted": rnd.n_accepted,
            "emitted": list(rnd.emitted),
            "target_probs": (
                [round(p, 6) for p in rnd.target_probs] if rnd.target_probs is not None else None
            ),
            "draft_ms": round(rnd.draft_ms, 3),
            "verify_ms": round(rnd.verify_ms, 3),
            "rollback_ms": round(rnd.rollback_ms, 3),
            "grammar_ms": round(rnd.grammar_ms, 3),
            "from_prompt": rnd.from_prompt,
        }
        if rnd.parents is not None:
            rec.update(_tree_fields(rnd))
        if rnd.decision is not None:
            rec["auto"] = rnd.decision
        if self.piece is not None:
            rec["proposed_text"] = self._texts(rnd.proposed)
            rec["emitted_text"] = self._texts(rnd.emitted)
        x = rnd.translation
        if x is not None:
            rec["draft_tokens"] = list(x["draft_tokens"])
            rec["draft_text"] = list(x["draft_text"])
            rec["translated"] = list(x["target_tokens"])
            rec["translate_ms"] = round(float(x["translate_ms"]), 3)
        return rec

    def write(self, rnd: Round) -> None:
        """Write one record, flushed (a disk full or an I/O error: one OutputError line)."""
        try:
            self.out.write(json.dumps(self.record(rnd), ensure_ascii=False) + "\n")
            self.out.flush()
        except OSError as e:
            self._failed = True
            raise write_failed(self.name, e) from None
        self._round += 1
        self.records += 1

    def close(self) -> None:
        if self._owns and not self.out.closed:
            try:
                self.out.close()
            except OSError as e:  # what a failed write left in the buffer fails again
                if not self._failed:
                    self._failed = True
                    raise write_failed(self.name, e) from None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

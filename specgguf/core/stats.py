"""Run statistics with llama.cpp's labels and llama-server's / vLLM's definitions.

- n_drafted: draft tokens sent to verification; n_accept: those accepted;
  accept = 100 * n_accept / n_drafted (llama-speculative-simple).
- mean acceptance length = 1 + accepted / drafting rounds; per-position acceptance = fraction
  of drafting rounds whose i-th proposal was accepted (vLLM). Rounds without a proposal are
  plain decoding steps and are counted apart (`plain_steps`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specgguf.core.rounds import Round


#: Below these a speed is not a measurement: a 1-token prompt evaluates nothing (its last
#: token is evaluated with the first generated one), and n tokens over a few microseconds of
#: timer noise once printed "179275 t/s". One token's time is a latency, not a throughput.
MIN_RATE_TOKENS = 2
MIN_RATE_MS = 1.0


def measured_rate(n: int, ms: float) -> float | None:
    """Tokens per second, or None when fewer than MIN_RATE_TOKENS tokens or less than
    MIN_RATE_MS milliseconds were measured."""
    if n < MIN_RATE_TOKENS or ms < MIN_RATE_MS:
        return None
    return 1e3 * n / ms


def format_rate(rate: float | None, width: int = 8, digits: int = 3) -> str:
    """"%8.3f t/s" as llama.cpp prints it, or "n/a" in the same width."""
    return f"{rate:{width}.{digits}f} t/s" if rate is not None else f"{'n/a':>{width}}"


def _round(x: float | None) -> float | None:
    return round(x, 3) if x is not None else None


@dataclass
class DrafterStats:
    """Per --spec-type counters, as llama-server logs them per implementation."""

    drafts: int = 0  # rounds in which this drafter's proposal was verified
    drafts_accepted: int = 0  # of those, rounds with at least one token accepted
    tokens_drafted: int = 0
    tokens_accepted: int = 0
    draft_ms: float = 0.0

    @property
    def mean_acceptance_length(self) -> float:
        return 1.0 + self.tokens_accepted / self.drafts if self.drafts else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "drafts": self.drafts,
            "drafts_accepted": self.drafts_accepted,
            "tokens_drafted": self.tokens_drafted,
            "tokens_accepted": self.tokens_accepted,
            "accept_rate": self.tokens_accepted / self.tokens_drafted
            if self.tokens_drafted
            else 0.0,
            "mean_acceptance_length": round(self.mean_acceptance_length, 4),
            "draft_ms": round(self.draft_ms, 3),
        }


@dataclass
class RunStats:
    n_max: int = 0
    prompt_n: int = 0  # prompt tokens evaluated (llama-server's prompt_n)
    cache_n: int = 0  # prompt tokens kept from the KV cache, not evaluated again
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    n_drafted: int = 0
    n_accept: int = 0
    rounds: int = 0  # rounds that verified a proposal
    plain_steps: int = 0  # rounds with nothing proposed
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    rollback_ms: float = 0.0  # the target's rollbacks (Round.rollback_ms)
    grammar_ms: float = 0.0  # of verify_ms, the grammar's questions (Round.grammar_ms)
    position_drafted: list[int] = field(default_factory=list)
    position_accepted: list[int] = field(default_factory=list)
    per_type: dict[str, DrafterStats] = field(default_factory=dict)
    # cross-vocabulary drafting: time spent turning draft text into target tokens (and
    # emitted target tokens back into draft tokens), part of draft_ms; rounds that translated
    translate_ms: float = 0.0
    translate_rounds: int = 0
    #: tree rounds (Round.parents), the nodes they verified, and those that kept a branch
    #: off the drafter's best chain (Round.off_chain)
    tree_rounds: int = 0
    tree_nodes: int = 0
    tree_off_chain: int = 0

    def add_round(self, rnd: Round) -> None:
        self.predicted_n += len(rnd.emitted)
        self.draft_ms += rnd.draft_ms
        self.verify_ms += rnd.verify_ms
        self.rollback_ms += rnd.rollback_ms
        self.grammar_ms += rnd.grammar_ms
        if rnd.from_prompt:  # the prompt's pass made its token: no step of its own
            return
        if rnd.translation is not None:
            self.translate_ms += float(rnd.translation.get("translate_ms", 0.0))
            self.translate_rounds += 1
        k = len(rnd.proposed)
        if k == 0:
            self.plain_steps += 1
            return
        self.rounds += 1
        self.n_drafted += k
        self.n_accept += rnd.n_accepted
        if rnd.parents is not None:
            self.tree_rounds += 1
            self.tree_nodes += k
            self.tree_off_chain += rnd.off_chain
        depth = rnd.depth  # a tree drafts each position once, however many nodes it has there
        while len(self.position_drafted) < depth:
            self.position_drafted.append(0)
            self.position_accepted.append(0)
        for i in range(depth):
            self.position_drafted[i] += 1
            self.position_accepted[i] += i < rnd.n_accepted
        s = self.per_type.setdefault(rnd.drafter or "?", DrafterStats())
        s.drafts += 1
        s.drafts_accepted += rnd.n_accepted > 0
        s.tokens_drafted += k
        s.tokens_accepted += rnd.n_accepted
        s.draft_ms += rnd.draft_ms

    # -- derived figures ---------------------------------------------------------------------

    @property
    def accept_rate(self) -> float:
        return self.n_accept / self.n_drafted if self.n_drafted else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        return 1.0 + self.n_accept / self.rounds if self.rounds else 0.0

    @property
    def per_position_acceptance(self) -> list[float]:
        return [
            a / d if d else 0.0
            for a, d in zip(self.position_accepted, self.position_drafted, strict=True)
        ]

    @property
    def prompt_speed(self) -> float | None:
        """Prompt tokens per second, None when not measurable (see measured_rate)."""
        return measured_rate(self.prompt_n, self.prompt_ms)

    @property
    def predicted_speed(self) -> float | None:
        """Generated tokens per second, None when not measurable (see measured_rate)."""
        return measured_rate(self.predicted_n, self.predicted_ms)

    @property
    def predicted_per_second(self) -> float:
        return 1e3 * self.predicted_n / self.predicted_ms if self.predicted_ms > 0 else 0.0

    @property
    def prompt_per_second(self) -> float:
        return 1e3 * self.prompt_n / self.prompt_ms if self.prompt_ms > 0 else 0.0

    # -- output ----------------------------------------------------------------------------

    def report_lines(self) -> list[str]:
        """llama-speculative-simple's report, then the extra figures, for stderr."""
        lines = [
            f"encoded {self.prompt_n:4d} tokens in {self.prompt_ms / 1e3:8.3f} seconds, "
            f"speed: {format_rate(self.prompt_speed)}"
            + (f" ({self.cache_n} more reused from the KV cache)" if self.cache_n else ""),
            f"decoded {self.predicted_n:4d} tokens in {self.predicted_ms / 1e3:8.3f} seconds, "
            f"speed: {format_rate(self.predicted_speed)}",
            "",
            f"n_draft   = {self.n_max}",
            f"n_predict = {self.predicted_n}",
            f"n_drafted = {self.n_drafted}",
            f"n_accept  = {self.n_accept}",
            f"accept    = {100 * self.accept_rate:.3f}%",
            "",
            f"rounds    = {self.rounds} drafting, {self.plain_steps} plain",
            f"mean acceptance length = {self.mean_acceptance_length:.3f}",
            "acceptance per position = "
            + (" ".join(f"{a:.3f}" for a in self.per_position_acceptance) or "-"),
            f"draft {self.draft_ms / 1e3:.3f} s, verify {self.verify_ms / 1e3:.3f} s",
        ]
        if self.grammar_ms:
            lines.append(
                f"grammar {self.grammar_ms / 1e3:.3f} s "
                f"({self.grammar_ms / max(self.predicted_n, 1):.3f} ms per token; part of verify)"
            )
        if self.translate_rounds:
            lines.append(
                f"translate {self.translate_ms / 1e3:.3f} s in {self.translate_rounds} rounds "
                f"({self.translate_ms / self.translate_rounds:.3f} ms per round; "
                "cross-vocabulary draft, part of draft)"
            )
        if self.tree_rounds:
            lines.append(
                f"tree      {self.tree_rounds} rounds, {self.tree_nodes} nodes verified "
                f"({self.tree_nodes / self.tree_rounds:.2f} per round), "
                f"{self.tree_off_chain} kept a branch off the draft's best chain"
            )
        for name, s in self.per_type.items():
            lines.append(
                f"  {name:14s} drafts {s.drafts:5d} (accepted {s.drafts_accepted:5d}), "
                f"tokens {s.tokens_drafted:6d} (accepted {s.tokens_accepted:6d}), "
                f"mean acceptance length {s.mean_acceptance_length:.3f}"
            )
        return lines

    def timings(self) -> dict[str, Any]:
        """llama-server's `timings` names, plus the speculative extras."""
        return {
            "cache_n": self.cache_n,
            "prompt_n": self.prompt_n,
            "prompt_ms": round(self.prompt_ms, 3),
            "prompt_per_token_ms": _per_token(self.prompt_ms, self.prompt_n),
            "prompt_per_second": _round(self.prompt_speed),
            "predicted_n": self.predicted_n,
            "predicted_ms": round(self.predicted_ms, 3),
            "predicted_per_token_ms": _per_token(self.predicted_ms, self.predicted_n),
            "predicted_per_second": _round(self.predicted_speed),
            "draft_n": self.n_drafted,
            "draft_n_accepted": self.n_accept,
            "accept_rate": round(self.accept_rate, 6),
            "rounds": self.rounds,
            "plain_steps": self.plain_steps,
            "mean_acceptance_length": round(self.mean_acceptance_length, 4),
            "per_position_acceptance": [round(a, 4) for a in self.per_position_acceptance],
            "draft_ms": round(self.draft_ms, 3),
            "verify_ms": round(self.verify_ms, 3),
            "rollback_ms": round(self.rollback_ms, 3),
            "grammar_ms": round(self.grammar_ms, 3),
            "n_draft_max": self.n_max,
            "per_type": {k: v.as_dict() for k, v in self.per_type.items()},
            **(
                {
                    "translate_ms": round(self.translate_ms, 3),
                    "translate_rounds": self.translate_rounds,
                }
                if self.translate_rounds
                else {}
            ),
            **(
                {
                    "tree_rounds": self.tree_rounds,
                    "tree_nodes": self.tree_nodes,
                    "tree_off_chain": self.tree_off_chain,
                }
                if self.tree_rounds
                else {}
            ),
        }


def _per_token(ms: float, n: int) -> float:
    """llama-server's *_per_token_ms: milliseconds per token (0 without tokens)."""
    return round(ms / n, 3) if n else 0.0

"""The verdict: the best measured configuration, or plain decoding when none beats it by more
than the margin, with the cost model's reading of the measurements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specgguf.auto.cost_model import Costs, best_k
from specgguf.bench.configs import PLAIN, BenchConfig
from specgguf.bench.costs import CostCurve
from specgguf.bench.summary import ConfigSummary
from specgguf.drafters.registry import bounded_by_n_max

#: a speculative configuration is recommended only if its median ratio beats plain by this
MARGIN = 0.03

#: an auto configuration that drafted less than this on average per round is plain decoding
IDLE_MEAN_K = 0.05


def conditional_acceptance(per_position: Sequence[float]) -> list[float]:
    """vLLM's per-position acceptance (fraction of drafting rounds whose i-th proposal was
    accepted) -> P(i accepted | i-1 accepted), what the cost model wants."""
    out, prev = [], 1.0
    for a in per_position:
        out.append(min(1.0, a / prev) if prev > 0 else 0.0)
        prev = a
    return out

@dataclass
class Recommendation:
    speculate: bool
    config: BenchConfig
    expected_speedup: float  # the measured median ratio to plain decoding
    command: str
    reason: str
    model_view: list[str] = field(default_factory=list)  # what the cost model predicts

    def as_dict(self) -> dict[str, Any]:
        return {
            "speculate": self.speculate,
            "config": self.config.label,
            "run_flags": self.config.run_flags(),
            "expected_speedup": round(self.expected_speedup, 4),
            "command": self.command,
            "reason": self.reason,
            "cost_model": self.model_view,
        }

def command_line(cfg: BenchConfig, model_args: Sequence[str] = (), ngram: Any = None) -> str:
    """The `specgguf run` command for `cfg`, carrying the n-gram options the bench ran with
    (`ngram`: NgramOptions) where they differ from the defaults."""
    import shlex

    extra = ngram.flags_for(cfg.types) if ngram is not None else []
    return shlex.join(["specgguf", "run", *model_args, *cfg.run_flags(), *extra])

def model_view(rows: Sequence[ConfigSummary], costs: CostCurve) -> list[str]:
    """The cost model's reading of the measurements: for each drafting configuration with
    fixed n_max, the best draft length given this machine's curve and its acceptance."""
    lines = []
    verify = costs.verify()
    for row in rows:
        cfg = row.config
        if cfg.plain or cfg.auto or not row.per_position_acceptance:
            continue
        if cfg.tree is not None and cfg.tree[0] > 1:
            # its acceptance by position is along whichever branch was kept: a chain's
            # model of it would price the tree's extra nodes and wider drafts at nothing
            lines.append(f"{cfg.label}: a tree, measured only (no chain model prices it)")
            continue
        # a type that drafts over a model's logits (a draft model, a head) pays its step
        draft = costs.draft_rel if bounded_by_n_max(cfg.types) and costs.draft_rel else 0.0
        acc = conditional_acceptance(row.per_position_acceptance)
        n = len(verify) - 1
        k, s = best_k(Costs(verify=verify, draft=draft), acc, n)
        what = f"n_max {k} (x{s:.2f} predicted)" if k else "no drafting (nothing beats x1.00)"
        lines.append(
            f"{cfg.label}: draft step {draft:.2f}, acceptance "
            + " ".join(f"{a:.2f}" for a in acc[:4])
            + f" -> best {what}"
        )
    return lines

def recommend(
    rows: Sequence[ConfigSummary],
    costs: CostCurve | None = None,
    *,
    model_args: Sequence[str] = (),
    margin: float = MARGIN,
    ngram: Any = None,
) -> Recommendation:
    """The configuration with the best median ratio to plain decoding, if it beats plain by
    more than `margin`; otherwise plain decoding ("do not speculate here"). With a control row
    (plain measured again), the bar is at least twice the control's distance from x1.00: a
    gain this machine's noise alone produces is not a reason to speculate."""
    control = next((r for r in rows if r.config.control and r.ratio is not None), None)
    if control is not None and control.ratio is not None:
        margin = max(margin, 2 * abs(control.ratio.median - 1.0))
    candidates = [r for r in rows if r.config.types and r.ratio is not None]
    # an auto row that (almost) never drafted IS plain decoding: its ratio is noise, and the
    # right advice is what it did by itself
    idle = [r for r in candidates if r.config.auto and r.auto and r.auto["mean_k"] < IDLE_MEAN_K]
    candidates = [r for r in candidates if r not in idle]
    view = model_view(rows, costs) if costs is not None else []
    best = max(candidates, key=lambda r: r.ratio.median, default=None)  # type: ignore[union-attr]
    if best is not None and best.ratio is not None and best.ratio.median > 1.0 + margin:
        r = best.ratio
        return Recommendation(
            True,
            best.config,
            r.median,
            command_line(best.config, model_args, ngram),
            f"{best.config.label} decoded at x{r.median:.2f} the speed of plain decoding "
            f"(median of pairwise ratios, range x{r.lo:.2f}..x{r.hi:.2f})",
            view,
        )
    if best is None or best.ratio is None:
        reason = "no speculative configuration was measured"
    else:
        reason = (
            f"no configuration beats plain decoding by more than {margin:.0%}: the best, "
            f"{best.config.label}, ran at x{best.ratio.median:.2f}"
        )
    for r in idle:
        reason += (
            f"; {r.config.label} drafted in {r.auto['rounds'] - r.auto['chosen_k'].get('0', 0)}"
            f" of {r.auto['rounds']} rounds: it already decodes plainly here by itself"
        )
    return Recommendation(False, PLAIN, 1.0, command_line(PLAIN, model_args), reason, view)

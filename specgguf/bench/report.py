"""Bench's --json object: the measurements, every run, and the verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specgguf.bench.verdict import Recommendation

if TYPE_CHECKING:
    from specgguf.bench import BenchResult


def to_json(
    result: BenchResult, rec: Recommendation, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        **(extra or {}),
        "n_predict": result.options.n_predict,
        "repeat": result.options.repeat,
        "seed": result.options.seed,
        "greedy": result.greedy,
        "interrupted": result.interrupted,
        "load_average": list(result.load) if result.load else None,
        "prompts": [{"class": p.cls, "chars": len(p.text)} for p in result.prompts],
        "cost_curve": result.costs.as_dict(),
        "configs": [
            {
                **row.as_dict(),
                "runs": [
                    {
                        "prompt": r.prompt,
                        "class": result.prompts[r.prompt].cls,
                        "rep": r.rep,
                        "tokens_per_second": round(r.tps, 3),
                        "tokens": len(r.tokens),
                        "cpu_share": round(r.cpu_share, 3),
                    }
                    for r in result.runs[row.config]
                ],
            }
            for row in result.rows
        ],
        "recommendation": rec.as_dict(),
    }

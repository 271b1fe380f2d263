"""The machine profile `bench` reads and writes: where it lives for these load options, and
bench's measured cost curve (specgguf.cost_curve) merged into it so that `run`'s auto starts
from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specgguf.auto.profile import CostProfile
from specgguf.cost_curve import PASS_GRID, CostCurve, CostSamples, measure_cost_curve

__all__ = ["PASS_GRID", "CostCurve", "CostSamples", "machine_profile", "measure_cost_curve",
           "save_costs"]


def machine_profile(load: Any) -> tuple[Path, CostProfile | None]:
    """Where this machine's cost profile for these load options lives, and what it holds."""
    from specgguf.auto.profile import load_profile, profile_path

    path = profile_path(load)
    return path, load_profile(path)

def save_costs(path: Path, costs: CostCurve) -> None:
    """Merge what bench measured into the machine profile: `run`'s auto starts from it."""
    from specgguf.auto.profile import save_profile

    save_profile(path, costs.to_profile())

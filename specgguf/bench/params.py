"""One configuration's run as a Generator call: its spec options as `run`'s flags would set
them (each axis of specgguf.bench.axes puts its value in), its own n-gram drafters, and under
auto a fresh policy."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from specgguf.auto.profile import CostProfile
from specgguf.bench.axes import AXES
from specgguf.bench.configs import BenchConfig

if TYPE_CHECKING:  # the generator needs the runtime
    from specgguf.generator import GenParams


def gen_params(
    cfg: BenchConfig,
    base_spec: Any,
    *,
    n_predict: int,
    sampler: Any,
    seed: int,
    ignore_eos: bool,
    profile: CostProfile | None = None,
) -> GenParams:
    """The Generator call that runs `cfg` as `specgguf run` with cfg.run_flags() would: its
    spec options in full (not a per-request n_max cap: an n-gram drafter keeps its size_m),
    n-gram drafters of its own (their options and caches never shared with another
    configuration), and under auto a fresh policy seeded from `profile`, as a new `run`."""
    from specgguf.generator import GenParams
    from specgguf.spec_plan import SpecPlan

    return GenParams(
        sampler=sampler,
        n_predict=n_predict,
        seed=seed,
        ignore_eos=ignore_eos,
        plan=SpecPlan(_spec(cfg, base_spec), fresh_policy=True, profile=profile, namespace=cfg),
    )


def _spec(cfg: BenchConfig, base_spec: Any) -> Any:
    """`base_spec` (the session's SpecOptions) with `cfg`'s types and each axis' value."""
    spec = replace(base_spec, types=list(cfg.types))
    for axis in AXES:
        spec = axis.into_spec(spec, getattr(cfg, axis.field))
    return spec

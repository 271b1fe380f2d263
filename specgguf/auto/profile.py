"""The machine's cost profile: what `--spec-draft-n-max auto` measured here, kept for next time.

Whether speculation pays is mostly a property of the machine and the model pair (how much a
(k+1)-token verify pass and a draft step cost relative to a plain step), not of the prompt.
Measuring that curve costs every cold run a few deliberately wasteful probe rounds. So the
costs `auto` and `bench` measure are kept in a small JSON file per (models, load options,
machine) and seed the next run's cost model: a warm run starts knowing, for instance, that on
a 2-core CPU a 0.5B draft cannot pay even at 100% acceptance, and never probes it; on a GPU it
starts with long drafts. Acceptance is NOT kept: it depends on the text.

Costs are stored relative to one plain target step (which drifts with the context length, so
ratios travel better than milliseconds), each with the number of samples behind it. Merging
caps that weight, so a profile keeps adapting when the machine changes (a new build, another
-ngl). $SPECGGUF_PROFILES chooses the folder (default ~/.cache/specgguf/profiles);
`--no-auto-profile` neither reads nor writes it. A damaged file is ignored, never fatal.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROFILES_ENV = "SPECGGUF_PROFILES"
FORMAT = 1
#: a merged estimate never counts more than this many samples, so new measurements still move it
MAX_WEIGHT = 40.0
#: a new estimate this far (relative) from the stored one, with at least DRIFT_SAMPLES samples
#: behind it, means the machine changed (a new build, another load on it): the stored value
#: then keeps only as much weight as the new one, so the profile follows within a run or two
DRIFT = 0.35
DRIFT_SAMPLES = 8.0


def plausible_verify(k: int, rel: float) -> bool:
    """Whether a pass over 1 + k tokens can cost `rel` plain steps: not less than half a
    step (it does at least a step's work) and not more than twice k + 1 separate steps. A
    value outside comes from a disturbed measurement (a stall in the plain step it is
    relative to, or in the pass), and auto would decide on nonsense with it."""
    return math.isfinite(rel) and 0.5 <= rel <= 2.0 * (k + 1)


def plausible_draft(rel: float) -> bool:
    """Whether a draft step can cost `rel` target steps: more than nothing, and not more
    than 20 of them (a draft on the CPU next to a target on a GPU can cost several)."""
    return math.isfinite(rel) and 0.001 <= rel <= 20.0


@dataclass
class Estimate:
    """A relative cost and the (possibly fractional) number of samples behind it."""

    value: float
    weight: float

    def merged(self, other: Estimate, cap: float = MAX_WEIGHT) -> Estimate:
        mine = self.weight
        if (
            other.weight >= DRIFT_SAMPLES
            and self.value > 0
            and abs(other.value - self.value) > DRIFT * self.value
        ):
            mine = min(mine, other.weight)  # drift: the newer measurement takes over
        w = mine + other.weight
        if w <= 0:
            return Estimate(other.value, 0.0)
        v = (self.value * mine + other.value * other.weight) / w
        return Estimate(v, min(w, cap))


@dataclass
class CostProfile:
    """verify[k]: cost of a target pass over 1 + k tokens relative to a plain step (k >= 1);
    draft[name]: one draft step of that model drafter relative to a plain target step."""

    verify: dict[int, Estimate] = field(default_factory=dict)
    draft: dict[str, Estimate] = field(default_factory=dict)
    target_step_ms: float | None = None

    def merged(self, newer: CostProfile) -> CostProfile:
        out = CostProfile(dict(self.verify), dict(self.draft), newer.target_step_ms)
        if out.target_step_ms is None:
            out.target_step_ms = self.target_step_ms
        for k, e in newer.verify.items():
            out.verify[k] = out.verify[k].merged(e) if k in out.verify else e
        for name, e in newer.draft.items():
            out.draft[name] = out.draft[name].merged(e) if name in out.draft else e
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "target_step_ms": self.target_step_ms,
            "verify": {
                str(k): [round(e.value, 5), round(e.weight, 3)] for k, e in self.verify.items()
            },
            "draft": {n: [round(e.value, 5), round(e.weight, 3)] for n, e in self.draft.items()},
        }

    @classmethod
    def from_json(cls, obj: Any) -> CostProfile | None:
        """None for anything that is not a well-formed profile of this format."""
        try:
            fmt = obj.get("format")
            if type(fmt) is not int or fmt != FORMAT:
                return None
            verify = {int(k): _estimate(v) for k, v in obj.get("verify", {}).items()}
            draft = {str(n): _estimate(v) for n, v in obj.get("draft", {}).items()}
            step = obj.get("target_step_ms")
            step = float(step) if step is not None else None
            if step is not None and not (0.0 < step < 1e7):
                return None
        except (AttributeError, TypeError, ValueError, IndexError, KeyError):
            return None
        if any(k < 1 for k in verify):
            return None
        return cls(verify, draft, step)


def _estimate(v: Any) -> Estimate:
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise ValueError("an estimate is [value, weight]")
    if any(isinstance(x, (str, bool)) for x in v):
        raise ValueError("an estimate holds numbers")
    value, weight = float(v[0]), float(v[1])
    if not (0.0 <= value < 1e6) or not (0.0 <= weight <= 1e6):
        raise ValueError("out of range")
    return Estimate(value, weight)


def profiles_dir() -> Path:
    """$SPECGGUF_PROFILES, else ~/.cache/specgguf/profiles."""
    env = os.environ.get(PROFILES_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specgguf" / "profiles"


def _file_id(path: Path | None) -> list[Any]:
    if path is None:
        return [None]
    try:
        st = Path(path).stat()
        return [str(Path(path).resolve()), st.st_size, st.st_mtime_ns]
    except OSError:
        return [str(path)]


def profile_key(load: Any) -> str:
    """What the costs depend on: both model files (path, size, mtime), where and how they run
    (-ngl, -ngld, threads, flash attention, KV types, batch sizes) and the machine itself."""
    parts = [
        _file_id(load.model),
        _file_id(getattr(load, "model_draft", None)),
        [
            str(getattr(load, name, None))
            for name in (
                "n_gpu_layers",
                "n_gpu_layers_draft",
                "threads",
                "threads_draft",
                "flash_attn",
                "n_ubatch",
                "repack",
                "cache_type_k",
                "cache_type_v",
                "cache_type_k_draft",
                "cache_type_v_draft",
            )
        ],
        [platform.machine(), os.cpu_count(), platform.node()],
    ]
    # --rpc/-dev/-devd: costs over a network are another machine's; absent, keys are unchanged
    where = [getattr(load, n, None) for n in ("rpc", "device", "device_draft")]
    if any(where):
        parts.append([str(w) for w in where])
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def profile_path(load: Any) -> Path:
    return profiles_dir() / f"{profile_key(load)}.json"


def load_profile(path: Path) -> CostProfile | None:
    """The profile at `path`, or None if there is none or it cannot be read or parsed."""
    try:
        return CostProfile.from_json(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def save_profile(path: Path, profile: CostProfile) -> bool:
    """Merge `profile` into the file at `path` (written atomically). False when it could not
    be written (read-only home, full disk): a lost profile only costs the next run its probes."""
    path = Path(path)
    old = load_profile(path)
    merged = old.merged(profile) if old is not None else profile
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".profile-", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(merged.to_json(), f, indent=1)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return False
    return True

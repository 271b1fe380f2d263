"""The machine's profile: what `--spec-draft-n-max auto` measured here, kept for next time.

Whether speculation pays is mostly a property of the machine and the model pair (how much a
(k+1)-token verify pass and a draft step cost relative to a plain step, and how often the
draft model agrees with the target), not of one prompt. Measuring all of it costs every cold
run a few deliberately wasteful probe rounds. So what `auto` and `bench` measure is kept in a
small JSON file per (models, load options, machine) and seeds the next run: a warm run starts
knowing, for instance, that on a 2-core CPU a 0.5B draft cannot pay even at 100% acceptance,
and never probes it (`run` does not even load it); where the target streams its weights, it
starts drafting at once, at the acceptance the pair showed before.

Costs are stored relative to one plain target step (which drifts with the context length, so
ratios travel better than milliseconds), each with the number of samples behind it. Merging
caps that weight, so a profile keeps adapting when the machine changes (a new build), while a
run that was slower than the profile says (another process took the cores) writes its costs
with a weight that cannot flip the next run's decision.

A model drafter's acceptance is kept too (per position, for this target/draft pair, since the
file's key names both models): a run's counts are merged with the stored ones faded by
RUN_FADE, so a new kind of text takes over within a run or two; and the best acceptance a run
has shown is kept, fading slowly, so that auto keeps trying a drafter that has paid before
even after a stretch of text where it did not. N-gram drafters are measured for free by shadow
drafts in every run, so their acceptance is not kept.

$SPECGGUF_PROFILES chooses the folder (default ~/.cache/specgguf/profiles);
`--no-auto-profile` neither reads nor writes it. A damaged file is ignored, never fatal; so is
one larger than MAX_PROFILE_BYTES, or anything in its place that is not a regular file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROFILES_ENV = "SPECGGUF_PROFILES"
FORMAT = 1
#: the largest profile file read: a real one is a few KB (a few dozen estimates); a larger
#: file is damaged or was not written by specgguf, and is ignored before more is read
MAX_PROFILE_BYTES = 1 << 20
#: a merged estimate never counts more than this many samples, so new measurements still move it
MAX_WEIGHT = 40.0
#: a new estimate this far (relative) from the stored one, with at least DRIFT_SAMPLES samples
#: behind it, means the machine changed (a new build, another load on it): the stored value
#: then keeps only as much weight as the new one, so the profile follows within a run or two
DRIFT = 0.35
DRIFT_SAMPLES = 8.0
#: a run whose plain step was this much slower than the profile's was disturbed (another
#: process on the cores): its costs count DISTURBED_WEIGHT samples at most and never drift
DISTURBED = 0.35
DISTURBED_WEIGHT = 1.0
#: ... unless this many runs in a row were: then the machine itself is slower now
DISTURBED_RUNS = 3
#: a model drafter's stored acceptance counts fade by this much per run merged into it
RUN_FADE = 0.5
#: the stored acceptance never counts more than this many rounds (at position 0)
MAX_ACCEPT_WEIGHT = 48.0
#: the best acceptance shown fades by this much per run that does not show it again
BEST_FADE = 0.03
#: a run's acceptance counts as "shown" only with this many rounds behind it
MIN_SHOWN_ROUNDS = 3.0


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
class AcceptanceMemory:
    """One model drafter's acceptance on this pair: `trials[i]` rounds reached draft position
    i (every earlier proposal accepted), `hits[i]` of them were accepted there; `best`: the
    best acceptance rate (accepted / reached, over all positions) a run has shown."""

    trials: list[float]
    hits: list[float]
    best: float = 0.0

    def rate(self) -> float | None:
        """accepted / reached over all positions (None without a round behind it)."""
        t = sum(self.trials)
        return sum(self.hits) / t if t > 0 else None

    def shown(self) -> float | None:
        """The rate, if enough rounds stand behind it to say the drafter showed it."""
        rate = self.rate()
        rounds = self.trials[0] if self.trials else 0.0
        return rate if rate is not None and rounds >= MIN_SHOWN_ROUNDS else None

    def merged(self, newer: AcceptanceMemory) -> AcceptanceMemory:
        """The stored counts faded by RUN_FADE plus the newer run's, capped; `best` is the
        newer run's rate if it showed a better one, else the stored best, faded."""
        n = max(len(self.trials), len(newer.trials))
        trials = [_at(self.trials, i) * RUN_FADE + _at(newer.trials, i) for i in range(n)]
        hits = [_at(self.hits, i) * RUN_FADE + _at(newer.hits, i) for i in range(n)]
        if trials and trials[0] > MAX_ACCEPT_WEIGHT:
            f = MAX_ACCEPT_WEIGHT / trials[0]
            trials, hits = [t * f for t in trials], [h * f for h in hits]
        shown = newer.shown()
        best = max(self.best - BEST_FADE, shown if shown is not None else 0.0, newer.best)
        return AcceptanceMemory(trials, hits, max(0.0, best))

    def to_json(self) -> dict[str, Any]:
        return {
            "trials": [round(t, 3) for t in self.trials],
            "hits": [round(h, 3) for h in self.hits],
            "best": round(self.best, 4),
        }

    @classmethod
    def from_json(cls, obj: Any) -> AcceptanceMemory:
        trials = [_count(x) for x in obj["trials"]]
        hits = [_count(x) for x in obj["hits"]]
        best = float(obj.get("best", 0.0))
        if len(trials) != len(hits) or len(trials) > 1024 or not 0.0 <= best <= 1.0:
            raise ValueError("malformed acceptance")
        if any(h > t + 1e-6 for h, t in zip(hits, trials, strict=True)):
            raise ValueError("more hits than trials")
        return cls(trials, hits, best)


def _at(xs: list[float], i: int) -> float:
    return xs[i] if i < len(xs) else 0.0


def _count(x: Any) -> float:
    if isinstance(x, (str, bool)):
        raise ValueError("a count is a number")
    v = float(x)
    if not 0.0 <= v <= 1e6:
        raise ValueError("out of range")
    return v


@dataclass
class CostProfile:
    """verify[k]: cost of a target pass over 1 + k tokens relative to a plain step (k >= 1);
    draft[name]: one draft step of that model drafter relative to a plain target step;
    acceptance[name]: that model drafter's acceptance on this pair; skipped_loads[name]: runs
    in a row that did not load that drafter's model because it cannot pay here;
    disturbed_runs: runs in a row whose plain step was DISTURBED slower than this profile's."""

    verify: dict[int, Estimate] = field(default_factory=dict)
    draft: dict[str, Estimate] = field(default_factory=dict)
    target_step_ms: float | None = None
    acceptance: dict[str, AcceptanceMemory] = field(default_factory=dict)
    skipped_loads: dict[str, int] = field(default_factory=dict)
    disturbed_runs: int = 0
    #: False for what only this process's warm-up timed (specgguf.warmup), not yet a profile
    #: read from the machine's file (the report says which one seeded auto)
    stored: bool = True

    def disturbed_by(self, newer: CostProfile) -> bool:
        """Whether `newer` (one run's measurements) came from a run slower than this profile
        says a plain step takes: another process had the cores, so its relative costs are
        suspect (a stall inflates whatever it falls on)."""
        old, new = self.target_step_ms, newer.target_step_ms
        slower = old is not None and new is not None and new > old * (1.0 + DISTURBED)
        return slower and self.disturbed_runs + 1 < DISTURBED_RUNS

    def merged(self, newer: CostProfile) -> CostProfile:
        disturbed = self.disturbed_by(newer)
        timed = newer.target_step_ms is not None  # (a note of a skipped load times nothing)
        out = CostProfile(
            dict(self.verify),
            dict(self.draft),
            self.target_step_ms if disturbed else newer.target_step_ms,
            dict(self.acceptance),
            dict(self.skipped_loads),
            self.disturbed_runs + 1 if disturbed else (0 if timed else self.disturbed_runs),
        )
        if out.target_step_ms is None:
            out.target_step_ms = self.target_step_ms
        out.stored = self.stored or newer.stored
        # a disturbed run's costs: a sample's weight at most, and no drift takeover
        cap = DISTURBED_WEIGHT if disturbed else None
        for table, new in ((out.verify, newer.verify), (out.draft, newer.draft)):
            for key, e in new.items():
                if cap is not None:
                    e = Estimate(e.value, min(e.weight, cap))
                table[key] = table[key].merged(e) if key in table else e  # type: ignore[index]
        # acceptance does not depend on what else ran: a disturbed run's counts are as true
        for name, a in newer.acceptance.items():
            out.acceptance[name] = out.acceptance[name].merged(a) if name in out.acceptance else a
        for name, n in newer.skipped_loads.items():
            out.skipped_loads[name] = out.skipped_loads.get(name, 0) + n
        for name in newer.draft:  # the draft model was loaded and measured again
            out.skipped_loads.pop(name, None)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "target_step_ms": self.target_step_ms,
            "verify": {
                str(k): [round(e.value, 5), round(e.weight, 3)] for k, e in self.verify.items()
            },
            "draft": {n: [round(e.value, 5), round(e.weight, 3)] for n, e in self.draft.items()},
            "acceptance": {n: a.to_json() for n, a in self.acceptance.items()},
            "skipped_loads": dict(self.skipped_loads),
            "disturbed_runs": self.disturbed_runs,
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
            # (absent in profiles written before acceptance was kept: those still load)
            acceptance = {
                str(n): AcceptanceMemory.from_json(a) for n, a in obj.get("acceptance", {}).items()
            }
            skipped = {str(n): int(v) for n, v in obj.get("skipped_loads", {}).items()}
            disturbed = int(obj.get("disturbed_runs", 0))
            if any(v < 0 for v in skipped.values()) or disturbed < 0:
                return None
        except (AttributeError, TypeError, ValueError, IndexError, KeyError, OverflowError):
            return None
        if any(k < 1 for k in verify):
            return None
        return cls(verify, draft, step, acceptance, skipped, disturbed)


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
    """The profile at `path`, or None if there is none or it cannot be read or parsed.

    The file is in the user's cache, but nothing vouches for what is there: it is opened
    without waiting (a FIFO in its place would block the open for ever), read only if it is a
    regular file, and at most MAX_PROFILE_BYTES of it; JSON nested deeper than Python's
    parser recurses is a damaged file like any other."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            data = f.read(MAX_PROFILE_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_PROFILE_BYTES:
        return None
    try:
        return CostProfile.from_json(json.loads(data.decode("utf-8")))
    except (ValueError, RecursionError):
        return None


def note_skipped_load(path: Path, name: str) -> bool:
    """Count one more run that did not load `name`'s model because it cannot pay here."""
    return save_profile(path, CostProfile(skipped_loads={name: 1}))


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

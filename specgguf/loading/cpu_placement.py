"""The process's CPU placement from the flag table's "process" settings (-C, -Cr, --cpu-strict,
--prio, --poll, their batch and draft forms, --numa), applied once before llama.cpp is loaded.

Why process-wide: llama-cpp-python binds no llama.cpp thread pool (llama_attach_threadpool),
and this build of llama.cpp's CPU backend computes with an OpenMP team. So the CPUs are the
process's affinity (every thread now; OpenMP's threads, made later, inherit it), the priority
is the nice value of every thread, and strict placement and polling are OpenMP's environment
(OMP_PROC_BIND/OMP_PLACES, OMP_WAIT_POLICY/GOMP_SPINCOUNT), which libgomp reads when it is
loaded: with llama.cpp, so they must be set before that."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Mapping

from specgguf.errors import UsageError
from specgguf.loading.tuning import Overrides

#: GOMP_SPINCOUNT per llama.cpp polling level: --poll 50 (llama.cpp's default) is libgomp's
#: default spin count, 300000
SPINS_PER_POLL_LEVEL = 6000


def _threads() -> list[int]:
    """The ids of this process's threads (Linux: /proc/self/task), this one if unreadable."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def openmp_environment(settings: Mapping[str, object]) -> dict[str, str]:
    """The OpenMP variables that --cpu-strict and --poll stand for."""
    env: dict[str, str] = {}
    if settings.get("cpu_strict"):
        cpus = settings.get("cpus")
        env["OMP_PROC_BIND"] = "close"
        env["OMP_PLACES"] = ",".join(f"{{{c}}}" for c in sorted(cpus)) if cpus else "cores"
    poll = settings.get("poll")
    if poll is not None:
        if poll == 0:
            env["OMP_WAIT_POLICY"] = "passive"
        else:
            env["GOMP_SPINCOUNT"] = str(int(poll) * SPINS_PER_POLL_LEVEL)
    return env


def apply(process: Overrides, warn: Callable[[str], None] | None = None) -> None:
    """Place the process as `process` (LlamaTuning.process) says. A CPU set the machine does
    not have is refused in one line; a priority the process may not raise is a warning (as in
    llama.cpp); OpenMP's variables set after llama.cpp was loaded are a warning too (they
    would have no effect). --numa's strategy goes to llama_numa_init, before any model loads."""
    settings = dict(process)
    say = warn or (lambda line: print(line, file=sys.stderr))
    cpus = settings.get("cpus")
    if cpus:
        _pin(cpus)
    nice = settings.get("nice")
    if nice is not None and nice != 0:
        _renice(int(nice), say)
    env = openmp_environment(settings)
    if env and "llama_cpp" in sys.modules:
        say("warning: --cpu-strict/--poll set OpenMP's environment, which llama.cpp read when it "
            "was loaded earlier in this process: they take effect in a new process")
    os.environ.update(env)
    if settings.get("numa") is not None:
        from specgguf.binding import engine

        engine.numa_init(int(settings["numa"]))


def _pin(cpus: Iterable[int]) -> None:
    wanted = set(cpus)
    usable = wanted & set(range(os.cpu_count() or 1))
    if not usable:
        raise UsageError(f"CPU placement: none of CPUs {_listed(wanted)} exists here "
                         f"(this machine has {os.cpu_count()})")  # fmt: skip
    for tid in _threads():
        try:
            os.sched_setaffinity(tid, usable)
        except OSError as e:  # a thread that ended meanwhile is nothing to place
            if tid in (0, os.getpid()):
                raise UsageError(f"CPU placement on CPUs {_listed(usable)} failed: "
                                 f"{e.strerror}") from None


def _renice(nice: int, say: Callable[[str], None]) -> None:
    for tid in _threads():
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        except PermissionError:
            say(f"warning: failed to set process priority (nice {nice}): not permitted")
            return
        except OSError:  # a thread that ended meanwhile
            continue


def _listed(cpus: Iterable[int]) -> str:
    ordered = sorted(cpus)
    return ",".join(map(str, ordered[:8])) + ("..." if len(ordered) > 8 else "")

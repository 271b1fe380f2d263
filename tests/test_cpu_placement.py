"""-C/-Cr/--cpu-strict/--prio/--poll/--numa place the process (specgguf.loading.cpu_placement):
checked in a child process, so this one keeps its CPUs, priority and environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specgguf.errors import UsageError
from specgguf.loading.cpu_placement import apply, openmp_environment

CHILD = """
import json, os, sys, threading
from specgguf.loading.cpu_placement import apply
ready, stop = threading.Event(), threading.Event()
t = threading.Thread(target=lambda: (ready.set(), stop.wait()))
t.start(); ready.wait()  # a thread that exists before the placement is placed too
apply((("cpus", frozenset({0})), ("nice", 5)))
after = []
t2 = threading.Thread(target=lambda: after.append(sorted(os.sched_getaffinity(0))))
t2.start(); t2.join()
print(json.dumps({"main": sorted(os.sched_getaffinity(0)), "new": after[0],
                  "old": sorted(os.sched_getaffinity(t.native_id)),
                  "nice": os.getpriority(os.PRIO_PROCESS, t.native_id)}))
stop.set()
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux affinity")
def test_every_thread_is_placed_and_new_ones_inherit() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         check=True, timeout=60)  # fmt: skip
    got = json.loads(out.stdout)
    assert got["main"] == got["new"] == got["old"] == [0]
    assert got["nice"] >= 5  # --prio -1: nice 5 (more if the tests run niced already)


def test_openmp_environment_for_strict_and_poll() -> None:
    assert openmp_environment({"cpu_strict": True, "cpus": frozenset({2, 0})}) == {
        "OMP_PROC_BIND": "close", "OMP_PLACES": "{0},{2}"}
    assert openmp_environment({"cpu_strict": True})["OMP_PLACES"] == "cores"
    assert openmp_environment({"poll": 0}) == {"OMP_WAIT_POLICY": "passive"}
    assert openmp_environment({"poll": 50}) == {"GOMP_SPINCOUNT": "300000"}  # libgomp's default
    assert openmp_environment({"cpu_strict": False}) == {}


def test_cpus_the_machine_lacks_are_one_line() -> None:
    with pytest.raises(UsageError, match="none of CPUs 511 exists here"):
        apply((("cpus", frozenset({511})),))


def test_openmp_variables_after_llama_cpp_loaded_warn(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", sys)  # as if loaded
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        monkeypatch.delenv(name, raising=False)
    said: list[str] = []
    apply((("poll", 0),), warn=said.append)
    assert said and "take effect in a new process" in said[0]
    assert os.environ["OMP_WAIT_POLICY"] == "passive"


def test_numa_reaches_llama_numa_init(monkeypatch) -> None:
    pytest.importorskip("llama_cpp")
    from specgguf.binding import engine

    seen = []
    monkeypatch.setattr(engine.ll, "llama_numa_init", seen.append)
    apply((("numa", 1),))
    assert seen == [1]


def test_run_places_the_process_before_loading(monkeypatch, tmp_path) -> None:
    """The command line's placement reaches apply() before the session is made."""
    pytest.importorskip("llama_cpp")
    from specgguf_cli import options as o
    from specgguf_cli.app import run_cli

    from specgguf.loading import cpu_placement, session

    order: list = []
    monkeypatch.setattr(cpu_placement, "apply", lambda process: order.append(dict(process)))

    def no_session(*a, **k):
        order.append("session")
        raise UsageError("stop")

    monkeypatch.setattr(session, "Session", no_session)
    monkeypatch.setattr(o, "resolve_models", lambda m, d: (tmp_path / "t.gguf", None))
    argv = ["run", "-p", "x", "--spec-type", "none", "-q", "-Cr", "0-0", "--poll", "0"]
    assert run_cli(argv) == 1
    assert order == [{"cpus": frozenset({0}), "poll": 0}, "session"]

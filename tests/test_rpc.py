"""ggml RPC: workers on 127.0.0.1 started here, the target split across them and the local CPU.

What would fail if the feature broke: the split run's greedy text must equal the local-only
run's (plain and speculative), the placement must name both workers and the CPU, a worker
killed mid-generation must end the client in one line with ExitCode.RPC (not a hang, not a
SIGABRT), an unreachable worker and a worker of another protocol version must be one line
each, and `rpc-server` must refuse 0.0.0.0 without --allow-remote.

Tests that need ggml's RPC backend skip (with the reason) when the installed
llama-cpp-python was built without it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specgguf.binding import devices
from specgguf.errors import ExitCode
from specgguf.errors import UsageError as SpecUsageError
from tests.test_interrupt import read_until
from tests.tiny_models import TARGET_SEED, build_tiny_model

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 60


def _rpc_available() -> tuple[bool, str]:
    try:
        ok = devices.rpc_supported()
    except Exception as e:  # noqa: BLE001 - any failure means: cannot test here
        return False, f"llama-cpp-python unavailable ({e})"
    return ok, "the installed llama-cpp-python was built without GGML_RPC (run scripts/setup.sh)"


_RPC_OK, _RPC_WHY = _rpc_available()
needs_rpc = pytest.mark.skipif(not _RPC_OK, reason=_RPC_WHY)


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    e["SPECGGUF_RPC_TIMEOUT"] = "5"
    return e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(*argv: str, timeout: float = WAIT_S) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specgguf_cli.app", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env(),
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


class Worker:
    """`specgguf rpc-server` on 127.0.0.1:port, one thread, as a child process."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specgguf_cli.app", "rpc-server", "--port", str(self.port),
             "-t", "1"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=env(),
        )  # fmt: skip
        deadline = time.monotonic() + WAIT_S
        while True:
            assert self.proc.poll() is None, self.proc.stderr.read().decode()
            try:
                devices.probe(self.endpoint, timeout=2)
                break
            except devices.RpcError:
                assert time.monotonic() < deadline, "rpc-server did not start listening"
                time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT_S)


@pytest.fixture(scope="module")
def workers():
    if not _RPC_OK:
        pytest.skip(_RPC_WHY)
    ws = [Worker(), Worker()]
    yield ws
    for w in ws:
        w.stop()


@pytest.fixture(scope="module")
def six_layers(tiny_models_dir):
    """Six layers, so that -ngl 5 leaves layers 0-1 on the CPU and splits 2-5 + output over
    the two workers (llama.cpp splits offloaded layers by the devices' free memory)."""
    return build_tiny_model(
        tiny_models_dir / "six.gguf", seed=TARGET_SEED, n_layer=6, n_ctx_train=8192
    )


@pytest.fixture(scope="module")
def six_layers_draft(tiny_models_dir):
    return build_tiny_model(
        tiny_models_dir / "six_draft.gguf",
        seed=7,
        perturb_from_seed=TARGET_SEED,
        perturb_scale=0.12,
        n_layer=6,
        n_ctx_train=8192,
    )


GREEDY = ["-n", "40", "--temp", "0", "-t", "1", "-c", "256", "-fa", "off", "-p", "hello there",
          "--json"]  # fmt: skip


def run_json(*argv: str) -> dict:
    r = cli("run", *argv)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# -- the split run equals the local one --------------------------------------------------------


@needs_rpc
def test_target_split_over_two_workers_and_cpu_matches_local_plain(workers, six_layers):
    local = run_json("-m", str(six_layers), "--spec-type", "none", *GREEDY)
    rpc = ",".join(w.endpoint for w in workers)
    split = run_json("-m", str(six_layers), "--spec-type", "none", *GREEDY, "--rpc", rpc,
                     "-ngl", "5")  # fmt: skip
    assert split["text"] == local["text"]
    assert len(local["text"]) >= 20
    placed = split["placement"]["target"]["layers"]
    assert placed.get("CPU") == "0-1", placed
    assert set(placed) == {"CPU", "RPC0", "RPC1"}, placed
    assert "placement" not in local  # local-only runs print nothing new


@needs_rpc
def test_split_with_speculation_matches_local_plain(workers, six_layers, six_layers_draft):
    local = run_json("-m", str(six_layers), "--spec-type", "none", *GREEDY)
    rpc = ",".join(w.endpoint for w in workers)
    r = cli("run", "-m", str(six_layers), "-md", str(six_layers_draft), "--spec-draft-n-max",
            "3", *GREEDY, "--rpc", rpc, "-ngl", "5", "-ngld", "99", "-devd", "RPC1")  # fmt: skip
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)
    assert spec["text"] == local["text"]
    assert spec["placement"]["draft"]["layers"] == {"RPC1": "0-5"}
    assert spec["placement"]["draft"]["output"] == "RPC1"
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("rpc: ")]
    assert len(line) == 1 and "target: layers 0-1 on CPU" in line[0], r.stderr


@needs_rpc
def test_check_predicts_the_placement_run_reports(workers, six_layers, six_layers_draft):
    rpc = ",".join(w.endpoint for w in workers)
    flags = ["--rpc", rpc, "-ngl", "5", "-ngld", "99", "-devd", "RPC1"]
    r = cli("check", "-m", str(six_layers), "-md", str(six_layers_draft), "--json", *flags)
    assert r.returncode == 0, r.stderr
    predicted = json.loads(r.stdout)["rpc"]["placement"]
    r = cli("run", "-m", str(six_layers), "-md", str(six_layers_draft), "--spec-draft-n-max",
            "3", *GREEDY, *flags)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert predicted == json.loads(r.stdout)["placement"]
    r = cli("check", "-m", str(six_layers), *flags)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("rpc: 2 worker(s) ")


@needs_rpc
def test_list_devices_names_the_workers(workers):
    r = cli("run", "--list-devices", "--rpc", workers[0].endpoint)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Available devices:")
    assert f"RPC0: {workers[0].endpoint}" in r.stdout
    r = cli("run", "--list-devices")
    assert r.returncode == 0 and "RPC" not in r.stdout  # negative control: no --rpc, no RPC0


@needs_rpc
def test_unknown_device_is_one_line(workers, six_layers):
    r = cli("run", "-m", str(six_layers), *GREEDY, "--rpc", workers[0].endpoint, "-dev", "RPC7")
    assert r.returncode == ExitCode.USAGE
    assert r.stderr.strip() == "error: -dev: invalid device: RPC7 (see --list-devices)"


# -- failures: unreachable, other version, killed mid-generation -------------------------------


@needs_rpc
def test_unreachable_worker_is_one_line_and_exit_code(six_layers):
    port = free_port()  # nothing listens there
    r = cli("run", "-m", str(six_layers), *GREEDY, "--rpc", f"127.0.0.1:{port}", timeout=30)
    assert r.returncode == ExitCode.RPC, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot connect" in lines[0], r.stderr


class FakeWorker:
    """Answers ggml's HELLO with another protocol version (or hangs up), once per connection."""

    def __init__(self, version: tuple[int, int, int] | None) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.version = version
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(1 + 8 + 24)
                if self.version is not None:
                    conn.sendall(struct.pack("<Q", 28) + bytes(self.version) + bytes(25))

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize(
    ("version", "expected"),
    [((6, 0, 0), "speaks ggml RPC protocol 6.0.0, this client 7.0.0"),
     ((7, 1, 0), "speaks ggml RPC protocol 7.1.0"),
     (None, "closed the connection at the handshake")],
)  # fmt: skip
def test_probe_reports_another_version_in_one_line(version, expected):
    fake = FakeWorker(version)
    try:
        with pytest.raises(devices.RpcError) as e:
            devices.probe(fake.endpoint, timeout=5)
        assert expected in str(e.value)
        assert e.value.code == ExitCode.RPC
    finally:
        fake.close()


def test_probe_accepts_the_same_version():  # negative control for the test above
    fake = FakeWorker(devices.RPC_PROTO)
    try:
        assert devices.probe(fake.endpoint, timeout=5) == devices.RPC_PROTO
    finally:
        fake.close()


@needs_rpc
def test_version_mismatch_ends_the_run_in_one_line(six_layers):
    fake = FakeWorker((6, 0, 0))
    try:
        r = cli("run", "-m", str(six_layers), *GREEDY, "--rpc", fake.endpoint, timeout=30)
    finally:
        fake.close()
    assert r.returncode == ExitCode.RPC
    assert r.stderr.strip().splitlines() == [
        f"error: RPC worker {fake.endpoint} speaks ggml RPC protocol 6.0.0, this client 7.0.0: "
        "run the same ggml version on both (e.g. `specgguf rpc-server` from this install)"
    ]


@needs_rpc
@pytest.mark.parametrize("spec", [False, True], ids=["plain", "speculative"])
def test_worker_killed_mid_generation_ends_client_cleanly(six_layers, six_layers_draft, spec):
    w = [Worker(), Worker()]
    try:
        argv = ["run", "-m", str(six_layers), "--rpc", ",".join(x.endpoint for x in w),
                "-ngl", "99", "-t", "1", "-c", "8192", "-fa", "off", "--ignore-eos",
                "-n", "8000", "--temp", "0", "-p", "hello"]  # fmt: skip
        argv += ["-md", str(six_layers_draft), "--spec-draft-n-max", "3"] if spec else []
        proc = subprocess.Popen(
            [sys.executable, "-m", "specgguf_cli.app", *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=env(),
        )
        try:
            before = read_until(proc, 20)
            w[1].proc.send_signal(signal.SIGKILL)
            out, err = proc.communicate(timeout=WAIT_S)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        err_s = err.decode("utf-8", "replace")
        assert proc.returncode == ExitCode.RPC, (proc.returncode, err_s[-2000:])
        lines = [ln for ln in err_s.splitlines() if ln.startswith("error")]
        assert len(lines) == 1 and lines[0].startswith("error: RPC worker lost"), err_s
        assert "Traceback" not in err_s
        text = before + out
        assert len(text) > len(before) or len(text) >= 20  # what was streamed is kept
    finally:
        for x in w:
            x.stop()


# -- rpc-server: loopback only unless asked ------------------------------------------------------


def test_rpc_server_refuses_0000_without_allow_remote():
    r = cli("rpc-server", "--host", "0.0.0.0", "--port", str(free_port()), timeout=30)
    assert r.returncode == ExitCode.USAGE
    assert r.stderr.strip().splitlines() == [
        "error: rpc-server: refusing to listen on 0.0.0.0: ggml RPC has no authentication, "
        "anyone who can reach the port can use this machine; pass --allow-remote on a trusted "
        "network only"
    ]


def test_listen_host_rule():
    for ok in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        devices.check_listen_host(ok, allow_remote=False)
    for bad in ("0.0.0.0", "::", "192.168.1.5", "example.org"):
        with pytest.raises(SpecUsageError):
            devices.check_listen_host(bad, allow_remote=False)
        devices.check_listen_host(bad, allow_remote=True)  # the explicit flag lets it through


@needs_rpc
def test_rpc_server_port_in_use_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = cli("rpc-server", "--port", str(port), timeout=30)
    assert r.returncode == ExitCode.RPC
    assert r.stderr.strip().startswith(f"error: rpc-server: cannot listen on 127.0.0.1:{port}")


def test_endpoint_parsing():
    assert devices.parse_endpoints("127.0.0.1:1,localhost:2, 127.0.0.1:1") == [
        "127.0.0.1:1",
        "localhost:2",
    ]
    assert devices.parse_endpoints("[::1]:50052") == ["[::1]:50052"]
    for bad in ("", "host", "host:0", "host:x", "a:1:2"):
        with pytest.raises(SpecUsageError):
            devices.parse_endpoints(bad)


def test_placement_text():
    rec = devices.PlacementRecorder()
    for il, dev in ((0, "CPU"), (1, "CPU"), (2, "RPC0"), (3, "RPC0"), (4, "RPC1"), (5, "RPC1")):
        rec(f"load_tensors: layer {il:3d} assigned to device {dev}, is_swa = 0\n".encode())
    p = devices.Placement(rec.layers, {"RPC0": "127.0.0.1:1", "CPU": "CPU"})
    assert p.describe() == (
        "layers 0-1 on CPU, layers 2-3 on RPC0 (127.0.0.1:1), layer 4 on RPC1, output on RPC1"
    )
    assert p.as_dict() == {"layers": {"CPU": "0-1", "RPC0": "2-3", "RPC1": "4"}, "output": "RPC1"}
    assert devices.compact_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


# -- interoperability with llama.cpp's own rpc-server ------------------------------------------


@needs_rpc
def test_llama_cpp_rpc_server_interoperates(six_layers):
    exe = os.environ.get("SPECGGUF_LLAMA_RPC_SERVER") or shutil.which("rpc-server")
    if not exe:
        pytest.skip("no llama.cpp rpc-server here (set $SPECGGUF_LLAMA_RPC_SERVER to one built "
                    "from the same ggml)")  # fmt: skip
    port = free_port()
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                devices.probe(f"127.0.0.1:{port}", timeout=2)
                break
            except devices.RpcError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        local = run_json("-m", str(six_layers), "--spec-type", "none", *GREEDY)
        split = run_json("-m", str(six_layers), "--spec-type", "none", *GREEDY,
                         "--rpc", f"127.0.0.1:{port}", "-ngl", "99")  # fmt: skip
        assert split["text"] == local["text"]
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(_RPC_OK, reason="this llama-cpp-python has the RPC backend")
def test_without_rpc_backend_is_one_line(tiny_target):
    r = cli("run", "-m", str(tiny_target), *GREEDY, "--rpc", "127.0.0.1:9", timeout=30)
    assert r.returncode == ExitCode.RPC
    assert r.stderr.strip().splitlines() == [
        "error: this llama-cpp-python was built without ggml's RPC backend: rebuild it with "
        "bash scripts/setup.sh (it builds with -DGGML_RPC=ON)"
    ]

"""ggml devices beyond the local CPU: RPC workers (`--rpc`), device lists (`-dev`, `-devd`),
`--list-devices`, and ggml's own RPC server for `specgguf rpc-server`.

Why ctypes on libggml: llama-cpp-python 0.3.36 wraps none of ggml's backend registry. We
reach the RPC backend exactly as llama.cpp's command line does: look the "RPC" registry entry
up by name and ask it for `ggml_backend_rpc_add_server` / `ggml_backend_rpc_start_server`.
A wheel built without GGML_RPC simply has no such entry, which we report in one line.

Why a handshake of our own before handing an endpoint to ggml: ggml aborts the process when
it cannot connect or the worker speaks another protocol. Probing first (bounded by a
timeout) turns "unreachable", "busy" and "version mismatch" into one line and an exit code;
for a worker that dies later, mid-generation, an abort hook does the same (see
`_install_abort_hook`).
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import re
import socket
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specgguf.errors import ExitCode, SpecggufError, UsageError

#: the ggml RPC protocol of the vendored ggml in llama-cpp-python 0.3.36 (ggml-rpc.h)
RPC_PROTO = (7, 0, 0)
_RPC_CMD_HELLO = 14
_CONN_CAPS = 24  # bytes of transport capabilities in HELLO (ggml-rpc transport.h)
DEFAULT_PORT = 50052
#: how long connecting to a worker and its handshake may take ($SPECGGUF_RPC_TIMEOUT, seconds)
DEFAULT_TIMEOUT_S = 10.0

_DEV_TYPES = ("CPU", "GPU", "IGPU", "ACCEL", "META")


class RpcError(SpecggufError):
    """An RPC worker is unreachable, busy, died, or speaks another protocol version."""

    exit_code = ExitCode.RPC


# -- pure parts ----------------------------------------------------------------------------


def parse_endpoints(value: str, flag: str = "--rpc") -> list[str]:
    """`HOST:PORT[,HOST:PORT...]` as llama.cpp takes it; [v6]:port is accepted too."""
    out: list[str] = []
    for raw in value.split(","):
        ep = raw.strip()
        if not ep:
            continue
        host, port = split_endpoint(ep, flag)
        out.append(f"{host}:{port}" if ":" not in host else f"[{host}]:{port}")
    if not out:
        raise UsageError(f"{flag}: no RPC servers specified (expected HOST:PORT[,HOST:PORT...])")
    return list(dict.fromkeys(out))


def split_endpoint(ep: str, flag: str = "--rpc") -> tuple[str, int]:
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|([^:\s\[\]]+):(\d+)", ep)
    if not m:
        raise UsageError(f"{flag}: {ep!r} is not HOST:PORT")
    host = m.group(1) or m.group(3)
    port = int(m.group(2) or m.group(4))
    if not 0 < port < 65536:
        raise UsageError(f"{flag}: port {port} out of range in {ep!r}")
    return host, port


def is_loopback(host: str) -> bool:
    """True when `host` can only be reached from this machine; names other than localhost
    count as remote (they may resolve anywhere)."""
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_listen_host(host: str, allow_remote: bool) -> None:
    """ggml RPC has no authentication: anyone who reaches the port can allocate memory and
    run graphs on the worker. Only loopback unless the user says otherwise."""
    if allow_remote or is_loopback(host):
        return
    raise UsageError(
        f"rpc-server: refusing to listen on {host}: ggml RPC has no authentication, anyone "
        "who can reach the port can use this machine; pass --allow-remote on a trusted "
        "network only"
    )


def compact_ranges(layers: list[int]) -> str:
    """[0,1,2,5,6] -> "0-2,5-6" (the layers are sorted)."""
    parts: list[str] = []
    start = prev = None
    for i in layers:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            parts.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = prev = i
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(parts)


_LAYER_RE = re.compile(rb"layer\s+(\d+) assigned to device ([^,\s]+)")


@dataclass
class Placement:
    """Where llama.cpp put one model's layers: read from its own load log, so it is what
    happened, not a prediction. `output` is the output layer (index n_layer)."""

    layers: dict[int, str]
    descriptions: dict[str, str]

    def describe(self) -> str:
        if not self.layers:
            return "unknown"
        n_out = max(self.layers)
        by_dev: dict[str, list[int]] = {}
        for il in sorted(self.layers):
            if il != n_out:
                by_dev.setdefault(self.layers[il], []).append(il)
        parts = []
        for dev, ls in by_dev.items():
            desc = self.descriptions.get(dev)
            where = f"{dev} ({desc})" if desc and dev != "CPU" else dev
            noun = "layer" if len(ls) == 1 else "layers"
            parts.append(f"{noun} {compact_ranges(ls)} on {where}")
        parts.append(f"output on {self.layers[n_out]}")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, object]:
        by_dev: dict[str, list[int]] = {}
        n_out = max(self.layers) if self.layers else -1
        for il in sorted(self.layers):
            if il != n_out:
                by_dev.setdefault(self.layers[il], []).append(il)
        return {
            "layers": {d: compact_ranges(ls) for d, ls in by_dev.items()},
            "output": self.layers.get(n_out),
        }


class PlacementRecorder:
    """Collects llama.cpp's "layer N assigned to device X" debug lines during one load."""

    def __init__(self) -> None:
        self.layers: dict[int, str] = {}

    def __call__(self, text: bytes) -> None:
        m = _LAYER_RE.search(text)
        if m:
            self.layers[int(m.group(1))] = m.group(2).decode("utf-8", "replace")

    def placement(self) -> Placement:
        descs = {d.name: d.description for d in list_devices()} if self.layers else {}
        return Placement(dict(self.layers), descs)


# -- ggml through ctypes -------------------------------------------------------------------

_lib: ctypes.CDLL | None = None


def _llama_path() -> str:
    """The libllama file this process loaded. Symbols are looked up through ITS handle, so
    they resolve in the libggml that libllama links against. Opening a libggml file directly
    is not the same: a wheel ships libggml.so and libggml.so.0 as separate copies, and the
    other one would be a second ggml with a registry of its own (RPC servers registered
    there would be invisible to llama.cpp)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                base = os.path.basename(path)
                if base == "libllama.so" or base.startswith("libllama.so."):
                    return path
    except OSError:  # pragma: no cover - not Linux
        pass
    import llama_cpp  # pragma: no cover - the copy next to the bindings

    return str(Path(llama_cpp.__file__).parent / "lib" / "libllama.so")  # pragma: no cover


def ggml() -> ctypes.CDLL:
    """ggml's API as libllama sees it, with the signatures we use."""
    global _lib
    if _lib is not None:
        return _lib
    from specgguf.binding import engine
    engine.init_backend(engine._verbose)  # loads libllama, hence libggml
    path = _llama_path()
    lib = ctypes.CDLL(path)
    vp, sz, cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
    for name, args, res in (
        ("ggml_backend_load_all", [], None),
        ("ggml_backend_reg_by_name", [cp], vp),
        ("ggml_backend_reg_get_proc_address", [vp, cp], vp),
        ("ggml_backend_register", [vp], None),
        ("ggml_backend_dev_count", [], sz),
        ("ggml_backend_dev_get", [sz], vp),
        ("ggml_backend_dev_by_name", [cp], vp),
        ("ggml_backend_dev_by_type", [ctypes.c_int], vp),
        ("ggml_backend_dev_name", [vp], cp),
        ("ggml_backend_dev_description", [vp], cp),
        ("ggml_backend_dev_type", [vp], ctypes.c_int),
        ("ggml_backend_dev_memory", [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)], None),
        ("ggml_set_abort_callback", [vp], vp),
    ):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    _lib = lib
    return lib


def rpc_supported() -> bool:
    return bool(ggml().ggml_backend_reg_by_name(b"RPC"))


def _rpc_proc(name: str) -> int:
    lib = ggml()
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise RpcError(
            "this llama-cpp-python was built without ggml's RPC backend: rebuild it with "
            "bash scripts/setup.sh (it builds with -DGGML_RPC=ON)"
        )
    fn = lib.ggml_backend_reg_get_proc_address(reg, name.encode())
    if not fn:  # pragma: no cover - an RPC backend of another shape
        raise RpcError(f"ggml's RPC backend has no {name}")
    return fn


@dataclass
class DeviceInfo:
    name: str
    description: str
    type: str
    total: int
    free: int


def list_devices(*, memory: bool = False) -> list[DeviceInfo]:
    """ggml's devices, CPU included (llama.cpp's --list-devices leaves the CPU out)."""
    lib = ggml()
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        if memory:
            lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        t = lib.ggml_backend_dev_type(dev)
        out.append(
            DeviceInfo(
                (lib.ggml_backend_dev_name(dev) or b"?").decode(),
                (lib.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace"),
                _DEV_TYPES[t] if 0 <= t < len(_DEV_TYPES) else str(t),
                total.value,
                free.value,
            )
        )
    return out


def format_device_list() -> str:
    """llama.cpp's --list-devices text."""
    mib = 1024 * 1024
    devs = [d for d in list_devices(memory=True) if d.type != "CPU"]
    lines = ["Available devices:"]
    if not devs:
        lines.append("  (none)")
    for d in devs:
        lines.append(
            f"  {d.name}: {d.description} ({d.total // mib} MiB, {d.free // mib} MiB free)"
        )
    return "\n".join(lines)


def parse_device_list(value: str | None, flag: str = "-dev") -> list[int] | None:
    """`-dev`/`-devd` as llama.cpp: None (flag not given) lets llama.cpp use every device;
    "none" offloads nothing; otherwise each name must be a non-CPU device (see
    --list-devices). Returns ggml_backend_dev_t pointers."""
    if value is None:
        return None
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise UsageError(f"{flag}: no devices specified")
    if names == ["none"]:
        return []
    lib = ggml()
    out = []
    for n in names:
        dev = lib.ggml_backend_dev_by_name(n.encode())
        if not dev or lib.ggml_backend_dev_type(dev) == 0:
            raise UsageError(f"{flag}: invalid device: {n} (see --list-devices)")
        out.append(dev)
    return out


# -- RPC client ----------------------------------------------------------------------------


def timeout_s() -> float:
    try:
        t = float(os.environ.get("SPECGGUF_RPC_TIMEOUT", DEFAULT_TIMEOUT_S))
    except ValueError:
        t = DEFAULT_TIMEOUT_S
    return t if t > 0 else DEFAULT_TIMEOUT_S


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def probe(endpoint: str, timeout: float | None = None) -> tuple[int, int, int]:
    """Connect to a worker and run ggml's HELLO handshake, bounded by `timeout`; returns the
    worker's protocol version or raises RpcError with the one line to print."""
    t = timeout_s() if timeout is None else timeout
    host, port = split_endpoint(endpoint)
    mine = ".".join(map(str, RPC_PROTO))
    try:
        sock = socket.create_connection((host, port), timeout=t)
    except TimeoutError:
        raise RpcError(f"RPC worker {endpoint}: no answer within {t:g} s") from None
    except OSError as e:
        raise RpcError(f"RPC worker {endpoint}: cannot connect ({e.strerror or e})") from None
    with sock:
        sock.settimeout(t)
        try:
            hello = bytes([_RPC_CMD_HELLO]) + struct.pack("<Q", _CONN_CAPS) + bytes(_CONN_CAPS)
            sock.sendall(hello)
            head = _recv_exact(sock, 8)
            size = struct.unpack("<Q", head)[0] if head else 0
            body = _recv_exact(sock, min(size, 64)) if size else None
        except TimeoutError:
            raise RpcError(
                f"RPC worker {endpoint}: no handshake within {t:g} s (a ggml RPC server serves "
                "one client at a time: is another one using it?)"
            ) from None
        except OSError as e:
            raise RpcError(f"RPC worker {endpoint}: handshake failed ({e.strerror or e})") from None
    if not body or len(body) < 3:
        raise RpcError(
            f"RPC worker {endpoint} closed the connection at the handshake: not a ggml RPC "
            f"server, or one speaking another protocol than this client's {mine}"
        )
    version = (body[0], body[1], body[2])
    if version[0] != RPC_PROTO[0] or version[1] > RPC_PROTO[1] or size != 4 + _CONN_CAPS:
        theirs = ".".join(map(str, version))
        raise RpcError(
            f"RPC worker {endpoint} speaks ggml RPC protocol {theirs}, this client {mine}: run "
            "the same ggml version on both (e.g. `specgguf rpc-server` from this install)"
        )
    return version


_registered: dict[str, int] = {}
_abort_hook = None


def _install_abort_hook() -> None:
    """ggml aborts the process when a worker's connection breaks mid-generation (there is no
    error path back to llama_decode). This hook runs first: it keeps what was already
    printed (stdout is flushed), says one line, and exits with ExitCode.RPC. Aborts that are
    not RPC failures keep ggml's behaviour (the message, then abort)."""
    global _abort_hook
    if _abort_hook is not None:
        return

    @ctypes.CFUNCTYPE(None, ctypes.c_char_p)
    def _on_abort(message: bytes) -> None:
        text = (message or b"").decode("utf-8", "replace").strip()
        where, _, what = text.partition(": ")
        with contextlib.suppress(Exception):  # a closed pipe must not hide the line below
            sys.stdout.flush()
        if "ggml-rpc" in where:
            ep = ", ".join(_registered) or "?"
            os.write(2, f"error: RPC worker lost ({ep}): {what or text}\n".encode())
            os._exit(int(ExitCode.RPC))
        os.write(2, (text + "\n").encode())
        os.abort()

    _abort_hook = _on_abort
    ggml().ggml_set_abort_callback(ctypes.cast(_on_abort, ctypes.c_void_p))


def add_rpc_servers(value: str) -> list[str]:
    """Register each worker as ggml devices (RPC0, RPC1, ...), as llama.cpp's --rpc does;
    idempotent per endpoint within a process."""
    endpoints = parse_endpoints(value)
    add = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(
        _rpc_proc("ggml_backend_rpc_add_server")
    )
    lib = ggml()
    for ep in endpoints:
        if ep in _registered:
            continue
        probe(ep)
        _install_abort_hook()
        _registered[ep] = 0  # named in the abort line from here on
        reg = add(ep.encode())
        if not reg:
            del _registered[ep]
            raise RpcError(f"RPC worker {ep} offers no device")
        lib.ggml_backend_register(reg)
        _registered[ep] = reg
    return endpoints


def registered_servers() -> list[str]:
    return list(_registered)


# -- RPC server ----------------------------------------------------------------------------


def start_server(host: str, port: int, threads: int, cache_dir: Path | None) -> Callable[[], None]:
    """Prepare ggml's RPC server on this machine's CPU; the returned call blocks serving
    clients (one at a time) and returns only if the server cannot continue."""
    start = ctypes.CFUNCTYPE(
        None,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_void_p),
    )(_rpc_proc("ggml_backend_rpc_start_server"))
    cpu = ggml().ggml_backend_dev_by_type(0)
    if not cpu:  # pragma: no cover
        raise RpcError("rpc-server: ggml has no CPU device")
    devices = (ctypes.c_void_p * 1)(cpu)
    endpoint = (f"[{host}]" if ":" in host else host) + f":{port}"
    cache = str(cache_dir).encode() if cache_dir is not None else None

    def serve() -> None:
        start(endpoint.encode(), cache, threads, 1, devices)

    return serve


# -- what a Session needs ------------------------------------------------------------------


@dataclass
class Placed:
    target: list[int] | None
    draft: list[int] | None
    record: bool  # read where llama.cpp put the layers (only when devices were asked for)


def prepare(load) -> Placed:  # noqa: ANN001 - specgguf.loading.session.LoadOptions (no import cycle)
    """Apply --rpc, -dev and -devd of a LoadOptions, in llama.cpp's order. Nothing here
    touches ggml when none of the three is given."""
    if load.rpc:
        add_rpc_servers(load.rpc)
    target = parse_device_list(load.device, "-dev")
    draft = parse_device_list(load.device_draft, "-devd") if load.device_draft else target
    record = bool(load.rpc or load.device or load.device_draft)
    return Placed(target, draft, record)


class recording:  # noqa: N801 - used as a `with` statement
    """While a model loads, record its layer placement into `into[name]` (if `enabled`)."""

    def __init__(self, into: dict[str, Placement], name: str, enabled: bool) -> None:
        self.into, self.name, self.enabled = into, name, enabled
        self.rec = PlacementRecorder()

    def __enter__(self) -> None:
        if self.enabled:
            from specgguf.binding import engine
            engine.log_listener = self.rec

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            from specgguf.binding import engine
            engine.log_listener = None
            if exc[0] is None:
                self.into[self.name] = self.rec.placement()


def placement_line(placement: dict[str, Placement]) -> str | None:
    """The one "rpc: ..." line run and bench print (None when no device was asked for)."""
    if not placement:
        return None
    workers = registered_servers()
    head = f"rpc: {len(workers)} worker(s) {', '.join(workers)}; " if workers else "rpc: "
    return head + "; ".join(f"{name}: {p.describe()}" for name, p in placement.items())


# -- `check`: where the layers would go, without loading ---------------------------------------


def predict_placement(n_layer: int, n_gpu_layers: int, devs: list[tuple[str, int]]) -> Placement:
    """llama.cpp's layer split (llama-model.cpp load_tensors), from the header's layer count:
    the last `n_gpu_layers` of the n_layer + 1 layers (output included) go to `devs`, split in
    proportion to their free memory; the rest stay on the CPU. -1 means all."""
    total = n_layer + 1
    ngl = total if n_gpu_layers < 0 else n_gpu_layers
    start = max(total - ngl, 0)
    act = min(ngl, total) if devs else 0
    free = [float(f) for _, f in devs] or [1.0]
    if not any(free):
        free = [1.0] * len(free)
    cum, acc = [], 0.0
    for f in free:
        acc += f
        cum.append(acc / sum(free))
    layers: dict[int, str] = {}
    for il in range(total):
        if il < start or il - start >= act:
            layers[il] = "CPU"
        else:
            x = (il - start) / act
            i = next((k for k, c in enumerate(cum) if c > x), len(cum) - 1)
            layers[il] = devs[i][0]
    return Placement(layers, {})


def default_offload_devices() -> list[tuple[str, int]]:
    """The devices llama.cpp offloads to without -dev, in its order (RPC workers first, then
    GPUs), with their free memory."""
    rpc, gpu = [], []
    for d in list_devices(memory=True):
        if d.type == "GPU":
            (rpc if d.name.startswith("RPC") else gpu).append((d.name, d.free))
    return rpc + gpu


def named_devices(value: str, flag: str) -> list[tuple[str, int]]:
    if parse_device_list(value, flag) == []:
        return []
    mem = {d.name: d.free for d in list_devices(memory=True)}
    return [(n.strip(), mem.get(n.strip(), 0)) for n in value.split(",") if n.strip()]


def check_placement(
    layers: dict[str, int | None],
    rpc: str | None,
    device: str | None,
    device_draft: str | None,
    ngl: dict[str, int],
) -> dict[str, Placement]:
    """`check --rpc/-dev/-devd`: registers the workers (so they are probed: an unreachable
    one fails the check) and predicts each model's placement."""
    if rpc:
        add_rpc_servers(rpc)
    target = named_devices(device, "-dev") if device else default_offload_devices()
    draft = named_devices(device_draft, "-devd") if device_draft else target
    out: dict[str, Placement] = {}
    for role, devs in (("target", target), ("draft", draft)):
        n = layers.get(role)
        if n:
            p = predict_placement(n, ngl[role], devs)
            p.descriptions = {d.name: d.description for d in list_devices()}
            out[role] = p
    return out

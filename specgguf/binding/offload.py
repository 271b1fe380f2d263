"""Where a model's layers go (-ngl / -ngld), and whether a GPU build has a GPU to go to.

Pure: the devices come in as plain data (specgguf.binding.engine.backend_devices reads them from
ggml), so the rules can be tested without a GPU. They follow llama.cpp's model loader:

* A model has n_layer repeating layers plus the output layer, n_layer + 1 in all; this is
  the "N/M layers" llama.cpp logs. -ngl N puts the LAST N of them on the GPU (the output layer
  first, then the repeating layers from the top down); -1 (`all`) means all of them.
* The devices that take layers are the GPU devices (the RPC ones are left out here), or, when
  there is none, the integrated GPUs. CPU and accelerator devices (BLAS, AMX) never take
  layers. With several GPUs the offloaded layers are split in proportion to free memory.
* A build with a GPU backend whose registry finds no device (a CUDA build on a machine
  without an NVIDIA GPU) would quietly run everything on the CPU at a fraction of the speed
  it was built for: that is refused (gpu_build_without_device) rather than reported.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

#: ggml_backend_dev_type, in ggml's order
DEVICE_KINDS = ("cpu", "gpu", "igpu", "accel", "meta")
#: registries of GPU backends: one of these with no device means a GPU build without its GPU
GPU_BACKENDS = frozenset({"CUDA", "ROCm", "HIP", "MUSA", "Vulkan", "SYCL", "CANN", "OpenCL"})


@dataclass(frozen=True)
class Device:
    name: str  # ggml's device name, e.g. "CUDA0", "CPU"
    kind: str  # one of DEVICE_KINDS
    backend: str = ""  # the registry it belongs to, e.g. "CUDA"
    description: str = ""  # e.g. "NVIDIA H200"
    free_bytes: int = 0  # 0: not asked (only needed to split between several GPUs)


def offload_targets(devices: Sequence[Device]) -> list[Device]:
    """The devices llama.cpp would put layers on, in its order."""
    gpus = [d for d in devices if d.kind == "gpu" and d.backend != "RPC"]
    return gpus or [d for d in devices if d.kind == "igpu"]


def resolve_gpu_layers(n_gpu_layers: int, n_layer: int) -> int:
    """How many of the n_layer + 1 layers -ngl asks for (-1: all)."""
    total = n_layer + 1
    return total if n_gpu_layers < 0 else min(n_gpu_layers, total)


def layer_placement(
    n_layer: int, n_gpu_layers: int, devices: Sequence[Device]
) -> dict[str, int]:
    """Layers per device name ("CPU" for the rest), as llama.cpp's loader assigns them."""
    total = n_layer + 1
    targets = offload_targets(devices)
    n_gpu = resolve_gpu_layers(n_gpu_layers, n_layer) if targets else 0
    counts: dict[str, int] = {}
    if n_gpu:
        free = [float(d.free_bytes) for d in targets]
        if len(targets) == 1 or not any(free):
            free = [1.0] * len(targets)
        cum, acc = [], 0.0
        for f in free:
            acc += f
            cum.append(acc / sum(free))
        first = total - n_gpu
        for il in range(first, total):
            i = min(bisect.bisect_right(cum, (il - first) / n_gpu), len(targets) - 1)
            counts[targets[i].name] = counts.get(targets[i].name, 0) + 1
    if total - n_gpu:
        counts["CPU"] = total - n_gpu
    return counts


def describe_placement(n_layer: int, n_gpu_layers: int, devices: Sequence[Device]) -> str:
    """One phrase: "all 29 layers on CPU", "29/29 layers on CUDA0", "20/29 layers on CUDA0
    (9 on CPU)", "29/29 layers on CUDA0 (15) + CUDA1 (14)"."""
    total = n_layer + 1
    counts = layer_placement(n_layer, n_gpu_layers, devices)
    cpu = counts.pop("CPU", 0)
    if not counts:
        return f"all {total} layers on CPU"
    n_gpu = total - cpu
    where = (
        next(iter(counts))
        if len(counts) == 1
        else " + ".join(f"{name} ({n})" for name, n in counts.items())
    )
    return f"{n_gpu}/{total} layers on {where}" + (f" ({cpu} on CPU)" if cpu else "")


def gpu_build_without_device(registries: Sequence[tuple[str, int]]) -> str | None:
    """The first GPU backend compiled into this build that found no device, else None.

    `registries` is ggml's backend registries as (name, number of devices)."""
    for name, n_devices in registries:
        if name in GPU_BACKENDS and n_devices == 0:
            return name
    return None


def no_device_message(backend: str) -> str:
    """The one line a GPU build without its GPU ends with."""
    return (
        f"this llama-cpp-python was built for {backend} but finds no {backend} device here; "
        "on a machine without that GPU rebuild it for the CPU: bash scripts/setup.sh "
        "(without SPECGGUF_CMAKE_ARGS)"
    )

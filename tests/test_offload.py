"""Where -ngl / -ngld put the layers, and a GPU build without its GPU.

The placement rule (specgguf.binding.offload) is llama.cpp's loader's, tested on made-up device
lists since no GPU is at hand; `run` and `check` are tested end to end on this (CPU) build,
where everything stays on the CPU, and the refusal of a GPU build that finds no GPU through a
fake registry list handed to the engine.
"""

from __future__ import annotations

import json

import pytest
from specgguf_cli.app import run_cli

from specgguf.binding.offload import (
    Device,
    describe_placement,
    gpu_build_without_device,
    layer_placement,
    no_device_message,
    offload_targets,
)
from specgguf.errors import ExitCode, SpecggufError

CPU = Device("CPU", "cpu", "CPU", "AMD EPYC")
CUDA0 = Device("CUDA0", "gpu", "CUDA", "NVIDIA H200")
CUDA1 = Device("CUDA1", "gpu", "CUDA", "NVIDIA H200")
BLAS = Device("BLAS", "accel", "BLAS")
RPC = Device("RPC0", "gpu", "RPC")
IGPU = Device("Vulkan0", "igpu", "Vulkan")


def test_all_on_cpu_without_a_gpu_whatever_ngl_says() -> None:
    for ngl in (-1, 0, 5, 999):
        assert layer_placement(28, ngl, [CPU, BLAS]) == {"CPU": 29}
        assert describe_placement(28, ngl, [CPU]) == "all 29 layers on CPU"


def test_ngl_counts_the_output_layer_and_takes_layers_from_the_top() -> None:
    devs = [CPU, CUDA0]
    assert describe_placement(28, -1, devs) == "29/29 layers on CUDA0"
    assert describe_placement(28, 999, devs) == "29/29 layers on CUDA0"
    assert describe_placement(28, 28, devs) == "28/29 layers on CUDA0 (1 on CPU)"
    assert describe_placement(28, 1, devs) == "1/29 layers on CUDA0 (28 on CPU)"
    assert describe_placement(28, 0, devs) == "all 29 layers on CPU"
    assert layer_placement(28, 10, devs) == {"CUDA0": 10, "CPU": 19}


def test_several_gpus_split_in_proportion_to_free_memory() -> None:
    a = Device("CUDA0", "gpu", "CUDA", free_bytes=3 * 2**30)
    b = Device("CUDA1", "gpu", "CUDA", free_bytes=1 * 2**30)
    placed = layer_placement(27, -1, [CPU, a, b])
    assert placed == {"CUDA0": 21, "CUDA1": 7}  # 28 layers, 3:1
    assert describe_placement(27, -1, [CPU, a, b]) == "28/28 layers on CUDA0 (21) + CUDA1 (7)"
    # unknown free memory: an even split
    assert layer_placement(27, -1, [CPU, CUDA0, CUDA1]) == {"CUDA0": 14, "CUDA1": 14}


def test_which_devices_take_layers() -> None:
    assert offload_targets([CPU, BLAS]) == []
    assert offload_targets([CPU, RPC, CUDA0]) == [CUDA0]  # RPC servers are not local GPUs
    assert offload_targets([CPU, IGPU]) == [IGPU]  # an iGPU only when there is no GPU
    assert offload_targets([CPU, IGPU, CUDA0]) == [CUDA0]


def test_a_gpu_backend_without_devices_is_named() -> None:
    assert gpu_build_without_device([("CPU", 1)]) is None
    assert gpu_build_without_device([("CUDA", 1), ("CPU", 1)]) is None
    assert gpu_build_without_device([("CUDA", 0), ("CPU", 1)]) == "CUDA"
    assert gpu_build_without_device([("BLAS", 0), ("CPU", 1)]) is None  # not a GPU backend
    msg = no_device_message("CUDA")
    assert "\n" not in msg and "CUDA" in msg and "scripts/setup.sh" in msg


# -- through the engine and the CLI on this build ---------------------------------------------


def test_engine_sees_this_machines_devices() -> None:
    from specgguf.binding import engine
    devices = engine.backend_devices()
    assert any(d.kind == "cpu" for d in devices)
    engine.require_gpu_if_built_for_one()  # a CPU build: nothing to refuse


def test_a_cuda_build_without_a_gpu_fails_in_one_line(monkeypatch, tiny_target, capfd) -> None:
    from specgguf.binding import engine
    class FakeGgml:
        """This build's ggml, plus a CUDA registry that found no device."""

        def __init__(self, real):
            self.real = real

        def __getattr__(self, name):
            return getattr(self.real, name)

        def ggml_backend_reg_count(self):
            return self.real.ggml_backend_reg_count() + 1

        def ggml_backend_reg_get(self, i):
            n = self.real.ggml_backend_reg_count()
            return None if i == n else self.real.ggml_backend_reg_get(i)

        def ggml_backend_reg_name(self, reg):
            return b"CUDA" if reg is None else self.real.ggml_backend_reg_name(reg)

        def ggml_backend_reg_dev_count(self, reg):
            return 0 if reg is None else self.real.ggml_backend_reg_dev_count(reg)

    real = engine._ggml()
    monkeypatch.setattr(engine, "_ggml", lambda: FakeGgml(real))
    with pytest.raises(SpecggufError) as err:
        engine.require_gpu_if_built_for_one()
    assert err.value.code == ExitCode.RUNTIME
    capfd.readouterr()
    code = run_cli(["run", "-m", str(tiny_target), "-p", "hi", "-n", "2", "-t", "1", "-c", "256"])
    out, errtext = capfd.readouterr()
    assert code == ExitCode.RUNTIME == 7
    assert errtext.strip().splitlines() == [f"error: {no_device_message('CUDA')}"]
    assert out == ""
    # `check` reads headers only: it says so instead of failing
    code = run_cli(["check", "-m", str(tiny_target), "--json"])
    out, _ = capfd.readouterr()
    assert code == 0 and json.loads(out)["offload"]["note"] == no_device_message("CUDA")


def test_run_reports_where_the_layers_went(tiny_target, tiny_draft, capfd) -> None:
    base = ["run", "-m", str(tiny_target), "-md", str(tiny_draft), "-p", "hi", "-n", "3"]
    base += ["--temp", "0", "-t", "1", "-c", "256"]
    assert run_cli([*base, "-ngl", "1"]) == 0
    err = capfd.readouterr().err
    # tiny models: 2 repeating layers + the output layer; this build has no GPU
    assert "offload: target: all 3 layers on CPU, draft: all 3 layers on CPU" in err.splitlines()
    assert run_cli([*base, "-q"]) == 0
    assert "offload" not in capfd.readouterr().err


def test_check_reports_where_the_layers_would_go(tiny_target, tiny_draft, capfd) -> None:
    code = run_cli(["check", "-m", str(tiny_target), "-md", str(tiny_draft), "--json"])
    out, _ = capfd.readouterr()
    assert code == 0
    off = json.loads(out)["offload"]
    assert off == {"target": "all 3 layers on CPU", "draft": "all 3 layers on CPU", "note": None}
    code = run_cli(["check", "-m", str(tiny_target), "-ngl", "2"])
    out, _ = capfd.readouterr()
    assert code == 0 and "offload: target: all 3 layers on CPU" in out
    assert run_cli(["check", "-m", str(tiny_target), "-ngl", "many"]) == ExitCode.USAGE
    assert "invalid value for -ngl" in capfd.readouterr().err

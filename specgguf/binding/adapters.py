"""The target's LoRA adapters (--lora, --lora-scaled) and control vectors (--control-vector,
--control-vector-scaled, --control-vector-layer-range): loaded once beside the target's
weights, then set on each context of the target as it is made.

Only the target is adapted. It verifies every draft, so speculation stays exact: the draft
model (or an n-gram lookup) guesses without the adapter, and a guess the adapted target would
not make is rejected like any other.

A control vector file is a GGUF of F32 tensors `direction.N`, one vector of the model's width
per layer N (from 1); several files, each times its strength, are summed. llama.cpp adds the
sum to the hidden state after each layer in the range (both ends included; 0 or less: the
first or the last layer)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specgguf.binding import engine
from specgguf.errors import ExitCode, IncompatibleModelsError, ModelFileError, SpecggufError

ll = engine.ll

#: the largest control vector file read (a vector per layer: a few MiB for the widest models)
CVEC_FILE_MAX = 256 << 20
#: the most direction tensors one control vector file may hold
CVEC_TENSORS_MAX = 4096


@dataclass(frozen=True)
class AdapterFiles:
    """What the command line asked (the flag table's "adapters" scope, by field)."""

    #: (file, scale) of each LoRA adapter, in the order given
    loras: tuple[tuple[Path, float], ...] = ()
    #: (file, strength) of each control vector
    control_vectors: tuple[tuple[Path, float], ...] = ()
    #: the first and last layer the control vectors are added to (0 or less: first / last)
    control_vector_layers: tuple[int, int] = (-1, -1)
    #: --lora-init-without-apply: the LoRA adapters are loaded at scale 0 (serve's
    #: POST /lora-adapters sets their scales later)
    init_without_apply: bool = False

    @classmethod
    def of(cls, fields: Sequence[tuple[str, Any]]) -> AdapterFiles:
        return cls(**dict(fields))


@dataclass
class Lora:
    """One loaded LoRA adapter (freed with the model it was loaded for)."""

    path: Path
    scale: float
    handle: Any  # llama_adapter_lora *


def _existing(path: Path, what: str) -> Path:
    if not path.is_file():
        raise ModelFileError(f"{path}: no such {what} file")
    return path


def read_control_vector(path: Path, strength: float, n_embd: int, n_layer: int) -> np.ndarray:
    """One control vector file times its strength: an (n_layer - 1) x n_embd array whose row
    i is layer i + 1's vector (zero where the file has none). The file is bounded before it is
    read; a tensor llama.cpp would not take, or one for another model, is one line."""
    from gguf import GGMLQuantizationType, GGUFReader

    if _existing(path, "control vector").stat().st_size > CVEC_FILE_MAX:
        raise ModelFileError(f"{path}: a control vector file over {CVEC_FILE_MAX >> 20} MiB")
    try:
        reader = GGUFReader(path)
    except (ValueError, OSError) as e:
        raise ModelFileError(f"{path}: not a control vector GGUF ({e})") from None
    if len(reader.tensors) > CVEC_TENSORS_MAX:
        raise ModelFileError(f"{path}: more than {CVEC_TENSORS_MAX} tensors")
    out = np.zeros((max(n_layer - 1, 0), n_embd), dtype=np.float32)
    for t in reader.tensors:
        prefix, _, layer = t.name.partition(".")
        if prefix != "direction" or not layer.isdigit() or int(layer) == 0:
            raise ModelFileError(f"{path}: tensor {t.name!r} is not direction.N (N from 1)")
        if t.tensor_type != GGMLQuantizationType.F32 or len(t.shape) != 1:
            raise ModelFileError(f"{path}: {t.name} is not a one-dimensional F32 tensor")
        if int(t.n_elements) != n_embd:
            raise IncompatibleModelsError(f"{path}: {t.name} has {int(t.n_elements)} values; "
                                          f"the target's width is {n_embd}")  # fmt: skip
        index = int(layer)
        if index >= n_layer:  # llama.cpp adds nothing after the last layer
            raise IncompatibleModelsError(f"{path}: {t.name} is past the target's layers "
                                          f"(1..{n_layer - 1} take a vector)")  # fmt: skip
        out[index - 1] += strength * np.asarray(t.data, dtype=np.float32).reshape(n_embd)
    return out


class TargetAdapters:
    """The adapters of one target model, set on every context made of it (`apply`)."""

    def __init__(self, model: engine.Model, files: AdapterFiles) -> None:
        self.files = files
        self.loras: list[Lora] = []
        for path, scale in files.loras:
            handle = ll.llama_adapter_lora_init(model.ptr, str(_existing(path, "LoRA")).encode())
            if not handle:
                raise ModelFileError(f"{path}: llama.cpp could not load it as a LoRA adapter of "
                                     f"{model.path.name} (run with -v to see why)")  # fmt: skip
            scale = 0.0 if files.init_without_apply else scale
            self.loras.append(Lora(path, scale, handle))
        self.n_embd = model.n_embd
        self.cvec: np.ndarray | None = None
        if files.control_vectors:
            self.cvec = sum(read_control_vector(p, s, model.n_embd, model.n_layer)
                            for p, s in files.control_vectors)  # fmt: skip
        start, end = files.control_vector_layers
        self.layers = (start if start > 0 else 1, end if end > 0 else model.n_layer)
        #: the contexts `apply` adapted, which `set_scales` sets again
        self.contexts: list[engine.Context] = []

    def apply(self, ctx: engine.Context) -> None:
        """Set the adapters on `ctx` (one of the target's contexts)."""
        self.contexts.append(ctx)
        self._set_loras(ctx.ptr)
        if self.cvec is not None:
            flat = np.ascontiguousarray(self.cvec.reshape(-1))
            data = flat.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            if ll.llama_set_adapter_cvec(ctx.ptr, data, flat.size, self.n_embd, *self.layers):
                raise SpecggufError("llama.cpp refused the control vectors (run with -v)",
                                    ExitCode.RUNTIME)  # fmt: skip

    def set_scales(self, scales: dict[int, float]) -> None:
        """New scales for the LoRA adapters, by index (one not named: 0, as llama-server's
        POST /lora-adapters), set on every context still open. The caller sees that no pass
        runs meanwhile, and that nothing computed under the old scales is reused."""
        for i, lora in enumerate(self.loras):
            lora.scale = float(scales.get(i, 0.0))
        self.contexts = [c for c in self.contexts if c.ptr is not None]
        for ctx in self.contexts:
            self._set_loras(ctx.ptr)

    def _set_loras(self, ptr: Any) -> None:
        """Every LoRA adapter at its scale (llama.cpp leaves those at 0 out: they cost
        nothing)."""
        if not self.loras:
            return
        n = len(self.loras)
        handles = (ll.llama_adapter_lora_p_ctypes * n)(*(a.handle for a in self.loras))
        scales = (ctypes.c_float * n)(*(a.scale for a in self.loras))
        ll.llama_set_adapters_lora(ptr, handles, n, scales)


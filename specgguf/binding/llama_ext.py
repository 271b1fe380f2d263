"""libllama's staging calls for hidden-state drafters, typed with ctypes.

EAGLE-3 heads and MTP layers read the target's hidden states. The calls that stage those
states (turn on the capture of a layer's input, read it back, read a context's "nextn"
embeddings, borrow the other context of a pair, list the target layers a head was trained on)
are exported by libllama as C++ symbols, declared in llama.cpp's staging header and not bound
by llama-cpp-python. This module resolves them once from the library llama-cpp-python already
loaded, by their mangled names, and gives them Python signatures. The extended batch API
(`llama_batch_ext_*`, `llama_process`) and `llama_model_n_layer_nextn` are plain C calls that
llama-cpp-python binds itself: use those from `llama_cpp` directly.

A libllama without one of these symbols (an older or a trimmed build) yields `ext() is None`;
`require_ext` turns that into one line and exit 10, before any model is loaded.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cache
from typing import Any

from specgguf.errors import ExitCode, SpecggufError

_ctx = ctypes.c_void_p
_model = ctypes.c_void_p
_float_p = ctypes.POINTER(ctypes.c_float)
_i32_p = ctypes.POINTER(ctypes.c_int32)

#: our name -> (the Itanium-mangled symbol, restype, argtypes): one row per staging call
SYMBOLS: dict[str, tuple[str, Any, list[Any]]] = {
    "set_embeddings_layer_inp": (
        "_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
        None,
        [_ctx, ctypes.c_uint32, ctypes.c_bool],
    ),
    "get_embeddings_layer_inp": (
        "_Z30llama_get_embeddings_layer_inpP13llama_contextj",
        _float_p,
        [_ctx, ctypes.c_uint32],
    ),
    "set_embeddings_nextn": (
        "_Z26llama_set_embeddings_nextnP13llama_contextbb",
        None,
        [_ctx, ctypes.c_bool, ctypes.c_bool],
    ),
    "get_embeddings_nextn": ("_Z26llama_get_embeddings_nextnP13llama_context", _float_p, [_ctx]),
    "get_embeddings_nextn_ith": (
        "_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
        _float_p,
        [_ctx, ctypes.c_int32],
    ),
    "set_nextn_layer_offset": (
        "_Z28llama_set_nextn_layer_offsetP13llama_contexti",
        None,
        [_ctx, ctypes.c_int32],
    ),
    "get_ctx_other": ("_Z19llama_get_ctx_otherP13llama_context", _ctx, [_ctx]),
    "model_target_layer_ids": ("_Z28llama_model_target_layer_idsPK11llama_model", _i32_p, [_model]),
    "model_target_layer_ids_n": (
        "_Z30llama_model_target_layer_ids_nPK11llama_model",
        ctypes.c_uint32,
        [_model],
    ),
    "model_get_tok_embd": (
        "_Z24llama_model_get_tok_embdPK11llama_modelPf",
        ctypes.c_uint32,
        [_model, _float_p],
    ),
}

#: the plain C calls a hidden-state drafter needs that llama-cpp-python binds (checked too: a
#: llama-cpp-python older than the staging API lacks them)
C_CALLS = (
    "llama_batch_ext_init",
    "llama_batch_ext_add_token",
    "llama_batch_ext_set_embd_token",
    "llama_batch_ext_set_embd_state",
    "llama_batch_ext_set_pos",
    "llama_batch_ext_set_output_logits",
    "llama_batch_ext_clear",
    "llama_batch_ext_free",
    "llama_process",
    "llama_model_n_layer_nextn",
)


#: the architectures whose graph in this libllama records every layer's input (what an EAGLE-3
#: head reads); for any other, asking llama.cpp to capture a layer input aborts the process
LAYER_INPUT_ARCHS = frozenset(
    {
        "bailingmoe3",
        "deepseek4",
        "gemma4",
        "gpt-oss",
        "hunyuan_vl",
        "lfm2",
        "llama",
        "mimo2",
        "minimax-01",
        "minimax-m2",
        "muse-glimmer",
        "nanbeige",
        "nemotron_h",
        "qwen3",
        "qwen35",
        "qwen35moe",
        "qwen3moe",
        "qwen3next",
        "qwen4exp",
    }
)


#: target architectures whose main graph in this libllama outputs its last layer's state (the
#: "nextn" embeddings, set by their main graph and not only by an MTP one), the only ones over
#: which a drafter may read layer id == n_layer; for any other (llama among them)
#: libllama hands back a buffer nothing wrote
LAST_STATE_ARCHS: frozenset[str] = frozenset(
    (
        "bailingmoe3", "deepseek4", "gemma4", "gpt-oss", "mimo2", "nemotron_h", "qwen35",
        "qwen35moe", "qwen3next",
    )
)  # fmt: skip


def outputs_last_state(architecture: str, mtp_loaded: bool) -> bool:
    """Whether a model of this architecture hands over its last layer's state (layer id ==
    n_layer): its main graph outputs it, or it was loaded with NextN layers its MTP graph
    reads it for (specgguf.heads.mtp_info checks those before loading)."""
    return architecture in LAST_STATE_ARCHS or mtp_loaded


def require_layer_inputs(architecture: str, what: str) -> None:
    """One line (exit 4) for a target whose graph does not record its layers' inputs."""
    if architecture not in LAYER_INPUT_ARCHS:
        raise SpecggufError(
            f"{what}: this libllama does not capture the hidden states of a {architecture!r} "
            "target's layers (it does for llama, qwen3, qwen3moe, qwen35, gemma4 and "
            f"{len(LAYER_INPUT_ARCHS) - 5} other architectures), so no drafter that reads them "
            "can run over it",
            ExitCode.INCOMPATIBLE,
        )


@dataclass(frozen=True)
class LlamaExt:
    """The resolved staging calls (ctypes function objects), called with raw pointers."""

    fns: dict[str, Any]

    def set_embeddings_layer_inp(self, ctx: int, layer: int, on: bool) -> None:
        """Capture (or stop capturing) the input of target layer `layer` on every decode."""
        self.fns["set_embeddings_layer_inp"](ctx, layer, on)

    def get_embeddings_layer_inp(self, ctx: int, layer: int) -> Any:
        """The captured input rows of `layer` for the last decode's tokens, in batch order."""
        return self.fns["get_embeddings_layer_inp"](ctx, layer)

    def set_embeddings_nextn(self, ctx: int, on: bool, masked: bool) -> None:
        """Output the pre-norm hidden state: for the rows with logits (masked) or all rows."""
        self.fns["set_embeddings_nextn"](ctx, on, masked)

    def get_embeddings_nextn(self, ctx: int) -> Any:
        return self.fns["get_embeddings_nextn"](ctx)

    def get_embeddings_nextn_ith(self, ctx: int, i: int) -> Any:
        return self.fns["get_embeddings_nextn_ith"](ctx, i)

    def set_nextn_layer_offset(self, ctx: int, offset: int) -> None:
        """Which of a model's NextN heads an MTP context runs (0: the first)."""
        self.fns["set_nextn_layer_offset"](ctx, offset)

    def get_ctx_other(self, ctx: int) -> int | None:
        return self.fns["get_ctx_other"](ctx)

    def model_target_layer_ids(self, model: int) -> list[int]:
        """The target layers an EAGLE-3 head reads (empty for any other model)."""
        n = int(self.fns["model_target_layer_ids_n"](model))
        ptr = self.fns["model_target_layer_ids"](model) if n else None
        return [int(ptr[i]) for i in range(n)] if ptr else []


@cache
def ext() -> LlamaExt | None:
    """The staging calls of the loaded libllama, or None when one is missing."""
    import llama_cpp.llama_cpp as lib

    if not all(hasattr(lib, name) for name in C_CALLS):
        return None
    fns: dict[str, Any] = {}
    for name, (symbol, restype, argtypes) in SYMBOLS.items():
        try:
            fn = getattr(lib._lib, symbol)
        except AttributeError:
            return None
        fn.restype = restype
        fn.argtypes = argtypes
        fns[name] = fn
    return LlamaExt(fns)


def missing_calls() -> list[str]:
    """The calls a hidden-state drafter needs that the loaded libllama lacks (for messages)."""
    import llama_cpp.llama_cpp as lib

    missing = [name for name in C_CALLS if not hasattr(lib, name)]
    missing += [
        f"llama_{name}" for name, (symbol, _, _) in SYMBOLS.items() if not hasattr(lib._lib, symbol)
    ]
    return missing


def require_ext(what: str) -> LlamaExt:
    """The staging calls, or one line naming what this libllama lacks (exit 10)."""
    api = ext()
    if api is None:
        missing = missing_calls()
        raise SpecggufError(
            f"{what} needs libllama's hidden-state calls, which this llama-cpp-python lacks "
            f"({', '.join(missing[:4]) or 'unknown'}"
            f"{', ...' if len(missing) > 4 else ''}): reinstall it with scripts/setup.sh",
            ExitCode.NO_RUNTIME,
        )
    return api

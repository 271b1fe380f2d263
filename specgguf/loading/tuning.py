"""LlamaTuning: the llama.cpp parameters a command line sets beyond specgguf's own options
(-ub, -tb, -lm, RoPE/YaRN, -sm, -ts, -mg ...), per model and context of the target and the
draft, as (field, value) pairs that the engine writes over llama.cpp's defaults; and serve's
endpoint switches (--no-webui, --no-slots) and HTTP settings (--threads-http, --ssl-*...).

Where each flag goes is declared once, in specgguf.flag_table's rows; this is only the carrier,
so that the loading layer needs no knowledge of the command line."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

Overrides = tuple[tuple[str, Any], ...]


#: the scopes that hold one value per field (the others are per model or context, per role)
FLAT_SCOPES = ("load", "server", "http", "process", "embeddings", "log", "slots", "router",
               "adapters")


@dataclass(frozen=True)
class LlamaTuning:
    #: LoadOptions fields (e.g. n_ubatch)
    load: Overrides = ()
    #: llama_model_params fields of the target's and of the draft's model
    target_model: Overrides = ()
    draft_model: Overrides = ()
    #: llama_context_params fields of the target's and of the draft's contexts
    target_context: Overrides = ()
    draft_context: Overrides = ()
    #: serve's switches: ENDPOINTS handler -> on or off (--no-webui: ("page", False))
    server: Overrides = ()
    #: serve's HTTP server settings (specgguf.server.http_settings.HttpSettings' fields)
    http: Overrides = ()
    #: the process's CPU placement (specgguf.loading.cpu_placement): cpus, nice, cpu_strict,
    #: poll, numa; the target's, the draft's and the batch forms fold into one value each
    process: Overrides = ()
    #: serve --embeddings, --pooling, --embd-normalize: on, pooling, normalize
    embeddings: Overrides = ()
    #: -lv, --log-file, --log-disable, --log-colors, --log-prefix, --log-timestamps
    #: (specgguf.io.log_sink.LogSettings)
    log: Overrides = ()
    #: serve --slot-prompt-similarity, --sleep-idle-seconds
    #: (specgguf.server.scheduler.SlotSettings)
    slots: Overrides = ()
    #: serve --models-dir, --models-max, --models-autoload (specgguf.server.router)
    router: Overrides = ()
    #: --lora, --lora-scaled, --control-vector, --control-vector-scaled,
    #: --control-vector-layer-range (specgguf.binding.adapters.AdapterFiles' fields)
    adapters: Overrides = ()

    def with_setting(self, scope: str, field: str, value: Any, role: str) -> LlamaTuning:
        """This tuning with `field` set to `value` in `scope` (load, model or context) for
        `role` (target, draft or both); a later value of the same field wins."""
        if scope in FLAT_SCOPES:
            return replace(self, **{scope: _set(getattr(self, scope), field, value)})
        changes = {}
        for who in ("target", "draft"):
            if role in (who, "both"):
                name = f"{who}_{scope}"
                changes[name] = _set(getattr(self, name), field, value)
        return replace(self, **changes)


#: the fields whose values fold together instead of the last one winning: -ot, -cmoe, -ncmoe
#: each add tensor placements (as llama.cpp appends them), and so do metadata overrides and
#: adapter files; the process-wide CPU placement
#: takes every CPU named (-C, -Cr and their batch and draft forms), the highest priority
#: (the lowest nice), strict placement if any asks for it, and the most polling
FOLDS = {
    "tensor_buft_overrides": lambda old, new: old + new,
    "cpus": lambda old, new: old | new,
    "nice": min,
    "cpu_strict": lambda old, new: old or new,
    "poll": max,
    # --override-kv, --lora and --control-vector add to what the others gave, as in llama.cpp
    "kv_overrides": lambda old, new: old + new,
    "loras": lambda old, new: old + new,
    "control_vectors": lambda old, new: old + new,
}


def _set(pairs: Overrides, field: str, value: Any) -> Overrides:
    old = dict(pairs)
    if field in FOLDS and field in old:
        value = FOLDS[field](old[field], value)
    return tuple((k, v) for k, v in pairs if k != field) + ((field, value),)

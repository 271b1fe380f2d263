"""llama.cpp's KV cache type names and flash-attention modes, with the ids llama.cpp takes.

The one place these choices are written: the engine maps them, the command line validates
-ctk/-ctv/-ctkd/-ctvd and -fa against them and lists them in --help. Apart from
specgguf.binding.engine because the command line validates -ctk/-ctv before anything
heavy is imported: importing llama_cpp takes a noticeable moment, and nothing should be slow
before a typo is reported (or before a Ctrl-C can be answered with a report).
"""

from __future__ import annotations

#: llama.cpp's accepted KV cache types (common/arg.cpp kv_cache_types) -> ggml_type ids
KV_CACHE_TYPES = {
    "f32": 0, "f16": 1, "bf16": 30, "q8_0": 8, "q4_0": 2, "q4_1": 3, "iq4_nl": 20, "q5_0": 6,
    "q5_1": 7,
}  # fmt: skip

#: -fa/--flash-attn values (common/arg.cpp) -> llama_flash_attn_type
FLASH_ATTN = {"on": 1, "off": 0, "auto": -1}

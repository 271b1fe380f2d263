"""Models the project derives itself: `specgguf pull target-f16`.

The F16 copy of the default target is made by llama.cpp's own quantizer (llama_model_quantize
with requantization allowed: the Q4_K_M weights are dequantized, so the copy computes what the
Q4 target computes, up to F16 rounding, and agrees with the draft as often), about 20 s and
3.4 GB on disk. It is written beside its final name and installed only if its SHA-256 is the
pinned one (specgguf.modelfiles.models.TARGET_F16), as a downloaded model is.
"""

from __future__ import annotations

from pathlib import Path

from specgguf.errors import ExitCode, SpecggufError
from specgguf.modelfiles.models import ModelSpec, install_verified, partial_file, sha256_file

#: the llama.cpp file types a derived model may be converted to
FTYPES = {"f16": "LLAMA_FTYPE_MOSTLY_F16"}


def derive(spec: ModelSpec, source: Path, dest: Path, *, ftype: str = "f16") -> None:
    """Convert `source` to `ftype` into `dest`, atomically and only if the checksum matches
    (what is left of an interrupted conversion is removed)."""
    import llama_cpp as ll

    from specgguf.binding import engine

    engine.init_backend(False)  # llama.cpp's log (one line per tensor) stays quiet
    params = ll.llama_model_quantize_default_params()
    params.ftype = getattr(ll, FTYPES[ftype])
    params.allow_requantize = True
    tmp = partial_file(dest)
    try:
        status = ll.llama_model_quantize(str(source).encode(), str(tmp).encode(), params)
        if status != 0:
            raise SpecggufError(
                f"{spec.filename}: llama.cpp's quantizer failed on {source} (status {status})",
                ExitCode.PULL,
            )
        install_verified(spec, tmp, dest, sha256_file(tmp))
    finally:
        tmp.unlink(missing_ok=True)

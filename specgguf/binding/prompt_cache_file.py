"""--prompt-cache FNAME (llama-completion's session file): the target's evaluated prompt (its
tokens and llama.cpp's state of them) kept in a file, so that the next run whose prompt starts
the same way evaluates only the rest. Exact: a cached position holds what evaluating its
prefix computes, and only the prefix the new prompt shares is kept (through the context's
prompt cache, specgguf.binding.prompt_cache, which loads it into sequence 0).

--prompt-cache-all keeps the generated tokens too; --prompt-cache-ro reads the file and never
writes it. The file names the model it was made with (name, size, and a hash of its first MiB):
a file of another model, another layout or larger than its parts say is refused in one line,
and read within bounds (its header, its tokens up to the context size)."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from array import array
from pathlib import Path
from typing import Any

from specgguf.binding import engine
from specgguf.binding.prompt_cache import PromptCache, get_state
from specgguf.errors import UsageError

ll = engine.ll

MAGIC = b"specgguf-prompt-cache 1\n"
MAX_HEADER = 1 << 16


def model_identity(path: Path) -> str:
    with open(path, "rb") as f:
        head = hashlib.sha256(f.read(1 << 20)).hexdigest()[:32]
    return f"{path.name}:{path.stat().st_size}:{head}"


def load(path: Path, model: Path, n_ctx: int) -> tuple[list[int], bytes] | None:
    """The tokens and state the file holds (None: no file yet)."""
    if not path.exists():
        return None
    try:
        with open(path, "rb") as f:
            if f.read(len(MAGIC)) != MAGIC:
                raise UsageError(f"--prompt-cache {path}: not a specgguf prompt cache file")
            (n_header,) = struct.unpack("<Q", f.read(8))
            if n_header > MAX_HEADER:
                raise UsageError(f"--prompt-cache {path}: damaged header")
            header = json.loads(f.read(n_header))
            n_tokens, n_state = int(header["n_tokens"]), int(header["state_bytes"])
            if header.get("model") != model_identity(model):
                raise UsageError(f"--prompt-cache {path}: made with another model "
                                 f"({header.get('model')}): remove it or name another file")
            size = path.stat().st_size
            if not 0 < n_tokens <= n_ctx or size != f.tell() + 4 * n_tokens + n_state:
                raise UsageError(f"--prompt-cache {path}: damaged ({n_tokens} tokens, "
                                 f"{n_state} state bytes in {size} bytes; context {n_ctx})")
            tokens = array("i")
            tokens.frombytes(f.read(4 * n_tokens))
            return tokens.tolist(), f.read(n_state)
    except (OSError, ValueError, KeyError, struct.error) as err:
        raise UsageError(f"--prompt-cache {path}: cannot be read: {err}") from None


def attach(ctx: Any, path: Path, model: Path) -> None:
    """Give `ctx` (the target's context) the file's sequence to start from."""
    held = load(path, model, ctx.n_ctx)
    if held is None:
        return
    if ctx.prompt_cache is None:
        ctx.prompt_cache = PromptCache(-1)
    ctx.prompt_cache.entries[tuple(held[0])] = held[1]


def save(ctx: Any, path: Path, model: Path, keep: int | None) -> bool:
    """Write what `ctx` holds (only its first `keep` tokens, where given and the memory can
    drop the rest) to `path`, atomically; False when its cache is not whole (nothing written)."""
    ctx.keep_prefix(list(ctx.tokens))  # cells after a hole lack their past: not kept
    if len(ctx.tokens) != ctx.n_past or ctx.dirty or not ctx.tokens:
        return False
    ptr, seq = ctx.state_handle()
    tokens = list(ctx.tokens)
    if keep is not None and 0 < keep < len(tokens) and ll.llama_memory_seq_rm(
            ll.llama_get_memory(ptr), seq, keep, -1):  # fmt: skip
        del ctx.tokens[keep:]
        ctx.n_past = keep
        tokens = tokens[:keep]
    state = get_state(ptr, seq)
    header = json.dumps({"model": model_identity(model), "n_tokens": len(tokens),
                         "state_bytes": len(state)}).encode()  # fmt: skip
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(MAGIC + struct.pack("<Q", len(header)) + header)
        f.write(array("i", tokens).tobytes())
        f.write(state)
    os.replace(tmp, path)
    return True

"""serve --slot-save-path: one slot's KV sequence written to a file and read back.

The file has llama.cpp's sequence-state layout (what llama_state_seq_save_file writes, so a
file llama-server saved restores here and the other way round): the magic `ggsq`, the layout
version, the count of the token stream that follows, that stream, then llama.cpp's state of
the sequence. llama-server's token stream is a marked one: -1, its format version (1), the
tokens as a counted list, and a counted list of media positions (always empty here: text
only); a stream without the -1 mark is the plain token list older servers wrote, read too.

Reading is bounded: the file's size is checked against what a full slot can hold before a
byte is read, and it is read whole into memory and handed to llama.cpp from there (llama.cpp
reads a state from a buffer without ever passing its end). Every token is checked against the
vocabulary and the count against the slot's context before the state is set."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from specgguf.binding import prompt_cache

ll = prompt_cache.ll

MAGIC = 0x67677371  # "ggsq"
LAYOUT_VERSION = 3  # the sequence-state file layout llama.cpp writes and reads
STREAM_MARK = -1  # llama-server's token stream starts so (its "no token")
STREAM_VERSION = 1
#: room for the headers and for state a sequence keeps beside its KV cells (the output
#: buffers' bookkeeping, a sliding-window copy) on top of the KV cells themselves
STATE_MARGIN = 64 << 20


class SlotFileError(Exception):
    """A file that cannot be restored (its message says why; the slot is left empty)."""


def size_limit(n_ctx: int, kv_row: tuple[int, int] | None) -> int:
    """The largest file a slot of `n_ctx` tokens can have written: its tokens and its KV
    cells (`kv_row`: the K and V elements a token adds) at 4 bytes an element (the widest
    cache type), plus STATE_MARGIN."""
    cells = n_ctx * sum(kv_row or (0, 0)) * 4
    return 4 * (n_ctx + 16) + cells + STATE_MARGIN


#: runs its argument where no pass of the context runs meanwhile (Generator.exclusive)
Exclusive = Callable[[Callable[[], Any]], Any]


def save(ctx: Any, path: Path, exclusive: Exclusive) -> int:
    """Write `ctx`'s sequence (a slot's target context: its `tokens` and `state_handle`) to
    `path`; returns the bytes written. Written to a side file and renamed: a reader never
    sees half a file."""
    tokens = list(ctx.tokens)
    ptr, seq = ctx.state_handle()
    state = exclusive(lambda: prompt_cache.get_state(ptr, seq))
    stream = [STREAM_MARK, STREAM_VERSION, len(tokens), *tokens, 0]
    head = struct.pack(f"<III{len(stream)}i", MAGIC, LAYOUT_VERSION, len(stream), *stream)
    side = path.with_name(path.name + ".part")
    with open(side, "wb") as f:
        f.write(head)
        f.write(state)
    side.replace(path)
    return len(head) + len(state)


def restore(ctx: Any, path: Path, exclusive: Exclusive, *, limit: int,
            n_vocab: int) -> tuple[int, int]:  # fmt: skip
    """Replace `ctx`'s sequence with the one saved in `path`; returns (tokens, bytes read).
    SlotFileError (and the sequence left empty) for a file that is missing, too large, not
    a sequence state, or whose tokens or state do not fit this model and slot (as in
    llama-server, a failed restore empties the slot: what it held is gone either way)."""
    ctx.truncate(0)
    try:
        with open(path, "rb") as f:
            data = bytearray(f.read(limit + 1))
    except FileNotFoundError:
        raise SlotFileError("no such file") from None
    except OSError as e:
        raise SlotFileError(f"cannot be read ({e.strerror or e})") from None
    if len(data) > limit:
        raise SlotFileError(f"larger than a slot's state can be ({limit} bytes)")
    tokens, offset = read_tokens(data)
    if len(tokens) > ctx.n_ctx:
        raise SlotFileError(f"{len(tokens)} tokens do not fit the slot's {ctx.n_ctx}")
    bad = next((t for t in tokens if not 0 <= t < n_vocab), None)
    if bad is not None:
        raise SlotFileError(f"token {bad} is not in this model's vocabulary ({n_vocab})")
    ptr, seq = ctx.state_handle()
    if not exclusive(lambda: prompt_cache.set_state(ptr, seq, memoryview(data)[offset:])):
        ctx.truncate(0)  # nothing half-set stays
        raise SlotFileError("its state does not fit this model or the slot's KV cache")
    ctx.tokens[:] = tokens
    ctx.n_past = len(tokens)
    return len(tokens), len(data)


def read_tokens(data: bytes | bytearray) -> tuple[list[int], int]:
    """The tokens of a sequence-state file's head, and where its state starts."""
    if len(data) < 12:
        raise SlotFileError("not a sequence state file (too short)")
    magic, version, n = struct.unpack_from("<III", data)
    if magic != MAGIC:
        raise SlotFileError("not a sequence state file")
    if version != LAYOUT_VERSION:
        raise SlotFileError(f"a sequence state file of layout {version}, not {LAYOUT_VERSION}")
    end = 12 + 4 * n
    if end > len(data):
        raise SlotFileError("its token count runs past the end of the file")
    stream = list(struct.unpack_from(f"<{n}i", data, 12))
    return unpack_stream(stream), end


def unpack_stream(stream: Sequence[int]) -> list[int]:
    """llama-server's token stream (marked, or an older plain token list) as tokens."""
    if not stream or stream[0] != STREAM_MARK:
        return list(stream)
    if len(stream) < 3 or stream[1] != STREAM_VERSION:
        raise SlotFileError("a token stream of an unknown version")
    n = stream[2]
    if not 0 <= n <= len(stream) - 4:
        raise SlotFileError("its token list runs past its stream")
    tokens, rest = list(stream[3 : 3 + n]), stream[3 + n :]
    if rest[0] != 0:
        raise SlotFileError("it holds media (images, audio), which specgguf cannot restore")
    if len(rest) > 1:
        raise SlotFileError("trailing data after its token stream")
    return tokens

"""POST /slots/{id}?action=save|restore|erase (serve --slot-save-path DIR): llama-server's
slot files.

`save` writes the slot's KV sequence and its tokens to DIR/filename, `restore` puts a saved
one back into the slot (the next request whose prompt starts with those tokens evaluates only
the rest), `erase` empties the slot's cache. A slot a request is running in is acted on once
that request ends (llama-server defers it the same way). The answers are llama-server's:
{id_slot, filename, n_saved, n_written, timings: {save_ms}}, {id_slot, filename, n_restored,
n_read, timings: {restore_ms}}, {id_slot, n_erased}.

The filename is a security boundary: it is one plain name inside DIR, never a path (no
separators, no "..", no control or look-alike characters, llama-server's rules), and the
resolved path is checked to be in DIR besides."""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from specgguf.binding import slot_files
from specgguf.modelfiles.gguf_info import kv_row_elements
from specgguf.server.protocol import ApiError, bad

ACTIONS = ("save", "restore", "erase")
#: the longest filename in UTF-8 bytes (the usual limit of a Linux file system)
MAX_NAME_BYTES = 255
#: characters no filename may hold: path separators and what other systems forbid, and their
#: look-alikes (fullwidth full stop, division slash, set minus), the replacement character
#: and the byte-order mark
_FORBIDDEN = set('/\\:*?"<>|') | {"\uff0e", "\u2215", "\u2216", "\ufffd", "\ufeff"}


def valid_filename(name: str) -> bool:
    """Whether `name` is one plain file name (llama-server's rules for slot files)."""
    if not name or len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return False
    for c in name:
        if c in _FORBIDDEN or unicodedata.category(c) in ("Cc", "Cs"):
            return False
    if name[0] == " " or name[-1] in " .":
        return False
    return ".." not in name and name != "."


class SlotFiles:
    """The slot actions of one server: its directory, and the generator's slots."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory.resolve()

    def path_of(self, body: Any) -> tuple[str, Path]:
        """The request's filename and its path in the directory, or a 400."""
        name = body.get("filename") if isinstance(body, dict) else None
        if not isinstance(name, str):
            raise bad("'filename' must be a string", "missing_field")
        if not valid_filename(name):
            raise bad("Invalid filename", "invalid_filename")
        path = self.directory / name
        if path.resolve().parent != self.directory:  # a link placed there cannot lead out
            raise bad("Invalid filename", "invalid_filename")
        return name, path

    def action(self, gen: Any, slot: int, action: str, name: str, path: Path | None,
               namespace: Hashable | None) -> Callable[[], dict[str, Any]]:  # fmt: skip
        """The work of one action on `slot`, for the worker thread once the slot is idle
        (with one slot it runs every pass; with several, llama.cpp's state is read and set
        between the shared steps: Generator.exclusive)."""
        if action == "erase":
            return lambda: _erase(gen, slot)
        assert path is not None
        if action == "save":
            return lambda: _save(gen, slot, name, path)
        return lambda: self._restore(gen, slot, name, path, namespace)

    def _restore(self, gen: Any, slot: int, name: str, path: Path,
                 namespace: Hashable | None) -> dict[str, Any]:  # fmt: skip
        t0 = time.perf_counter()
        ctx = _target(gen, slot)
        session = gen.session
        limit = slot_files.size_limit(ctx.n_ctx, kv_row_elements(session.info.target))
        try:
            n, size = slot_files.restore(ctx, path, gen.exclusive, limit=limit,
                                         n_vocab=session.target_model.n_vocab)  # fmt: skip
        except slot_files.SlotFileError as e:
            raise bad(f"Unable to restore slot: {name}: {e}", "invalid_slot_file") from None
        gen.slot_written(slot, namespace)
        return {"id_slot": slot, "filename": name, "n_restored": n, "n_read": size,
                "timings": {"restore_ms": _ms(t0)}}  # fmt: skip


def check_slot(gen: Any, text: str) -> int:
    """The path's slot id, or a 400."""
    try:
        slot = int(text)
    except ValueError:
        raise bad("Invalid slot ID", "invalid_slot") from None
    if not 0 <= slot < gen.n_slots:
        raise bad(f"Invalid slot ID: {slot} (the slots are 0..{gen.n_slots - 1})", "invalid_slot")
    return slot


def check_action(action: str | None) -> str:
    if action not in ACTIONS:
        raise bad(f"Invalid action: ?action= must be one of {', '.join(ACTIONS)}",
                  "invalid_action")  # fmt: skip
    return action


def _target(gen: Any, slot: int) -> Any:
    """The slot's target context, where its memory can be saved and set whole."""
    ctx = gen.slot_target(slot)
    if not hasattr(ctx, "state_handle"):  # recurrent and hybrid models: rolled back from
        raise ApiError(501, "slot files are not supported for this model's memory (a "
                       "recurrent or hybrid model)", "not_supported")  # fmt: skip
    return ctx


def _save(gen: Any, slot: int, name: str, path: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    ctx = _target(gen, slot)
    if ctx.dirty:  # a failed pass: cells past n_past go, as before the next prompt
        ctx.truncate(ctx.n_past)
    if getattr(ctx, "pending_holes", 0):  # --cache-reuse's holes: evaluated, as next pass
        ctx.settle()
    try:
        size = slot_files.save(ctx, path, gen.exclusive)
    except OSError as e:
        raise ApiError(500, f"Unable to save slot: {name}: {e.strerror or e}",
                       "slot_save_failed") from None  # fmt: skip
    return {"id_slot": slot, "filename": name, "n_saved": len(ctx.tokens), "n_written": size,
            "timings": {"save_ms": _ms(t0)}}  # fmt: skip


def _erase(gen: Any, slot: int) -> dict[str, Any]:
    ctx = gen.slot_target(slot)
    n = len(ctx.tokens)
    ctx.truncate(0)
    return {"id_slot": slot, "n_erased": n}


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1e3, 3)

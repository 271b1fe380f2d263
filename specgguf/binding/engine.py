"""A thin, fast layer over llama-cpp-python's low-level (ctypes) API.

Why not the high-level `Llama` class: it copies the logits of every evaluated position into
a numpy array and keeps its own token bookkeeping. Speculative decoding needs the opposite:
one batch whose logits are requested only for the positions we verify, zero-copy views of
those rows, and KV caches that two models roll back independently.

This module is the only one that imports llama_cpp; everything above it sees token ids,
numpy rows and plain exceptions.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from specgguf import interrupts
from specgguf.binding import llama_ext, param_overrides
from specgguf.binding.offload import (
    DEVICE_KINDS,
    Device,
    describe_placement,
    gpu_build_without_device,
    no_device_message,
    offload_targets,
)
from specgguf.binding.outcome import Outcome
from specgguf.core import tree
from specgguf.core.cache_reuse import plan_reuse
from specgguf.core.context import Outputs, common_prefix_len
from specgguf.core.draft import Hear, TargetPass
from specgguf.errors import ExitCode, ModelFileError, SpecggufError
from specgguf.io import log_sink
from specgguf.modelfiles.ggml_types import FLASH_ATTN, KV_CACHE_TYPES

try:  # imported lazily by tests that only need pure modules
    import llama_cpp as ll
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    raise SpecggufError(
        "llama-cpp-python, the runtime of run and bench, is not installed: "
        "pip install 'specgguf[llama]' (or scripts/setup.sh, which builds it for this CPU)",
        ExitCode.NO_RUNTIME,
    ) from exc
except (OSError, RuntimeError) as exc:  # pragma: no cover - a GPU build without its driver
    # llama_cpp wraps the dlopen failure in a RuntimeError; for a CUDA build on a machine
    # without the NVIDIA driver it names libcuda: say so in one line, not a traceback.
    why = str(exc).splitlines()[-1] if str(exc) else type(exc).__name__
    hint = (
        "this llama-cpp-python was built for CUDA but the NVIDIA driver (libcuda) is not "
        "here; on a machine without that GPU rebuild it for the CPU: bash scripts/setup.sh"
        if "libcuda" in why
        else "reinstall it with scripts/setup.sh"
    )
    raise SpecggufError(
        f"llama-cpp-python failed to load ({why}): {hint}", ExitCode.RUNTIME
    ) from exc


T = TypeVar("T")

_backend_ready = False
_verbose = False
# llama.cpp keeps these function pointers for the process lifetime: keep the objects alive.
_log_callback = None
_progress_callback = None
_abort_callback = None
_NO_ABORT = ll.ggml_abort_callback()  # a NULL function pointer: no abort check
#: called with every llama.cpp log line while set (specgguf.binding.devices reads layer placement)
log_listener = None
#: llama_state_seq_*_ext flag: only the partial state (a recurrent state, a sliding window)
_PARTIAL_STATE = ll.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
#: batches at least this long (prompt chunks) are evaluated with llama.cpp's abort check, so a
#: signal stops a long prompt evaluation within one graph node; short verification batches skip
#: it (the check is a Python call per graph node).
ABORTABLE_BATCH = 64


@interrupts.callback
def _log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    """llama.cpp's log callback: to the command's log sink while one is set
    (specgguf.io.log_sink: -lv, --log-file, --log-prefix ...), else stderr with -v. It must
    never raise: an exception cannot cross C and ctypes would print it and drop it."""
    try:
        if log_listener is not None and text:
            log_listener(text)
        sink = log_sink.current
        if sink is not None:
            sink(level, text)
        elif _verbose and text:
            os.write(2, text)
    except (OSError, ValueError):  # a stream or log file closed meanwhile
        pass
    except KeyboardInterrupt:  # only without interrupts.handling() (library use)
        interrupts.note(signal.SIGINT)


@interrupts.callback
def _keep_going(_progress: float, _user: ctypes.c_void_p) -> bool:
    """Model-load progress: returning False makes llama.cpp abandon the load at once."""
    return not interrupts.pending()


class GaveWay(Exception):
    """A `decode_rows` batch was abandoned part-way because its `give_way` check said so;
    nothing of it is in the cache."""


@interrupts.callback
def _abort(_user: ctypes.c_void_p) -> bool:
    """ggml's abort check between graph nodes: True stops llama_decode (it returns 2)."""
    return interrupts.pending()


def on_passing_thread(fn: Callable[[], T]) -> T:
    """Run `fn` (the few decodes made while loading: the memory probe) on a thread that ends
    with it, and return what it returns or raise what it raises.

    Why: llama.cpp's CPU backend, built with OpenMP, keeps a team of worker threads for every
    thread that has decoded, until that thread ends. With a second team alive beside the one
    of the thread that does the work (a server's worker or step thread), every later decode
    ran about 35% slower on this 2-core machine (presumably because OpenMP, managing more
    threads than there are cores, stops letting its workers spin between passes)."""
    out = Outcome()
    t = threading.Thread(target=out.run, args=(fn,), name="specgguf-load")
    t.start()
    t.join()
    return out.result()


def init_backend(verbose: bool = False) -> None:
    """Initialise llama.cpp once, routing its logs to stderr only when asked (`-v`). The log
    callback is set again on every call: other code in the process (llama-cpp-python's own
    classes, a library user) may have set its own since, and a command's --log-file and -v
    must see llama.cpp's lines."""
    global _backend_ready, _log_callback, _progress_callback, _abort_callback, _verbose
    _verbose = verbose
    if _backend_ready:
        ll.llama_log_set(_log_callback, ctypes.c_void_p(0))
        return
    _log_callback = ll.llama_log_callback(_log)
    _progress_callback = ll.llama_progress_callback(_keep_going)
    _abort_callback = ll.ggml_abort_callback(_abort)
    ll.llama_log_set(_log_callback, ctypes.c_void_p(0))
    ll.llama_backend_init()
    _backend_ready = True
    interrupts.check()


def numa_init(strategy: int) -> None:
    """--numa: llama.cpp's NUMA placement (ggml_numa_strategy), once, before a model loads."""
    init_backend(_verbose)
    ll.llama_numa_init(strategy)


def gpu_offload_supported() -> bool:
    return bool(ll.llama_supports_gpu_offload())


# -- devices and layer placement (the rules are in specgguf.binding.offload) ----------------


def _ggml():
    """ggml's library as llama_cpp loaded it, with the device API's signatures (the 0.3.36
    bindings export none of ggml_backend_dev_*); None if it cannot be reached."""
    try:
        from llama_cpp import _ggml

        lib = _ggml.libggml
    except Exception:  # pragma: no cover - a bindings layout we do not know
        return None
    if not getattr(lib, "_specgguf_typed", False):
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        for name, args, res in (
            ("ggml_backend_dev_count", [], sz), ("ggml_backend_dev_get", [sz], vp),
            ("ggml_backend_dev_name", [vp], ctypes.c_char_p),
            ("ggml_backend_dev_description", [vp], ctypes.c_char_p),
            ("ggml_backend_dev_type", [vp], ctypes.c_int),
            ("ggml_backend_dev_memory", [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)], None),
            ("ggml_backend_dev_backend_reg", [vp], vp),
            ("ggml_backend_reg_count", [], sz), ("ggml_backend_reg_get", [sz], vp),
            ("ggml_backend_reg_name", [vp], ctypes.c_char_p),
            ("ggml_backend_reg_dev_count", [vp], sz),
        ):  # fmt: skip
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
        lib._specgguf_typed = True
    return lib


def backend_devices(*, memory: bool = False) -> list[Device]:
    """ggml's devices (CPU, CUDA0, ...); `memory` also asks each GPU its free memory (which
    initialises it: only worth it to split layers between several GPUs)."""
    init_backend(_verbose)
    lib = _ggml()
    if lib is None:
        return []
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        t = lib.ggml_backend_dev_type(dev)
        kind = DEVICE_KINDS[t] if 0 <= t < len(DEVICE_KINDS) else "other"
        free = ctypes.c_size_t(0)
        if memory and kind in ("gpu", "igpu"):
            lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(ctypes.c_size_t()))
        reg = lib.ggml_backend_dev_backend_reg(dev)
        out.append(Device(
            (lib.ggml_backend_dev_name(dev) or b"?").decode(), kind,
            (lib.ggml_backend_reg_name(reg) or b"").decode() if reg else "",
            (lib.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace"),
            free.value,
        ))  # fmt: skip
    return out


def require_gpu_if_built_for_one() -> None:
    """Refuse, in one line, a GPU build that finds no GPU (see specgguf.binding.offload)."""
    init_backend(_verbose)
    lib = _ggml()
    if lib is None:
        return
    regs = []
    for i in range(lib.ggml_backend_reg_count()):
        reg = lib.ggml_backend_reg_get(i)
        regs.append(((lib.ggml_backend_reg_name(reg) or b"").decode(),
                     lib.ggml_backend_reg_dev_count(reg)))  # fmt: skip
    missing = gpu_build_without_device(regs)
    if missing is not None:
        raise SpecggufError(no_device_message(missing), ExitCode.RUNTIME)


def offload_summary(model: Model, n_gpu_layers: int) -> str:
    """Where `model`'s layers went with -ngl `n_gpu_layers` (llama.cpp's split, from its
    layer count and the devices present), e.g. "28/29 layers on CUDA0 (1 on CPU)"."""
    devices = backend_devices()
    if len(offload_targets(devices)) > 1:
        devices = backend_devices(memory=True)
    return describe_placement(int(ll.llama_model_n_layer(model.ptr)), n_gpu_layers, devices)


def parse_gpu_layers(value: str) -> int:
    """llama.cpp's `-ngl N|auto|all` as the int llama_model_params wants (-1 = all layers).

    llama.cpp's `auto` fits as many layers as free memory allows; the bindings expose no fit
    API, so `auto` here means all layers when this build can offload at all, else none.
    """
    v = value.strip().lower()
    if v == "all":
        return -1
    if v == "auto":
        return -1 if gpu_offload_supported() else 0
    try:
        n = int(v)
    except ValueError:
        raise SpecggufError(
            f"invalid value for -ngl: {value!r} (expected a number, 'auto' or 'all')"
        ) from None
    if n < -1:
        raise SpecggufError(f"invalid value for -ngl: {value!r} (must be >= -1)")
    return n


class Model:
    """Weights and vocabulary of one GGUF file."""

    def __init__(
        self,
        path: Path,
        *,
        n_gpu_layers: int = 0,
        repack: bool = True,
        devices: Sequence[int] | None = None,
        load_mtp: bool = False,
        overrides: Sequence[tuple[str, Any]] = (),
    ) -> None:
        """`load_mtp`: load the model's NextN (MTP) layers too, which llama.cpp skips by
        default; an MTP context over a model loaded without them aborts in llama.cpp.
        `overrides`: llama_model_params fields the command line sets (-lm, -sm, -ts ...)."""
        init_backend(_verbose)
        self.path = Path(path)
        params = ll.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.load_mtp = load_mtp
        #: whether the NextN layers were loaded (what an MTP context checks first)
        self.mtp_loaded = load_mtp
        if devices is not None:  # -dev: ggml_backend_dev_t list, NULL-terminated (none: empty)
            dev_array = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
            params.devices = ctypes.cast(dev_array, ctypes.c_void_p)
        # -nr/--no-repack: llama.cpp's way around crashes in repacked (AMX) kernels.
        params.use_extra_bufts = repack
        params.progress_callback = _progress_callback
        self._param_arrays = param_overrides.apply(params, overrides)  # alive while loading
        ptr = ll.llama_model_load_from_file(str(self.path).encode(), params)
        if interrupts.pending():  # abandoned, or finished while the signal waited
            if ptr:
                ll.llama_model_free(ptr)
            interrupts.raise_pending()
        if not ptr:
            raise ModelFileError(f"{self.path}: llama.cpp failed to load the model (run with -v)")
        self.ptr = ptr
        self.vocab = ll.llama_model_get_vocab(ptr)
        self.n_vocab = int(ll.llama_vocab_n_tokens(self.vocab))
        self.n_ctx_train = int(ll.llama_model_n_ctx_train(ptr))
        self.add_bos = bool(ll.llama_vocab_get_add_bos(self.vocab))
        self.bos = int(ll.llama_vocab_bos(self.vocab))
        self.eos = int(ll.llama_vocab_eos(self.vocab))
        self.n_layer = int(ll.llama_model_n_layer(ptr))
        self.n_embd = int(ll.llama_model_n_embd(ptr))
        # what llama-server's /v1/models tells of the model (its `meta`)
        self.vocab_type = int(ll.llama_vocab_type(self.vocab))
        self.n_params = int(ll.llama_model_n_params(ptr))
        self.size = int(ll.llama_model_size(ptr))  # bytes of its tensors
        self.ftype = (ll.llama_ftype_name(ll.llama_model_ftype(ptr)) or b"").decode()
        self.architecture = self.meta("general.architecture") or ""
        #: the fill-in-the-middle tokens llama.cpp found (GGUF keys or known token texts), by
        #: role: pre, suf, mid, rep (repository), sep (file separator); None where absent
        self.fim: dict[str, int | None] = {}
        for role in ("pre", "suf", "mid", "rep", "sep"):
            t = int(getattr(ll, f"llama_vocab_fim_{role}")(self.vocab))
            self.fim[role] = t if t >= 0 else None
        self._pieces: dict[int, bytes] = {}
        self._special_pieces: dict[int, bytes] = {}

    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as text (llama.cpp's reading of it), None when absent."""
        buf = ctypes.create_string_buffer(256)
        n = ll.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        out = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self.vocab, data, len(data), out, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            out = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self.vocab, data, len(data), out, cap, add_special, parse_special)
        return list(out[:n])

    def piece(self, token: int) -> bytes:
        """Bytes of one token (special tokens render as nothing); memoised: the loop asks
        for every emitted token and pieces never change."""
        cached = self._pieces.get(token)
        if cached is None:
            cached = self._pieces[token] = self._render_piece(token, special=False)
        return cached

    def piece_special(self, token: int) -> bytes:
        """Bytes of one token with control tokens spelled out ("<|im_end|>"): the text another
        vocabulary must see to map a chat marker onto its own special token."""
        cached = self._special_pieces.get(token)
        if cached is None:
            cached = self._special_pieces[token] = self._render_piece(token, special=True)
        return cached

    def _render_piece(self, token: int, *, special: bool) -> bytes:
        """llama.cpp's bytes of one token (a cache miss of `piece` or `piece_special`)."""
        buf = ctypes.create_string_buffer(256)  # per miss: a server's slot threads race
        n = ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        return bool(ll.llama_vocab_is_eog(self.vocab, token))

    def close(self) -> None:
        if self.ptr:
            ll.llama_model_free(self.ptr)
            self.ptr = None


@dataclass(frozen=True)
class ContextParams:
    n_ctx: int = 0  # 0: the model's training context, as llama.cpp
    n_batch: int = 2048
    n_ubatch: int = 512
    n_threads: int = 0  # 0: all usable cores
    flash_attn: str = "auto"
    type_k: str = "f16"  # -ctk / -ctkd
    type_v: str = "f16"  # -ctv / -ctvd
    #: sequences the context holds at once (a server's -np batched into one context); more
    #: than one makes the KV cache unified, so one batch may mix any rows of any sequences
    n_seq_max: int = 1
    #: llama_context_params fields the command line sets (-tb, RoPE/YaRN, -nkvo ...), written
    #: last: (field, value) pairs
    overrides: tuple[tuple[str, Any], ...] = ()


def llama_params(params: ContextParams):  # noqa: ANN201 - llama_cpp.llama_context_params
    """llama.cpp's context parameters for `params` (every context specgguf makes starts here:
    a target's, a draft's, an EAGLE-3 head's, an MTP context)."""
    cp = ll.llama_context_default_params()
    cp.n_ctx = params.n_ctx
    cp.n_batch = params.n_batch
    cp.n_ubatch = min(params.n_ubatch, params.n_batch)
    threads = params.n_threads if params.n_threads > 0 else default_threads()
    cp.n_threads = threads
    cp.n_threads_batch = threads
    cp.flash_attn_type = FLASH_ATTN[params.flash_attn]
    cp.type_k = KV_CACHE_TYPES[params.type_k]
    cp.type_v = KV_CACHE_TYPES[params.type_v]
    cp.no_perf = True
    cp.n_seq_max = params.n_seq_max
    cp.kv_unified = params.n_seq_max > 1
    param_overrides.apply(cp, params.overrides)  # scalars only: nothing to keep alive
    return cp


def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def check_room(needed: int, n_ctx: int) -> None:
    """A decode that would need more positions than a sequence has: one line, exit PROMPT."""
    if needed > n_ctx:
        raise SpecggufError(f"context full: {needed} tokens needed, -c is {n_ctx}", ExitCode.PROMPT)


def own_rows(ctx, tokens: Sequence[int], pos: Sequence[int], seq: Sequence[int]):  # noqa: ANN001, ANN201
    """Before a decode_beside pass on `ctx` (an engine Context or a shared-pass sequence):
    the (token, position) rows of its own sequence 0, checked against its room, and the
    sequence rolled back to where they start when it holds more (or a failed pass left
    cells)."""
    own = [(t, p) for t, p, s in zip(tokens, pos, seq, strict=True) if s == 0]
    if own:
        start = own[0][1]
        check_room(start + len(own), ctx.n_ctx)
        if start < len(ctx.tokens) or ctx._dirty:
            ctx.truncate(start)
    return own


def record_own_rows(ctx, own: Sequence[tuple[int, int]]) -> None:  # noqa: ANN001
    """After the pass: sequence 0's rows are in `ctx`'s cache, so in its bookkeeping."""
    for t, p in own:
        ctx.tokens.append(t)
        ctx.n_past = p + 1


@dataclass
class TreePass:
    """A draft tree laid out as KV cells: what one pass evaluates and what `keep` settles.

    Leaf k's sequence is `seqs[k]`; `seqs[0]` is the generation's own sequence, the others
    exist only for the round. Each node's cell belongs to the sequences of every leaf below
    it, the root's to all, so under llama.cpp's mask (a row sees the cells of its first
    sequence at positions up to its own) each node sees its ancestors and the prefix, and
    nothing of its siblings' branches: as if its path were decoded alone."""

    root: int
    tokens: list[int]
    pos0: int
    seqs: list[int]
    #: node -> the leaves (indices into seqs) its cell belongs to
    below: list[list[int]]
    depth: list[int]

    @classmethod
    def lay_out(
        cls,
        root: int,
        tokens: Sequence[int],
        parents: Sequence[int],
        pos0: int,
        seqs: Sequence[int],
    ) -> TreePass:
        """The layout of a tree whose leaves take `seqs` in order (at least as many)."""
        ends, below = tree.leaf_sets(parents)
        if len(ends) > len(seqs):
            raise ValueError(f"a tree of {len(ends)} leaves, {len(seqs)} sequences for them")
        return cls(root, list(tokens), pos0, list(seqs[: len(ends)]), below, tree.depths(parents))

    @property
    def end(self) -> int:
        """One past the deepest position the pass writes."""
        return self.pos0 + 1 + max(self.depth, default=0)

    def rows(self) -> tuple[list[int], list[int], list[tuple[int, ...]]]:
        """(tokens, positions, sequence sets) of the pass: the root, then one row per node."""
        toks = [self.root, *self.tokens]
        pos = [self.pos0, *(self.pos0 + d for d in self.depth)]
        sets = [tuple(self.seqs), *(tuple(self.seqs[k] for k in b) for b in self.below)]
        return toks, pos, sets

    def share(self, memory) -> None:  # noqa: ANN001 - llama_memory_t
        """Before the pass: every branch's sequence sees the prefix (cells shared, none
        copied)."""
        for s in self.seqs[1:]:
            ll.llama_memory_seq_cp(memory, self.seqs[0], s, -1, -1)

    def keep(self, memory, path: Sequence[int]) -> list[int]:  # noqa: ANN001
        """After the verdict: the root and the accepted nodes `path` become the main
        sequence's next positions (the cells the pass wrote, now its own), every other node
        and every branch sequence are dropped. Returns the kept tokens, root first."""
        main = self.seqs[0]
        leaf = self.seqs[self.below[path[-1]][0]] if path else main
        end = self.pos0 + 1 + len(path)
        if leaf != main:  # the kept branch is another leaf's: the main sequence takes it
            ll.llama_memory_seq_rm(memory, main, self.pos0 + 1, -1)
            ll.llama_memory_seq_cp(memory, leaf, main, self.pos0 + 1, end)
        else:
            ll.llama_memory_seq_rm(memory, main, end, -1)
        for s in self.seqs[1:]:
            ll.llama_memory_seq_rm(memory, s, -1, -1)
        return [self.root, *(self.tokens[i] for i in path)]

    def drop(self, memory) -> None:  # noqa: ANN001
        """After a failed pass: the branches gone, the main sequence back to pos0."""
        for s in self.seqs[1:]:
            ll.llama_memory_seq_rm(memory, s, -1, -1)
        ll.llama_memory_seq_rm(memory, self.seqs[0], self.pos0, -1)


class Context:
    """One sequence's KV cache over a Model, plus a reusable batch.

    Positions are managed by the caller: `decode(tokens, pos0)` places tokens at
    pos0..pos0+n-1, and `truncate(n)` drops every cell at position >= n (the rollback).
    The context remembers which token sits at each position (`tokens`), so a new prompt that
    starts like what the cache already holds can keep that prefix (`keep_prefix`) instead of
    evaluating it again: a conversation's next turn, batch lines with one system prompt.
    """

    def __init__(self, model: Model, params: ContextParams) -> None:
        self.model = model
        ptr = ll.llama_init_from_model(model.ptr, llama_params(params))
        if interrupts.pending():  # a signal that came while llama.cpp was logging
            if ptr:
                ll.llama_free(ptr)
            interrupts.raise_pending()
        if not ptr:
            size = params.n_ctx or model.n_ctx_train
            raise SpecggufError(
                f"{model.path}: failed to create a context of {size} tokens"
                + (" (-c 0: the model's training context)" if not params.n_ctx else "")
                + " (llama.cpp's reason: run with -v; common ones: out of memory, try a smaller -c;"
                " a quantized KV cache whose block size does not divide the head size)",
                ExitCode.RUNTIME,
            )
        self.ptr = ptr
        self.n_ctx = int(ll.llama_n_ctx(ptr))
        self.n_batch = int(ll.llama_n_batch(ptr))
        self.n_vocab = model.n_vocab
        self.memory = ll.llama_get_memory(ptr)
        #: sequences the context holds (a server's slots, or a tree's branches)
        self.n_seq = max(1, params.n_seq_max)
        self._batch = ll.llama_batch_init(self.n_batch, 0, self.n_seq)
        for i in range(self.n_batch):  # one sequence, id 0, set once
            self._batch.n_seq_id[i] = 1
            self._batch.seq_id[i][0] = 0
        #: the tree of the last decode_tree, until keep_path settles it
        self._tree: TreePass | None = None
        self.n_past = 0
        #: the token at each position the KV cache holds (len == n_past)
        self.tokens: list[int] = []
        # a decode that failed or was interrupted part-way may have left cells past n_past
        self._dirty = False
        #: the layers whose hidden states every decode captures (`capture`)
        self.captured: tuple[int, ...] = ()
        #: what the abort check asks during a decode_rows(..., give_way=) batch
        self._give_way: Callable[[], bool] | None = None
        #: --cache-reuse N: keep_prefix also moves cached chunks of >= N tokens (0: never)
        self.cache_reuse = 0
        #: --cache-ram: keep_prefix swaps whole sequences with a host-memory prompt cache
        #: (binding.prompt_cache.PromptCache; None: none)
        self.prompt_cache = None
        #: prompt tokens the last keep_prefix evaluated in the holes between moved chunks
        #: (counted among its kept positions, though evaluated)
        self.refilled = 0
        #: the holes of the last --cache-reuse plan not evaluated yet, (position, tokens) in
        #: prompt order: the next pass evaluates them first (`settle`), so a context that
        #: is not decoded in a request (a draft model auto leaves idle) pays neither for them
        #: nor for the shift pass
        self._holes: list[tuple[int, list[int]]] = []
        #: --cache-reuse: shifted chunks shorter than this many tokens are evaluated again
        #: instead (ReusePlan.worth_shifting; `time_shift` measures it); 0: always shift
        self.shift_break_even = 0
        #: keep_prefix calls that shifted cells (each costs one shift pass of the whole
        #: cache at the next decode)
        self.shifts = 0
        self._give_way_check = ll.ggml_abort_callback(self._gives_way)  # alive with self

    def capture(self, layers: Sequence[int]) -> None:
        """Capture these layers' hidden states on every decode from now on (what a drafter
        that hears the target reads; see `decode`'s `hear`): an id below the model's layer
        count is that layer's input, the layer count itself the state the architecture hands
        its NextN layers (core.draft.Drafter.hears). Refused, before llama.cpp could abort on
        it, where this model's graph does not record what is asked."""
        api = llama_ext.require_ext("a drafter that reads the target's hidden states")
        model = self.model
        for layer in layers:
            if not 0 <= layer <= model.n_layer:
                raise SpecggufError(
                    f"{model.path.name}: a drafter asks for hidden layer {layer}, the model has "
                    f"{model.n_layer} layers",
                    ExitCode.INCOMPATIBLE,
                )
            if layer < model.n_layer:
                llama_ext.require_layer_inputs(model.architecture, model.path.name)
            elif not llama_ext.outputs_last_state(model.architecture, model.mtp_loaded):
                raise SpecggufError(
                    f"{model.path.name}: this libllama does not hand over the last layer's "
                    f"state of a {model.architecture!r} model",
                    ExitCode.INCOMPATIBLE,
                )
        for layer in layers:
            if layer < model.n_layer:
                api.set_embeddings_layer_inp(self.ptr, layer, True)
            else:
                api.set_embeddings_nextn(self.ptr, True, False)
        self.captured = tuple(layers)
        self._ext = api

    def _heard(self, tokens: Sequence[int], pos0: int) -> TargetPass:
        """The pass just decoded, with zero-copy views of the captured rows."""
        n, width = len(tokens), self.model.n_embd
        hidden = {}
        for layer in self.captured:
            ptr = (
                self._ext.get_embeddings_layer_inp(self.ptr, layer)
                if layer < self.model.n_layer
                else self._ext.get_embeddings_nextn(self.ptr)
            )
            if not ptr:
                raise SpecggufError(
                    f"llama.cpp returned no hidden states for layer {layer}", ExitCode.RUNTIME
                )
            hidden[layer] = np.ctypeslib.as_array(ptr, shape=(n, width))
        return TargetPass(tokens, pos0, hidden)

    @interrupts.atomic
    def decode(
        self,
        tokens: Sequence[int],
        pos0: int,
        *,
        outputs: Outputs = "last",
        hear: Hear | None = None,
    ) -> np.ndarray | None:
        """Evaluate tokens at positions pos0.. and return a zero-copy (n_out, n_vocab) view of
        the requested logits ("last", "all" or "none"); valid until the next decode.

        Batches longer than n_batch (prompts) are split; only the final chunk can output.
        With `hear` (and layers captured), each chunk's rows are handed to it right after
        that chunk is decoded, while llama.cpp's buffers still hold them.
        """
        if hear is not None and not self.captured:
            raise ValueError("decode(hear=...) on a context that captures no layers")
        n = len(tokens)
        if n == 0:
            return None
        check_room(pos0 + n, self.n_ctx)
        if pos0 < len(self.tokens) or self._dirty:  # (an interrupted decode left cells)
            self.truncate(pos0)
        self.settle()
        b = self._batch
        start = 0
        while start < n:
            end = min(n, start + self.n_batch)
            final = end == n
            m = end - start
            for j in range(m):
                b.token[j] = tokens[start + j]
                b.pos[j] = pos0 + start + j
                b.logits[j] = final and (outputs == "all" or (outputs == "last" and j == m - 1))
            b.n_tokens = m
            abortable = m >= ABORTABLE_BATCH
            if abortable:
                ll.llama_set_abort_callback(self.ptr, _abort_callback, None)
            rc = ll.llama_decode(self.ptr, b)
            if abortable:
                ll.llama_set_abort_callback(self.ptr, _NO_ABORT, None)
            if rc != 0:
                # failed, or abandoned by the abort check: cells may be left past n_past
                self._dirty = True
                if interrupts.pending():
                    interrupts.raise_pending()
                raise SpecggufError(f"llama_decode failed with status {rc}", ExitCode.RUNTIME)
            # each chunk that is in the cache is recorded at once: an interrupt between
            # chunks leaves `tokens` true to what the cache holds
            self.tokens.extend(tokens[start:end])
            self.n_past = pos0 + end
            if hear is not None:
                hear(self._heard(tokens[start:end], pos0 + start))
            start = end
            if interrupts.pending():  # a signal that came during a callback
                interrupts.check()
        if outputs == "none":
            return None
        n_out = 1 if outputs == "last" else m
        ptr = ll.llama_get_logits(self.ptr)
        return np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab))

    def decode_rows(
        self,
        tokens: Sequence[int],
        pos: Sequence[int],
        seq: Sequence[int],
        logits: Sequence[bool],
        *,
        give_way: Callable[[], bool] | None = None,
    ) -> np.ndarray:
        """One llama_decode of rows that may belong to several sequences (a context made with
        n_seq_max > 1): row j is `tokens[j]` at `pos[j]` of sequence `seq[j]` (or of each
        sequence of a tuple there: a tree node's cell, shared by its leaves), with its
        logits computed where `logits[j]`. Returns a zero-copy (n_out, n_vocab) view of those
        rows in batch order, valid until the next decode. At most n_batch rows; the caller
        keeps each sequence's positions and bookkeeping (specgguf.binding.batched), so a
        context decoded this way is not decoded through `decode` (whose rows are sequence 0).

        `give_way`, when given, is asked between the graph's nodes (llama.cpp's abort check: a
        Python call per node, worth it for wide batches only); once it says True the batch is
        abandoned: every sequence in it loses its positions from its first row here on (the
        rows of a batch split in several micro-batches included) and this raises GaveWay.
        """
        n = len(tokens)
        if not 0 < n <= self.n_batch:
            raise ValueError(f"decode_rows: {n} rows, the batch holds 1..{self.n_batch}")
        b = self._batch
        sets = [(s,) if isinstance(s, int) else tuple(s) for s in seq]
        for j in range(n):
            b.token[j] = tokens[j]
            b.pos[j] = pos[j]
            b.n_seq_id[j] = len(sets[j])
            for k, s_ in enumerate(sets[j]):
                b.seq_id[j][k] = s_
            b.logits[j] = logits[j]
        b.n_tokens = n
        try:
            if give_way is None:
                rc = ll.llama_decode(self.ptr, b)
            else:
                self._give_way = give_way
                ll.llama_set_abort_callback(self.ptr, self._give_way_check, None)
                try:
                    rc = ll.llama_decode(self.ptr, b)
                finally:
                    ll.llama_set_abort_callback(self.ptr, _NO_ABORT, None)
                    self._give_way = None
        finally:
            for j in range(n):  # rows of sequence 0 alone again (what decode expects)
                b.n_seq_id[j], b.seq_id[j][0] = 1, 0
        if rc == 2 and give_way is not None:
            first: dict[int, int] = {}
            for ss, p_ in zip(sets, pos, strict=True):
                for s_ in ss:
                    first[s_] = min(p_, first.get(s_, p_))
            for s_, p_ in first.items():
                self.seq_rm(s_, p_)
            raise GaveWay
        if rc != 0:
            raise SpecggufError(f"llama_decode failed with status {rc}", ExitCode.RUNTIME)
        n_out = sum(map(bool, logits))
        if n_out == 0:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        ptr = ll.llama_get_logits(self.ptr)
        return np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab))

    # -- tree drafts: one pass over every node, each seeing exactly its ancestors ------------

    @property
    def tree_width(self) -> int:
        """The most leaves a tree decoded here may have (1: chains only). Each leaf is a
        sequence of the unified KV cache: sequence 0 is the generation's own, the others
        exist only during a tree round."""
        return self.n_seq

    @interrupts.atomic
    def decode_tree(
        self, root: int, tokens: Sequence[int], parents: Sequence[int], pos0: int
    ) -> np.ndarray:
        """Evaluate a draft tree in ONE llama_decode (TreePass: each node sees exactly its
        ancestors): `root` (the round's last token) at pos0, node i (`tokens[i]`, below
        `parents[i]`, -1: the root) at pos0 + its depth. Returns a zero-copy
        (1 + len(tokens), n_vocab) view of the logits, the root's row first, then one per
        node; valid until the next decode. `keep_path` must follow."""
        t = TreePass.lay_out(root, tokens, parents, pos0, range(self.n_seq))
        check_room(t.end, self.n_ctx)
        if pos0 < len(self.tokens) or self._dirty:
            self.truncate(pos0)
        self.settle()
        t.share(self.memory)
        self._tree = t
        toks, pos, sets = t.rows()
        try:
            return self.decode_rows(toks, pos, sets, [True] * len(toks))
        except BaseException:
            self._tree = None
            t.drop(self.memory)
            self._dirty = True
            if interrupts.pending():
                interrupts.raise_pending()
            raise

    @interrupts.atomic
    def keep_path(self, path: Sequence[int]) -> None:
        """Settle the last decode_tree: keep the root and the accepted nodes `path` (a branch
        from the root down) as the sequence's next positions, drop every other node."""
        t = self._tree
        if t is None:
            raise ValueError("keep_path without a decode_tree")
        self._tree = None
        kept = t.keep(self.memory, path)
        del self.tokens[t.pos0 :]
        self.tokens.extend(kept)
        self.n_past = t.pos0 + len(kept)

    # -- branches of a draft: sequences beside sequence 0 (specgguf.drafters.draft_tree) ----

    def fork(self, src: int, dst: int) -> None:
        """Sequence `dst` becomes a copy of `src` (cells shared, nothing evaluated)."""
        self.settle()
        ll.llama_memory_seq_cp(self.memory, src, dst, -1, -1)

    def decode_beside(
        self, tokens: Sequence[int], pos: Sequence[int], seq: Sequence[int]
    ) -> np.ndarray:
        """One pass over rows of several sequences, logits for each row (a zero-copy view,
        valid until the next decode): row j is `tokens[j]` at `pos[j]` of sequence `seq[j]`.
        Rows of sequence 0 extend the context's own bookkeeping (`tokens`, `n_past`), as
        `decode` would; the other sequences are the caller's to keep and to drop."""
        self.settle()
        own = own_rows(self, tokens, pos, seq)
        try:
            out = self.decode_rows(tokens, pos, seq, [True] * len(tokens))
        except SpecggufError:
            self._dirty = True
            raise
        record_own_rows(self, own)
        return out

    @interrupts.callback
    def _gives_way(self, _user: ctypes.c_void_p) -> bool:
        """The abort check of a decode_rows batch with `give_way` (never raises into C)."""
        try:
            return self._give_way is not None and bool(self._give_way())
        except Exception:  # noqa: BLE001 - a broken check must not stop the batch
            return False

    def seq_rm(self, seq: int, p0: int) -> None:
        """Forget every cell of sequence `seq` at position >= p0 (one sequence's rollback in a
        context that holds several)."""
        ll.llama_memory_seq_rm(self.memory, seq, max(0, p0), -1)

    def truncate(self, n_keep: int) -> None:
        """Roll back: forget every position >= n_keep.

        A recurrent or hybrid model's memory cannot forget its last positions (its state
        holds no per-position history); llama.cpp then refuses and this raises rather than
        let the bookkeeping drift from the cache. specgguf.binding.checkpoints rolls such a
        context back from saved states instead."""
        n_keep = max(0, n_keep)
        if (n_keep < self.n_past or self._dirty) and not self.remove_from(n_keep):
            raise SpecggufError(
                f"{self.model.path}: this model's memory cannot drop its last positions "
                "(a recurrent or hybrid model)",
                ExitCode.RUNTIME,
            )

    # -- the memory primitives behind truncate and specgguf.binding.checkpoints ------------

    @property
    def dirty(self) -> bool:
        """A decode failed or was interrupted part-way: cells may lie past n_past."""
        return self._dirty

    @interrupts.atomic
    def remove_from(self, p0: int) -> bool:
        """Ask the memory to drop every position >= p0; False (and nothing changed) where
        it cannot, as a recurrent state asked for less than the whole sequence."""
        if not ll.llama_memory_seq_rm(self.memory, 0, p0, -1):
            return False
        self._dirty = False
        self.n_past = min(self.n_past, p0)
        del self.tokens[self.n_past :]
        self._holes = [(p, t[: p0 - p]) for p, t in self._holes if p < p0]
        return True

    @interrupts.atomic
    def clear(self) -> None:
        """Forget the whole sequence (any memory can)."""
        ll.llama_memory_clear(self.memory, True)
        self._dirty = False
        self.n_past = 0
        self.tokens.clear()
        self._holes = []

    def save_state(self, into: bytearray | None = None) -> bytearray:
        """The sequence's recurrent state as it is now, without its attention KV (llama.cpp's
        partial-state flag): what a later `load_state` needs to return to this position.
        `into`, when given and of the right size, is reused (no allocation per round)."""
        size = ll.llama_state_seq_get_size_ext(self.ptr, 0, _PARTIAL_STATE)
        buf = into if into is not None and len(into) == size else bytearray(size)
        if size:
            view = (ctypes.c_uint8 * size).from_buffer(buf)
            ll.llama_state_seq_get_data_ext(self.ptr, view, size, 0, _PARTIAL_STATE)
            del view  # releases the export: the bytearray may be resized again
        return buf

    @interrupts.atomic
    def load_state(self, state: bytearray, n_past: int) -> None:
        """Return to a state `save_state` took when the cache held n_past positions: the
        recurrent part is restored, the attention KV past n_past dropped."""
        size = len(state)
        view = (ctypes.c_uint8 * size).from_buffer(state)
        ok = ll.llama_state_seq_set_data_ext(self.ptr, view, size, 0, _PARTIAL_STATE) == size
        del view
        if not ok or not ll.llama_memory_seq_rm(self.memory, 0, n_past, -1):
            self._dirty = True
            raise SpecggufError(
                f"{self.model.path}: restoring a saved sequence state failed", ExitCode.RUNTIME
            )
        self._dirty = False
        self.n_past = n_past
        del self.tokens[n_past:]

    def keep_prefix(self, tokens: Sequence[int]) -> int:
        """Keep the longest prefix of the cache that equals the start of `tokens`, drop the
        rest, and return its length: the positions a new sequence need not evaluate again.
        (Each cell's key and value depend only on the tokens before it, so a cell whose whole
        prefix matches is exactly what a fresh evaluation would compute.)"""
        self.refilled = 0
        if self._holes:  # a pass never came: the cells after the first hole lack their past
            self.truncate(self._holes[0][0])
        n = common_prefix_len(self.tokens, tokens)
        if self.prompt_cache is not None:
            n = self.prompt_cache.swap(self, tokens, n)
        if self.cache_reuse > 0 and n < self.n_past:
            n = self._move_chunks(tokens, n)
        self.truncate(n)
        return n

    def state_handle(self) -> tuple[Any, int]:
        """llama.cpp's context and this cache's sequence id (binding.prompt_cache)."""
        return self.ptr, 0

    @interrupts.atomic
    def _move_chunks(self, tokens: Sequence[int], n: int) -> int:
        """--cache-reuse (specgguf.core.cache_reuse): shift the cached chunks `tokens`
        repeats to their positions there and evaluate the holes between them; returns how
        much of its start is cached now. Not where the memory cannot shift positions, nor
        while hidden states are captured (a drafter that heard the chunks at their old
        places would not hear them again). Holes need a second sequence (llama.cpp decodes
        a sequence's rows only right after its last cell): without one, the chunks after
        the first hole are dropped. The holes are evaluated by the next pass (`settle`);
        chunks too short to be worth the shift pass are not kept (`shift_break_even`)."""
        if self._dirty or self.captured or not self.can_shift:
            return n
        plan = plan_reuse(self.tokens, tokens, n, self.cache_reuse, holes=self.n_seq > 1)
        plan = plan.worth_shifting(self.shift_break_even)
        for p0, p1 in plan.dropped(len(self.tokens)):
            ll.llama_memory_seq_rm(self.memory, 0, p0, p1)
        for m in plan.shift_order():
            ll.llama_memory_seq_add(self.memory, 0, m.src, m.src + m.n, m.dst - m.src)
        self.shifts += plan.shifts
        self.tokens[:] = tokens[: plan.end]
        self.n_past = plan.end
        self._holes = [(p0, list(tokens[p0:p1])) for p0, p1 in plan.holes()]
        self.refilled = plan.n_holes
        return plan.end

    @property
    def can_shift(self) -> bool:
        """Whether this context's memory can move cells to other positions (not a recurrent
        or hybrid model's)."""
        return bool(ll.llama_memory_can_shift(self.memory))

    @property
    def pending_holes(self) -> int:
        """Hole tokens a pass has yet to evaluate (`settle`)."""
        return sum(len(hole) for _, hole in self._holes)

    def settle(self) -> None:
        """Evaluate the holes the last keep_prefix left (each in place, before the chunk
        after it); the shift pass runs with the first. Every pass over sequence 0 starts
        here."""
        holes, self._holes = self._holes, []
        for pos0, hole in holes:
            self._fill_hole(hole, pos0)

    def time_shift(self, n: int = 8) -> int:
        """Measure, on this empty context, how many prompt tokens its shift pass costs to
        evaluate (rounded up; what `shift_break_even` holds): a pass of `n` tokens, then a
        one-token pass without and with a shift before it, twice. Leaves the context empty.
        Errs towards shifting (the status quo): the first pass also pays the graph's
        allocation, and the smaller of the two shifts is kept (a pause of a busy CPU in one
        of them is not)."""

        def timed(tokens: list[int], pos0: int) -> float:
            t0 = time.perf_counter()
            self.decode(tokens, pos0, outputs="last")
            return time.perf_counter() - t0

        n = max(1, min(n, self.n_ctx - 3))
        try:
            per_token = timed([0] * n, 0) / n
            shift = []
            for _ in range(2):
                self.truncate(n)
                plain = timed([0], n)
                ll.llama_memory_seq_add(self.memory, 0, n, n + 1, 1)
                shift.append(timed([0], n + 2) - plain)
        finally:
            self.clear()
        return max(0, int(-(-min(shift) // per_token)))

    def _fill_hole(self, tokens: Sequence[int], pos0: int) -> None:
        """Evaluate `tokens` at pos0.. of sequence 0, whose cells go on after them: in
        sequence 1, which shares sequence 0's cells before pos0, then handed to sequence 0."""
        ll.llama_memory_seq_rm(self.memory, 1, -1, -1)
        ll.llama_memory_seq_cp(self.memory, 0, 1, 0, pos0)
        try:
            for start in range(0, len(tokens), self.n_batch):
                part = tokens[start : start + self.n_batch]
                pos = range(pos0 + start, pos0 + start + len(part))
                self.decode_rows(part, pos, [1] * len(part), [False] * len(part))
        except BaseException:
            # the cells after the hole lack their past: only what precedes it stays true
            self._dirty = True
            self.n_past = pos0
            del self.tokens[pos0:]
            raise
        finally:
            ll.llama_memory_seq_cp(self.memory, 1, 0, pos0, pos0 + len(tokens))
            ll.llama_memory_seq_rm(self.memory, 1, -1, -1)

    def close(self) -> None:
        if self.ptr:
            ll.llama_batch_free(self._batch)
            ll.llama_free(self.ptr)
            self.ptr = None

"""libllama's grammar sampler as the loop's Constraint (specgguf.core.constraint).

llama.cpp already has the grammar engine (GBNF parsing, the stacks, UTF-8 across tokens, EOG
allowed only where the grammar may end); this module only asks it questions. `allowed` hands
it a small candidate array and reads which logits it set to -inf (llama_sampler_apply), and
`accept` / `clone` are llama_sampler_accept / llama_sampler_clone, so a round can walk its
proposals on clones and the sequence's state moves only over emitted tokens.

Two things llama.cpp does not do gently are kept away from it here: a grammar that does not
parse is printed by llama.cpp straight to the C stderr (not through the log callback), so
compiling captures fd 2 and turns the reason into one GrammarError line; and accepting a token
the grammar forbids throws through C (the process aborts), which the loop never asks for
(RoundStates accepts only what `allowed` said yes to).

Also here, because both need llama-cpp-python: JSON schemas turned into GBNF
(specgguf.grammars.schema_gbnf, over its port of llama.cpp's converter: every keyword enforced
or refused), and what the grammar drafter needs of the model (its single-character
tokens and tokenizer). Compiled grammars are kept per model (a few dozen), so a server that
sees the same schema again clones it instead of parsing it again.
"""

from __future__ import annotations

import ctypes
import os
import re
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from specgguf.binding import engine
from specgguf.binding.engine import ll
from specgguf.drafters.grammar_draft import GrammarDraftSource
from specgguf.errors import SpecggufError
from specgguf.grammars.grammar_bounds import grammar_too_large, schema_too_large
from specgguf.io import json_input

#: compiled grammars kept per model for a server that sees the same schema again
_CACHE_SIZE = 32
_compile_lock = threading.Lock()


class GrammarError(SpecggufError):
    """A grammar (or a JSON schema turned into one) that llama.cpp cannot use; exit 1."""


class _Sampler:
    """Owns one llama_sampler pointer: freed when the last reference goes."""

    __slots__ = ("ptr",)

    def __init__(self, ptr) -> None:
        self.ptr = ptr

    def __del__(self) -> None:
        if self.ptr is not None and ll is not None:
            ll.llama_sampler_free(self.ptr)
            self.ptr = None


class GrammarConstraint:
    """One sequence's grammar state over a model's vocabulary."""

    def __init__(self, sampler: _Sampler, model: engine.Model) -> None:
        self._s = sampler
        self._model = model  # the vocabulary the grammar reads must outlive it
        self._buf = (ll.llama_token_data * 0)()
        self._arr = ll.llama_token_data_array()

    def allowed(self, ids: np.ndarray) -> np.ndarray:
        n = len(ids)
        if len(self._buf) < n:
            self._buf = (ll.llama_token_data * max(n, 64))()
        view = np.ctypeslib.as_array(self._buf)[:n]
        view["id"] = ids
        view["logit"] = 0.0
        view["p"] = 0.0
        self._arr.data = ctypes.cast(self._buf, ll.llama_token_data_p)
        self._arr.size = n
        self._arr.selected = -1
        self._arr.sorted = False
        ll.llama_sampler_apply(self._s.ptr, ctypes.byref(self._arr))
        # the grammar only ever lowers logits to -inf; it never reorders or shrinks the array
        return np.isfinite(view["logit"])

    def accept(self, token: int) -> None:
        ll.llama_sampler_accept(self._s.ptr, int(token))

    def clone(self) -> GrammarConstraint:
        return GrammarConstraint(_Sampler(ll.llama_sampler_clone(self._s.ptr)), self._model)


def compile_grammar(model: engine.Model, gbnf: str, what: str = "--grammar") -> GrammarConstraint:
    """A fresh grammar state for `gbnf` (root rule `root`) over `model`'s vocabulary.

    GrammarError (one line, naming `what`) when llama.cpp refuses it, or when it has more
    parts than llama.cpp parses safely and soon (grammar_bounds)."""
    cache: OrderedDict[str, _Sampler] | None = getattr(model, "_specgguf_grammars", None)
    if cache is None:
        cache = OrderedDict()
        model._specgguf_grammars = cache  # type: ignore[attr-defined]
    proto = cache.get(gbnf)
    if proto is None:
        if not gbnf.strip():
            raise GrammarError(f"{what}: the grammar is empty")
        too_large = grammar_too_large(gbnf)
        if too_large:
            raise GrammarError(f"{what}: {too_large}")
        ptr, reason = _init(model, gbnf)
        if not ptr:
            raise GrammarError(f"{what}: {reason}")
        proto = _Sampler(ptr)
        cache[gbnf] = proto
        while len(cache) > _CACHE_SIZE:
            cache.popitem(last=False)
    else:
        cache.move_to_end(gbnf)
    return GrammarConstraint(proto, model).clone()


_PARSE_ERROR = re.compile(r"error parsing grammar: (.*)")


def _init(model: engine.Model, gbnf: str):
    """llama_sampler_init_grammar with llama.cpp's complaints captured: (pointer or None,
    the reason in one line). For the call, llama.cpp's log goes to its default, the C stderr,
    which is redirected to a file with the parser's own output (whatever log callback was set,
    by specgguf or anyone else, is restored after)."""
    with _compile_lock, tempfile.TemporaryFile() as err:
        callback, user = ll.llama_log_callback(), ctypes.c_void_p()
        ll.llama_log_get(ctypes.byref(callback), ctypes.byref(user))
        saved = os.dup(2)
        try:
            os.dup2(err.fileno(), 2)
            ll.llama_log_set(ll.llama_log_callback(), ctypes.c_void_p(0))  # NULL: the default
            ptr = ll.llama_sampler_init_grammar(model.vocab, gbnf.encode(), b"root")
        finally:
            ll.llama_log_set(callback, user)
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        printed = err.read().decode("utf-8", "replace")
    if ptr:
        return ptr, ""
    m = _PARSE_ERROR.search(printed)
    if m:
        return None, f"the grammar does not parse: {m.group(1).strip()[:200]}"
    for line in printed.splitlines():
        line = line.strip()
        if line and "failed to parse grammar" not in line:
            return None, f"the grammar is not usable: {line[:200]}"
    return None, "the grammar does not parse"


def schema_to_gbnf(schema: object, what: str = "--json-schema") -> str:
    """GBNF for a JSON schema (a dict, true / false, or its JSON text), through
    specgguf.grammars.schema_gbnf (which writes the rules with llama-cpp-python's port of
    llama.cpp's converter, and enforces or refuses every keyword). GrammarError naming `what`
    when the text is not JSON, asks for more repetitions than the converter should write out
    (grammar_bounds), or uses what the grammar cannot enforce."""
    from specgguf.grammars.schema_gbnf import convert

    if isinstance(schema, str):
        try:
            schema = json_input.loads(schema)
        except json_input.JsonInputError as e:
            raise GrammarError(f"{what}: not valid JSON: {e}") from None
    if not isinstance(schema, (dict, bool)):
        raise GrammarError(f"{what}: a JSON schema is an object, not {type(schema).__name__}")
    too_large = schema_too_large(schema)
    if too_large:
        raise GrammarError(f"{what}: {too_large}")
    try:
        gbnf = convert(schema)
    except RecursionError:
        raise GrammarError(f"{what}: the schema nests too deeply to convert") from None
    except Exception as e:  # SchemaRefused, or the converter's bare ValueError/KeyError/...
        why = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        raise GrammarError(f"{what}: the schema cannot be turned into a grammar: {why}") from None
    # the Python converter's string character admits raw control characters, which JSON
    # forbids inside a string (a tab in a "name" would not parse): exclude them, as the C++
    # converter does
    return gbnf.replace(_LOOSE_CHAR, _JSON_CHAR)


_LOOSE_CHAR = r'char ::= [^"\\] |'
_JSON_CHAR = r'char ::= [^"\\\x7F\x00-\x1F] |'


def byte_speller(model: engine.Model) -> Callable[[bytes], list[int] | None]:
    """Bytes -> the model's single-byte tokens that spell them (None when it has no token for
    one of them): how a lazy grammar (specgguf.core.lazy_grammar) is fed the text from its
    trigger on, byte by byte, whatever tokens the model wrote it in. The table is found once
    per model, in id order (byte tokens come first in the usual vocabularies)."""
    table: dict[int, int] | None = getattr(model, "_specgguf_byte_tokens", None)
    if table is None:
        table = {}
        for t in range(model.n_vocab):
            p = model.piece_special(t)
            if len(p) == 1 and p[0] not in table:
                table[p[0]] = t
                if len(table) == 256:
                    break
        model._specgguf_byte_tokens = table  # type: ignore[attr-defined]

    def spell(text: bytes) -> list[int] | None:
        try:
            return [table[b] for b in text]
        except KeyError:
            return None

    return spell


#: the characters the grammar drafter tests one by one: printable ASCII, newline and tab
_DRAFT_CHARS = [chr(c) for c in range(0x20, 0x7F)] + ["\n", "\t"]


def draft_source(model: engine.Model, constraint: GrammarConstraint) -> GrammarDraftSource:
    """What the grammar drafter needs over `model`: `constraint` (a generation's fresh
    grammar), the model's token of each single character (those it has one for), its
    end-of-generation tokens and its tokenizer (cached on the model)."""
    table = getattr(model, "_specgguf_char_tokens", None)
    if table is None:
        ids, chars = [], []
        for c in _DRAFT_CHARS:
            toks = model.tokenize(c, add_special=False, parse_special=False)
            if len(toks) == 1:
                ids.append(toks[0])
                chars.append(c)
        # the grammar allows every end-of-generation token or none: asking about one will do
        eog = [model.eos] if model.eos >= 0 and model.is_eog(model.eos) else []
        table = (np.array(ids, dtype=np.int64), chars, np.array(eog, dtype=np.int64))
        model._specgguf_char_tokens = table  # type: ignore[attr-defined]
    ids, chars, eog = table
    return GrammarDraftSource(
        constraint,
        ids,
        chars,
        eog,
        lambda text: model.tokenize(text, add_special=False, parse_special=False),
    )

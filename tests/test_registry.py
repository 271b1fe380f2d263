"""The one table of --spec-type names (specgguf.drafters.registry), and the choices written once
that the command line, bench and the server all read: draft lengths, KV cache types, -fa."""

from __future__ import annotations

from dataclasses import fields

import pytest
from specgguf_cli import options as o

from specgguf.bench import parse_n_max_list
from specgguf.core.sampling import SamplerParams
from specgguf.drafters.cross_vocab import CrossVocabDrafter
from specgguf.drafters.draft_lengths import AUTO_N_MAX_CAP, N_MAX_LIMIT
from specgguf.drafters.draft_model import DraftModelDrafter
from specgguf.drafters.ngram_options import NGRAM_FLAGS, NgramOptions
from specgguf.drafters.registry import (
    PRIORITY,
    REGISTRY,
    SPEC_TYPES,
    BuildContext,
    needs_draft_model,
    ngram_drafter,
)
from specgguf.errors import UsageError
from specgguf.modelfiles.ggml_types import FLASH_ATTN, KV_CACHE_TYPES
from specgguf.server.protocol import ApiError, parse_speculative

#: llama.cpp's names in its fixed trial order (common/speculative.cpp)
LLAMA_CPP_ORDER = (
    "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
    "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
)  # fmt: skip


#: o.validate's arguments, each a value every command accepts (a test changes one)
VALID = dict(
    n_predict=-1, n_min=0, p_min=0.0, p_split=0.1, temp=0.8, top_p=0.95, min_p=0.05, ctx=None,
    threads=0, threads_draft=0, flash_attn="auto", draft_sampling="auto", batch=2048,
)  # fmt: skip


def test_one_row_per_name_in_llama_cpp_order() -> None:
    # specgguf's own grammar type first, then llama.cpp's, with vLLM's suffix after the
    # n-gram types (a lookup too, over earlier requests' outputs as well)
    ours = list(LLAMA_CPP_ORDER)
    ours.insert(ours.index("ngram-cache") + 1, "suffix")
    assert PRIORITY == ("grammar", *ours) == tuple(t.name for t in REGISTRY)
    for row in REGISTRY:
        # a row is either runnable or says what is missing, never both
        assert (row.builder is None) == (row.unsupported is not None), row.name
        if row.unsupported is not None:
            with pytest.raises(UsageError, match=f"--spec-type {row.name} needs "):
                row.build(BuildContext())


def test_free_types_build_cheap_drafters_of_their_name() -> None:
    for row in REGISTRY:
        if row.params is None:
            continue
        assert row.free and not row.needs_model
        d = row.build(BuildContext())
        assert d.name == row.name and d.free
        d.close()
    assert needs_draft_model(["ngram-map-k", "draft-simple"])
    assert not needs_draft_model(["ngram-map-k", "ngram-mod"])
    with pytest.raises(UsageError, match="unknown n-gram speculative type 'draft-simple'"):
        ngram_drafter("draft-simple")


class _Ctx:
    """Stands in for a loaded draft context: building a drafter touches none of it."""


class _Vocab:
    bos = 1
    add_bos = True

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        return list(text.encode())

    def piece_special(self, token: int) -> bytes:
        return bytes([token])


def test_draft_simple_is_built_over_the_build_context() -> None:
    row = SPEC_TYPES["draft-simple"]
    assert row.needs_model and not row.free and row.params is None
    ctx = _Ctx()
    d = row.build(
        BuildContext(draft_ctx=ctx, sampler=SamplerParams(temp=0.0), n_max=5, n_min=2, p_min=0.5)
    )
    assert isinstance(d, DraftModelDrafter) and not d.free
    assert (d.ctx, d.max_draft, d.rules.n_min, d.rules.p_min) == (ctx, 5, 2, 0.5)
    draft, target = _Vocab(), _Vocab()
    d = row.build(BuildContext(draft_ctx=ctx, cross_vocab=(draft, target), n_max=4))
    assert isinstance(d, CrossVocabDrafter) and d.target_model is target and d.max_draft == 4
    with pytest.raises(ValueError, match="draft_ctx"):
        row.build(BuildContext())


def test_ngram_options_and_flags_come_from_the_table() -> None:
    with_params = [row for row in REGISTRY if row.params is not None]
    assert sorted(f.default_factory.__name__ for f in fields(NgramOptions)) == sorted(
        row.params.__name__ for row in with_params
    )
    opts = NgramOptions()
    for row in with_params:
        assert type(opts.for_type(row.name)) is row.params
    assert list(dict.fromkeys(f.spec_type for f in NGRAM_FLAGS)) == [r.name for r in with_params]


# -- draft lengths ------------------------------------------------------------------------------


def test_every_draft_length_reader_accepts_the_same_range() -> None:
    assert o.parse_n_max(str(N_MAX_LIMIT)) == N_MAX_LIMIT and o.parse_n_max("0") == 0
    with pytest.raises(UsageError, match=f"must be 0..{N_MAX_LIMIT}"):
        o.parse_n_max(str(N_MAX_LIMIT + 1))
    assert parse_n_max_list(f"0,{N_MAX_LIMIT}") == [0, N_MAX_LIMIT]
    with pytest.raises(UsageError, match=f"must be 0..{N_MAX_LIMIT}"):
        parse_n_max_list(str(N_MAX_LIMIT + 1))
    assert parse_speculative({"speculative.n_max": N_MAX_LIMIT}).n_max == N_MAX_LIMIT
    for field in ("n_max", "n_min"):
        with pytest.raises(ApiError, match=f"0..{N_MAX_LIMIT}"):
            parse_speculative({f"speculative.{field}": N_MAX_LIMIT + 1})
    o.validate(**{**VALID, "n_min": N_MAX_LIMIT})
    with pytest.raises(UsageError, match=f"--spec-draft-n-min: {N_MAX_LIMIT + 1}"):
        o.validate(**{**VALID, "n_min": N_MAX_LIMIT + 1})


def test_help_names_autos_cap() -> None:
    """--help said "0..N_MAX_AUTO" (a constant's name, not its value)."""
    assert f"0..{AUTO_N_MAX_CAP} each round" in o.NMax.help
    assert "N_MAX_AUTO" not in o.NMax.help


# -- KV cache types and flash attention -----------------------------------------------------------


def _listed(help_text: str, after: str) -> list[str]:
    names = help_text.split(after, 1)[1].rstrip(".").replace(" or ", ", ")
    return [n.strip() for n in names.split(",")]


def test_cli_accepts_exactly_the_kv_cache_types() -> None:
    for option in (o.CacheTypeK, o.CacheTypeV, o.CacheTypeKDraft, o.CacheTypeVDraft):
        assert _listed(option.help, "KV cache data type: ") == list(KV_CACHE_TYPES)
    for name in KV_CACHE_TYPES:
        o.validate_cache_types(**{"-ctk": name, "-ctv": name, "-ctkd": name, "-ctvd": name})
    for bad in ("F16", "fp16", "q8_1", ""):
        with pytest.raises(UsageError, match="one of: " + ", ".join(KV_CACHE_TYPES)):
            o.validate_cache_types(**{"-ctk": bad})


def test_cli_accepts_exactly_the_flash_attn_modes() -> None:
    assert _listed(o.FlashAttn.help, "Flash attention: ") == list(FLASH_ATTN)
    for mode in FLASH_ATTN:
        o.validate(**{**VALID, "flash_attn": mode})
    for bad in ("1", "true", "ON", ""):
        with pytest.raises(UsageError, match=r"-fa/--flash-attn: .* \(on, off or auto\)"):
            o.validate(**{**VALID, "flash_attn": bad})


def test_cli_accepts_exactly_the_draft_sampling_modes() -> None:
    from specgguf.drafters.draft_lengths import DRAFT_SAMPLING_MODES

    for mode in DRAFT_SAMPLING_MODES:
        o.validate(**{**VALID, "draft_sampling": mode})
    for bad in ("Greedy", "sample", ""):
        with pytest.raises(UsageError, match="--spec-draft-sampling"):
            o.validate(**{**VALID, "draft_sampling": bad})

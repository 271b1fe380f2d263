"""A DFlash or DSpark drafter is recognised and checked against its target from the headers
alone: what llama.cpp's loader or graph would assert on is one line and an exit code, before
loading."""

from __future__ import annotations

import json

import numpy as np
import pytest
from specgguf_cli.app import run_cli

from specgguf.errors import ExitCode, SpecggufError
from specgguf.heads.dflash_info import check_dflash_pair
from specgguf.heads.eagle3_info import check_draft_role, check_target_role, draft_type_of
from specgguf.loading import memory_budget
from specgguf.loading.preflight import preflight
from specgguf.loading.session import LoadOptions
from specgguf.modelfiles.gguf_info import read_gguf_info
from tests.head_pairs import build_pair, refusal
from tests.tiny_dflash import MASK_TOKEN, build_dflash_head
from tests.tiny_eagle3 import TARGET_LAYERS_N, write_qwen2_target_header
from tests.tiny_models import N_VOCAB


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return build_pair(tmp_path_factory, "dflash_info", build_dflash_head)


def _refusal(head, target) -> SpecggufError:
    return refusal(check_dflash_pair, head, target)


def test_a_drafter_is_recognised_and_described(pair, tmp_path):
    target, head = pair
    info = read_gguf_info(head)
    assert draft_type_of(info) == "draft-dflash"
    h = check_dflash_pair(info, read_gguf_info(target))
    assert h.target_layers == (0, 1, 2) and h.block_size == 8 and h.mask_token == MASK_TOKEN
    assert h.max_draft == 7 and not h.anchor_drafts and not h.causal
    assert h.borrows == ["token embeddings"]
    assert h.describe().startswith("DFlash drafter over 3 target layers (0, 1, 2)")
    assert preflight(target, head).dflash == h
    dspark = build_dflash_head(tmp_path / "dspark.gguf", markov_rank=4, confidence=True)
    d = check_dflash_pair(read_gguf_info(dspark), read_gguf_info(target))
    assert draft_type_of(read_gguf_info(dspark)) == d.spec_type == "draft-dspark"
    assert d.max_draft == 8 and d.anchor_drafts and d.has_confidence
    assert "DSpark drafter" in d.describe() and "Markov head of rank 4" in d.describe()
    bonus = build_dflash_head(tmp_path / "bonus.gguf", markov_rank=4, sample_from_anchor=False)
    assert check_dflash_pair(read_gguf_info(bonus), read_gguf_info(target)).max_draft == 7


@pytest.mark.parametrize(
    ("kwargs", "code", "words"),
    [
        (dict(omit=["fc.weight"]), ExitCode.MODEL, "lacks the tensor 'fc.weight'"),
        (dict(omit=["blk.1.attn_k_norm.weight"]), ExitCode.MODEL, "attn_k_norm"),
        (dict(omit=["enc.output_norm.weight"]), ExitCode.MODEL, "enc.output_norm"),
        (dict(target_layers=()), ExitCode.MODEL, "target_layers"),
        (dict(mask_token=None), ExitCode.MODEL, "mask_token_id"),
        (dict(mask_token=N_VOCAB), ExitCode.MODEL, "outside its vocabulary"),
        (dict(block_size=1), ExitCode.MODEL, "no room to draft"),
        (dict(d2t=[3, 5], own_output=False), ExitCode.MODEL, "no lm_head of its own"),
        (dict(markov_rank=4, omit=["markov_w2.weight"]), ExitCode.MODEL, "DSpark drafter lacks"),
        (dict(extra={"selector_hidden.weight": np.zeros((8, 64))}), ExitCode.MODEL, "DFlash2"),
        (dict(n_embd=32), ExitCode.INCOMPATIBLE, "hidden size is 64"),
        (dict(target_layers=(0, 1, 7)), ExitCode.INCOMPATIBLE, "target layer 7"),
        (dict(target_layers=(0, TARGET_LAYERS_N)), ExitCode.INCOMPATIBLE, "last layer's output"),
        (dict(d2t=[*range(50), N_VOCAB]), ExitCode.INCOMPATIBLE, f"target id {N_VOCAB}"),
    ],
)
def test_bad_drafters_are_refused_in_one_line(tmp_path, pair, kwargs, code, words):
    head = build_dflash_head(tmp_path / "bad.gguf", **kwargs)
    err = _refusal(head, pair[0])
    assert err.code == code and words in str(err), str(err)


def test_a_drafter_for_another_vocabulary(tmp_path, pair):
    smollm_like = build_dflash_head(tmp_path / "other.gguf", tokenizer_from=_other_vocab(tmp_path))
    err = _refusal(smollm_like, pair[0])
    assert err.code == ExitCode.INCOMPATIBLE and "vocabulary" in str(err)


def _other_vocab(tmp_path):
    """A GGUF whose tokenizer has fewer tokens than the tiny target's."""
    import gguf

    from tests.tiny_models import write_file

    path = tmp_path / "vocab.gguf"
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(N_VOCAB - 10)])
    w.add_token_types([1] * (N_VOCAB - 10))
    write_file(w)
    return path


def test_a_target_whose_graph_does_not_record_layer_inputs_is_refused(tmp_path, pair):
    qwen2 = write_qwen2_target_header(tmp_path / "qwen2.gguf")
    err = _refusal(pair[1], qwen2)
    assert err.code == ExitCode.INCOMPATIBLE and "'qwen2' target" in str(err)


def test_roles(tmp_path, pair):
    target, head = pair
    info, t = read_gguf_info(head), read_gguf_info(target)
    with pytest.raises(SpecggufError) as err:
        check_draft_role(["draft-simple"], info)
    assert err.value.code == ExitCode.USAGE and "--spec-type draft-dflash" in str(err.value)
    for types in (["draft-eagle3"], ["draft-dspark"]):
        with pytest.raises(SpecggufError) as err:
            check_draft_role(types, info)
        assert err.value.code == ExitCode.MODEL and "(a DFlash drafter)" in str(err.value)
    with pytest.raises(SpecggufError) as err:
        check_draft_role(["draft-dflash"], t)
    assert err.value.code == ExitCode.MODEL and "llama model" in str(err.value)
    check_draft_role(["ngram-simple", "draft-dflash"], info)  # its own type: fine
    with pytest.raises(SpecggufError) as err:
        check_target_role(info)
    assert "is a DFlash drafter" in str(err.value) and "-md" in str(err.value)


def test_check_names_the_drafter_and_exits_with_the_refusals_code(tmp_path, pair, capfd):
    target, head = pair
    assert run_cli(["check", "-m", str(target), "-md", str(head), "--json"]) == 0
    report = json.loads(capfd.readouterr().out)
    assert report["draft_kind"].startswith("DFlash drafter over 3 target layers")
    assert report["memory"]["draft"]["kv_bytes"] > 0  # the drafter's own cache is counted
    bad = build_dflash_head(tmp_path / "narrow.gguf", n_embd=32)
    assert run_cli(["check", "-m", str(target), "-md", str(bad)]) == ExitCode.INCOMPATIBLE
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "hidden size is 64" in err


def test_the_memory_check_counts_the_drafters_contexts(pair, monkeypatch):
    """The drafter's KV cache (its layers, at the target's context, one per slot) is in the
    session's memory check: memory that holds the target alone refuses the pair."""
    target, head = pair
    pre = preflight(target, head)
    load = LoadOptions(model=target, model_draft=head)
    seen = []

    def fits(plans, *a, **kw):
        seen.append({p.role: p.count for p in plans})

    monkeypatch.setattr(memory_budget, "available_bytes", lambda: 1)
    monkeypatch.setattr(memory_budget, "offload_free_bytes", lambda: 0)
    monkeypatch.setattr(memory_budget, "require_fits", fits)
    memory_budget.check_session(pre, 512, 2, load, offload=False)
    assert seen == [{"target": 2, "draft": 2}]
    plans = [
        memory_budget.ContextPlan(role, info, 512, 1, "f16", "f16")
        for role, info in (("target", pre.target), ("draft", pre.draft))
    ]
    both = memory_budget.total_bytes(plans, n_ubatch=512, flash_attn="off")
    alone = memory_budget.total_bytes(plans[:1], n_ubatch=512, flash_attn="off")
    assert both is not None and alone is not None and both > alone

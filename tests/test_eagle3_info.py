"""An EAGLE-3 head is recognised and checked against its target from the headers alone: what
llama.cpp's loader or graph would assert on is one line and an exit code, before loading."""

from __future__ import annotations

import json

import pytest
from specgguf_cli.app import run_cli

from specgguf.drafters.spec_types import parse_spec_types
from specgguf.errors import ExitCode, SpecggufError
from specgguf.heads.eagle3_info import (
    check_draft_role,
    check_eagle3_pair,
    draft_type_of,
)
from specgguf.heads.head_checks import read_d2t
from specgguf.loading.preflight import preflight
from specgguf.modelfiles.gguf_info import read_gguf_info
from tests.head_pairs import build_pair, refusal
from tests.tiny_eagle3 import (
    TARGET_LAYERS_N,
    build_eagle3_head,
    write_qwen2_target_header,
)
from tests.tiny_models import N_VOCAB


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return build_pair(tmp_path_factory, "eagle3_info", build_eagle3_head)


def _refusal(head, target) -> SpecggufError:
    return refusal(check_eagle3_pair, head, target)


def test_a_head_is_recognised_and_described(pair):
    target, head = pair
    info = read_gguf_info(head)
    assert draft_type_of(info) == "draft-eagle3"
    assert draft_type_of(read_gguf_info(target)) == "draft-simple"
    h = check_eagle3_pair(info, read_gguf_info(target))
    assert h.target_layers == (0, 1, 2) and h.target_hidden_size == 64
    assert h.borrows == ["token embeddings"]
    assert "EAGLE-3 head over 3 target layers (0, 1, 2)" in h.describe()
    assert preflight(target, head).eagle3 == h


def test_no_spec_type_picks_the_type_the_file_makes():
    assert parse_spec_types(None, have_draft_model=True, draft_type="draft-eagle3") == [
        "draft-eagle3"
    ]
    assert "draft-simple" in parse_spec_types(None, have_draft_model=True, auto=True)


@pytest.mark.parametrize(
    ("kwargs", "code", "words"),
    [
        (dict(omit=["fc.weight"]), ExitCode.MODEL, "lacks the tensor 'fc.weight'"),
        (dict(omit=["blk.0.attn_norm_2.weight"]), ExitCode.MODEL, "attn_norm_2"),
        (dict(fc_in=100), ExitCode.MODEL, "'fc.weight' has shape [100, 64]"),
        (dict(block_count=2), ExitCode.MODEL, "one decoder layer"),
        (dict(target_layers=(0, 1)), ExitCode.MODEL, "exactly 3 target layers"),
        (dict(target_hidden_size=32), ExitCode.INCOMPATIBLE, "hidden size 32"),
        (dict(target_layers=(0, 1, 7)), ExitCode.INCOMPATIBLE, "target layer 7"),
        (dict(d2t=[*range(50), N_VOCAB]), ExitCode.INCOMPATIBLE, f"target id {N_VOCAB}"),
        (dict(d2t=[-1, 3]), ExitCode.INCOMPATIBLE, "target id -1"),
        (dict(n_embd=32, own_output=True), ExitCode.INCOMPATIBLE, "borrows the target's"),
    ],
)
def test_bad_heads_are_refused_in_one_line(tmp_path, pair, kwargs, code, words):
    head = build_eagle3_head(tmp_path / "bad.gguf", **kwargs)
    err = _refusal(head, pair[0])
    assert err.code == code and words in str(err), str(err)


def test_the_last_layers_output_is_refused_where_the_target_does_not_hand_it_over(tmp_path, pair):
    head = build_eagle3_head(tmp_path / "last.gguf", target_layers=(0, 1, TARGET_LAYERS_N))
    err = _refusal(head, pair[0])  # llama's graph outputs no last state: nothing would be read
    assert err.code == ExitCode.INCOMPATIBLE and "last layer's output" in str(err)


def test_d2t_is_read_as_absolute_target_ids(tmp_path, pair):
    ids = [5, 9, *range(100, 140)]
    head = build_eagle3_head(tmp_path / "d2t.gguf", d2t=ids)
    info = read_gguf_info(head)
    assert list(read_d2t(info)) == ids
    h = check_eagle3_pair(info, read_gguf_info(pair[0]))
    assert h.has_d2t and h.n_draft_vocab == len(ids)


def test_a_target_whose_graph_does_not_record_layer_inputs_is_refused(tmp_path, pair):
    qwen2 = write_qwen2_target_header(tmp_path / "qwen2.gguf")
    err = _refusal(pair[1], qwen2)
    assert err.code == ExitCode.INCOMPATIBLE and "'qwen2' target" in str(err)


def test_a_head_as_draft_simple_and_a_model_as_draft_eagle3_are_refused(pair):
    target, head = pair
    with pytest.raises(SpecggufError) as err:
        check_draft_role(["draft-simple"], read_gguf_info(head))
    assert err.value.code == ExitCode.USAGE and "--spec-type draft-eagle3" in str(err.value)
    with pytest.raises(SpecggufError) as err:
        check_draft_role(["draft-eagle3"], read_gguf_info(target))
    assert err.value.code == ExitCode.MODEL and "llama model" in str(err.value)


def test_check_names_the_kind_and_exits_with_the_refusals_code(tmp_path, pair, capfd):
    target, head = pair
    assert run_cli(["check", "-m", str(target), "-md", str(head), "--json"]) == 0
    out = capfd.readouterr().out
    assert json.loads(out)["draft_kind"].startswith("EAGLE-3 head over 3 target layers")
    bad = build_eagle3_head(tmp_path / "wide.gguf", target_hidden_size=32)
    assert run_cli(["check", "-m", str(target), "-md", str(bad)]) == ExitCode.INCOMPATIBLE
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "hidden size 32" in err

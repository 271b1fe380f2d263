"""The header check behind --spec-type draft-mtp and `check`'s "MTP layers" row
(specgguf.heads.mtp_info): a target's own NextN layers are found, and every file llama.cpp's
MTP graph would abort on is refused in one line before any weight is read."""

from __future__ import annotations

import pytest

from cli.check_cmd import check_report
from specgguf.errors import ExitCode, SpecggufError
from specgguf.heads.mtp_info import MtpLayers, mtp_layers, mtp_problem, require_mtp
from specgguf.modelfiles.gguf_info import read_gguf_info
from tests.tiny_hybrid import build_tiny_qwen35
from tests.tiny_models import TARGET_SEED


@pytest.fixture(scope="module")
def files(tiny_models_dir):
    d = tiny_models_dir
    return {
        "mtp": build_tiny_qwen35(d / "qwen35-mtp.gguf", seed=TARGET_SEED, nextn=1),
        "plain": build_tiny_qwen35(d / "qwen35-plain.gguf", seed=TARGET_SEED),
        "two": build_tiny_qwen35(d / "qwen35-mtp2.gguf", seed=TARGET_SEED, nextn=2),
        "broken": build_tiny_qwen35(
            d / "qwen35-mtp-nohnorm.gguf",
            seed=TARGET_SEED,
            nextn=1,
            drop=("blk.2.nextn.hnorm.weight",),
        ),
    }


def test_a_target_with_one_nextn_layer_is_usable(files):
    info = read_gguf_info(files["mtp"])
    assert mtp_layers(info) == MtpLayers(count=1, first_block=2)
    assert mtp_problem(info) is None
    assert require_mtp(info).blocks == range(2, 3)


def test_a_target_without_nextn_layers_is_refused_with_exit_4(files):
    info = read_gguf_info(files["plain"])
    assert mtp_layers(info) is None
    with pytest.raises(SpecggufError) as e:
        require_mtp(info)
    assert e.value.code == ExitCode.INCOMPATIBLE
    assert "no MTP layers" in str(e.value) and "\n" not in str(e.value)


def test_more_layers_than_the_architecture_runs_are_refused(files):
    info = read_gguf_info(files["two"])
    assert mtp_layers(info) == MtpLayers(count=2, first_block=2)
    assert "runs exactly 1" in (mtp_problem(info) or "")


def test_a_missing_nextn_tensor_is_named(files):
    problem = mtp_problem(read_gguf_info(files["broken"]))
    assert problem is not None and "blk.2.nextn.hnorm.weight" in problem


def test_check_names_the_mtp_layers(files):
    mtp = check_report(str(files["mtp"]), None)["target"]["mtp"]
    assert mtp == {
        "layers": 1,
        "first_block": 2,
        "summary": "1 MTP layer (block 2)",
        "problem": None,
    }
    assert check_report(str(files["plain"]), None)["target"]["mtp"] is None

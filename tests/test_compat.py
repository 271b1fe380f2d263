"""compat: llama.cpp's five vocab clauses, each passing and failing; require_compatible's
one-line error; and `specgguf check` through a tiny Typer app."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest
import typer
from gguf_factory import QWEN_05, QWEN_15, SMOLLM, default_tokens, need_models, write_gguf
from typer.testing import CliRunner

from specgguf.errors import ExitCode, IncompatibleModelsError
from specgguf.modelfiles.compat import check_compatible, require_compatible, vocab_type
from specgguf.modelfiles.gguf_info import VocabInfo, read_gguf_info


def vocab(n: int = 300, **changes) -> VocabInfo:
    tokens = tuple(f"t{i}" for i in range(n))
    base = VocabInfo(
        model="gpt2",
        pre="qwen2",
        tokens=tokens,
        n_vocab=n,
        add_bos=False,
        bos_id=0,
        add_eos=False,
        eos_id=1,
        eot_id=None,
    )
    return dataclasses.replace(base, **changes)


def with_tokens(v: VocabInfo, tokens: tuple[str, ...]) -> VocabInfo:
    return dataclasses.replace(v, tokens=tokens, n_vocab=len(tokens))


def test_identical_vocabs_are_compatible():
    report = check_compatible(vocab(), vocab())
    assert report.ok and report.reasons == [] and report.first_diffs == []
    assert (report.n_vocab_target, report.n_vocab_draft) == (300, 300)
    assert require_compatible(vocab(), vocab()).ok


# clause 1: vocab type


def test_clause1_same_type_different_model_string_passes():
    assert vocab_type("gpt2") == vocab_type("whitespace") == "BPE"
    assert check_compatible(vocab(model="gpt2"), vocab(model="whitespace")).ok


def test_clause1_different_type_fails():
    report = check_compatible(vocab(model="gpt2"), vocab(model="llama"))
    assert not report.ok
    assert report.reasons[0] == (
        "vocab types differ: the target is BPE (gpt2), the draft is SPM (llama)"
    )


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("llama", "SPM"),
        ("gpt2", "BPE"),
        ("bert", "WPM"),
        ("t5", "UGM"),
        ("rwkv", "RWKV"),
        ("plamo2", "PLaMo2"),
    ],
)
def test_vocab_type_mapping(model, name):
    assert vocab_type(model) == name


# clauses 2 and 3: add_bos / add_eos, and the BOS / EOS id when added


def _special(which: str, added: bool, token: int):
    """A vocabulary that adds (or not) its `which` ("bos", "eos") token, of id `token`."""
    return vocab(**{f"add_{which}": added, f"{which}_id": token})


@pytest.mark.parametrize("which", ["bos", "eos"])
def test_clause2_3_ids_ignored_when_not_added(which):
    assert check_compatible(_special(which, False, 0), _special(which, False, 7)).ok


def test_clause2_same_added_bos_passes():
    assert check_compatible(_special("bos", True, 3), _special("bos", True, 3)).ok


@pytest.mark.parametrize(("target", "draft", "reason"), [
    (_special("bos", True, 3), _special("bos", False, 3),
     "BOS tokens differ: the target adds BOS 3, the draft does not add BOS"),
    (_special("eos", False, 1), _special("eos", True, 1),
     "EOS tokens differ: the target does not add EOS, the draft adds EOS 1"),
])  # fmt: skip
def test_clause2_3_add_flag_differs_fails(target, draft, reason):
    assert check_compatible(target, draft).reasons == [reason]


@pytest.mark.parametrize(("which", "a", "b"), [("bos", 3, 4), ("eos", 1, 2)])
def test_clause2_3_added_id_differs_fails(which, a, b):
    report = check_compatible(_special(which, True, a), _special(which, True, b))
    assert not report.ok and report.reasons[0].startswith(f"{which.upper()} tokens differ")


# clause 4: sizes within 128


def test_clause4_difference_of_128_passes():
    assert check_compatible(vocab(300), vocab(300 + 128)).ok


def test_clause4_difference_of_129_fails():
    report = check_compatible(vocab(300 + 129), vocab(300))
    assert not report.ok
    assert report.reasons == [
        "vocab sizes differ by 129 tokens: the target has 429, the draft 300 (at most 128 allowed)"
    ]


# clause 5: texts of ids 5 .. min(n_vocab)-1


def test_clause5_ids_below_5_and_past_the_shorter_vocab_are_not_compared():
    t = vocab(300)
    d_tokens = ("x0", "x1", "x2", "x3", "x4") + t.tokens[5:] + ("extra",) * 10
    assert check_compatible(t, with_tokens(t, d_tokens)).ok


def test_clause5_text_at_id_5_differs_fails():
    t = vocab(300)
    d = with_tokens(t, t.tokens[:5] + ("other",) + t.tokens[6:])
    report = check_compatible(t, d)
    assert not report.ok
    assert report.first_diffs == [(5, "t5", "other")]
    assert report.reasons == [
        "1 token texts differ in ids 5..299, the first at id 5: the target has 't5', "
        "the draft 'other'"
    ]


def test_clause5_last_shared_id_is_compared_and_diffs_capped():
    t = vocab(300)
    d_tokens = list(t.tokens)
    for i in (10, 11, 12, 13, 14, 15, 299):
        d_tokens[i] = f"changed{i}"
    report = check_compatible(t, with_tokens(t, tuple(d_tokens)))
    assert report.n_token_diffs == 7
    assert [i for i, _, _ in report.first_diffs] == [10, 11, 12, 13, 14]


def test_every_failing_clause_reported_in_llama_cpp_order():
    report = check_compatible(
        vocab(300, model="gpt2", add_bos=True),
        with_tokens(vocab(100, model="llama"), tuple(f"z{i}" for i in range(100))),
    )
    assert [r.split(" ")[0] for r in report.reasons] == ["vocab", "BOS", "vocab", "95"]


def test_require_compatible_raises_one_line():
    with pytest.raises(IncompatibleModelsError) as exc:
        require_compatible(vocab(model="gpt2"), vocab(model="llama", n_vocab=9999))
    assert exc.value.code == ExitCode.INCOMPATIBLE
    assert str(exc.value) == (
        "the target and draft vocabs are not compatible: "
        "vocab types differ: the target is BPE (gpt2), the draft is SPM (llama)"
    )


def test_undecodable_token_bytes_are_printable_in_diffs():
    t = vocab(10)
    d = with_tokens(t, t.tokens[:6] + (b"\xff".decode("utf-8", "surrogateescape"),) + t.tokens[7:])
    report = check_compatible(t, d)
    assert report.first_diffs == [(6, "t6", "\\xff")]
    json.dumps(report.to_dict())


def test_compat_from_files(tmp_path):
    a = read_gguf_info(write_gguf(tmp_path / "a.gguf")).vocab
    b = read_gguf_info(write_gguf(tmp_path / "b.gguf", block_count=5)).vocab
    tokens = default_tokens()
    tokens[20] = "different"
    c = read_gguf_info(write_gguf(tmp_path / "c.gguf", tokens=tokens)).vocab
    assert check_compatible(a, b).ok
    assert check_compatible(a, c).first_diffs == [(20, "tok20", "different")]


# --- `specgguf check` through CliRunner -------------------------------------------------------


def _load_check_cmd():
    path = Path(__file__).resolve().parents[1] / "cli" / "check_cmd.py"
    spec = importlib.util.spec_from_file_location("specgguf_check_cmd_under_test", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    app.command()(_load_check_cmd().check)

    @app.command()
    def other() -> None:  # a second command, so "check" is a subcommand as in the real app
        pass

    return app


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        return CliRunner()


def test_cli_check_compatible_pair_json(tmp_path, app):
    t = write_gguf(tmp_path / "t.gguf", chat_template="{{ x }}")
    d = write_gguf(tmp_path / "d.gguf", block_count=1)
    result = _runner().invoke(app, ["check", "-m", str(t), "-md", str(d), "-c", "512", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["compatible"] is True
    assert report["target"]["architecture"] == "llama"
    assert report["target"]["chat_template"] is True
    assert report["draft"]["block_count"] == 1
    assert report["target"]["vocab"]["type"] == "SPM"
    mem = report["memory"]
    assert mem["n_ctx"] == 512
    assert mem["total_bytes"] == mem["target"]["total_bytes"] + mem["draft"]["total_bytes"]


def test_cli_check_incompatible_pair(tmp_path, app):
    t = write_gguf(tmp_path / "t.gguf")
    d = write_gguf(tmp_path / "d.gguf", tokenizer_model="gpt2")
    runner = _runner()
    result = runner.invoke(app, ["check", "-m", str(t), "--spec-draft-model", str(d), "--json"])
    assert result.exit_code == 0  # cross-vocabulary mode: usable, exit 4 only when strict
    report = json.loads(result.stdout)
    assert report["compatible"] is False
    assert report["mode"] == "cross-vocabulary"
    assert report["compatibility"]["reasons"][0].startswith("vocab types differ")
    human = runner.invoke(app, ["check", "-m", str(t), "--model-draft", str(d)])
    assert human.exit_code == 0
    assert "not compatible" in human.stdout and "vocab types differ" in human.stdout
    strict = runner.invoke(app, ["check", "-m", str(t), "-md", str(d), "--spec-vocab-strict"])
    assert strict.exit_code == ExitCode.INCOMPATIBLE


def test_cli_check_single_model_human(tmp_path, app):
    t = write_gguf(tmp_path / "t.gguf")
    result = _runner().invoke(app, ["check", "--model", str(t), "--ctx-size", "0"])
    assert result.exit_code == 0, result.output
    assert "llama" in result.stdout and "memory at -c 2048" in result.stdout


def test_cli_check_error_is_one_stderr_line(tmp_path, app):
    result = _runner().invoke(app, ["check", "-m", str(tmp_path / "missing.gguf")])
    assert result.exit_code == ExitCode.MODEL
    assert result.stdout == ""
    assert result.stderr == f"error: {tmp_path / 'missing.gguf'}: no such file\n"


# --- the real models --------------------------------------------------------------------------


@pytest.mark.real
def test_real_qwen_pair_compatible_and_smollm_not(app):
    need_models(QWEN_15, QWEN_05, SMOLLM)
    q15, q05, smol = (read_gguf_info(p).vocab for p in (QWEN_15, QWEN_05, SMOLLM))
    assert check_compatible(q15, q05).ok
    report = check_compatible(q15, smol)
    assert not report.ok
    with pytest.raises(IncompatibleModelsError):
        require_compatible(q15, smol)
    runner = _runner()
    ok = runner.invoke(app, ["check", "-m", str(QWEN_15), "-md", str(QWEN_05), "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["compatible"] is True
    bad = runner.invoke(app, ["check", "-m", str(QWEN_15), "-md", str(SMOLLM), "--json"])
    assert bad.exit_code == 0
    report = json.loads(bad.stdout)
    assert report["mode"] == "cross-vocabulary"
    assert 0.3 < report["vocab_overlap"] < 1.0  # both byte-level BPE, much shared
    strict = runner.invoke(
        app, ["check", "-m", str(QWEN_15), "-md", str(SMOLLM), "--spec-vocab-strict"]
    )
    assert strict.exit_code == ExitCode.INCOMPATIBLE

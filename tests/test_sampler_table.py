"""The table of sampler settings drives the flags, the request fields, their checks and the
docs; every llama.cpp sampling flag is taken by `run` and `serve`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from specgguf_cli.app import run_cli
from test_shared_flags import _command_names

from specgguf.core.sampling import SamplerParams
from specgguf.io import sampler_table as t

DOC = Path(__file__).resolve().parent.parent / "docs" / "sampling.md"

#: llama.cpp's sampling flags (its --help), every spelling
LLAMA_FLAGS = [
    "--samplers", "--sampler-seq", "--sampling-seq", "--ignore-eos", "--temp", "--temperature",
    "--top-k", "--top-p", "--min-p", "--top-nsigma", "--top-n-sigma", "--xtc-probability",
    "--xtc-threshold", "--typical", "--typical-p", "--repeat-last-n", "--repeat-penalty",
    "--presence-penalty", "--frequency-penalty", "--dry-multiplier", "--dry-base",
    "--dry-allowed-length", "--dry-penalty-last-n", "--dry-sequence-breaker",
    "--adaptive-target", "--adaptive-decay", "--dynatemp-range", "--dynatemp-exp",
    "--mirostat", "--mirostat-lr", "--mirostat-ent", "-l", "--logit-bias", "-s", "--seed",
]


def test_the_docs_table_is_the_tables():
    assert t.markdown_table() in DOC.read_text(encoding="utf-8")


@pytest.mark.parametrize("command", ["run", "serve"])
def test_every_llama_cpp_sampling_flag_is_taken(command):
    missing = set(LLAMA_FLAGS) - _command_names(command)
    assert not missing, sorted(missing)


def test_request_fields_become_sampler_params():
    body = {"repeat_penalty": 1.1, "presence_penalty": 1.5, "frequency_penalty": 0.2,
            "repeat_last_n": -1, "typical_p": 0.9, "top_n_sigma": 1, "xtc_probability": 0.3,
            "xtc_threshold": 0.2, "dynatemp_range": 0.5, "dynatemp_exponent": 2,
            "mirostat": 2, "mirostat_tau": 4, "mirostat_eta": 0.2, "min_keep": 3,
            "samplers": "kt", "logit_bias": [[5, False], [6, 2]], "temperature": 0.5,
            "dry_multiplier": 0.8, "dry_base": 2, "dry_allowed_length": 3,
            "dry_penalty_last_n": -1, "dry_sequence_breakers": ["\n", "<|im_end|>"]}  # fmt: skip
    p = t.params(SamplerParams(), t.from_request(body))
    assert (p.penalty_repeat, p.penalty_present, p.penalty_freq, p.penalty_last_n) == (
        1.1, 1.5, 0.2, -1)
    assert (p.typ_p, p.top_n_sigma, p.xtc_probability, p.xtc_threshold) == (0.9, 1.0, 0.3, 0.2)
    assert (p.dynatemp_range, p.dynatemp_exponent, p.mirostat, p.min_keep) == (0.5, 2.0, 2, 3)
    assert p.samplers == ("top_k", "temperature") and p.temp == 0.5
    assert p.logit_bias == ((5, -math.inf), (6, 2.0))
    assert t.from_request({"logit_bias": {"7": -100}})["logit_bias"] == ((7, -100.0),)
    assert (p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n) == (
        0.8, 2.0, 3, -1)
    assert p.dry_sequence_breakers == ("\n", "<|im_end|>")


def test_logit_bias_may_name_tokens_by_text():
    """llama-server's forms: a list pair's string is text (even digits); an object key is an
    id when it spells an integer, else text."""
    got = t.from_request({"logit_bias": [["Hello", -1], ["12", False], [3, 2]]})["logit_bias"]
    assert got == (("Hello", -1.0), ("12", -math.inf), (3, 2.0))
    got = t.from_request({"logit_bias": {"Hello": -1, " 15": 2, "1x": 1}})["logit_bias"]
    assert got == (("Hello", -1.0), (15, 2.0), ("1x", 1.0))


def test_dry_breakers_flag_takes_escapes_and_none():
    flags = {"dry_sequence_breaker": ["\\n", "none", "###", "\\t"]}
    assert t.from_flags(flags)["dry_sequence_breakers"] == ("###", "\t")
    assert t.from_flags({"dry_sequence_breaker": ["none"]})["dry_sequence_breakers"] == ()
    assert "dry_sequence_breakers" not in t.from_flags({})  # the defaults stay


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"repeat_penalty": -1}, "'repeat_penalty' must be a number > 0"),
        ({"repeat_last_n": -2}, "'repeat_last_n' must be an integer in -1.."),
        ({"typical_p": 2}, "'typical_p' must be a number in [0, 1]"),
        ({"logit_bias": {"": 1}}, "a token's text is empty"),
        ({"logit_bias": [[-1, 1]]}, "-1 is not a token id or a text"),
        ({"dry_base": 0.5}, "'dry_base' must be a number >= 1"),
        ({"dry_allowed_length": 0}, "'dry_allowed_length' must be an integer >= 1"),
        ({"dry_penalty_last_n": -2}, "'dry_penalty_last_n' must be an integer in -1.."),
        ({"dry_sequence_breakers": []}, "must be a non-empty list of strings"),
        ({"dry_sequence_breakers": ["x" * 41]}, "a breaker is 1..40 bytes"),
        ({"logit_bias": [1, 2]}, "'logit_bias' must be an object"),
        ({"logit_bias": {str(i): 1 for i in range(t.MAX_BIAS + 1)}}, "at most"),
        ({"samplers": ["top_k"] * (t.MAX_ORDER + 1)}, "at most"),
        ({"adaptive_target": 1.5}, "'adaptive_target' must be a number <= 1"),
        ({"adaptive_decay": 1}, "'adaptive_decay' must be a number in [0, 0.99]"),
        ({"presence_penalty": float("nan")}, "'presence_penalty' must be a number"),
    ],
)
def test_bad_request_fields_are_named(body, says):
    with pytest.raises(t.SettingError, match=None) as e:
        t.from_request(body)
    assert says in str(e.value)


@pytest.mark.parametrize(
    ("item", "pair"), [("15043+1", (15043, 1.0)), ("2-inf", (2, -math.inf)), ("3-0.5", (3, -0.5))]
)
def test_logit_bias_flag(item, pair):
    assert t.parse_bias_flag(item) == pair


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--repeat-penalty", "0"], "for --repeat-penalty: 0.0 (must be a number > 0)"),
        (["--mirostat", "3"], "invalid value for --mirostat: 3 (must be 0, 1 or 2)"),
        (["-l", "abc"], "invalid value for -l/--logit-bias: 'abc'"),
        (["--sampling-seq", "kq"], "invalid value for --sampling-seq/--sampler-seq"),
        (["--dry-base", "0.5"], "invalid value for --dry-base: 0.5 (must be a number >= 1)"),
        (["--dry-sequence-breaker", ""], "--dry-sequence-breaker: '' (a breaker is 1..40"),
    ],
)
def test_bad_flags_are_one_line_before_loading(argv, says, capsys):
    assert run_cli(["run", "-m", "/nonexistent.gguf", "-p", "x", *argv]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err

"""--spec-type through the CLI on tiny models: every n-gram type is lossless, the fixed
priority order decides who drafts, and `none` resets the list."""

from __future__ import annotations

import json

import pytest
from specgguf_cli.app import run_cli

FAST = ["-t", "1", "-c", "512", "-fa", "off"]
# The tiny target settles into short cycles, so short n-gram keys find earlier occurrences.
SMALL_NGRAMS = [
    "--spec-ngram-simple-size-n", "2", "--spec-ngram-simple-size-m", "6",
    "--spec-ngram-map-k-size-n", "2", "--spec-ngram-map-k-size-m", "6",
    "--spec-ngram-map-k4v-size-n", "2", "--spec-ngram-map-k4v-size-m", "6",
    "--spec-ngram-mod-n-match", "2", "--spec-ngram-mod-n-min", "1", "--spec-ngram-mod-n-max", "6",
]  # fmt: skip
PROMPT = ["-p", "the cat sat on the mat and the cat sat on", "-n", "80", "--temp", "0"]


@pytest.fixture
def run_json(tiny_target, tiny_draft, capsys):
    def _run(*args: str) -> dict:
        argv = ["run", "-m", str(tiny_target), "-md", str(tiny_draft), *FAST, *PROMPT]
        # a fixed draft length (auto, the default, may decide drafting does not pay here)
        fixed = ["--spec-draft-n-max", "3"]
        code = run_cli([*argv, *SMALL_NGRAMS, *fixed, "--ignore-eos", "--json", "-q", *args])
        out = capsys.readouterr().out
        assert code == 0, out
        return json.loads(out)

    return _run


@pytest.mark.parametrize(
    "spec_type", ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"]
)
def test_each_ngram_type_is_lossless(run_json, spec_type):
    plain = run_json("--spec-type", "none")
    got = run_json("--spec-type", spec_type)
    assert got["text"] == plain["text"]
    stats = got["timings"]["per_type"][spec_type]
    assert stats["tokens_drafted"] > 0  # the lookup really proposed something
    assert got["timings"]["draft_n"] == stats["tokens_drafted"]


def test_priority_order_not_command_line_order(run_json):
    """draft-simple always has a proposal (p-min 0), so ngram-simple can only ever draft if
    it is tried first, whatever order the user wrote."""
    got = run_json("--spec-type", "draft-simple,ngram-simple")
    assert got["spec_type"] == ["ngram-simple", "draft-simple"]
    per_type = got["timings"]["per_type"]
    assert per_type["ngram-simple"]["drafts"] > 0
    assert per_type["draft-simple"]["drafts"] > 0  # and the draft model fills the other rounds
    plain = run_json("--spec-type", "none")
    assert got["text"] == plain["text"]


def test_none_resets_what_came_before(run_json):
    got = run_json("--spec-type", "draft-simple,ngram-simple,none,ngram-map-k")
    assert got["spec_type"] == ["ngram-map-k"]
    assert set(got["timings"]["per_type"]) <= {"ngram-map-k"}
    off = run_json("--spec-type", "draft-simple,none")  # -md given, yet nothing drafts
    assert off["spec_type"] == ["none"] and off["timings"]["draft_n"] == 0

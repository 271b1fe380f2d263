"""`specgguf run --json --n-probs N` on the tiny pair: each generated token's log probability
and its N alternatives (llama-server's completion_probabilities), equal with and without
speculation; --n-probs without JSON output, or out of range, is one usage line."""

from __future__ import annotations

from tests.test_run_cli import as_json, run  # noqa: F401 - the fixture

ARGS = ("-p", "Once upon a time, in a land", "-n", "24", "--temp", "0", "--json", "-q")


def test_n_probs_in_json_equal_without_speculation(run):  # noqa: F811
    spec = as_json(run(*ARGS, "--n-probs", "3", "--spec-draft-n-max", "4"))
    plain = as_json(run(*ARGS, "--n-probs", "3", "--spec-type", "none"))
    assert spec["text"] == plain["text"]
    assert spec["timings"]["draft_n_accepted"] > 0
    got, ref = spec["completion_probabilities"], plain["completion_probabilities"]
    assert len(got) == spec["tokens_predicted"] == 24
    assert [e["id"] for e in got] == [e["id"] for e in ref]
    assert all(abs(a["logprob"] - b["logprob"]) <= 1e-3 for a, b in zip(got, ref, strict=True))
    assert all(len(e["top_logprobs"]) == 3 and e["top_logprobs"][0]["id"] == e["id"] for e in got)
    assert "".join(e["token"] for e in got) == spec["text"]
    assert "completion_probabilities" not in as_json(run(*ARGS))


def test_n_probs_needs_json_and_a_bound(run):  # noqa: F811
    code, _, err = run("-p", "x", "-n", "2", "--n-probs", "2")
    assert code != 0 and "--json" in err and len(err.strip().splitlines()) == 1
    code, _, err = run("-p", "x", "-n", "2", "--json", "--n-probs", "1000")
    assert code != 0 and "--n-probs" in err and len(err.strip().splitlines()) == 1

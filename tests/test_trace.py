"""--trace records: a chain's record keeps its keys; a tree round's adds its shape and the
branch it kept (parents, path, depth, off_chain), from the record writer to a real run."""

from __future__ import annotations

import io
import json

from specgguf_cli.app import run_cli

from specgguf.core.rounds import Round
from specgguf.io.trace import TraceWriter

#: a chain record's keys (no vocabulary, no translation): trees must not change them
CHAIN_KEYS = ["round", "drafter", "proposed", "n_accepted", "emitted", "target_probs",
              "draft_ms", "verify_ms", "rollback_ms", "grammar_ms", "from_prompt"]
TREE_KEYS = ["parents", "path", "depth", "off_chain"]


def _line(rnd: Round) -> dict:
    out = io.StringIO()
    TraceWriter(out).write(rnd)
    return json.loads(out.getvalue())


def test_a_chain_record_is_as_before():
    rec = _line(Round("draft-simple", [5, 6, 7], 2, [5, 6, 9], 1.0, 2.0))
    assert list(rec) == CHAIN_KEYS
    assert (rec["proposed"], rec["n_accepted"], rec["emitted"]) == ([5, 6, 7], 2, [5, 6, 9])


def test_a_tree_record_has_its_shape_and_the_branch_kept():
    # root -> 0 -> 2 -> 4 (the drafter's best chain), root -> 1 -> 3 (a sibling branch)
    rnd = Round("draft-simple", [10, 11, 12, 13, 14], 2, [11, 13, 8], 1.0, 2.0,
                parents=[-1, -1, 0, 1, 2], path=(1, 3))
    rec = _line(rnd)
    assert list(rec) == CHAIN_KEYS + TREE_KEYS
    assert rec["parents"] == [-1, -1, 0, 1, 2] and rec["path"] == [1, 3]
    assert rec["depth"] == 3 and rec["off_chain"] is True


def test_a_tree_round_that_kept_its_best_chain_is_not_off_chain():
    rnd = Round("draft-simple", [10, 11, 12], 2, [10, 12, 8], 1.0, 2.0,
                parents=[-1, -1, 0], path=(0, 2))
    rec = _line(rnd)
    assert (rec["path"], rec["depth"], rec["off_chain"]) == ([0, 2], 2, False)


def test_a_tree_run_traces_trees_and_its_chain_run_does_not(tiny_target, tiny_draft, tmp_path,
                                                            capsys):
    def trace(*shape: str) -> list[dict]:
        path = tmp_path / f"t{len(shape)}.jsonl"
        code = run_cli(["run", "-m", str(tiny_target), "-md", str(tiny_draft), "-t", "1",
                        "-c", "512", "-fa", "off", "-p", "Once upon a time, in a land", "-n",
                        "40", "--temp", "0", "--spec-draft-n-max", "4", "--trace", str(path),
                        *shape])
        capsys.readouterr()
        assert code == 0
        return [json.loads(x) for x in path.read_text().splitlines()]

    trees = [r for r in trace("--spec-tree-topk", "4", "--spec-draft-p-split", "0")
             if "parents" in r]
    assert trees  # the draft branched
    for r in trees:
        assert set(TREE_KEYS) <= set(r) and len(r["parents"]) == len(r["proposed"])
        assert len(r["path"]) == r["n_accepted"]
        assert r["emitted"][: r["n_accepted"]] == [r["proposed"][i] for i in r["path"]]
        assert all(r["parents"][b] == a for a, b in zip([-1, *r["path"]], r["path"],
                                                        strict=False))
        assert 1 <= r["depth"] <= 4
    assert any(r["off_chain"] for r in trees)
    assert not any(set(TREE_KEYS) & set(r) for r in trace("--spec-tree-topk", "1"))


def test_an_auto_run_traces_what_auto_allowed_each_round_and_why(tiny_target, tiny_draft,
                                                                  tmp_path, capsys):
    """Under --spec-draft-n-max auto every record but the prompt's says the draft length auto
    allowed (`auto.k`: no chain proposed more, no tree went deeper), why, and each drafter's plan;
    a fixed length's records have no `auto`."""
    def trace(n_max: str) -> list[dict]:
        path = tmp_path / f"{n_max}.jsonl"
        code = run_cli(["run", "-m", str(tiny_target), "-md", str(tiny_draft), "-t", "1",
                        "-c", "512", "-fa", "off", "-p", "Once upon a time, in a land", "-n",
                        "40", "--temp", "0", "--spec-type", "draft-simple",
                        "--spec-draft-n-max", n_max, "--no-auto-profile", "--trace", str(path)])
        capsys.readouterr()
        assert code == 0
        return [json.loads(x) for x in path.read_text().splitlines()]

    records = trace("auto")
    assert "auto" not in records[0] and records[0]["from_prompt"]
    rest = records[1:]
    assert rest and all("auto" in r for r in rest)
    for r in rest:
        a = r["auto"]
        # (a tree's k is its depth: a tree round may send more nodes than k)
        assert r.get("depth", len(r["proposed"])) <= a["k"] or r["drafter"] is None
        assert isinstance(a["why"], str) and a["why"]
        assert set(a["plans"]) == {"draft-simple"}
        assert set(a["behind"]) == {"draft-simple"} and a["behind"]["draft-simple"] >= 0
    # a cold run measures the cost curve first: its first rounds say so
    assert rest[0]["auto"]["why"].startswith("first rounds")
    # the draft model has read nothing of the prompt before its first draft: it is behind by
    # all of it, and by one more token each plain round; once it drafts it keeps up (the
    # last round's tokens: at most a draft's worth and one)
    behind = [r["auto"]["behind"]["draft-simple"] for r in rest]
    assert behind[0] >= 5 and behind[1] == behind[0] + 1
    after = [b for a, b in zip(rest, behind[1:], strict=False) if a["drafter"] == "draft-simple"]
    assert max(after, default=0) <= 1 + 4
    assert not any("auto" in r for r in trace("4"))

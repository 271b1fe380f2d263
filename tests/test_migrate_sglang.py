"""`specgguf migrate`: SGLang's tree flags in a specgguf command become specgguf's.

The outputs are written out in full: they are what a user's command turns into.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from specgguf.core.tree import NODES_MAX, TOPK_MAX
from specgguf.errors import UsageError
from specgguf.migrate import removed_flags as lg
from specgguf.migrate.argv import migrate_argv
from specgguf.migrate.reasons import reason
from specgguf.migrate.refuse import check_run_argv
from specgguf.migrate.text import migrate_text

README = Path(__file__).resolve().parents[1] / "docs" / "migrate.md"
R = "specgguf run -m t.gguf -md d.gguf"

MAPPING = [
    (f"{R} --speculative-eagle-topk 4 --speculative-num-steps 5 "
     "--speculative-num-draft-tokens 8 -p hi",
     f"{R} --spec-tree-topk 4 --spec-draft-n-max 5 --spec-tree-nodes 7 -p hi"),
    (f"{R} --speculative-num-draft-tokens=13", f"{R} --spec-tree-nodes=12"),
    (f"{R} --speculative_eagle_topk 2", f"{R} --spec-tree-topk 2"),
    ("specgguf serve -m t.gguf -md d.gguf --speculative-num-steps 3",
     "specgguf serve -m t.gguf -md d.gguf --spec-draft-n-max 3"),
    # a prompt that names the flag is text, not the flag
    (f"{R} -p '--speculative-eagle-topk 4' --speculative-eagle-topk 3",
     f"{R} -p '--speculative-eagle-topk 4' --spec-tree-topk 3"),
    # with a removed llama.cpp flag in the same command: both rewrites
    (f"{R} --speculative-eagle-topk 4 --draft-max 5",
     f"{R} --spec-tree-topk 4 --spec-draft-n-max 5"),
]

CLAMPED = [
    (f"{R} --speculative-eagle-topk 16", f"{R} --spec-tree-topk 10",
     "warning: --speculative-eagle-topk 16 means 16 children per tree node; specgguf takes at "
     "most 10, so --spec-tree-topk 10 is written"),
    (f"{R} --speculative-num-draft-tokens 100", f"{R} --spec-tree-nodes 64",
     "warning: --speculative-num-draft-tokens 100 means 99 tree nodes verified per round; "
     "specgguf takes at most 64, so --spec-tree-nodes 64 is written"),
    (f"{R} --speculative-num-draft-tokens=1", f"{R} --spec-tree-nodes=1",
     "warning: --speculative-num-draft-tokens=1 means 0 tree nodes verified per round; "
     "specgguf takes at least 1, so --spec-tree-nodes 1 is written"),
]


def mig(cmd: str, dynamic: tuple[int, ...] = ()):
    return migrate_argv(shlex.split(cmd), dynamic=dynamic)


@pytest.mark.parametrize(("old", "new"), MAPPING)
def test_sglang_tree_flags_get_specgguf_names(old, new):
    res = mig(old)
    assert shlex.join(res.argv) == new
    assert res.unsafe == [] and res.notes
    assert not any(n.startswith("warning:") for n in res.notes)


def test_the_root_is_not_a_node_and_the_note_says_so():
    res = mig(f"{R} --speculative-num-draft-tokens 8")
    assert res.notes == ["--speculative-num-draft-tokens 8 -> --spec-tree-nodes 7: SGLang counts "
                         "the tree's root among its draft tokens, specgguf's --spec-tree-nodes "
                         "does not"]


@pytest.mark.parametrize(("old", "new", "warning"), CLAMPED)
def test_values_specgguf_refuses_are_clamped_with_a_warning(old, new, warning):
    res = mig(old)
    assert shlex.join(res.argv) == new
    assert res.unsafe == [] and warning in res.notes


#: commands that are not specgguf's: their sglang flags are theirs to keep
NOT_SPECGGUF = [
    "python -m sglang.launch_server --model-path M --speculative-algorithm EAGLE "
    "--speculative-eagle-topk 4 --speculative-num-steps 5 --speculative-num-draft-tokens 8",
    "llama-server -m t.gguf --speculative-eagle-topk 4",
    "--speculative-eagle-topk 4 --speculative-num-steps 5",
]


@pytest.mark.parametrize("cmd", [m[1] for m in MAPPING] + [c[1] for c in CLAMPED] + NOT_SPECGGUF)
def test_migrated_output_and_other_tools_commands_need_nothing(cmd):
    res = mig(cmd)
    assert not res.needs_attention, (res.notes, res.unsafe)


def test_every_sglang_flag_appears_in_the_mapping():
    seen = " ".join(m[0] for m in MAPPING)
    for name in lg.SGLANG_FLAGS:
        assert f"{name} " in seen or f"{name}=" in seen, name


@pytest.mark.parametrize(("cmd", "dynamic", "why", "key"), [
    (f"{R} --speculative-num-draft-tokens $N", (7,),
     "--speculative-num-draft-tokens $N: a shell variable cannot be lowered by 1 here; write "
     "--spec-tree-nodes by hand", "runtime"),
    (f"{R} --speculative-eagle-topk four", (),
     "--speculative-eagle-topk four: not an integer", "no-equivalent"),
    (f"{R} --speculative-num-steps 5 --spec-draft-n-max 4", (),
     "both --spec-draft-n-max 4 and SGLang's --speculative-num-steps 5: merge them by hand",
     "ambiguous"),
    (f"{R} --speculative-num-steps 5 --draft 4", (),
     "both --draft 4 and SGLang's --speculative-num-steps 5: merge them by hand", "ambiguous"),
    (f"{R} --speculative-eagle-topk", (), "--speculative-eagle-topk has no value",
     "no-equivalent"),
])
def test_what_cannot_be_carried_over_is_reported(cmd, dynamic, why, key):
    res = mig(cmd, dynamic)
    assert why in res.unsafe
    assert reason(why) == key
    assert any(lg.normalize_flag(w) in lg.SGLANG_FLAGS for w in res.argv)  # kept as written


def test_a_variable_topk_is_renamed_as_written():
    res = mig(f"{R} --speculative-eagle-topk $K", (7,))
    assert res.argv[-2:] == ["--spec-tree-topk", "$K"] and res.unsafe == []


def test_a_script_running_specgguf_is_rewritten_and_an_sglang_script_is_not():
    text = ("specgguf serve -m t.gguf -md d.gguf \\\n  --speculative-eagle-topk 4 "
            "--speculative-num-draft-tokens 13\n"
            "python3 -m sglang.launch_server --model-path M --speculative-eagle-topk 4\n")
    new, findings = migrate_text(text, "shell")
    assert new == ("specgguf serve -m t.gguf -md d.gguf \\\n  --spec-tree-topk 4 "
                   "--spec-tree-nodes 12\n"
                   "python3 -m sglang.launch_server --model-path M --speculative-eagle-topk 4\n")
    assert [f.line for f in findings] == [1]


def test_the_corrected_run_command_uses_specgguf_names_too():
    with pytest.raises(UsageError, match="corrected: specgguf run -m t.gguf --spec-draft-n-max 5 "
                                        "--spec-tree-topk 4"):
        check_run_argv(["run", "-m", "t.gguf", "--draft-max", "5", "--speculative-eagle-topk",
                        "4"], {})


def test_the_bounds_are_specgguf_s_own():
    """The migration may not import core (its contract), so it repeats the bounds."""
    assert (lg.TREE_TOPK_MAX, lg.TREE_NODES_MAX) == (TOPK_MAX, NODES_MAX)
    assert lg.SGLANG_FLAGS["--speculative-eagle-topk"].bounds == (1, TOPK_MAX)
    assert lg.SGLANG_FLAGS["--speculative-num-draft-tokens"].bounds == (1, NODES_MAX)


def test_readme_table_lists_each_mapping():
    section = README.read_text(encoding="utf-8").split(
        "**SGLang's tree flags in a specgguf command**", 1)[1].split("\n\n**", 1)[0]
    rows = {m.group(1): m.group(2) for m in re.finditer(
        r"^\| `(--[\w-]+) \w+` \| `(--[\w-]+) [\w-]+` \|", section, re.M)}
    assert rows == {name: f.new for name, f in lg.SGLANG_FLAGS.items()}
    for name, f in lg.SGLANG_FLAGS.items():
        if f.bounds:
            assert f"clamped to {f.bounds[0]}..{f.bounds[1]}" in section, name

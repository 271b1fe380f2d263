"""`specgguf migrate`: argv rewriting, token-preserving file edits, reports, --check/--write/--diff.

The golden outputs below are written out in full on purpose: they are the contract (what a
user's script looks like afterwards), and a byte that moves should fail a test.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shlex
import stat
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from specgguf.migrate import drafter_kind
from specgguf.migrate import removed_flags as lg
from specgguf.migrate.argv import migrate_argv
from specgguf.migrate.check import run_migrate
from specgguf.migrate.edit import CannotQuote, ShellStyle, apply_edits
from specgguf.migrate.kinds import detect, file_kind
from specgguf.migrate.plan import MigrationResult, apply_ops
from specgguf.migrate.shell_lexer import lex_shell
from specgguf.migrate.text import check_text, migrate_text

ROOT = Path(__file__).resolve().parents[1]
READ_DRAFT_FILES = drafter_kind.classify_draft


@pytest.fixture(autouse=True)
def plain_drafts(monkeypatch):
    """The golden outputs below assume plain draft models (d.gguf is not on disk here); the
    tests of drafter detection put the real classifier back (READ_DRAFT_FILES)."""
    monkeypatch.setattr(drafter_kind, "classify_draft", lambda value, base=None: ("plain", ""))


def mig(cmd: str, **kw) -> MigrationResult:
    return migrate_argv(shlex.split(cmd), **kw)


def migrated(cmd: str) -> str:
    return shlex.join(mig(cmd).argv)


# ----------------------------------------------------------------------------------------------
# argv: the full mapping, table-driven
# ----------------------------------------------------------------------------------------------

S = "llama-server -m t.gguf"
MAPPING = [
    # n_max
    (f"{S} -md d.gguf --spec-type draft-simple --draft 5",
     f"{S} -md d.gguf --spec-type draft-simple --spec-draft-n-max 5"),
    (f"{S} -md d.gguf --spec-type draft-simple --draft-n 5",
     f"{S} -md d.gguf --spec-type draft-simple --spec-draft-n-max 5"),
    (f"{S} --draft-max=7", f"{S} --spec-draft-n-max=7"),
    (f"{S} --spec-type ngram-mod --draft-max 64",
     f"{S} --spec-type ngram-mod --spec-ngram-mod-n-max 64"),
    # n_min
    (f"{S} --draft-min 2", f"{S} --spec-draft-n-min 2"),
    (f"{S} --draft-n-min=2", f"{S} --spec-draft-n-min=2"),
    (f"{S} --spec-type ngram-mod --draft-min 8",
     f"{S} --spec-type ngram-mod --spec-ngram-mod-n-min 8"),
    # ngram sizes, per type
    *[(f"{S} --spec-type {t} --spec-ngram-size-n 8 --spec-ngram-size-m 24 --spec-ngram-min-hits 2",
       f"{S} --spec-type {t} --spec-ngram-{t[6:]}-size-n 8 --spec-ngram-{t[6:]}-size-m 24 "
       f"--spec-ngram-{t[6:]}-min-hits 2")
      for t in ("ngram-simple", "ngram-map-k", "ngram-map-k4v")],
    (f"{S} --spec-type ngram-mod --spec-ngram-size-n=12",
     f"{S} --spec-type ngram-mod --spec-ngram-mod-n-match=12"),
    (f"{S} --spec-ngram-size-n 8 --spec-type=ngram-simple",
     f"{S} --spec-ngram-simple-size-n 8 --spec-type=ngram-simple"),
    # -cd / --ctx-size-draft
    (f"{S} -c 4096 -cd 4096", f"{S} -c 4096"),
    (f"{S} --ctx-size-draft=2048 -c 8192", f"{S} -c 8192"),
    # --spec-type draft
    (f"{S} -md d.gguf --spec-type draft --spec-draft-n-max 4",
     f"{S} -md d.gguf --spec-type draft-simple --spec-draft-n-max 4"),
    (f"{S} -md d.gguf --spec-type draft --draft 4",
     f"{S} -md d.gguf --spec-draft-p-min 0.75 --spec-type draft-simple --spec-draft-n-max 4"),
    (f"{S} --spec-type=ngram-simple,draft -md d.gguf --spec-draft-n-max 4 --draft-p-min 0.5",
     f"{S} --spec-type=ngram-simple,draft-simple -md d.gguf --spec-draft-n-max 4 "
     "--draft-p-min 0.5"),
    # underscores are the same options
    (f"{S} --draft_max 3", f"{S} --spec-draft-n-max 3"),
    # tools
    ("llama-cli -m t.gguf -md d.gguf --draft 8 -p 'say --draft-max'",
     "llama-cli -m t.gguf -md d.gguf --spec-type draft-simple --spec-draft-p-min 0.75 "
     "--spec-draft-n-max 8 -p 'say --draft-max'"),
    ("./build/bin/llama-speculative-simple -m t.gguf -md d.gguf --draft-max 16 --draft-min 5",
     "./build/bin/llama-speculative-simple -m t.gguf -md d.gguf --spec-type draft-simple "
     "--spec-draft-p-min 0.75 --spec-draft-n-max 16 --spec-draft-n-min 5"),
    ("llama-speculative -m t.gguf -md d.gguf --draft 8",
     "llama-speculative -m t.gguf -md d.gguf --spec-draft-n-max 8"),
    ("llama-lookup -m t.gguf --draft-max 4 -lcd c.bin",
     "llama-lookup -m t.gguf --spec-draft-n-max 4 -lcd c.bin"),
    ("specgguf run -m t.gguf -md d.gguf --draft 5 -cd 512",
     "specgguf run -m t.gguf -md d.gguf --spec-draft-n-max 5"),
    ("llama-server.exe -m t.gguf --draft-min 1", "llama-server.exe -m t.gguf --spec-draft-n-min 1"),
    # no tool word at all: rename only
    ("--draft-max 5 -cd 100", "--spec-draft-n-max 5"),
]


@pytest.mark.parametrize(("old", "new"), MAPPING)
def test_mapping(old, new):
    res = mig(old)
    assert shlex.join(res.argv) == new
    assert res.unsafe == []
    assert res.notes


@pytest.mark.parametrize("cmd", [m[0] for m in MAPPING] + [m[1] for m in MAPPING])
def test_migrating_migrated_output_changes_nothing(cmd):
    once = mig(cmd).argv
    twice = migrate_argv(once)
    assert twice.argv == once
    assert twice.notes == [] and twice.unsafe == []


def test_every_removed_spelling_appears_in_the_mapping():
    from specgguf.migrate.removed_flags import REMOVED_BY_NAME

    seen = " ".join(m[0] for m in MAPPING)
    for name in REMOVED_BY_NAME:
        assert f"{name} " in seen or f"{name}=" in seen, name


@pytest.mark.parametrize("cmd", [
    "llama-server -m t.gguf --spec-draft-n-max 4 --spec-type ngram-simple",
    "llama-server -m t.gguf -md d.gguf --spec-type draft-simple",
    "llama-server -md d.gguf --model-draft d.gguf -ngld 99 --gpu-layers-draft 99 -td 4 "
    "-ctkd q8_0 -ctvd q8_0 --draft-p-min 0.5 --draft-p-split 0.2 --spec-type draft-simple",
    "llama-server -m t.gguf --port 8080 -p --draft-max",
    "vllm serve M --speculative-config '{\"model\": \"D\", \"num_speculative_tokens\": 5}'",
])
def test_current_commands_are_left_alone(cmd):
    res = mig(cmd)
    assert not res.needs_attention, (res.notes, res.unsafe)


# ----------------------------------------------------------------------------------------------
# argv: old defaults, spec-type, reasons
# ----------------------------------------------------------------------------------------------


def test_tutorial_command_gets_spec_type_and_the_old_p_min():
    res = mig("llama-server -m t.gguf -md d.gguf --draft-max 5 --draft-min 1")
    assert shlex.join(res.argv) == (
        "llama-server -m t.gguf -md d.gguf --spec-type draft-simple --spec-draft-p-min 0.75 "
        "--spec-draft-n-max 5 --spec-draft-n-min 1")
    assert any("llama.cpp ignores -md unless --spec-type" in n for n in res.notes)
    assert any("old --draft-p-min default was 0.75, the new default is 0.00" in n
               for n in res.notes)


def test_a_command_that_relied_on_the_old_draft_max_default_gets_16():
    res = mig("llama-server -m t.gguf -md d.gguf -c 8192 --draft-min 1")
    assert res.argv[5:11] == ["--spec-type", "draft-simple", "--spec-draft-n-max", "16",
                              "--spec-draft-p-min", "0.75"]
    assert "added --spec-draft-n-max 16: the old --draft-max default was 16, the new default " \
           "is 3" in res.notes


@pytest.mark.parametrize("cmd", [
    "llama-server -m target.gguf -md draft.gguf --spec-draft-n-max 4 -ngl all -c 8192 -fa on",
    "llama-server -m t.gguf -md d.gguf -c 8192",
])
def test_a_command_with_no_removed_flag_is_left_alone(cmd):
    """Was: --spec-type draft-simple (and old defaults) added to any command with a draft model.
    Nothing was removed from these, so nothing is changed (issue 12)."""
    res = mig(cmd)
    assert res.argv == shlex.split(cmd) and not res.notes and not res.unsafe


@pytest.mark.parametrize(("cmd", "added"), [
    ("llama-speculative -m t.gguf -md d.gguf --draft-min 2", ["--spec-draft-n-max", "16"]),
    ("llama-lookup -m t.gguf --draft-min 1", ["--spec-draft-n-max", "16"]),
    ("llama-server -m t.gguf -md d.gguf --draft-p-min 0.9 --draft-min 1",
     ["--spec-type", "draft-simple", "--spec-draft-n-max", "16"]),
    ("specgguf run -m t.gguf -md d.gguf --draft-min 1", []),
    ("llama-server -m t.gguf --draft-min 1", []),  # no draft model: no draft defaults
])
def test_old_defaults_are_written_where_they_applied(cmd, added):
    res = mig(cmd)
    renamed = {"--spec-draft-n-min", "1", "2"}
    assert [w for w in res.argv if w not in shlex.split(cmd) and w not in renamed] == added


def test_old_default_not_written_when_the_file_sets_it_through_the_environment():
    res = mig("llama-server -m t.gguf -md d.gguf --draft-min 1",
              env_names={"LLAMA_ARG_DRAFT_MAX"})
    assert "--spec-draft-n-max" not in res.argv
    assert "--spec-draft-n-max not added: LLAMA_ARG_DRAFT_MAX is set in this file" in res.notes


@pytest.mark.parametrize(("cmd", "note"), [
    ("llama-server -m t.gguf -c 4096 -cd 4096", "(-c 4096, the same value)"),
    ("llama-server -m t.gguf -c 8192 -cd 2048", "warning: -cd 2048 removed: the draft context "
                                                 "now follows the target's: it was 2048, it is "
                                                 "now -c 8192"),
    ("llama-server -m t.gguf -cd 2048", "(no -c: the model's training context), it was 2048"),
])
def test_ctx_size_draft_is_dropped_and_a_difference_reported(cmd, note):
    res = mig(cmd)
    assert "-cd" not in res.argv
    assert any(note in n for n in res.notes), res.notes


def test_ctx_size_draft_with_a_variable_is_dropped_but_not_compared():
    res = mig("llama-server -m t.gguf -c 4096 -cd $DCTX", dynamic={6})
    assert res.argv == ["llama-server", "-m", "t.gguf", "-c", "4096"]
    assert "cannot compare $DCTX with -c here" in res.notes[0]


@pytest.mark.parametrize(("cmd", "dynamic", "why"), [
    ("llama-server --spec-type ngram-simple,ngram-map-k --spec-ngram-size-n 8", (), "several"),
    ("llama-server --spec-ngram-size-m 8", (), "no ngram type in --spec-type"),
    ("llama-server --spec-type ngram-mod --spec-ngram-min-hits 2", (), "ngram-mod has no"),
    ("llama-server --spec-type $T --spec-ngram-size-n 8", (2,), "--spec-type is $T"),
    ("llama-server -m t.gguf $EXTRA --spec-ngram-size-n 8", (3,), "$EXTRA may set --spec-type"),
    ("llama-server -m t.gguf $EXTRA --draft-max 8", (3,), "$EXTRA may set --spec-type"),
    ("llama-server -md d.gguf --spec-type draft-simple,ngram-mod --draft-max 8", (),
     "both ngram-mod and draft-simple"),
    ("llama-server -md d.gguf --spec-type ngram-simple --draft-min 1", (),
     "-md d.gguf is ignored"),
    ("llama-server -md d.gguf $EXTRA --draft-min 1", (3,),
     "needs --spec-type draft-simple now, unless $EXTRA"),
])
def test_what_cannot_be_migrated_safely_is_reported_not_guessed(cmd, dynamic, why):
    res = mig(cmd, dynamic=dynamic)
    assert any(why in u for u in res.unsafe), res.unsafe
    for word in shlex.split(cmd):
        if word.startswith("--spec-ngram-size") or word == "--draft-max":
            assert word in res.argv  # left as it was


def test_spec_type_from_the_environment_blocks_the_addition():
    res = mig("llama-server -m t.gguf -md d.gguf --draft-min 1",
              env_names={"LLAMA_ARG_SPEC_TYPE"})
    assert "--spec-type" not in res.argv
    assert res.unsafe


def test_ops_describe_the_change_on_word_indices():
    res = mig("llama-server -md d.gguf -cd 9 --draft 4")
    assert [(op.kind, op.index) for op in res.ops] == [
        ("set", 5), ("delete", 3), ("delete", 4), ("insert", 2)]
    assert apply_ops(res.original, res.ops) == res.argv


# ----------------------------------------------------------------------------------------------
# vLLM
# ----------------------------------------------------------------------------------------------

VLLM = [
    ("vllm serve M --speculative-model D --num-speculative-tokens 5",
     "vllm serve M --speculative-config '{\"model\": \"D\", \"num_speculative_tokens\": 5}'"),
    ("vllm serve M --speculative-model '[ngram]' --num-speculative-tokens 5 "
     "--ngram-prompt-lookup-max 4 --ngram-prompt-lookup-min 1",
     "vllm serve M --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 5, "
     "\"prompt_lookup_max\": 4, \"prompt_lookup_min\": 1}'"),
    ("python -m vllm.entrypoints.openai.api_server --model M --speculative_model=D "
     "--num_speculative_tokens=3 --speculative-draft-tensor-parallel-size 1",
     "python -m vllm.entrypoints.openai.api_server --model M '--speculative-config={\"model\": "
     "\"D\", \"num_speculative_tokens\": 3, \"draft_tensor_parallel_size\": 1}'"),
    ("vllm serve M --num-speculative-tokens 5 --ngram-prompt-lookup-max 4 --port 8000",
     "vllm serve M --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 5, "
     "\"prompt_lookup_max\": 4}' --port 8000"),
]


def test_vllm_mtp_without_a_draft_model_gets_method_mtp_and_only_accepted_keys():
    res = mig("vllm serve deepseek-ai/DeepSeek-R1 -tp 8 --num-speculative-tokens 1")
    assert shlex.join(res.argv) == ("vllm serve deepseek-ai/DeepSeek-R1 -tp 8 "
                                    "--speculative-config '{\"method\": \"mtp\", "
                                    "\"num_speculative_tokens\": 1}'")
    assert any("mtp" in n for n in res.notes)
    # every key ever written is a field of current vLLM's SpeculativeConfig
    accepted = {"method", "model", "num_speculative_tokens", "prompt_lookup_max",
                "prompt_lookup_min", "draft_tensor_parallel_size", "max_model_len",
                "quantization"}
    assert {key for key, _ in lg.VLLM_KEYS.values()} <= accepted


@pytest.mark.parametrize(("old", "new"), VLLM)
def test_vllm_flags_become_one_speculative_config(old, new):
    res = mig(old)
    assert shlex.join(res.argv) == new
    assert migrate_argv(res.argv).argv == res.argv  # round trip


@pytest.mark.parametrize("model", ["my draft", "it's/D", 'quo"te'])
def test_vllm_json_survives_the_shell(model):
    res = migrate_argv(["vllm", "serve", "M", "--speculative-model", model,
                        "--num-speculative-tokens", "2"])
    words = shlex.split(shlex.join(res.argv))
    assert json.loads(words[words.index("--speculative-config") + 1]) == {
        "model": model, "num_speculative_tokens": 2}


@pytest.mark.parametrize(("cmd", "dynamic", "why"), [
    ("vllm serve M --speculative-model $DRAFT --num-speculative-tokens 5", (4,),
     "a shell variable cannot be placed inside"),
    ("vllm serve M --speculative-model D --speculative-config {}", (), "merge them by hand"),
    ("vllm serve M --speculative-model D --speculative-disable-mqa-scorer", (),
     "no --speculative-config equivalent"),
    ("vllm serve M --num-speculative-tokens five", (), "not an integer"),
    ("vllm serve M --num-speculative-tokens 1 --speculative-disable-by-batch-size 33", (),
     "--speculative-disable-by-batch-size 33: no --speculative-config equivalent"),
])
def test_vllm_refusals(cmd, dynamic, why):
    res = mig(cmd, dynamic=dynamic)
    assert any(why in u for u in res.unsafe), res.unsafe


# ----------------------------------------------------------------------------------------------
# lexer and token-preserving edits
# ----------------------------------------------------------------------------------------------


def test_shell_lexer_words_quotes_expansions_and_separators():
    text = 'A=1 llama-server -m "$M" -p \'a b\' --x=${Y:-2} $(cmd "q") 2>&1 | tee l # c\nnext'
    cmds = lex_shell(text)
    assert [[w.value for w in c if not w.redirect] for c in cmds] == [
        ["A=1", "llama-server", "-m", "$M", "-p", "a b", "--x=${Y:-2}", '$(cmd "q")'],
        ["tee", "l"], ["next"]]
    words = cmds[0]
    assert [w.dynamic for w in words[:6]] == [False, False, False, True, False, False]
    assert words[5].quote == "'" and words[3].quote == '"'
    for w in words:  # every character knows where it came from
        for ch, p in zip(w.value, w.pos, strict=True):
            assert text[p] == ch


def test_continuations_and_comments():
    text = "llama-server \\\n  -m x \\\n  --draft 4  # old\n# llama-server --draft 1\n"
    cmds = lex_shell(text)
    assert [[w.value for w in c] for c in cmds] == [["llama-server", "-m", "x", "--draft", "4"]]


def test_words_that_are_not_a_known_tool_are_left_alone_in_files():
    text = "echo --draft-max 5\ncmake --build b -t llama-server\npip install vllm --draft 2\n"
    assert migrate_text(text, "shell") == (text, [])


@pytest.mark.parametrize(("text", "expected"), [
    ("llama-server --draft_max=4", "llama-server --spec-draft-n-max=4"),
    ('llama-server "--draft-max" 4', 'llama-server "--spec-draft-n-max" 4'),
    ("llama-server --spec-type 'draft' -md d", "llama-server --spec-type 'draft-simple' -md d "
                                               "--spec-draft-n-max 16 --spec-draft-p-min 0.75"),
    ('llama-server -md "my d.gguf" --draft 2',
     'llama-server -md "my d.gguf" --spec-type draft-simple --spec-draft-p-min 0.75 '
     "--spec-draft-n-max 2"),
    ("llama-server -m x -cd 512 > log 2>&1 &", "llama-server -m x > log 2>&1 &"),
])
def test_only_the_changed_characters_move(text, expected):
    new, _ = migrate_text(text, "shell")
    assert new == expected


SCRIPT = """\
#!/usr/bin/env bash
set -euo pipefail
# Old tutorial: llama-server --draft-max 16 (comment kept as is)
MODEL="$HOME/models/t.gguf"

\t./build/bin/llama-server \\
\t    -m "$MODEL" \\
\t    -md '/models/my draft.gguf' \\
\t    --draft-max 8 \\
\t    -cd 4096 \\
\t    -c 4096 \\
\t    --port 8080 >server.log 2>&1 &   # background

llama-cli -m t.gguf --spec-type ngram-simple --spec-ngram-size-n=8 -p "say --draft-max"
sh -c "llama-speculative -m t.gguf -md d.gguf --draft 4"
vllm serve meta/Llama --speculative-model 'meta/Small 1B' \\
  --num-speculative-tokens 5
"""
SCRIPT_MIGRATED = """\
#!/usr/bin/env bash
set -euo pipefail
# Old tutorial: llama-server --draft-max 16 (comment kept as is)
MODEL="$HOME/models/t.gguf"

\t./build/bin/llama-server \\
\t    -m "$MODEL" \\
\t    -md '/models/my draft.gguf' --spec-type draft-simple --spec-draft-p-min 0.75 \\
\t    --spec-draft-n-max 8 \\
\t    -c 4096 \\
\t    --port 8080 >server.log 2>&1 &   # background

llama-cli -m t.gguf --spec-type ngram-simple --spec-ngram-simple-size-n=8 -p "say --draft-max"
sh -c "llama-speculative -m t.gguf -md d.gguf --spec-draft-n-max 4"
vllm serve meta/Llama --speculative-config '{"model": "meta/Small 1B", "num_speculative_tokens": 5}'
"""


def test_shell_script_with_several_invocations():
    new, findings = migrate_text(SCRIPT, "shell")
    assert new == SCRIPT_MIGRATED
    assert [f.line for f in findings] == [6, 14, 15, 16]
    assert migrate_text(new, "shell") == (new, [])


def test_bytes_outside_the_changed_tokens_are_identical():
    """Every edit lies inside (or right after) a word of a migrated command."""
    _, findings = migrate_text(SCRIPT, "shell")
    edits = sorted((e for f in findings for e in f.edits), key=lambda e: e.start)
    words = [w for c in lex_shell(SCRIPT) for w in c]
    for e in edits:
        inside = any(w.start <= e.start and e.end <= w.end for w in words)
        after = any(e.start == e.end == w.end for w in words)
        between = any(w.end == e.start for w in words) and e.text == ""
        assert inside or after or between, e
    # and everything between edits is the original text, byte for byte
    out, last = [], 0
    for e in edits:
        out.append(SCRIPT[last:e.start])
        last = e.end
    kept = "".join(out) + SCRIPT[last:]
    new = apply_edits(SCRIPT, edits)
    pos = 0
    for piece in out + [SCRIPT[last:]]:
        found = new.find(piece, pos)
        assert found >= 0
        pos = found + len(piece)
    assert len(kept) < len(SCRIPT)


def test_a_deletion_right_after_an_insertion_point():
    new, _ = migrate_text("llama-server -m x -md d -cd 512 # old\n", "shell")
    assert new == ("llama-server -m x -md d --spec-type draft-simple --spec-draft-n-max 16 "
                   "--spec-draft-p-min 0.75 # old\n")


def test_a_word_that_cannot_be_written_safely_is_reported():
    with pytest.raises(CannotQuote):
        ShellStyle("yaml-plain").quote("a: b")
    assert ShellStyle("yaml-plain").quote('{"model": "D"}') == """'{"model":"D"}'"""
    assert ShellStyle("sq").quote('{"a": 1}') == r'"{\"a\": 1}"'  # inside '...'
    assert ShellStyle("dq").quote('{"a": 1}') == r"""'{\"a\": 1}'"""  # inside "..."
    # JSON nested past json's recursion stays as it is (before: RecursionError, a traceback)
    deep = '{"a":' + "[" * 100_000 + "]" * 100_000 + "}"
    assert ShellStyle("yaml-plain").quote(deep) == f"'{deep}'"


def test_crlf_line_endings_are_kept():
    text = "llama-server -m t \\\r\n  --draft 4 \\\r\n  -c 10\r\n"
    new, _ = migrate_text(text, "shell")
    assert new == "llama-server -m t \\\r\n  --spec-draft-n-max 4 \\\r\n  -c 10\r\n"


# ----------------------------------------------------------------------------------------------
# Dockerfile, Makefile, YAML, Markdown
# ----------------------------------------------------------------------------------------------

DOCKERFILE = """\
FROM ghcr.io/ggml-org/llama.cpp:server-cuda
ENV LLAMA_ARG_DRAFT_MAX=8
CMD ["-m", "/models/t.gguf", \\
     "-md", "/models/d.gguf", "--draft-min", "2"]

FROM python:3.11 AS api
RUN pip install vllm && \\
    llama-cli -m x --draft 3 -cd 100
ENTRYPOINT ["python", "-m", "vllm.entrypoints.openai.api_server", "--speculative-model", "[ngram]", "--num-speculative-tokens", "5"]
ENTRYPOINT ["/bin/sh", "-c", "llama-server -m /m --draft-max 4 -md /d"]
"""  # noqa: E501
DOCKERFILE_MIGRATED = """\
FROM ghcr.io/ggml-org/llama.cpp:server-cuda
ENV LLAMA_ARG_SPEC_DRAFT_N_MAX=8
CMD ["-m", "/models/t.gguf", \\
     "-md", "/models/d.gguf", "--spec-type", "draft-simple", "--spec-draft-p-min", "0.75", "--spec-draft-n-min", "2"]

FROM python:3.11 AS api
RUN pip install vllm && \\
    llama-cli -m x --spec-draft-n-max 3
ENTRYPOINT ["python", "-m", "vllm.entrypoints.openai.api_server", "--speculative-config", "{\\"method\\": \\"ngram\\", \\"num_speculative_tokens\\": 5}"]
ENTRYPOINT ["/bin/sh", "-c", "llama-server -m /m --spec-draft-n-max 4 -md /d --spec-type draft-simple --spec-draft-p-min 0.75"]
"""  # noqa: E501


def test_dockerfile_shell_exec_and_implicit_entrypoint():
    new, findings = migrate_text(DOCKERFILE, "dockerfile")
    assert new == DOCKERFILE_MIGRATED
    assert any("--spec-draft-n-max not added: LLAMA_ARG_DRAFT_MAX is set" in n
               for f in findings for n in f.notes)
    exec_form = new.splitlines()[8].removeprefix("ENTRYPOINT ")
    assert json.loads(json.loads(exec_form)[4]) == {"method": "ngram", "num_speculative_tokens": 5}
    assert migrate_text(new, "dockerfile") == (new, [])


def test_dockerfile_cmd_after_an_entrypoint_tool():
    text = 'FROM ubuntu\nENTRYPOINT ["/app/llama-server"]\nCMD ["-m", "x", "--draft", "2"]\n'
    new, _ = migrate_text(text, "dockerfile")
    assert new.splitlines()[2] == 'CMD ["-m", "x", "--spec-draft-n-max", "2"]'


MAKEFILE = """\
N ?= 8
serve:
\tllama-server -m $(MODEL) -md $(DRAFT) --draft-max $(N)

vllm:
\tvllm serve $(M) --speculative-model D --num-speculative-tokens 3
"""


def test_makefile_keeps_make_variables_and_doubles_dollars_it_adds():
    new, findings = migrate_text(MAKEFILE, "make")
    # the draft is a make variable: it cannot be read, so it is taken as a plain draft model,
    # and the report says so (issue 23, item 5)
    assert new.splitlines()[2] == ("\tllama-server -m $(MODEL) -md $(DRAFT) --spec-type "
                                   "draft-simple --spec-draft-p-min 0.75 --spec-draft-n-max $(N)")
    assert "assumed $(DRAFT) is a plain draft model ($(DRAFT) is decided when the command " \
           "runs; its name says nothing else)" in findings[0].notes[1]
    assert not findings[0].unsafe
    assert new.splitlines()[5] == ("\tvllm serve $(M) --speculative-config '{\"model\": \"D\", "
                                   "\"num_speculative_tokens\": 3}'")
    assert ShellStyle(make=True).quote("$x y") == "'$$x y'"
    assert len(findings) == 2


COMPOSE = """\
services:
  llama:
    image: ghcr.io/ggml-org/llama.cpp:server
    command: -m /models/t.gguf -md /models/d.gguf --draft-max 16   # legacy
    environment:
      LLAMA_ARG_CTX_SIZE_DRAFT: 4096
  llama2:
    image: ghcr.io/ggml-org/llama.cpp:server
    command:
      - -m
      - /models/t.gguf
      - -md
      - /models/d.gguf  # the draft
      - --draft-min
      - "1"
  vllm:
    image: vllm/vllm-openai:latest
    command: ["--model", "M", "--speculative-model", "D", "--num-speculative-tokens", "5"]
  vllm2:
    image: vllm/vllm-openai:v0.6.3
    command: >
      --model M
      --speculative-model D
      --num-speculative-tokens 5
  vllm3:
    image: vllm/vllm-openai
    command: vllm serve M --speculative-model D --num-speculative-tokens 5
  custom:
    image: ubuntu
    entrypoint: ["sh", "-c", "llama-server -m /m/t.gguf --draft 3 -cd 1"]
"""
COMPOSE_MIGRATED = """\
services:
  llama:
    image: ghcr.io/ggml-org/llama.cpp:server
    command: -m /models/t.gguf -md /models/d.gguf --spec-type draft-simple --spec-draft-p-min 0.75 --spec-draft-n-max 16   # legacy
    environment:
      LLAMA_ARG_CTX_SIZE_DRAFT: 4096
  llama2:
    image: ghcr.io/ggml-org/llama.cpp:server
    command:
      - -m
      - /models/t.gguf
      - -md
      - /models/d.gguf  # the draft
      - --spec-type
      - draft-simple
      - --spec-draft-n-max
      - "16"
      - --spec-draft-p-min
      - "0.75"
      - --spec-draft-n-min
      - "1"
  vllm:
    image: vllm/vllm-openai:latest
    command: ["--model", "M", "--speculative-config", "{\\"model\\": \\"D\\", \\"num_speculative_tokens\\": 5}"]
  vllm2:
    image: vllm/vllm-openai:v0.6.3
    command: >
      --model M
      --speculative-config '{"model": "D", "num_speculative_tokens": 5}'
  vllm3:
    image: vllm/vllm-openai
    command: vllm serve M --speculative-config '{"model":"D","num_speculative_tokens":5}'
  custom:
    image: ubuntu
    entrypoint: ["sh", "-c", "llama-server -m /m/t.gguf --spec-draft-n-max 3"]
"""  # noqa: E501


def test_compose_strings_lists_flow_and_block_scalars():
    new, findings = migrate_text(COMPOSE, "yaml")
    assert new == COMPOSE_MIGRATED
    assert any("LLAMA_ARG_CTX_SIZE_DRAFT has no effect" in u for f in findings for u in f.unsafe)
    assert migrate_text(new, "yaml")[0] == new


def test_compose_result_is_still_valid_yaml_with_the_same_meaning():
    yaml = pytest.importorskip("yaml")
    services = yaml.safe_load(migrate_text(COMPOSE, "yaml")[0])["services"]
    assert services["llama2"]["command"][4:8] == ["--spec-type", "draft-simple",
                                                  "--spec-draft-n-max", "16"]
    assert json.loads(services["vllm"]["command"][3])["model"] == "D"
    assert json.loads(shlex.split(services["vllm3"]["command"])[4]) == {
        "model": "D", "num_speculative_tokens": 5}
    assert json.loads(shlex.split(services["vllm2"]["command"])[3])["num_speculative_tokens"] == 5


def test_compose_command_under_an_entrypoint_tool():
    text = ("services:\n  s:\n    image: mine\n    entrypoint: [\"/app/llama-server\"]\n"
            "    command: [\"-m\", \"x\", \"--draft\", \"3\"]\n")
    new, _ = migrate_text(text, "yaml")
    assert new.splitlines()[4] == '    command: ["-m", "x", "--spec-draft-n-max", "3"]'


def test_yaml_quoted_scalars_and_k8s_args():
    text = """\
a:
  command: "llama-server -md 'my d' --draft 2 -c 1"
b:
  command: 'vllm serve M --speculative-model "x y" --num-speculative-tokens 2'
spec:
  containers:
    - name: llama
      image: ghcr.io/ggml-org/llama.cpp:server
      args: ["-m", "t", "--draft-max", "4"]
    - name: other
      command: ["/usr/bin/llama-cli"]
      args:
        - --draft-min
        - '2'
jobs:
  test:
    steps:
      - run: |
          llama-server -m x --draft 4 &
          sleep 1
"""
    yaml = pytest.importorskip("yaml")
    new, _ = migrate_text(text, "yaml")
    doc = yaml.safe_load(new)
    assert shlex.split(doc["a"]["command"]) == [
        "llama-server", "-md", "my d", "--spec-type", "draft-simple", "--spec-draft-p-min",
        "0.75", "--spec-draft-n-max", "2", "-c", "1"]
    b = shlex.split(doc["b"]["command"])
    assert json.loads(b[4]) == {"model": "x y", "num_speculative_tokens": 2}
    containers = doc["spec"]["containers"]
    assert containers[0]["args"] == ["-m", "t", "--spec-draft-n-max", "4"]
    assert containers[1]["args"] == ["--spec-draft-n-min", "2"]
    assert doc["jobs"]["test"]["steps"][0]["run"].splitlines()[0] == (
        "llama-server -m x --spec-draft-n-max 4 &")


MARKDOWN = """\
# Speculative decoding

Inline `llama-server --draft-max 5` is prose and stays.

```bash
llama-server -m t.gguf -md d.gguf --draft-max 5 --draft-min 1
```

```python
subprocess.run(["llama-server", "--draft-max", "5"])
```

```yaml
command: ["llama-server", "-cd", "2048", "-c", "2048", "-m", "x"]
```

~~~dockerfile
CMD llama-lookup -m x --draft 4
~~~

```
$ vllm serve M --speculative-model D --num-speculative-tokens 5
```
"""


def test_markdown_code_blocks_only():
    new, findings = migrate_text(MARKDOWN, "markdown")
    lines = new.splitlines()
    # inline code that names a tool is a command (issue 27)
    assert lines[2] == "Inline `llama-server --spec-draft-n-max 5` is prose and stays."
    assert lines[5] == ("llama-server -m t.gguf -md d.gguf --spec-type draft-simple "
                        "--spec-draft-p-min 0.75 --spec-draft-n-max 5 --spec-draft-n-min 1")
    # a Python block's argument list that names its tool is an argv (scan_source)
    assert lines[9] == 'subprocess.run(["llama-server", "--spec-draft-n-max", "5"])'
    assert lines[13] == 'command: ["llama-server", "-c", "2048", "-m", "x"]'
    assert lines[17] == "CMD llama-lookup -m x --spec-draft-n-max 4"
    assert lines[21] == ("$ vllm serve M --speculative-config '{\"model\": \"D\", "
                         "\"num_speculative_tokens\": 5}'")
    assert [f.line for f in findings] == [3, 6, 10, 14, 18, 22]


def test_reference_tutorial_commands():
    """Commands as a speculative-decoding tutorial writes them, old and current flags mixed."""
    text = """\
```sh
llama-server -m target.gguf -md draft.gguf --spec-draft-n-max 4 -ngl all -c 8192 -fa on
llama-server -m t.gguf -md d.gguf --draft-max 5 --draft-min 1
vllm serve M --speculative-config '{"model": "...", "num_speculative_tokens": 5}'
vllm serve M --speculative-model M2 --num-speculative-tokens 5
```
"""
    new, findings = migrate_text(text, "markdown")
    assert new.splitlines()[1:5] == [
        "llama-server -m target.gguf -md draft.gguf --spec-draft-n-max 4 -ngl all -c 8192 -fa on",
        "llama-server -m t.gguf -md d.gguf --spec-type draft-simple --spec-draft-p-min 0.75 "
        "--spec-draft-n-max 5 --spec-draft-n-min 1",
        "vllm serve M --speculative-config '{\"model\": \"...\", \"num_speculative_tokens\": 5}'",
        "vllm serve M --speculative-config '{\"model\": \"M2\", \"num_speculative_tokens\": 5}'",
    ]
    assert [f.line for f in findings] == [3, 5]


def test_specgguf_migrate_examples_in_docs_are_not_rewritten():
    text = "```sh\nspecgguf migrate -- llama-server --draft-max 5\n```\n"
    assert migrate_text(text, "markdown") == (text, [])


# ----------------------------------------------------------------------------------------------
# run_migrate: --check, --write, --diff, reports
# ----------------------------------------------------------------------------------------------


def run(paths, **kw) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_migrate([str(p) for p in paths], stdout=out, stderr=err, **kw)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "start.sh").write_text(SCRIPT)
    (tmp_path / "Dockerfile").write_text(DOCKERFILE)
    (tmp_path / "Makefile").write_text(MAKEFILE)
    (tmp_path / "compose.yml").write_text(COMPOSE)
    (tmp_path / "README.md").write_text(MARKDOWN)
    (tmp_path / "clean.sh").write_text("llama-server -m x --spec-draft-n-max 4\n")
    return tmp_path


def test_report_format_is_path_line_old_new(tree):
    code, out, err = run([tree / "start.sh"])
    assert code == 0 and err == ""
    lines = out.splitlines()
    path = tree / "start.sh"
    assert lines[0].startswith(f"{path}:6: ./build/bin/llama-server -m \"$MODEL\" -md ")
    assert " -> ./build/bin/llama-server -m \"$MODEL\" -md '/models/my draft.gguf' " \
           "--spec-type draft-simple --spec-draft-p-min 0.75 --spec-draft-n-max 8 -c 4096 " \
           "--port 8080" in lines[0]
    assert f"{path}:6: note: added --spec-draft-p-min 0.75: the old --draft-p-min default " \
           "was 0.75, the new default is 0.00" in lines
    assert (tree / "start.sh").read_text() == SCRIPT  # reporting changes nothing


def test_check_exit_codes(tree):
    assert run([tree / "clean.sh"], check=True)[0] == 0
    assert run([tree / "start.sh"], check=True)[0] == 1
    assert run([tree / "clean.sh", tree / "Makefile"], check=True)[0] == 1
    code, _, err = run([tree / "missing.sh"], check=True)
    assert code == 1 and "missing.sh: no such file" in err
    # a device or a FIFO exists: it is not read (a FIFO would block), and not called missing
    fifo = tree / "fifo"
    os.mkfifo(fifo)
    for special in (fifo, "/dev/zero"):
        code, _, err = run([special], check=True)
        assert code == 1 and err == f"error: {special}: not a regular file\n", err
    # unsafe items need a person even without --check
    assert run([tree / "compose.yml"])[0] == 1


def test_write_rewrites_atomically_and_keeps_mode(tree, monkeypatch):
    script = tree / "start.sh"
    script.chmod(0o751)
    replaced = []
    real_replace = os.replace

    def spy(src, dst):
        replaced.append((src, dst))
        assert Path(src).parent == Path(dst).parent  # same directory: same filesystem
        assert Path(dst).read_text() == SCRIPT  # the old file is whole until the swap
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    code, out, _ = run([script], write=True)
    assert code == 0 and f"{script}: rewritten" in out
    assert script.read_text() == SCRIPT_MIGRATED
    assert stat.S_IMODE(script.stat().st_mode) == 0o751
    assert len(replaced) == 1
    assert sorted(p.name for p in tree.iterdir()) == sorted(
        ["start.sh", "Dockerfile", "Makefile", "compose.yml", "README.md", "clean.sh"])
    assert run([script], check=True)[0] == 0  # nothing left


def test_write_failure_leaves_the_file_and_no_temporary(tree, monkeypatch):
    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    code, _, err = run([tree / "start.sh"], write=True)  # was: the OSError escaped
    assert code == 1 and err == f"error: {tree / 'start.sh'}: not rewritten: disk full\n"
    assert (tree / "start.sh").read_text() == SCRIPT
    assert not [p for p in tree.iterdir() if p.name.endswith(".tmp")]


def test_write_through_a_symlink_keeps_the_link(tree):
    link = tree / "link.sh"
    link.symlink_to(tree / "start.sh")
    run([link], write=True)
    assert link.is_symlink()
    assert (tree / "start.sh").read_text() == SCRIPT_MIGRATED


def test_write_every_kind_then_check_is_clean_except_what_needs_a_person(tree):
    run([tree], write=True)
    assert (tree / "Dockerfile").read_text() == DOCKERFILE_MIGRATED
    assert (tree / "compose.yml").read_text() == COMPOSE_MIGRATED
    code, out, _ = run([tree], check=True)
    assert code == 1
    # what is left: a variable with no successor; the make-variable draft is taken as plain,
    # the inline code and the README's Python argument list are migrated
    assert sorted(line.split(": cannot migrate safely: ")[0].rsplit("/", 1)[1]
                  for line in out.splitlines()) == ["compose.yml:6"]
    assert "LLAMA_ARG_CTX_SIZE_DRAFT" in out


def test_diff_is_a_unified_diff(tree):
    code, out, _ = run([tree / "start.sh"], diff=True)
    assert code == 0
    assert out.startswith(f"--- {tree / 'start.sh'}\n+++ {tree / 'start.sh'}\n@@ ")
    assert "-\t    --draft-max 8 \\\n" in out and "+\t    --spec-draft-n-max 8 \\\n" in out
    assert "\n# " in out  # the reasons follow, as comments
    assert (tree / "start.sh").read_text() == SCRIPT


def test_non_utf8_files_are_checked_and_rewritten_byte_for_byte(tmp_path):
    """Was: "not UTF-8, skipped", exit 0. Now the bytes are kept and the file is migrated."""
    latin = tmp_path / "latin.sh"
    latin.write_bytes(b"# caf\xe9 \xff\nllama-server -m x --draft 4 # caf\xe9\n")
    code, out, _ = run([latin], check=True)
    assert code == 1 and f"{latin}:2: " in out
    assert run([latin], write=True)[0] == 0
    assert latin.read_bytes() == (b"# caf\xe9 \xff\nllama-server -m x --spec-draft-n-max 4 "
                                  b"# caf\xe9\n")
    assert run([latin], check=True)[0] == 0


def test_utf16_windows_batch_file_is_read_and_written_as_utf16(tmp_path):
    bat = tmp_path / "serve.bat"
    text = "llama-server.exe -m x.gguf ^\r\n  --draft-min 2\r\n"
    bat.write_bytes(b"\xff\xfe" + text.encode("utf-16-le"))
    assert run([bat], check=True)[0] == 1
    run([bat], write=True)
    assert bat.read_bytes() == b"\xff\xfe" + text.replace(
        "--draft-min", "--spec-draft-n-min").encode("utf-16-le")


def test_a_named_binary_file_fails_and_a_binary_file_in_a_directory_is_listed(tmp_path):
    (tmp_path / "bin.sh").write_bytes(b"llama-server --draft 4\0\x01")
    code, out, err = run([tmp_path / "bin.sh"], check=True)
    assert code == 1 and "bin.sh: binary file" in err
    code, out, err = run([tmp_path], check=True)
    assert (code, out) == (0, "") and err == ""
    code, out, err = run([tmp_path], check=True, verbose=True)
    assert code == 0 and f"skipped: {tmp_path / 'bin.sh'}: binary file" in err


def test_file_kinds():
    assert file_kind("x/Dockerfile") == file_kind("Dockerfile.gpu") == "dockerfile"
    assert file_kind("Makefile") == file_kind("rules.mk") == "make"
    assert file_kind("docker-compose.yaml") == "yaml"
    assert file_kind("README.md") == "markdown"
    assert file_kind("run.sh") == file_kind("run", "#!/bin/bash\n") == "shell"
    assert file_kind("Makefile.cuda") == file_kind("GNUmakefile") == "make"
    assert file_kind("serve.bat") == file_kind("SERVE.CMD") == "bat"
    for name in ("llama.service", ".env", "prod.env", "notes.txt", "app.conf"):
        assert file_kind(name) == "shell", name
    # PowerShell continues a line with a backtick, and a backslash is a path's
    assert file_kind("x.ps1") == file_kind("Serve.PSM1") == "powershell"
    assert detect("x.ps1", "") == ("powershell", "shell")
    assert file_kind("main.py") is None
    # a named file and a file in a directory are detected the same way
    assert detect("main.py", "") == (None, "python")
    assert detect("args.json", "") == (None, "json")
    assert detect("run", "#!/usr/bin/env python3\n") == (None, "python")
    assert detect("Procfile", "web: llama-server\n") == ("shell", "shell")


# ----------------------------------------------------------------------------------------------
# the Typer command
# ----------------------------------------------------------------------------------------------


def _app() -> typer.Typer:
    spec = importlib.util.spec_from_file_location("specgguf_cli_migrate_cmd",
                                                  ROOT / "cli" / "migrate_cmd.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    app = typer.Typer()
    app.command("migrate", context_settings={"allow_extra_args": True,
                                             "ignore_unknown_options": True})(module.migrate)

    @app.command("other")
    def other() -> None:  # a second command keeps `migrate` a subcommand
        pass

    return app


def test_cli_migrates_a_command_after_double_dash():
    result = CliRunner().invoke(_app(), ["migrate", "--", "llama-server", "-m", "t.gguf", "-md",
                                         "d.gguf", "--draft-max", "5", "--draft-min", "1"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0] == ("llama-server -m t.gguf -md d.gguf --spec-type draft-simple "
                        "--spec-draft-p-min 0.75 --spec-draft-n-max 5 --spec-draft-n-min 1")
    assert all(line.startswith("# ") for line in lines[1:]) and len(lines) == 5


def test_cli_check_with_a_command_and_with_files(tree):
    app, runner = _app(), CliRunner()
    assert runner.invoke(app, ["migrate", "--check", "--", "llama-server", "--draft",
                               "3"]).exit_code == 1
    assert runner.invoke(app, ["migrate", "--check", "--", "llama-server", "-m",
                               "x"]).exit_code == 0
    result = runner.invoke(app, ["migrate", "--check", str(tree / "start.sh")])
    assert result.exit_code == 1 and f"{tree / 'start.sh'}:6: " in result.output
    assert runner.invoke(app, ["migrate", "--check", str(tree / "clean.sh")]).exit_code == 0
    result = runner.invoke(app, ["migrate", "--write", str(tree / "start.sh")])
    assert result.exit_code == 0 and (tree / "start.sh").read_text() == SCRIPT_MIGRATED


def test_cli_usage_errors():
    app, runner = _app(), CliRunner()
    assert runner.invoke(app, ["migrate"]).exit_code == 1
    result = runner.invoke(app, ["migrate", "--write", "--", "llama-server", "--draft", "3"])
    assert result.exit_code == 1


def test_cli_unsafe_command_exits_1_and_says_why():
    result = CliRunner().invoke(_app(), ["migrate", "--", "llama-server", "--spec-ngram-size-n",
                                         "4"])
    assert result.exit_code == 1
    assert "# cannot migrate safely: --spec-ngram-size-n 4: no ngram type" in result.output


def test_pre_commit_hook_manifest():
    text = (ROOT / ".pre-commit-hooks.yaml").read_text()
    assert "- id: specgguf-migrate" in text
    assert "entry: specgguf migrate --check" in text
    assert "language: python" in text
    assert "types: [text]" in text  # every text file, not only the kinds named before
    yaml = pytest.importorskip("yaml")
    (hook,) = yaml.safe_load(text)
    assert hook["id"] == "specgguf-migrate"


# ----------------------------------------------------------------------------------------------
# draft-type awareness (issue 12): read the drafter's GGUF, never guess
# ----------------------------------------------------------------------------------------------


def _drafter(path: Path, arch: str, extra: tuple[bytes, ...] = ()) -> Path:
    from tests.gguf_factory import minimal_kvs, raw_gguf

    path.write_bytes(raw_gguf([*minimal_kvs(arch), *extra]))
    return path


@pytest.mark.parametrize(("arch", "extra", "kind"), [
    ("llama", (), "plain"),
    ("eagle3", (), "eagle3"),
    ("dflash", (), "dflash"),
    ("qwen35", ("qwen35.nextn_predict_layers",), "mtp"),
])
def test_drafter_kind_is_read_from_its_gguf(tmp_path, monkeypatch, arch, extra, kind):
    from tests.gguf_factory import kv_u32

    monkeypatch.setattr(drafter_kind, "classify_draft", READ_DRAFT_FILES)
    _drafter(tmp_path / "d.gguf", arch, tuple(kv_u32(k, 1) for k in extra))
    assert drafter_kind.classify_draft("d.gguf", str(tmp_path)) == (kind, "")
    script = tmp_path / "serve.sh"
    script.write_text("llama-server -m t.gguf -md d.gguf --draft-max 8\n")
    code, out, _ = run([script], write=True)
    new = script.read_text()
    assert "--spec-draft-n-max 8" in new
    if kind == "plain":
        assert code == 0 and "--spec-type draft-simple --spec-draft-p-min 0.75" in new
    else:  # llama.cpp takes an MTP/EAGLE-3/DFlash drafter's type from the file
        assert code == 0 and "--spec-type" not in new and "p-min" not in new
        assert "llama.cpp takes its type from the file" in out
    assert run([script], check=True)[0] == 0


def test_a_drafter_that_is_not_here_is_taken_as_plain_unless_its_name_says_otherwise(
        tmp_path, monkeypatch):
    """Issue 23, item 5: models are never in a repository, so refusing every command whose
    draft cannot be read made `--write` useless in CI. The assumption is said in one note."""
    monkeypatch.setattr(drafter_kind, "classify_draft", READ_DRAFT_FILES)
    script = tmp_path / "serve.sh"
    script.write_text("llama-server -m t.gguf -md /nowhere/d.gguf --draft-max 8\n")
    assert run([script], check=True)[0] == 1  # a removed flag always fails --check
    code, out, _ = run([script], write=True)
    assert code == 0
    assert script.read_text() == ("llama-server -m t.gguf -md /nowhere/d.gguf --spec-type "
                                  "draft-simple --spec-draft-p-min 0.75 --spec-draft-n-max 8\n")
    notes = [ln for ln in out.splitlines() if "assumed" in ln]
    assert notes == [f"{script}:1: note: assumed /nowhere/d.gguf is a plain draft model "
                     "(/nowhere/d.gguf is not here to read; its name says nothing else); if it "
                     "is not, give --draft-kind or a `specgguf-migrate: draft-kind=KIND` comment"]
    assert run([script], check=True)[0] == 0


@pytest.mark.parametrize(("draft", "kind"), [
    ("models/Qwen3-MTP-head.gguf", "mtp"), ("$MTP_PATH", "mtp"), ("eagle3-llama.gguf", "eagle3"),
    ("/m/x-dflash.gguf", "dflash"), ("dspark_q8.gguf", "dspark"), ("smtp-d.gguf", "plain"),
    ("models/Qwen3-1.7B-Q4_K_M.gguf", "plain"),
])
def test_a_drafter_name_says_its_kind(draft, kind):
    assert drafter_kind.kind_from_name(draft) == kind


@pytest.mark.parametrize(("how", "extra"), [
    ("option", {"draft_kind": "mtp"}),
    ("directive", {}),
])
def test_draft_kind_option_and_directive_override_the_assumption(tmp_path, monkeypatch, how,
                                                                  extra):
    monkeypatch.setattr(drafter_kind, "classify_draft", READ_DRAFT_FILES)
    script = tmp_path / "serve.sh"
    head = "# specgguf-migrate: draft-kind=mtp\n" if how == "directive" else ""
    script.write_text(f"{head}llama-server -m t.gguf -md d.gguf --draft-max 8\n")
    code, out, _ = run([script], write=True, **extra)
    assert code == 0
    assert script.read_text() == f"{head}llama-server -m t.gguf -md d.gguf --spec-draft-n-max 8\n"
    assert "d.gguf taken as an MTP drafter (draft-kind mtp; d.gguf is not here to read)" in out
    # a draft file that can be read wins over what is said about it
    _drafter(tmp_path / "d.gguf", "llama")
    script.write_text(f"{head}llama-server -m t.gguf -md d.gguf --draft-max 8\n")
    run([script], write=True, **extra)
    assert "--spec-type draft-simple" in script.read_text()


def test_cli_migrates_the_common_legacy_command_with_no_draft_file(tmp_path, monkeypatch):
    app = _app()
    monkeypatch.setattr(drafter_kind, "classify_draft", READ_DRAFT_FILES)
    monkeypatch.chdir(tmp_path)
    cmd = ["migrate", "--", "llama-server", "-m", "t.gguf", "-md", "d.gguf", "--draft-max", "5"]
    result = CliRunner().invoke(app, cmd)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == ("llama-server -m t.gguf -md d.gguf --spec-type "
                                             "draft-simple --spec-draft-p-min 0.75 "
                                             "--spec-draft-n-max 5")
    assert "# assumed d.gguf is a plain draft model" in result.output
    result = CliRunner().invoke(app, ["migrate", "--draft-kind", "eagle3", *cmd[1:]])
    assert result.output.splitlines()[0] == "llama-server -m t.gguf -md d.gguf --spec-draft-n-max 5"
    result = CliRunner().invoke(app, ["migrate", "--draft-kind", "big", *cmd[1:]])
    assert result.exit_code == 1
    assert "--draft-kind big: not one of plain, mtp, eagle3, dflash, dspark" in result.output


@pytest.mark.parametrize("cmd", [
    "llama-server -m t.gguf -md dflash.gguf --dflash --draft-max 16",
    "llama-server -m t.gguf --mtp-head h.gguf --spec-type mtp --draft-max 8 --draft-min 0",
])
def test_fork_flags_are_reported_and_nothing_is_rewritten(cmd):
    res = mig(cmd)
    assert res.argv == shlex.split(cmd)
    assert "written for a fork" in res.unsafe[0]


# ----------------------------------------------------------------------------------------------
# the real-world corpus (tests/data/migrate): shapes taken from public repositories, each file
# naming its source; tests/test_migrate_corpus.py holds the exact text each becomes. negative/
# holds files that must pass untouched
# ----------------------------------------------------------------------------------------------

CORPUS = ROOT / "tests" / "data" / "migrate"
POSITIVE = sorted(p for p in CORPUS.iterdir() if p.is_file())
NEGATIVE = sorted((CORPUS / "negative").iterdir())


@pytest.mark.parametrize("src", NEGATIVE, ids=lambda p: p.name)
def test_corpus_negative_controls_pass_untouched(src, tmp_path, monkeypatch):
    monkeypatch.setattr(drafter_kind, "classify_draft", READ_DRAFT_FILES)
    path = tmp_path / src.name
    path.write_bytes(src.read_bytes())
    assert run([path], check=True)[:2] == (0, "")
    assert run([path], write=True)[0] == 0
    assert path.read_bytes() == src.read_bytes()


def test_corpus_directory_scan_sees_every_file_a_named_scan_sees(tmp_path, monkeypatch):
    import shutil

    monkeypatch.setattr(drafter_kind, "classify_draft", READ_DRAFT_FILES)
    shutil.copytree(CORPUS, tmp_path / "c", ignore=shutil.ignore_patterns("expected"))
    (tmp_path / "c" / ".git").mkdir()
    (tmp_path / "c" / ".git" / "x.sh").write_text("llama-server --draft-max 4\n")
    (tmp_path / "c" / "model.bin").write_bytes(b"\0--draft-max\0")
    code, out, err = run([tmp_path / "c"], check=True, verbose=True)
    assert code == 1
    reported = {line.split(":", 1)[0] for line in out.splitlines()}
    assert reported == {str(tmp_path / "c" / p.name) for p in POSITIVE}
    assert f"skipped: {tmp_path / 'c' / '.git'}: vendored or tool directory" in err
    assert f"skipped: {tmp_path / 'c' / 'model.bin'}: binary file" in err


# ----------------------------------------------------------------------------------------------
# issue 12: the token scan, opt-outs, env-only configs, ownership
# ----------------------------------------------------------------------------------------------


def _check(text: str, name: str = "f.sh") -> tuple[str, list[str]]:
    kind, comments = detect(name, text)
    new, findings = check_text(text, kind, comments)
    return new, [u for f in findings for u in f.unsafe]


@pytest.mark.parametrize(("text", "name"), [
    ('SPEC_FLAGS="--draft-max 16"\nllama-server -m t.gguf $SPEC_FLAGS\n', "a.sh"),
    ("args=(-md d.gguf --draft_min 2)\n", "a.sh"),
    ('X=$(llama-cli -m t -md d --draft 4 -p hi)\n', "a.sh"),
    ("llama-server.exe -m t ^\r\n  -md d ^\r\n  --draft-max 8\r\n", "a.bat"),
    ("svc:\n  start_command: llama-server -m t --draft-max 8\n", "a.yaml"),
    ("flags:\n  - --draft-max: 16\n", "a.yml"),
    ("```\n--draft-min 1\n```\n", "a.md"),
    ('{"argv": ["--ctx-size-draft", "4096"], "llama": 1}\n', "a.json"),
    ('subprocess.run(["vllm", "serve", "M", "--num-speculative-tokens", "3"])\n', "a.py"),
    ("LLAMA_ARG_SPEC_TYPE=draft\n", ".env"),
    ("command: llama-server --spec-type 'ngram-simple,draft' -m x\n", "c.yaml"),
    ("ExecStart=/opt/vllm/bin/python -m vllm.entrypoints.openai.api_server "
     "--speculative-disable-mqa-scorer\n", "vllm.service"),
])
def test_no_removed_name_passes_whatever_its_shape(text, name):
    """Rewritten where the rewrite understands the shape, reported where it does not."""
    kind, comments = detect(name, text)
    new, findings = check_text(text, kind, comments)
    assert findings, text
    if not any(f.unsafe for f in findings):  # all rewritten: nothing removed is left
        assert check_text(new, kind, comments)[1] == []
        assert new != text


@pytest.mark.parametrize(("text", "name"), [
    ("gh pr create --draft --title t   # uses llama.cpp elsewhere\n", "a.sh"),
    ('llama-server -m t -p "say --draft-max" --spec-draft-n-max 4\n', "a.sh"),
    ("# llama-server --draft-max 16 (an old example, in a comment)\nllama-server -m t\n", "a.sh"),
    ("```sh\nspecgguf migrate -- llama-server --draft-max 5\n```\n", "a.md"),
    ("cd build && cmake .. -DLLAMA_CUDA=ON\n", "a.sh"),
    ("llama-server -m t --draft-p-min 0.5 --spec-draft-n-max 4 -md d\n", "a.sh"),
])
def test_what_is_not_a_removed_argument_passes(text, name):
    new, unsafe = _check(text, name)
    assert (new, unsafe) == (text, [])


def test_opt_out_comments_line_next_line_block_and_file():
    text = ("llama-server --draft-max 5  # specgguf-migrate: ignore\n"
            "# specgguf-migrate: ignore-next-line\n"
            "llama-server --draft-max 6\n"
            "# specgguf-migrate: ignore-start\n"
            "FLAGS='--draft-min 1'\n"
            "llama-server --draft 2\n"
            "# specgguf-migrate: ignore-end\n")
    assert _check(text) == (text, [])  # nothing reported, nothing rewritten
    new, unsafe = _check(text + "llama-server --draft-max 7\n")
    assert new.endswith("llama-server --spec-draft-n-max 7\n") and new.startswith(text)
    whole = "<!-- specgguf-migrate: ignore-file -->\n`--draft-max 4`\n"
    assert _check(whole, "doc.md") == (whole, [])


def test_vllm_removed_flags_are_the_ones_migrate_knows():
    from specgguf.migrate.guard import VLLM_REMOVED_FLAGS

    assert set(lg.VLLM_KEYS) | set(lg.VLLM_GONE) == VLLM_REMOVED_FLAGS


ENV_CASES = [
    ("compose.yml",
     "services:\n  s:\n    image: ghcr.io/ggml-org/llama.cpp:server\n    environment:\n"
     "      - LLAMA_ARG_MODEL_DRAFT=/m/d.gguf\n      - LLAMA_ARG_DRAFT_MAX=8\n",
     "services:\n  s:\n    image: ghcr.io/ggml-org/llama.cpp:server\n    environment:\n"
     "      - LLAMA_ARG_SPEC_DRAFT_MODEL=/m/d.gguf\n      - LLAMA_ARG_SPEC_DRAFT_N_MAX=8\n"
     "      - LLAMA_ARG_SPEC_TYPE=draft-simple\n      - LLAMA_ARG_SPEC_DRAFT_P_MIN=0.75\n"),
    ("compose.yaml",
     "x:\n  environment:\n    LLAMA_ARG_MODEL_DRAFT: \"/m/d.gguf\"\n"
     "    LLAMA_ARG_DRAFT_MIN: \"2\"  # min\n",
     "x:\n  environment:\n    LLAMA_ARG_SPEC_DRAFT_MODEL: \"/m/d.gguf\"\n"
     "    LLAMA_ARG_SPEC_DRAFT_N_MIN: \"2\"  # min\n    LLAMA_ARG_SPEC_TYPE: \"draft-simple\"\n"
     "    LLAMA_ARG_SPEC_DRAFT_N_MAX: \"16\"\n    LLAMA_ARG_SPEC_DRAFT_P_MIN: \"0.75\"\n"),
    ("deploy.yaml",
     "env:\n  - name: LLAMA_ARG_MODEL_DRAFT\n    value: /m/d.gguf\n"
     "  - name: LLAMA_ARG_DRAFT_MAX\n    value: \"12\"\n",
     "env:\n  - name: LLAMA_ARG_SPEC_DRAFT_MODEL\n    value: /m/d.gguf\n"
     "  - name: LLAMA_ARG_SPEC_DRAFT_N_MAX\n    value: \"12\"\n"
     "  - name: LLAMA_ARG_SPEC_TYPE\n    value: \"draft-simple\"\n"
     "  - name: LLAMA_ARG_SPEC_DRAFT_P_MIN\n    value: \"0.75\"\n"),
    (".env",
     "LLAMA_ARG_MODEL_DRAFT=/m/d.gguf\r\nexport LLAMA_ARG_DRAFT_MAX=8\r\n",
     "LLAMA_ARG_SPEC_DRAFT_MODEL=/m/d.gguf\r\nexport LLAMA_ARG_SPEC_DRAFT_N_MAX=8\r\n"
     "export LLAMA_ARG_SPEC_TYPE=draft-simple\r\nexport LLAMA_ARG_SPEC_DRAFT_P_MIN=0.75\r\n"),
    ("llama.service",
     '[Service]\nEnvironment="LLAMA_ARG_MODEL_DRAFT=/m/d.gguf"\n'
     'Environment="LLAMA_ARG_DRAFT_MAX=8"\nExecStart=/usr/bin/llama-server -m /m/t.gguf\n',
     '[Service]\nEnvironment="LLAMA_ARG_SPEC_DRAFT_MODEL=/m/d.gguf"\n'
     'Environment="LLAMA_ARG_SPEC_DRAFT_N_MAX=8"\nEnvironment="LLAMA_ARG_SPEC_TYPE=draft-simple"\n'
     'Environment="LLAMA_ARG_SPEC_DRAFT_P_MIN=0.75"\n'
     "ExecStart=/usr/bin/llama-server -m /m/t.gguf\n"),
]


@pytest.mark.parametrize(("name", "old", "new"), ENV_CASES, ids=[c[0] for c in ENV_CASES])
def test_env_only_configs_keep_drafting(tmp_path, name, old, new):
    """Was: LLAMA_ARG_DRAFT_MAX renamed, no LLAMA_ARG_SPEC_TYPE: drafting silently off."""
    path = tmp_path / name
    path.write_bytes(old.encode())
    code, out, _ = run([path], write=True)
    assert code == 0, out
    assert path.read_bytes() == new.encode()
    assert "added LLAMA_ARG_SPEC_TYPE=draft-simple" in out
    assert run([path], check=True)[0] == 0
    if name.endswith((".yml", ".yaml")):
        yaml = pytest.importorskip("yaml")
        yaml.safe_load(new)


@pytest.mark.parametrize(("old", "why"), [
    ("LLAMA_ARG_DRAFT_MAX=8\n", "no draft model and no speculative type in this file"),
])
def test_env_blocks_that_cannot_be_decided_are_reported_untouched(tmp_path, old, why):
    path = tmp_path / ".env"
    path.write_text(old)
    code, out, _ = run([path], write=True)
    assert code == 1 and why in out
    assert path.read_text() == old


def test_env_with_a_hugging_face_draft_is_taken_as_plain_and_says_so(tmp_path):
    path = tmp_path / ".env"
    path.write_text("LLAMA_ARG_HF_REPO_DRAFT=org/d-GGUF\nLLAMA_ARG_DRAFT_MAX=8\n")
    code, out, _ = run([path], write=True)
    assert code == 0
    assert path.read_text() == ("LLAMA_ARG_HF_REPO_DRAFT=org/d-GGUF\n"
                                "LLAMA_ARG_SPEC_DRAFT_N_MAX=8\nLLAMA_ARG_SPEC_TYPE=draft-simple\n"
                                "LLAMA_ARG_SPEC_DRAFT_P_MIN=0.75\n")
    assert "assumed org/d-GGUF is a plain draft model (org/d-GGUF is a Hugging Face " \
           "repository; its name says nothing else)" in out


def test_env_with_a_spec_type_or_a_drafter_gguf_is_only_renamed(tmp_path, monkeypatch):
    path = tmp_path / ".env"
    path.write_text("LLAMA_ARG_SPEC_TYPE=ngram-mod,draft-simple\nLLAMA_ARG_DRAFT_MIN=2\n")
    assert run([path], write=True)[0] == 0
    assert path.read_text() == ("LLAMA_ARG_SPEC_TYPE=ngram-mod,draft-simple\n"
                                "LLAMA_ARG_SPEC_DRAFT_N_MIN=2\n")
    monkeypatch.setattr(drafter_kind, "classify_draft", READ_DRAFT_FILES)
    _drafter(tmp_path / "e.gguf", "eagle3")
    path.write_text("LLAMA_ARG_MODEL_DRAFT=e.gguf\nLLAMA_ARG_DRAFT_MAX=4\n")
    code, out, _ = run([path], write=True)
    assert code == 0 and "LLAMA_ARG_SPEC_TYPE" not in path.read_text()
    assert "takes its type from the file" in out


def test_write_keeps_owner_and_group(tree):
    script = tree / "start.sh"
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    os.chown(script, 4321, 4322)
    assert run([script], write=True)[0] == 0
    st = script.stat()
    assert (st.st_uid, st.st_gid) == (4321, 4322)
    assert script.read_text() == SCRIPT_MIGRATED


def test_write_in_place_when_the_owner_cannot_be_kept(tree, monkeypatch):
    script = tree / "start.sh"
    inode = script.stat().st_ino

    def refuse(*_args):
        raise PermissionError("not permitted")

    monkeypatch.setattr(os, "chown", refuse)
    monkeypatch.setattr(os, "stat", _stat_with_other_owner(os.stat, str(script)))
    assert run([script], write=True)[0] == 0
    assert script.read_text() == SCRIPT_MIGRATED
    assert script.stat().st_ino == inode  # the same file, so the same owner, group and mode
    assert not [p for p in tree.iterdir() if p.name.endswith(".tmp")]


def _stat_with_other_owner(real_stat, target: str):
    """os.stat that reports another owner for `target`, as for a file someone else owns."""

    def fake(path, *args, **kw):
        st = real_stat(path, *args, **kw)
        if os.fspath(path) == target:
            fields = list(st)
            fields[4] = st.st_uid + 1
            return os.stat_result(fields)
        return st

    return fake


# ----------------------------------------------------------------------------------------------
# issue 27: options without their tool, nested strings, prose, and the reasons left
# ----------------------------------------------------------------------------------------------


def test_fragments_in_one_file_get_one_spec_type_and_no_default_set_elsewhere(monkeypatch):
    monkeypatch.setattr(drafter_kind, "classify_draft", READ_DRAFT_FILES)
    text = ('SPEC="--model-draft $M --draft-max 16 --draft-min 5"\n'
            "FLAGS=(-md /m/d.gguf --draft-p-min 0.6 -cd 4096)\n"
            'llama-server -m /m/t.gguf $SPEC "${FLAGS[@]}"\n')
    new, findings = check_text(text, "shell", "shell")
    assert new == ('SPEC="--model-draft $M --spec-type draft-simple --spec-draft-n-max 16 '
                   '--spec-draft-n-min 5"\n'
                   "FLAGS=(-md /m/d.gguf --draft-p-min 0.6)\n"
                   'llama-server -m /m/t.gguf $SPEC "${FLAGS[@]}"\n')
    assert not [u for f in findings for u in f.unsafe]
    assert check_text(new, "shell", "shell")[1] == []


def test_a_line_that_is_not_a_command_or_its_options_is_reported_not_rewritten():
    text = "llama-server -m t.gguf\necho --draft-max 5\n"
    new, findings = check_text(text, "shell", "shell")
    assert new == text
    assert [f.line for f in findings if f.unsafe] == [2]


def test_shell_single_quotes_inside_a_plain_yaml_scalar():
    text = ("services:\n  v:\n    command: sh -c 'vllm serve M --speculative-model D "
            "--num-speculative-tokens 3'\n")
    new, findings = check_text(text, "yaml", "yaml")
    assert new == ("services:\n  v:\n    command: sh -c 'vllm serve M --speculative-config "
                   '"{\\"model\\":\\"D\\",\\"num_speculative_tokens\\":3}"\'\n')
    yaml = pytest.importorskip("yaml")
    inner = shlex.split(yaml.safe_load(new)["services"]["v"]["command"])[2]
    assert json.loads(shlex.split(inner)[4]) == {"model": "D", "num_speculative_tokens": 3}


@pytest.mark.parametrize(("line", "changed"), [
    ("Use `--draft-max 8` for code.", "Use `--spec-draft-n-max 8` for code."),
    ("- removed `--draft-max` (llama.cpp)", None),
    ("`--draft-max` -> `--spec-draft-n-max`", None),
])
def test_markdown_prose_renames_one_to_one_and_leaves_lines_about_old_flags(line, changed):
    new, findings = check_text(line + "\n", "markdown", "markdown")
    assert new == (changed or line) + "\n"
    assert not [u for f in findings for u in f.unsafe]


def test_a_changelog_heading_exempts_its_lines_but_not_its_code_blocks():
    text = ("# Changelog\n\n## 1.2\n\n- added `--draft 16` to llama.cpp runs\n\n"
            "```sh\nllama-server -m t --draft-min 1\n```\n")
    new, findings = check_text(text, "markdown", "markdown")
    assert new == text.replace("--draft-min 1", "--spec-draft-n-min 1")
    assert not [u for f in findings for u in f.unsafe]


@pytest.mark.parametrize(("message", "key"), [
    ("--speculative-model $M: a shell variable cannot be placed inside the "
     "--speculative-config JSON safely; write the JSON by hand", "runtime"),
    ("--speculative-disable-by-batch-size 4: no --speculative-config equivalent (current vLLM "
     "has no such setting); remove it by hand", "no-equivalent"),
    ("--dflash is not a llama.cpp option: this command was written for a fork, whose flags may "
     "still be valid there; migrate it by hand", "fork"),
    ("--spec-ngram-size-n 4: no ngram type in --spec-type, so the ngram type it configured is "
     "unknown", "ambiguous"),
    ("--draft-max is still here (llama.cpp removed it); migrate it by hand (inside program "
     "source: a string the rewrite does not edit)", "source"),
    ("--draft-max is still here (llama.cpp removed it); migrate it by hand", "unplaced"),
])
def test_every_message_files_under_one_reason(message, key):
    from specgguf.migrate.reasons import REASONS, reason, tagged

    assert reason(message) == key
    assert tagged(message) == f"{message} [{REASONS[key]}]"


def test_a_yaml_string_with_escaped_quotes_is_reported_not_misread():
    """Was: the shell lexer read `\\"` in a YAML "..." string as a shell escape, so the last
    value came out as `2"` ("not an integer")."""
    text = 'cmd: "sh -c \\"vllm serve M --speculative-model D --num-speculative-tokens 2\\""\n'
    new, findings = check_text(text, "yaml", "yaml")
    assert new == text
    unsafe = [u for f in findings for u in f.unsafe]
    assert len(unsafe) == 2 and all("is still here (vLLM removed it)" in u for u in unsafe)


# ----------------------------------------------------------------------------------------------
# migrate -: stdin in, migrated text out (a real process: what a pipe sees)
# ----------------------------------------------------------------------------------------------

STDIN_SCRIPT = ("#!/bin/sh\r\nllama-server -m t.gguf -md d.gguf --draft-max 8 \\\r\n"
                "  --port 8080\r\n")


def _migrate_process(*args: str, stdin: bytes, cwd: Path):
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "specgguf_cli.app", "migrate", *args],
                          input=stdin, capture_output=True, cwd=cwd, env=env, timeout=60)


def test_process_migrate_dash_reads_stdin_and_writes_the_text_to_stdout(tmp_path):
    res = _migrate_process("-", stdin=STDIN_SCRIPT.encode(), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode() == STDIN_SCRIPT.replace(
        "--draft-max 8", "--spec-type draft-simple --spec-draft-p-min 0.75 --spec-draft-n-max 8")
    err = res.stderr.decode()
    assert "Traceback" not in err
    assert err.splitlines()[0].startswith("<stdin>:2: llama-server -m t.gguf"), err
    assert all(line.startswith("<stdin>:2: ") for line in err.splitlines())


def test_process_migrate_dash_check_diff_and_a_name(tmp_path):
    res = _migrate_process("--check", "-", stdin=STDIN_SCRIPT.encode(), cwd=tmp_path)
    assert res.returncode == 1 and res.stderr == b""
    assert res.stdout.decode().startswith("<stdin>:2: ")
    res = _migrate_process("--check", "-", stdin=b"llama-server -m t.gguf\n", cwd=tmp_path)
    assert (res.returncode, res.stdout, res.stderr) == (0, b"", b"")
    res = _migrate_process("--diff", "-", stdin=STDIN_SCRIPT.encode(), cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.decode().startswith("--- <stdin>\n+++ <stdin>\n")
    compose = b'services:\n  a:\n    command: ["--draft-max", "8", "-md", "d.gguf"]\n'
    res = _migrate_process("-", "--stdin-filename", "compose.yaml", stdin=compose, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == compose.replace(
        b'"--draft-max"', b'"--spec-draft-n-max"').replace(
        b'"d.gguf"]', b'"d.gguf", "--spec-type", "draft-simple", "--spec-draft-p-min", "0.75"]')
    assert res.stderr.decode().startswith("compose.yaml:3: ")


@pytest.mark.parametrize("args, fragment", [
    (("--write", "-"), "--write needs files"),
    (("-", "a.sh"), "- reads stdin alone"),
    (("--stdin-filename", "x.yaml", "a.sh"), "--stdin-filename names stdin's text"),
    (("-",), "<stdin>: binary file"),
])
def test_process_migrate_dash_refusals_are_one_line(args, fragment, tmp_path):
    (tmp_path / "a.sh").write_text("llama-server --draft 3\n")
    res = _migrate_process(*args, stdin=b"\0\1\2", cwd=tmp_path)
    err = res.stderr.decode()
    assert res.returncode == 1 and res.stdout == b""
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and fragment in err, err


# ----------------------------------------------------------------------------------------------
# shapes found by hostile use (round 3); the corpus (tests/data/migrate/r3_*) holds whole files
# ----------------------------------------------------------------------------------------------

_MD_FLAGS = "--spec-type draft-simple --spec-draft-p-min 0.75"


@pytest.mark.parametrize(("name", "old", "new"), [
    # PowerShell: a backtick continues the line (it was read as a command substitution, and
    # the report printed the rest of the file), a backslash is a path's
    ("a.ps1", "& .\\llama-server.exe -md C:\\m\\d.gguf `\n  --draft-max 16\n",
     f"& .\\llama-server.exe -md C:\\m\\d.gguf {_MD_FLAGS} `\n  --spec-draft-n-max 16\n"),
    # a console session's `> ` before a continued line is the prompt, not a redirection
    ("a.md", "```console\n$ llama-server -md d.gguf \\\n>   --draft-max 16\n```\n",
     f"```console\n$ llama-server -md d.gguf {_MD_FLAGS} \\\n>   --spec-draft-n-max 16\n```\n"),
    # an indented code block that runs a tool
    ("a.md", "Run:\n\n    llama-server -md d.gguf --draft-max 8\n",
     f"Run:\n\n    llama-server -md d.gguf {_MD_FLAGS} --spec-draft-n-max 8\n"),
    # a Python block's argument list that starts with its tool
    ("a.md", '```python\nrun(["llama-server", "--draft-max", "8"])\n```\n',
     '```python\nrun(["llama-server", "--spec-draft-n-max", "8"])\n```\n'),
    # an old variable named in prose gets its new name
    ("a.md", "Set `LLAMA_ARG_DRAFT_MAX=16`.\n", "Set `LLAMA_ARG_SPEC_DRAFT_N_MAX=16`.\n"),
    # a make target's own variable
    ("Makefile", "serve: ARGS += --draft-max $(N)\n", "serve: ARGS += --spec-draft-n-max $(N)\n"),
    # systemd: two assignments on one line; the new ones join that line
    ("a.service", '[Service]\nEnvironment="LLAMA_ARG_MODEL_DRAFT=/m/d.gguf" "LLAMA_ARG_DRAFT_MAX=8"'
     "\n",
     '[Service]\nEnvironment="LLAMA_ARG_SPEC_DRAFT_MODEL=/m/d.gguf" "LLAMA_ARG_SPEC_DRAFT_N_MAX=8"'
     ' "LLAMA_ARG_SPEC_TYPE=draft-simple" "LLAMA_ARG_SPEC_DRAFT_P_MIN=0.75"\n'),
    # a folded `run: >` is one command line (its -md got no --spec-type: each line was read
    # as a command of its own)
    ("ci.yml", "steps:\n  - run: >\n      llama-server -md d.gguf\n      --draft-max 8\n",
     f"steps:\n  - run: >\n      llama-server -md d.gguf {_MD_FLAGS}\n"
     "      --spec-draft-n-max 8\n"),
    # a list of whole command lines under a key of its own (Taskfile's cmds:); a mapping item
    # is read under its own key, once
    ("Taskfile.yml", "tasks:\n  s:\n    cmds:\n      - llama-server -md d.gguf --draft 8\n"
     "      - cmd: llama-cli -m t --draft 4\n",
     f"tasks:\n  s:\n    cmds:\n      - llama-server -md d.gguf {_MD_FLAGS} --spec-draft-n-max 8\n"
     "      - cmd: llama-cli -m t --spec-draft-n-max 4\n"),
    # block items after a quoted item are quoted the same way
    ("c.yml", 'services:\n  a:\n    image: ghcr.io/ggml-org/llama.cpp:server\n    command:\n'
     '      - "-md"\n      - "d.gguf"\n      - "--draft-max"\n      - "8"\n',
     'services:\n  a:\n    image: ghcr.io/ggml-org/llama.cpp:server\n    command:\n'
     '      - "-md"\n      - "d.gguf"\n      - "--spec-type"\n      - "draft-simple"\n'
     '      - "--spec-draft-p-min"\n      - "0.75"\n      - "--spec-draft-n-max"\n      - "8"\n'),
    # Python: an argument list naming its tool, with values decided at run time, in the
    # list's quotes; a whole command line in a string
    ("a.py", "Popen(['llama-server', '-md', d, '--draft-max', str(n)])\n",
     "Popen(['llama-server', '-md', d, '--spec-type', 'draft-simple', '--spec-draft-p-min', "
     "'0.75', '--spec-draft-n-max', str(n)])\n"),
    ("a.py", "os.system('llama-server -m t --draft 8')\n",
     "os.system('llama-server -m t --spec-draft-n-max 8')\n"),
    ("a.json", '{"argv": ["llama-server", "--draft-min", "2"]}\n',
     '{"argv": ["llama-server", "--spec-draft-n-min", "2"]}\n'),
    ("a.ipynb", '{"source": ["!llama-server -m t --draft 8\\n"]}\n',
     '{"source": ["!llama-server -m t --spec-draft-n-max 8\\n"]}\n'),
    ("a.toml", 'cmd = ["llama-server", "--draft-min", "2"]\n',
     'cmd = ["llama-server", "--spec-draft-n-min", "2"]\n'),
    # the image with every tool, the first argument picking one
    ("a.sh", "docker run ghcr.io/ggml-org/llama.cpp:full --server -m t --draft 8\n",
     "docker run ghcr.io/ggml-org/llama.cpp:full --server -m t --spec-draft-n-max 8\n"),
])
def test_round3_shapes_are_migrated(name, old, new):
    kind, comments = detect(name, old)
    got, findings = check_text(old, kind, comments)
    assert got == new
    assert not [u for f in findings for u in f.unsafe]
    assert check_text(got, kind, comments)[1] == []


@pytest.mark.parametrize("text", [
    'REMOVED = ["--draft", "--draft-max"]\n',  # a table of names, not a command
    'cmd = [sys.executable, "-m", "x", "--draft-max", "4"]\n',  # the tool is not written
    'run(["llama-server", "--draft-max", "8", *extra])\n',  # a splat: not one item per word
    'CMD = f"llama-server -m {m} --draft-max {n}"\n',  # an f-string
])
def test_python_source_left_as_written_is_reported_as_source(text):
    from specgguf.migrate.reasons import tagged

    kind, comments = detect("a.py", text)
    got, findings = check_text(text, kind, comments)
    assert got == text
    unsafe = [u for f in findings for u in f.unsafe]
    assert unsafe and all(tagged(u).endswith("[inside program source]") for u in unsafe)


def test_a_tool_in_a_variable_after_exec_is_migrated_where_it_can_be_and_reported():
    new, unsafe = _check('exec "$LLAMA_SERVER" -m t.gguf -md d.gguf --draft-max 8\n')
    assert new == 'exec "$LLAMA_SERVER" -m t.gguf -md d.gguf --spec-draft-n-max 8\n'
    assert any("needs --spec-type draft-simple now, unless $LLAMA_SERVER" in u for u in unsafe)


def test_a_flag_the_command_sets_gets_no_old_default_note_behind_a_variable_tool():
    """Was: `$LLAMA ... --draft-max 8` was told to add --spec-draft-n-max 16 (the old default
    of a flag it sets)."""
    new, unsafe = _check("LLAMA=./llama-server\n$LLAMA -m t.gguf -md d.gguf --draft-max 8\n")
    assert new.endswith("$LLAMA -m t.gguf -md d.gguf --spec-draft-n-max 8\n")
    assert not any("--spec-draft-n-max 16" in u for u in unsafe), unsafe
    assert any("add --spec-draft-p-min 0.75 if it is" in u for u in unsafe), unsafe


def test_a_line_of_thousands_of_commands_is_checked_in_bounded_time():
    """Was: the token scan searched the whole line again for every hit on it (4000 commands
    joined by `;` took 25 s). A hang guard, not a timing: the fix made it about 0.3 s."""
    import time

    for text, kind, comments in (("llama-server --draft 8; " * 4000 + "\n", "shell", "shell"),
                                 ('"llama-server --draft 8", ' * 4000 + "\n", None, "python")):
        t0 = time.perf_counter()
        new, _ = check_text(text, kind, comments)
        assert time.perf_counter() - t0 < 10.0
        assert "--draft 8" not in new


def test_every_value_option_of_the_flag_table_takes_its_word() -> None:
    """The migration reads which llama.cpp options take a value from the flag table: a word
    after one is its value (llama.cpp reads it so), never an option to rewrite."""
    from specgguf.flag_table.table import row_of

    assert row_of("--tags").flag.values  # a value option no migration list names itself
    res = migrate_argv(shlex.split("llama-server -m t.gguf --tags --draft-max -md d.gguf"))
    assert "--draft-max" in res.argv and "--spec-draft-n-max" not in res.argv
    assert set(row_of("--spec-draft-model").flag.spellings) <= lg.DRAFT_MODEL_FLAGS
    assert lg.REMOVED_BY_NAME.keys() >= set(row_of("--draft").flag.spellings)

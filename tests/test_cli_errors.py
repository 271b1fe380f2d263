"""Hostile and broken input to `specgguf run` and `specgguf check`: each case ends in ONE
clear line on stderr, its documented exit status (specgguf.errors.ExitCode) and no traceback.

Most cases go through `run_cli` in-process (capfd also catches what llama.cpp writes to fd 2);
a few go through a real `python -m specgguf_cli.app` process, to check the exit status the
shell sees and that a refused legacy flag costs no model load. Signals and closed pipes are
in test_interrupt.py.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer.main
from gguf import GGUFValueType
from specgguf_cli.app import _register, app, run_cli
from specgguf_cli.short_flags import multi_letter_short_flags

from specgguf.errors import ExitCode
from specgguf.flag_table.table import BARE_VALUES, flag_table
from specgguf.modelfiles.gguf_info import read_gguf_info
from tests.gguf_factory import (
    gguf_str,
    header,
    kv_array,
    kv_raw,
    kv_str,
    minimal_kvs,
    raw_gguf,
    write_gguf,
)

ROOT = Path(__file__).resolve().parent.parent
FAST = ["-t", "1", "-c", "512", "-fa", "off"]


# -- helpers ----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    """No LLAMA_ARG_* from the caller's shell, and no pulled default models."""
    for var in list(os.environ):
        if var.startswith("LLAMA_ARG_"):
            monkeypatch.delenv(var)
    empty = tmp_path / "no-models"
    empty.mkdir()
    monkeypatch.setenv("SPECGGUF_MODELS", str(empty))


@pytest.fixture
def cli(capfd, monkeypatch):
    """cli(*argv) -> (exit status, stdout, stderr) of `specgguf *argv`, run in-process."""

    def _cli(*argv):
        code = run_cli([str(a) for a in argv])
        out = capfd.readouterr()
        return code, out.out, out.err

    return _cli


def assert_one_line(result, code: ExitCode, *fragments: str) -> str:
    """The error contract: the exit status, exactly one non-empty stderr line carrying every
    fragment, no traceback, nothing on stdout."""
    got, out, err = result
    lines = [line for line in err.splitlines() if line.strip()]
    assert got == code, f"exit {got}, expected {int(code)}; stderr: {err!r}"
    assert "Traceback" not in err
    assert len(lines) == 1, f"expected one stderr line, got {lines!r}"
    assert lines[0].startswith("error"), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert out == "", f"unexpected stdout {out!r}"
    return lines[0]


def run_args(model, *args, draft=None):
    argv = ["run", "-m", model]
    if draft is not None:
        argv += ["-md", draft]
    return [*argv, *FAST, *args]


def spawn(*argv, env=None, timeout=120):
    """`python -m specgguf_cli.app *argv` as a real process: (status, stdout, stderr, seconds)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    full_env.update(env or {})
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "specgguf_cli.app", *map(str, argv)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=full_env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return res.returncode, res.stdout, res.stderr, time.perf_counter() - t0


# -- broken and hostile model files ------------------------------------------------------------


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory, tiny_target):
    """name -> path of a model file `run` and `check` must refuse with exit status 3."""
    d = tmp_path_factory.mktemp("bad_models")
    data = Path(tiny_target).read_bytes()
    info = read_gguf_info(tiny_target)
    files: dict[str, Path] = {}

    def put(name: str, content: bytes) -> None:
        files[name] = d / f"{name}.gguf"
        files[name].write_bytes(content)

    files["missing"] = d / "missing.gguf"
    files["directory"] = d / "a-directory.gguf"
    files["directory"].mkdir()
    put("empty", b"")
    put("not-gguf", b"hello, this is a text file and not a model\n" * 10)
    put("truncated-fixed-header", data[:20])
    put("truncated-metadata", data[:200])
    put("truncated-tensor-infos", data[: info.data_offset - 40])
    put("truncated-tensor-data", data[: (info.data_offset + len(data)) // 2])
    put(
        "huge-string-array",
        raw_gguf(
            [
                kv_str("general.architecture", "llama"),
                kv_str("tokenizer.ggml.model", "llama"),
                kv_array("tokenizer.ggml.tokens", GGUFValueType.STRING, 2**60, gguf_str("a")),
            ]
        ),
    )
    put(
        "huge-string-length",
        raw_gguf([kv_raw("general.architecture", GGUFValueType.STRING, gguf_str("x", 2**62))]),
    )
    put(
        "huge-numeric-array",
        raw_gguf([*minimal_kvs(), kv_array("x.y", GGUFValueType.UINT32, 2**61, b"\0" * 8)]),
    )
    put("huge-counts", header(2**40, 2**40) + b"\0" * 64)
    put("unknown-value-type", raw_gguf([*minimal_kvs(), kv_raw("x.y", 99, b"\0" * 8)]))
    put("unknown-array-type", raw_gguf([*minimal_kvs(), kv_array("x.y", 77, 1, b"\0" * 8)]))
    files["unsupported-architecture"] = write_gguf(d / "arch.gguf", arch="notanarch")
    return files


#: what the one line must say for each broken file (it always names the file too)
BAD_FILE_MESSAGES = {
    "missing": "no such file",
    "directory": "is a directory",
    "empty": "not a GGUF file",
    "not-gguf": "not a GGUF file",
    "truncated-fixed-header": "truncated",
    "truncated-metadata": "truncated",
    "truncated-tensor-infos": "truncated",
    "truncated-tensor-data": "truncated: tensor data ends at byte",
    "huge-string-array": "declares an array of 1152921504606846976 strings",
    "huge-string-length": "declares a string of 4611686018427387904 bytes",
    "huge-numeric-array": "declares an array of 2305843009213693952 uint32",
    "huge-counts": "cannot fit",
    "unknown-value-type": "unknown value type 99",
    "unknown-array-type": "unknown array element type 77",
    "unsupported-architecture": "unsupported architecture 'notanarch'",
}


@pytest.mark.parametrize("kind", list(BAD_FILE_MESSAGES))
def test_run_refuses_a_bad_target(cli, bad_files, kind):
    path = bad_files[kind]
    t0 = time.perf_counter()
    result = cli(*run_args(path, "-p", "hi"))
    assert_one_line(result, ExitCode.MODEL, str(path), BAD_FILE_MESSAGES[kind])
    assert time.perf_counter() - t0 < 5  # bounded: no allocation the header asks for


@pytest.mark.parametrize("kind", list(BAD_FILE_MESSAGES))
def test_check_refuses_a_bad_target(cli, bad_files, kind):
    path = bad_files[kind]
    result = cli("check", "-m", path)
    assert_one_line(result, ExitCode.MODEL, str(path), BAD_FILE_MESSAGES[kind])


@pytest.mark.parametrize(
    "kind", ["missing", "directory", "not-gguf", "truncated-tensor-data", "huge-string-array"]
)
def test_run_refuses_a_bad_draft(cli, bad_files, tiny_target, kind):
    path = bad_files[kind]
    result = cli(*run_args(tiny_target, "-p", "hi", draft=path))
    assert_one_line(result, ExitCode.MODEL, str(path), BAD_FILE_MESSAGES[kind])


@pytest.mark.parametrize(
    "kind", ["missing", "directory", "not-gguf", "truncated-tensor-data", "huge-string-array"]
)
def test_check_refuses_a_bad_draft(cli, bad_files, tiny_target, kind):
    path = bad_files[kind]
    result = cli("check", "-m", tiny_target, "-md", path)
    assert_one_line(result, ExitCode.MODEL, str(path), BAD_FILE_MESSAGES[kind])


# -- incompatible pair ------------------------------------------------------------------------


def test_run_refuses_an_incompatible_pair_when_strict(cli, tiny_target, tiny_other_vocab):
    # without --spec-vocab-strict such a pair drafts through text (tests/test_cross_vocab.py)
    result = cli(*run_args(tiny_target, "-p", "hi", "--spec-vocab-strict", draft=tiny_other_vocab))
    assert_one_line(result, ExitCode.INCOMPATIBLE, "not compatible", "id 5")


def test_check_reports_an_incompatible_pair(cli, tiny_target, tiny_other_vocab):
    code, out, err = cli("check", "-m", tiny_target, "-md", tiny_other_vocab)
    assert code == 0  # usable: cross-vocabulary mode
    assert "not compatible" in out and "cross-vocabulary" in out
    assert err.strip() == "" and "Traceback" not in err
    code, out, err = cli("check", "-m", tiny_target, "-md", tiny_other_vocab, "--json")
    assert code == 0
    assert json.loads(out)["compatible"] is False
    assert json.loads(out)["mode"] == "cross-vocabulary"
    assert err.strip() == ""
    code, out, err = cli(
        "check", "-m", tiny_target, "-md", tiny_other_vocab, "--json", "--spec-vocab-strict"
    )
    assert code == ExitCode.INCOMPATIBLE
    assert json.loads(out)["compatible"] is False


# -- prompts ----------------------------------------------------------------------------------


def test_prompt_longer_than_the_context(cli, tiny_target):
    result = cli(*run_args(tiny_target, "-p", "hello " * 400))  # 2000 tokens, -c 512
    assert_one_line(result, ExitCode.PROMPT, "2000 tokens", "the context is 512")


def test_non_utf8_prompt_file(cli, tiny_target, tmp_path):
    f = tmp_path / "latin1.txt"
    f.write_bytes("café au lait".encode("latin-1"))
    result = cli(*run_args(tiny_target, "-f", f))
    assert_one_line(result, ExitCode.PROMPT, str(f), "not valid UTF-8", "byte 3")


def test_non_utf8_prompt_on_stdin(cli, tiny_target, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ok \xff\xfe")))
    result = cli(*run_args(tiny_target))
    assert_one_line(result, ExitCode.PROMPT, "stdin", "not valid UTF-8")


def test_empty_prompt(cli, tiny_target):
    assert_one_line(cli(*run_args(tiny_target, "-p", "")), ExitCode.PROMPT, "empty")


def test_empty_prompt_file(cli, tiny_target, tmp_path):
    f = tmp_path / "empty.txt"
    f.write_bytes(b"")
    assert_one_line(cli(*run_args(tiny_target, "-f", f)), ExitCode.PROMPT, "empty")


def test_empty_prompt_on_stdin(cli, tiny_target, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert_one_line(cli(*run_args(tiny_target)), ExitCode.PROMPT, "empty")


def test_missing_prompt_file(cli, tiny_target, tmp_path):
    f = tmp_path / "nope.txt"
    assert_one_line(cli(*run_args(tiny_target, "-f", f)), ExitCode.USAGE, str(f), "no such file")


# -- bad option values: refused before any model is read ---------------------------------------
#
# -m points at a file that does not exist: a value check that came after the model load would
# fail with exit status 3 instead.

NO_MODEL = "/nonexistent/model.gguf"


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["-n", "-2"], "-n/--n-predict: -2"),
        (["-n", "-100000"], "-n/--n-predict: -100000"),
        (["-n", "many"], "-n"),
        (["--spec-draft-n-max", "-1"], "--spec-draft-n-max: -1"),
        (["--spec-draft-n-max", "257"], "--spec-draft-n-max: 257"),
        (["--spec-draft-n-max", "100000000000000000000"], "--spec-draft-n-max"),
        (["--spec-draft-n-max", "lots"], "--spec-draft-n-max: 'lots'"),
        (["--spec-draft-p-min", "1.5"], "--spec-draft-p-min: 1.5"),
        (["--spec-draft-p-min", "-0.1"], "--spec-draft-p-min: -0.1"),
        (["--spec-draft-p-min", "nan"], "--spec-draft-p-min: nan"),
        (["--draft-p-min", "2"], "--spec-draft-p-min: 2.0"),
        (["--spec-tree-topk", "11"], "--spec-tree-topk: 11"),
        (["--spec-tree-topk", "0"], "--spec-tree-topk: 0"),
        (["--spec-tree-nodes", "65"], "--spec-tree-nodes: 65"),
        (["--temp", "-1"], "--temp: -1.0"),
        (["--temp", "-0.01"], "--temp: -0.01"),
        (["--temp", "nan"], "--temp: nan"),
        (["--spec-type", "bogus"], "--spec-type: 'bogus'"),
        (["--spec-type", "ngram-simple,turbo"], "--spec-type: 'turbo'"),
        # past ggml's thread limit (512): ggml aborted with no message
        (["-t", "100000"], "-t/--threads: 100000 (must be 1..512"),
        (["-t", "513"], "-t/--threads: 513 (must be 1..512"),
        (["-t", "-2"], "-t/--threads: -2 (must be 1..512"),
        (["-td", "100000"], "-td/--threads-draft: 100000 (must be 1..512"),
        (["-td", "-5"], "-td/--threads-draft: -5 (must be 1..512"),
        # an output grammar that cannot be read or converted (tests/test_grammar_cli.py: one
        # that llama.cpp does not parse)
        (["-j", "{oops"], "-j/--json-schema: not valid JSON"),
        (["-j", '{"type": "nope"}'], "-j/--json-schema: the schema cannot be turned into"),
        (["--grammar", 'root ::= "a"', "-j", "{}"], "cannot be combined: give one grammar"),
        (["--grammar-file", "/nonexistent.gbnf"], "--grammar-file /nonexistent.gbnf: no such"),
        (["-jf", "/nonexistent.json"], "-jf /nonexistent.json: no such file"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_bad_values_are_refused_before_loading(cli, args, fragment):
    result = cli(*run_args(NO_MODEL, "-p", "hi", *args))
    assert_one_line(result, ExitCode.USAGE, fragment)


def test_absurd_n_predict_is_refused(cli):
    result = cli(*run_args(NO_MODEL, "-p", "hi", "-n", "99999999999999999999"))
    assert_one_line(result, ExitCode.USAGE, "-n/--n-predict")


def test_unknown_option(cli, tiny_target):
    result = cli(*run_args(tiny_target, "-p", "hi", "--no-such-flag"))
    assert_one_line(result, ExitCode.USAGE, "--no-such-flag")


def test_check_unknown_option(cli, tiny_target):
    assert_one_line(cli("check", "-m", tiny_target, "--no-such-flag"), ExitCode.USAGE, "--no-such")


def test_check_negative_context(cli, tiny_target):
    assert_one_line(cli("check", "-m", tiny_target, "-c", "-5"), ExitCode.USAGE, "-5")


#: the flags that may stand without their value (older llama.cpp's switches: `-fa`, `-co`)
BARE = {s for r in flag_table() if r.key in BARE_VALUES for s in r.flag.spellings}


def _short_flag_cases() -> tuple[list, list]:
    """(flag, command) for every multi-letter short flag of the CLI: the commands that lack it
    (where the parser used to split it into one-letter flags), and those that take a value
    with it."""
    _register()
    group = typer.main.get_command(app)
    lacking, taking = [], []
    for flag, takers in multi_letter_short_flags(group).items():
        for sub, command in group.commands.items():
            if sub in takers:
                option = next(p for p in command.params if flag in (*p.opts, *p.secondary_opts))
                if not option.is_flag and flag not in BARE:  # -fa alone means -fa on
                    taking.append((flag, sub))
            elif not command.context_settings.get("ignore_unknown_options"):
                lacking.append((flag, sub))
    return lacking, taking


SHORT_LACKING, SHORT_TAKING = _short_flag_cases()


def test_the_multi_letter_short_flags_are_found():
    found = {flag for flag, _ in SHORT_LACKING + SHORT_TAKING}
    assert {"-np", "-md", "-cnv", "-ngl", "-ngld", "-ctk", "-sys", "-to", "-lcd"} <= found
    assert ("-np", "run") in SHORT_LACKING and ("-np", "serve") in SHORT_TAKING


@pytest.mark.parametrize(("flag", "sub"), SHORT_LACKING)
def test_a_multi_letter_short_flag_a_command_lacks_names_itself(cli, flag, sub):
    """`run -np 0` was read as `-n p`: the error was about -n's value."""
    line = assert_one_line(cli(sub, flag, "0"), ExitCode.USAGE, f"has no option {flag} ")
    assert line.startswith(f"error: specgguf {sub} has no option {flag} (it is an option of ")


@pytest.mark.parametrize(("flag", "sub"), SHORT_TAKING)
def test_a_multi_letter_short_flag_without_its_value_names_itself(cli, flag, sub):
    assert_one_line(cli(sub, flag), ExitCode.USAGE, f"'{flag}'")


def test_a_multi_letter_short_flag_as_a_value_or_after_the_end_of_options_is_not_a_flag(cli):
    # the prompt "-np" is -p's value: the run goes on to the (missing) model
    assert_one_line(cli("run", "-m", NO_MODEL, "-p", "-np"), ExitCode.MODEL, NO_MODEL)
    assert_one_line(cli("run", "-p=-np", "-m", NO_MODEL), ExitCode.MODEL, NO_MODEL)
    assert "has no option" not in cli("run", "--", "-np")[2]


def test_unknown_subcommand(cli):
    assert_one_line(cli("runn", "-p", "hi"), ExitCode.USAGE, "runn")


# -- the default models ------------------------------------------------------------------------


def test_run_without_m_and_no_pulled_models(cli, tmp_path):
    result = cli("run", "-p", "hi", *FAST)
    assert_one_line(result, ExitCode.PULL, "specgguf pull", str(tmp_path / "no-models"))


def test_check_without_m_and_no_pulled_models(cli):
    assert_one_line(cli("check"), ExitCode.PULL, "specgguf pull")


# -- removed (legacy) flags: exit 1 at once, no model load --------------------------------------


def test_legacy_flag_refused_before_anything_is_loaded(cli, tiny_target, tiny_draft, monkeypatch):
    import specgguf.loading.session as session

    def boom(*args, **kwargs):
        raise AssertionError("a model was loaded for a refused flag")

    monkeypatch.setattr(session.Session, "__init__", boom)
    code, out, err = cli(*run_args(tiny_target, "-p", "hi", "--draft-max", "8", draft=tiny_draft))
    assert code == ExitCode.USAGE and out == "" and "Traceback" not in err
    first, second = [line for line in err.splitlines() if line.strip()]
    assert first == (
        'error while handling argument "--draft-max": the argument has been removed. '
        "use --spec-draft-n-max or --spec-ngram-mod-n-max"
    )
    assert second.startswith("corrected: specgguf run ") and "--spec-draft-n-max 8" in second


def test_legacy_spec_type_draft_refused(cli):
    code, out, err = cli(*run_args(NO_MODEL, "-p", "hi", "--spec-type", "draft"))
    assert code == ExitCode.USAGE and out == "" and "Traceback" not in err
    first, second = [line for line in err.splitlines() if line.strip()]
    assert first.startswith('error while handling argument "--spec-type"')
    assert "use draft-simple" in first
    assert second.startswith("corrected: ") and "--spec-type draft-simple" in second


def test_legacy_env_variable_refused(cli, tiny_target, monkeypatch):
    monkeypatch.setenv("LLAMA_ARG_DRAFT_MAX", "8")
    code, out, err = cli(*run_args(tiny_target, "-p", "hi"))
    assert code == ExitCode.USAGE and out == "" and "Traceback" not in err
    assert "LLAMA_ARG_DRAFT_MAX" in err.splitlines()[0]


# -- the same contract at the process level -----------------------------------------------------


def test_process_legacy_flag_exits_1_within_seconds(tiny_target, tiny_draft):
    """Measured from outside: a refused flag costs the interpreter's start-up, not a load."""
    code, out, err, seconds = spawn(
        *run_args(tiny_target, "-p", "hi", "--draft", "5", draft=tiny_draft)
    )
    assert code == 1, err
    assert out == "" and "Traceback" not in err
    assert err.splitlines()[0].startswith('error while handling argument "--draft"')
    # no model is loaded (that takes far longer); a hang guard, not a timing: the speed of
    # this path is a benchmark's business, and a loaded CI machine must not fail it
    assert seconds < 20.0


@pytest.mark.parametrize(
    "case",
    ["missing-model", "unknown-option", "missing-defaults", "check-truncated"],
)
def test_process_exit_status_and_one_line(case, tiny_target, bad_files, tmp_path):
    argv, env, code, fragment = {
        "missing-model": (run_args(bad_files["missing"], "-p", "hi"), {}, 3, "no such file"),
        "unknown-option": (run_args(tiny_target, "-p", "hi", "--bogus"), {}, 1, "--bogus"),
        "missing-defaults": (
            ["run", "-p", "hi", *FAST],
            {"SPECGGUF_MODELS": str(tmp_path)},
            6,
            "specgguf pull",
        ),
        "check-truncated": (
            ["check", "-m", bad_files["truncated-tensor-data"]],
            {},
            3,
            "truncated",
        ),
    }[case]
    got, out, err, _ = spawn(*argv, env=env)
    lines = [line for line in err.splitlines() if line.strip()]
    assert got == code, err
    assert out == "" and "Traceback" not in err
    assert len(lines) == 1 and fragment in lines[0], lines


@pytest.fixture(scope="module")
def drafter_heads(tmp_path_factory):
    """An EAGLE-3 head and a Gemma-4 assistant: drafters that decode nothing alone."""
    from tests.tiny_eagle3 import build_eagle3_head
    from tests.tiny_gemma4 import build_tiny_assistant

    d = tmp_path_factory.mktemp("drafter_heads")
    return {
        "eagle3": (build_eagle3_head(d / "head.gguf"), "an EAGLE-3 head"),
        "assistant": (
            build_tiny_assistant(d / "assistant.gguf", seed=3),
            "a gemma4-assistant MTP drafter",
        ),
    }


@pytest.mark.parametrize("command", ["check", "run"])
@pytest.mark.parametrize("kind", ["eagle3", "assistant"])
def test_process_drafter_head_as_model_says_it_belongs_after_md(kind, command, drafter_heads):
    """A drafter head given as -m is named as one before loading (exit 3), not reported as a
    healthy model by `check` nor as running out of memory by `run`."""
    path, what = drafter_heads[kind]
    argv = ["check", "-m", path] if command == "check" else run_args(path, "-p", "hi", "-n", "2")
    got, out, err, _ = spawn(*argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert got == ExitCode.MODEL, err
    assert out == "" and "Traceback" not in err
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: -m {path} is {what}"), lines[0]
    assert f"-md {path}" in lines[0] and "memory" not in lines[0]

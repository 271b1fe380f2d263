"""`specgguf run` refuses llama.cpp's removed flags with llama.cpp's message and exit status 1.

check_run_argv is what the CLI calls before loading anything; these tests pin its two lines
(llama.cpp's own, then the exact corrected command) for every removed flag and variable.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specgguf.errors import ExitCode, UsageError
from specgguf.migrate import removed_flags as lg
from specgguf.migrate.refuse import check_run_argv

ROOT = Path(__file__).resolve().parents[1]
ARG_CPP = Path("/tmp/build/src/llama_cpp_python-0.3.36/vendor/llama.cpp/common/arg.cpp")

DRAFT_MAX_HINT = "use --spec-draft-n-max or --spec-ngram-mod-n-max"
DRAFT_MIN_HINT = "use --spec-draft-n-min or --spec-ngram-mod-n-min"


def refusal(argv: list[str], env: dict[str, str] | None = None) -> tuple[str, str]:
    with pytest.raises(UsageError) as info:
        check_run_argv(argv, env or {})
    assert info.value.code == ExitCode.USAGE == 1
    first, second = str(info.value).split("\n")
    return first, second


def arg_line(name: str, hint: str) -> str:
    return f'error while handling argument "{name}": the argument has been removed. {hint}'


# (argv after `specgguf run`, flag llama.cpp names, hint, corrected argv)
FLAG_CASES = [
    *[(["-m", "t.gguf", "-md", "d.gguf", name, "5"], name, DRAFT_MAX_HINT,
       "-m t.gguf -md d.gguf --spec-draft-n-max 5")
      for name in ("--draft", "--draft-n", "--draft-max")],
    *[(["-m", "t.gguf", "-md", "d.gguf", name, "2"], name, DRAFT_MIN_HINT,
       "-m t.gguf -md d.gguf --spec-draft-n-min 2")
      for name in ("--draft-min", "--draft-n-min")],
    # the shared n-gram spellings: one of each, renamed after the --spec-type given
    *[(["-m", "t.gguf", "--spec-type", kind, f"--spec-ngram-{part}", value],
       f"--spec-ngram-{part}", f"use the respective --spec-ngram-*-{part}",
       f"-m t.gguf --spec-type {kind} --spec-ngram-{own} {value}")
      for kind, part, value, own in [
          ("ngram-simple", "size-n", "8", "simple-size-n"),
          ("ngram-map-k", "size-m", "32", "map-k-size-m"),
          ("ngram-map-k4v", "min-hits", "2", "map-k4v-min-hits"),
          ("ngram-mod", "size-n", "16", "mod-n-match"),
      ]],
    (["-m", "t.gguf", "--spec-type", "ngram-mod", "--draft-max", "32"],
     "--draft-max", DRAFT_MAX_HINT, "-m t.gguf --spec-type ngram-mod --spec-ngram-mod-n-max 32"),
    (["-m", "t.gguf", "-md", "d.gguf", "-c", "4096", "-cd", "4096"], "-cd",
     "the draft context now follows the target's (-c)", "-m t.gguf -md d.gguf -c 4096"),
    (["-m", "t.gguf", "-md", "d.gguf", "--ctx-size-draft", "2048"], "--ctx-size-draft",
     "the draft context now follows the target's (-c)", "-m t.gguf -md d.gguf"),
]


@pytest.mark.parametrize(("argv", "name", "hint", "fixed"), FLAG_CASES)
@pytest.mark.parametrize("form", ["space", "equals"])
def test_each_removed_flag_is_refused_with_the_corrected_command(argv, name, hint, fixed, form):
    if form == "equals":
        i = argv.index(name)
        argv = [*argv[:i], f"{name}={argv[i + 1]}", *argv[i + 2:]]
        new = fixed.split()
        for j, word in enumerate(new[:-1]):
            if word.startswith("--spec-") and word != "--spec-type" and word not in argv:
                new[j:j + 2] = [f"{word}={new[j + 1]}"]
                break
        fixed = " ".join(new)
    first, second = refusal(["run", *argv])
    assert first == arg_line(name, hint)
    assert second == f"corrected: specgguf run {fixed}"


def test_every_spelling_in_the_table_is_covered():
    covered = {case[1] for case in FLAG_CASES}
    assert covered == set(lg.REMOVED_BY_NAME)


@pytest.mark.parametrize(("var", "hint", "new_flag"), [
    ("LLAMA_ARG_DRAFT_MAX", DRAFT_MAX_HINT, "--spec-draft-n-max"),
    ("LLAMA_ARG_DRAFT_MIN", DRAFT_MIN_HINT, "--spec-draft-n-min"),
])
def test_removed_environment_variables_are_refused(var, hint, new_flag):
    first, second = refusal(["run", "-m", "t.gguf", "-md", "d.gguf"], {var: "6"})
    assert first == (f'error while handling environment variable "{var}": the argument has '
                     f"been removed. {hint}")
    assert second == f"corrected: env -u {var} specgguf run -m t.gguf -md d.gguf {new_flag} 6"


def test_an_environment_variable_is_reported_before_a_flag_like_llama_cpp():
    first, second = refusal(["run", "-md", "d.gguf", "--draft-min", "1"],
                            {"LLAMA_ARG_DRAFT_MAX": "8"})
    assert first.startswith('error while handling environment variable "LLAMA_ARG_DRAFT_MAX"')
    assert second == ("corrected: env -u LLAMA_ARG_DRAFT_MAX specgguf run -md d.gguf "
                      "--spec-draft-n-min 1 --spec-draft-n-max 8")


def test_the_command_line_wins_over_the_environment_so_only_unset_is_added():
    _, second = refusal(["run", "-md", "d.gguf", "--spec-draft-n-max", "4"],
                        {"LLAMA_ARG_DRAFT_MAX": "8"})
    assert second == ("corrected: env -u LLAMA_ARG_DRAFT_MAX specgguf run -md d.gguf "
                      "--spec-draft-n-max 4")


@pytest.mark.parametrize(("value", "new"), [
    ("draft", "draft-simple"),
    ("ngram-simple,draft", "ngram-simple,draft-simple"),
])
def test_spec_type_draft_is_refused_in_flags_and_lists(value, new):
    first, second = refusal(["run", "-md", "d.gguf", "--spec-type", value])
    assert first == ('error while handling argument "--spec-type": the speculative type '
                     '"draft" has been removed. use draft-simple')
    assert second == f"corrected: specgguf run -md d.gguf --spec-type {new}"
    first, second = refusal(["run", "-md", "d.gguf", f"--spec-type={value}"])
    assert second == f"corrected: specgguf run -md d.gguf --spec-type={new}"


def test_spec_type_draft_in_the_environment():
    first, second = refusal(["run", "-md", "d.gguf"], {"LLAMA_ARG_SPEC_TYPE": "draft"})
    assert first.startswith('error while handling environment variable "LLAMA_ARG_SPEC_TYPE"')
    assert second == ("corrected: env -u LLAMA_ARG_SPEC_TYPE specgguf run -md d.gguf "
                      "--spec-type draft-simple")


@pytest.mark.parametrize("argv", [
    ["-md", "d.gguf"], ["--model-draft", "d.gguf"], ["-ngld", "99"],
    ["--gpu-layers-draft", "99"], ["--n-gpu-layers-draft", "all"], ["--draft-p-min", "0.5"],
    ["--draft-p-split", "0.2"], ["-td", "4"], ["--threads-draft", "4"], ["-ctkd", "q8_0"],
    ["-ctvd", "q8_0"], ["--spec-type", "draft-simple"], ["--spec-draft-n-max", "8"],
])
def test_aliases_that_still_work_upstream_are_not_flagged(argv):
    check_run_argv(["run", "-m", "t.gguf", *argv], {})
    check_run_argv(["-m", "t.gguf", *argv], {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "3"})


def test_a_prompt_that_mentions_a_removed_flag_is_not_a_flag():
    check_run_argv(["run", "-p", "--draft-max", "-m", "t.gguf"], {})
    check_run_argv(["run", "--prompt", "use --spec-type draft here"], {})


def test_underscore_spelling_is_the_same_option_as_in_llama_cpp():
    first, second = refusal(["run", "-md", "d.gguf", "--draft_max", "3"])
    assert first == arg_line("--draft-max", DRAFT_MAX_HINT)
    assert second == "corrected: specgguf run -md d.gguf --spec-draft-n-max 3"


def test_argv_may_include_the_subcommand_or_not():
    assert refusal(["bench", "--draft", "3"])[1] == "corrected: specgguf bench --spec-draft-n-max 3"
    assert refusal(["--draft", "3"])[1] == "corrected: specgguf run --spec-draft-n-max 3"


def test_corrected_command_is_shell_quoted():
    _, second = refusal(["run", "-md", "my draft.gguf", "-p", "it's", "--draft-max", "4"])
    words = shlex.split(second.removeprefix("corrected: "))
    assert words == ["specgguf", "run", "-md", "my draft.gguf", "-p", "it's",
                     "--spec-draft-n-max", "4"]


@pytest.mark.parametrize(("argv", "why"), [
    (["--spec-type", "ngram-simple,ngram-map-k", "--spec-ngram-size-n", "4"], "several ngram"),
    (["--spec-ngram-size-n", "4"], "no ngram type"),
    (["--spec-type", "ngram-mod", "--spec-ngram-size-m", "4"], "ngram-mod has no equivalent"),
    (["--spec-type", "ngram-cache", "--spec-ngram-min-hits", "2"], "ngram-cache has no"),
    (["-md", "d.gguf", "--spec-type", "draft-simple,ngram-mod", "--draft-max", "4"],
     "both ngram-mod and draft-simple"),
])
def test_what_cannot_be_corrected_safely_is_said_instead_of_guessed(argv, why):
    first, second = refusal(["run", *argv])
    assert first.startswith("error while handling argument")
    assert second.startswith("cannot be corrected automatically: ")
    assert why in second


def test_clean_commands_pass_quickly_and_import_nothing_heavy():
    argv = ["run", "-m", "t.gguf", "-md", "d.gguf", "--spec-draft-n-max", "8", "-p", "hi"]
    t0 = time.perf_counter()
    for _ in range(2000):
        check_run_argv(argv, os.environ)
    # hang guards, not timings (a loaded machine must not fail them): the real property is
    # that the check imports nothing heavy, asserted below
    assert time.perf_counter() - t0 < 10.0
    code = ("import sys, time; t = time.perf_counter()\n"
            "import specgguf.migrate.refuse as l\n"
            "try:\n  l.check_run_argv(['run', '--draft', '2'], {})\nexcept Exception: pass\n"
            "print(time.perf_counter() - t, *sorted(m for m in ('numpy', 'llama_cpp', 'typer',"
            " 'rich', 'gguf') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    elapsed, *heavy = out.stdout.split()
    assert heavy == []
    assert float(elapsed) < 10.0


def test_tables_agree_with_each_other():
    for entry in lg.REMOVED_FLAGS:
        assert entry.names and entry.hint
        for new in (entry.draft_flag, *entry.ngram_flags.values()):
            assert new is None or new.startswith("--spec-")
    assert set(lg.REMOVED_ENV) == {"LLAMA_ARG_DRAFT_MAX", "LLAMA_ARG_DRAFT_MIN"}
    for var, entry in lg.REMOVED_ENV.items():
        assert lg.RENAMED_ENV[var] == entry.new_env
    for d in lg.OLD_DEFAULTS:
        assert d.old != d.new and d.tools <= lg.LLAMA_TOOLS


@pytest.mark.skipif(not ARG_CPP.exists(), reason="needs the vendored llama.cpp sources")
def test_table_matches_the_vendored_arg_cpp():
    """The removed options and their messages are exactly what arg.cpp declares."""
    src = ARG_CPP.read_text()
    removed_part = src[src.index("// removed params"):src.index("// TTS params")]
    declared = re.findall(r'\{("--[^}]*)\}, "N",\s*"[^"]*",\s*\[\][^{]*\{\s*arg_removed\("([^"]*)"',
                          removed_part)
    assert declared
    for names, hint in declared:
        for name in re.findall(r'"([^"]+)"', names):
            assert lg.REMOVED_BY_NAME[name].hint == hint
    for var in re.findall(r'set_env\("(LLAMA_ARG_[A-Z_]+)"\)', removed_part):
        assert var in lg.REMOVED_ENV
    for new_env in lg.RENAMED_ENV.values():
        assert f'set_env("{new_env}")' in src
    for entry in lg.REMOVED_FLAGS:
        for new in (entry.draft_flag, *entry.ngram_flags.values()):
            assert new is None or f'{{"{new}"}}' in src


# -- one message for `--spec-type draft`, whichever front end meets it ------------------------

DRAFT_TYPE_LINE = ('error while handling argument "--spec-type": the speculative type "draft" '
                   "has been removed. use draft-simple")
DRAFT_TYPE_REASON = 'the speculative type "draft" has been removed. use draft-simple'


@pytest.fixture
def cli(capfd, monkeypatch):
    """cli(*argv) -> (exit status, stdout, stderr lines) of `specgguf *argv`, in-process."""
    from specgguf_cli.app import run_cli

    for var in list(os.environ):
        if var.startswith("LLAMA_ARG_"):
            monkeypatch.delenv(var)

    def _cli(*argv: str) -> tuple[int, str, list[str]]:
        code = run_cli(list(argv))
        out = capfd.readouterr()
        return code, out.out, [line for line in out.err.splitlines() if line.strip()]

    return _cli


def test_the_removed_type_message_is_defined_once():
    assert lg.spec_type_message("--spec-type", "ngram-simple,draft") == DRAFT_TYPE_LINE
    assert lg.removed_type_reason("draft") == DRAFT_TYPE_REASON


def test_run_prints_the_one_message(cli):
    code, out, err = cli("run", "-m", "/nonexistent/t.gguf", "-p", "hi", "--spec-type", "draft")
    assert code == ExitCode.USAGE == 1 and out == ""
    assert err[0] == DRAFT_TYPE_LINE
    assert err[1] == "corrected: specgguf run -m /nonexistent/t.gguf -p hi --spec-type draft-simple"


@pytest.mark.parametrize("value", ["ngram-simple;draft", "draft:2",
                                   "ngram-simple;ngram-mod,draft:auto"])
def test_bench_prints_the_one_message_for_each_configuration(cli, value):
    """bench's `;` (configurations) and `:` (draft lengths) hide the type from the start-up
    check; bench checks each configuration's types the same way, before anything is loaded."""
    code, out, err = cli("bench", "-m", "/nonexistent/t.gguf", "--spec-type", value)
    assert code == ExitCode.USAGE == 1 and out == ""
    assert err == [DRAFT_TYPE_LINE]


def test_bench_names_the_variable_when_the_type_comes_from_the_environment(cli, monkeypatch):
    monkeypatch.setenv("LLAMA_ARG_SPEC_TYPE", "ngram-simple;draft")
    code, out, err = cli("bench", "-m", "/nonexistent/t.gguf")
    assert code == ExitCode.USAGE == 1 and out == ""
    assert err == [DRAFT_TYPE_LINE.replace('argument "--spec-type"',
                                           'environment variable "LLAMA_ARG_SPEC_TYPE"')]


def test_migrate_prints_the_one_message(cli, tmp_path):
    code, out, err = cli("migrate", "--check", "--", "llama-server", "-m", "t.gguf",
                         "--spec-type", "ngram-simple,draft")
    assert code == 1 and err == []
    assert out.splitlines() == [
        "llama-server -m t.gguf --spec-type ngram-simple,draft-simple",
        f"# --spec-type ngram-simple,draft -> --spec-type ngram-simple,draft-simple: "
        f"{DRAFT_TYPE_REASON}",
    ]
    # what the rewrite cannot place (a Python list that does not name its tool) the token scan
    # reports, with the same words
    script = tmp_path / "serve.py"
    script.write_text('import subprocess\nsubprocess.run([LLAMA_SERVER, "--spec-type", '
                      '"draft"])\n')
    code, out, err = cli("migrate", "--check", str(script))
    assert code == 1 and err == []
    assert f"{script}:2: cannot migrate safely: --spec-type draft is still here " \
           f"({DRAFT_TYPE_REASON}); " in out


def test_a_library_caller_gets_the_generic_invalid_value_error():
    from specgguf.drafters.spec_types import parse_spec_types

    with pytest.raises(UsageError, match="invalid value for --spec-type: 'draft'"):
        parse_spec_types("draft", have_draft_model=True)

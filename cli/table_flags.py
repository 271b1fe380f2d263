"""The command options that specgguf.flag_table declares itself (SETTING, ALWAYS, DEPRECATED
and REFUSED rows; DECLARED rows are the commands' own options), added to a command by
`with_table_flags`, and the bare spellings older llama.cpp took as switches (`-fa`, `--color`).

A refused flag is parsed like any other (hidden from --help), so its value, its variable and
its position are read exactly; the command then stops with the row's one line before anything
is loaded. A SETTING row's value is checked here and handed on as one LlamaTuning."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Sequence
from typing import Any

import typer

from specgguf.errors import UsageError
from specgguf.flag_table.table import (
    BARE_VALUES,
    MODEL_PRESETS,
    PRESETS,
    Flag,
    Status,
    flag_table,
    row_of,
    rows_for,
)
from specgguf.io.log_sink import LogSettings, logging_to
from specgguf.loading.tuning import LlamaTuning

#: the statuses whose rows become options here (the others are the commands' own, another
#: family's, or refused by the migration's removed-flag table before parsing)
TABLE_DECLARED = (Status.SETTING, Status.ALWAYS, Status.DEPRECATED, Status.REFUSED,
                  Status.PRESET)


def spelled(row: Flag) -> str:
    """How messages name a row: its spellings joined, e.g. "-ub/--ubatch-size"."""
    return "/".join(row.flag.spellings)


def _declarations(row: Flag) -> list[str]:
    """Click's parameter declarations: a switch with `--no-` spellings pairs each positive
    with a negative ("--mmap/--no-mmap")."""
    pos, neg = list(row.flag.spellings), list(row.flag.negative)
    if not row.is_switch or not neg:
        return pos
    pairs = [f"{p}/{n}" for p, n in zip(pos, neg, strict=False)]
    pairs += [f"{pos[0]}/{n}" for n in neg[len(pos):]]
    return pairs + pos[len(neg):]


def _help(row: Flag) -> str:
    entry = row.entry
    if row.status is Status.PRESET:
        return f"Preset: {entry.note}."
    if row.status is Status.ALWAYS:
        return f"Accepted for llama.cpp compatibility: {entry.note}."
    if row.status is Status.DEPRECATED:
        return f"Deprecated (warns): {entry.note}."
    default = f" (llama.cpp's default: {row.flag.default})" if row.flag.default else ""
    return entry.note[:1].upper() + entry.note[1:] + default + "."


#: the settings a repeated flag adds to, as llama.cpp appends each occurrence (--lora a --lora
#: b loads both): their options take every occurrence
APPENDING = frozenset({"kv_overrides", "loras", "control_vectors", "tensor_buft_overrides"})


def _appends(row: Flag) -> bool:
    setting = row.entry.setting
    return setting is not None and setting.field in APPENDING and len(row.flag.values) == 1


def _option(row: Flag) -> inspect.Parameter:
    option = typer.Option(
        None, *_declarations(row), envvar=row.flag.env, show_default=False,
        hidden=row.status is Status.REFUSED, help=_help(row),
        metavar=None if row.is_switch else " ".join(row.flag.values),
    )  # fmt: skip
    # a flag of several values (--control-vector-layer-range START END) takes them all
    values = len(row.flag.values)
    annotation = (bool | None if row.is_switch else list[str] | None if _appends(row)
                  else str | None if values < 2 else tuple[(str,) * values] | None)  # fmt: skip
    return inspect.Parameter(
        row.param, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation
    )


def own_option(spelling: str) -> Any:
    """The Typer option of a DECLARED row that a command declares as its own parameter,
    made from the row: its spellings, variable, value form and help (the row's `help`).
    A switch defaults to off, a value to none."""
    row = row_of(spelling)
    assert row is not None and row.status is Status.DECLARED and row.entry.help, spelling
    return typer.Option(
        False if row.is_switch else None, *_declarations(row), envvar=row.flag.env,
        help=row.entry.help, metavar=None if row.is_switch else " ".join(row.flag.values),
    )  # fmt: skip


def parameters(command: str) -> list[inspect.Parameter]:
    """The table's options for one command, in the table's order."""
    return [_option(row) for row in rows_for(command, *TABLE_DECLARED)]


def _refusal(row: Flag) -> UsageError:
    env = f" (or {row.flag.env})" if row.flag.env else ""
    return UsageError(f"{spelled(row)}{env}: {row.entry.note}")


def take(command: str, given: dict[str, Any]) -> LlamaTuning:
    """Pop the table's options from a command's arguments: refuse, warn, or collect the
    settings (one line, exit 1, for a refused flag or a bad value)."""
    tuning = LlamaTuning()
    for row in rows_for(command, *TABLE_DECLARED):
        value = given.pop(row.param, None)
        if value is None or value == []:
            continue
        entry = row.entry
        if row.status is Status.REFUSED:
            raise _refusal(row)
        if row.status is Status.PRESET:  # expand_presets put its flags in its place
            continue
        if row.status is Status.ALWAYS:
            if (value.strip().lower() if isinstance(value, str) else value) != entry.always:
                raise _refusal(row)
        elif row.status is Status.DEPRECATED:
            print(f"warning: {entry.note}", file=sys.stderr)
        else:
            assert entry.setting is not None
            for one in value if _appends(row) else [value]:
                try:
                    parsed = entry.setting.parse(one)
                except ValueError as e:
                    raise UsageError(f"invalid value for {spelled(row)}: {one!r} ({e})") from None
                tuning = tuning.with_setting(entry.setting.scope, entry.setting.field, parsed,
                                             entry.setting.role)  # fmt: skip
    return tuning


def with_table_flags(command: str):
    """Add the table's options for `command` to a Typer command (one decorated with
    options.with_session_flags): their settings reach its SessionFlags as one LlamaTuning."""
    from specgguf_cli.options import _extend_signature

    def call(func, args, kwargs):
        tuning = take(command, kwargs)
        if not tuning.log:
            return func(*args, llama_tuning=tuning, **kwargs)
        settings = LogSettings.of(dict(tuning.log), verbose=bool(kwargs.get("verbose")))
        with logging_to(settings):
            return func(*args, llama_tuning=tuning, **kwargs)

    return lambda func: _extend_signature(func, None, parameters(command), call)


def _takes_value_words(rows: Sequence[Flag]) -> dict[str, str]:
    return {s: BARE_VALUES[r.key] for r in rows if r.key in BARE_VALUES for s in r.flag.spellings}


def with_bare_values(argv: list[str]) -> list[str]:
    """`argv` with a bare `-fa` or `--color` (at the end, or before another flag) given
    llama.cpp's old meaning: on. A word after one is its value (checked by the command)."""
    bare = _takes_value_words(flag_table())
    bare.update({"--colour": "on"})  # specgguf's British spelling of --color
    out: list[str] = []
    for i, token in enumerate(argv):
        out.append(token)
        if token == "--":
            return out + argv[i + 1:]
        if token in bare:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is None or nxt.startswith("-"):
                out.append(bare[token])
    return out


#: the flags that name a draft model (with one, a preset's speculation also drafts with it)
_DRAFT_FLAGS = ("-md", "--model-draft", "--spec-draft-model", "-hfd", "-hfrd", "--hf-repo-draft",
                "--spec-draft-hf")  # fmt: skip
_TARGET_FLAGS = ("-m", "--model", "-hf", "-hfr", "--hf-repo", "-mu", "--model-url")


def _given(argv: list[str], names: tuple[str, ...]) -> bool:
    return any(t in names or t.split("=", 1)[0] in names for t in argv)


def expand_model_presets(command: str, argv: list[str]) -> list[str]:
    """`argv` (after the command) with a model preset (--gpt-oss-20b-default ...) replaced by
    its model and settings, placed first so that a flag given on the command line wins; a
    model given with -m or -hf replaces the preset's. Two presets are one line, exit 1."""
    given = [t for t in argv if t in MODEL_PRESETS and command in MODEL_PRESETS[t].commands]
    if not given:  # (one another command lacks stays: an unknown option there)
        return argv
    if len(given) > 1:
        raise UsageError(f"{given[0]} and {given[1]} are two presets: give one")
    preset = MODEL_PRESETS[given[0]]
    rest = [t for t in argv if t != given[0]]
    model = () if _given(rest, _TARGET_FLAGS) else preset.flags
    serve = preset.serve if command == "serve" else ()
    return [*model, *preset.settings, *serve, *rest]


def expand_presets(argv: list[str]) -> list[str]:
    """`argv` with each preset flag (--spec-default) replaced by the flags it stands for: its
    spec types join --spec-type's list (as llama.cpp adds them), with draft-simple where a
    draft model is given or the pulled pair (no -m) brings one; its settings go first, so a
    flag given on the command line wins."""
    presets = [t for t in argv if t in PRESETS]
    if not presets:
        return argv
    rest = [t for t in argv if t not in PRESETS]
    types: list[str] = []
    settings: list[str] = []
    for name in presets:
        add, flags = PRESETS[name]
        types += add
        settings += flags
    if _given(rest, _DRAFT_FLAGS) or not _given(rest, _TARGET_FLAGS):
        types.append("draft-simple")
    out: list[str] = []
    i = 0
    while i < len(rest):
        token = rest[i]
        if token == "--spec-type" and i + 1 < len(rest):
            types = [*rest[i + 1].split(","), *types]
            i += 2
            continue
        if token.startswith("--spec-type="):
            types = [*token.split("=", 1)[1].split(","), *types]
            i += 1
            continue
        out.append(token)
        i += 1
    return [*settings, "--spec-type", ",".join(dict.fromkeys(types)), *out]

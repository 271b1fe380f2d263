"""The loading and drafting flags are declared once (cli/options.py SESSION_FLAGS, plus the
n-gram options table) and `run`, `bench` and `serve` all take every one of them; the README's
table of shared flags lists exactly those names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main
from specgguf_cli import options as o
from specgguf_cli.app import _register, app, run_cli

from specgguf.drafters.ngram_options import NGRAM_FLAGS

README = Path(__file__).resolve().parent.parent / "docs" / "running.md"
COMMANDS = ("run", "bench", "serve")


def _shared_names() -> set[str]:
    names = {n for row in o.SESSION_FLAGS for n in row.names}
    return names | {n for row in NGRAM_FLAGS for n in (row.info.flag, *row.info.aliases)}


def _command_names(command: str) -> set[str]:
    _register()
    click_app = typer.main.get_command(app)
    cmd = click_app.commands[command]
    return {opt for p in cmd.params for opt in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_every_shared_flag(command: str) -> None:
    missing = _shared_names() - _command_names(command)
    assert not missing, f"{command} lacks {sorted(missing)}"


def _expand(cell_item: str) -> list[str]:
    """`--spec-ngram-mod-n-match/-n-min/-n-max` -> the three flags it abbreviates (each part
    after a / replaces as many trailing -words of the first as it has)."""
    first, *rest = cell_item.split("/")
    out = [first]
    for part in rest:
        words = part.lstrip("-").split("-")
        head = first.split("-")
        out.append("-".join(head[: len(head) - len(words)] + words))
    return out


def _readme_shared_table() -> set[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("### Loading and drafting", 1)[1].split("\n### ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        flag_cells = line.split(" | ")[:2]  # flag, aliases
        for cell in flag_cells:
            for item in re.findall(r"`([^`]+)`", cell):
                names.update(_expand(item.split(" ")[0]))
    return names


def test_readme_shared_flag_table_lists_exactly_the_shared_flags() -> None:
    listed = _readme_shared_table()
    declared = _shared_names()
    assert listed - declared == set(), "README lists flags that are not shared"
    assert declared - listed == set(), "README misses shared flags"


def test_load_options_come_from_the_table() -> None:
    load = o.load_options(
        Path("t.gguf"), None, threads=-1, no_repack=True, cache_type_k="q8_0",
        spec_vocab_strict=True, rpc="h:1", ctx_size=512,
    )  # fmt: skip
    assert (load.threads, load.repack, load.strict_vocab) == (0, False, True)
    assert (load.cache_type_k, load.cache_type_v) == ("q8_0", "f16")
    assert (load.rpc, load.n_ctx, load.n_batch) == ("h:1", 512, 2048)
    with pytest.raises(TypeError, match="not a shared flag"):
        o.load_options(Path("t.gguf"), None, n_ctx=1)


@pytest.mark.parametrize("command", COMMANDS)
def test_list_devices_in_every_command(command: str, capsys) -> None:
    """--list-devices answers without a model in all three (serve had no such flag)."""
    assert run_cli([command, "--list-devices"]) == 0
    assert capsys.readouterr().out.strip()


@pytest.mark.parametrize("command", COMMANDS)
def test_bad_kv_type_refused_before_loading_in_every_command(command: str, capsys) -> None:
    """bench had no -ctk: it is checked the same way everywhere, before any model is read."""
    assert run_cli([command, "-m", "/nonexistent.gguf", "-ctk", "q9"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid value for -ctk: 'q9'" in err


@pytest.mark.parametrize("command", ("run", "serve"))
def test_run_and_serve_take_every_generation_flag(command: str) -> None:
    """How a generation speculates, samples and is constrained is declared once
    (o.GENERATION_FLAGS), not in each command's signature."""
    names = {n for row in o.GENERATION_FLAGS for n in row.names}
    missing = names - _command_names(command)
    assert not missing, f"{command} lacks {sorted(missing)}"
    assert {"--temp", "--top-k", "--seed", "--grammar", "-j", "--spec-type"} <= names

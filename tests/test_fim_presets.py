"""llama-server's code-completion presets for `serve` (specgguf_cli.fim_presets)."""

from __future__ import annotations

import pytest
from specgguf_cli.app import run_cli
from specgguf_cli.fim_presets import PRESETS, SETTINGS, expand

from specgguf.errors import ExitCode, SpecggufError, UsageError


def test_the_pulled_preset_sets_the_editor_defaults_first():
    argv = expand(["serve", "--fim-qwen-1.5b-default", "--port", "9000"])
    assert argv == ["serve", *SETTINGS, "--port", "9000"]  # the user's --port comes last: wins


def test_a_preset_needing_a_download_names_its_model():
    with pytest.raises(SpecggufError, match="Qwen2.5-Coder-7B-Q8_0-GGUF with the Qwen2.5"):
        expand(["serve", "--fim-qwen-7b-spec"])
    assert expand(["serve", "--fim-qwen-7b-spec", "-m", "7b.gguf"]) == [
        "serve", *SETTINGS, "-m", "7b.gguf"]  # fmt: skip


def test_presets_are_serve_flags_only_and_one_at_a_time():
    assert expand(["run", "--fim-qwen-1.5b-default"]) == ["run", "--fim-qwen-1.5b-default"]
    with pytest.raises(UsageError, match="two presets"):
        expand(["serve", "--fim-qwen-1.5b-default", "--fim-qwen-3b-default"])
    assert len({p.flag for p in PRESETS}) == len(PRESETS)


def test_refusal_is_one_line_and_exit_6(capsys):
    assert run_cli(["serve", "--fim-qwen-14b-spec"]) == ExitCode.PULL
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Qwen2.5-Coder-14B" in err


def test_the_settings_are_flags_serve_takes(capsys):
    # parsed in full before -np 2 is refused for --cache-reuse (nothing is loaded)
    assert run_cli(["serve", "--fim-qwen-1.5b-default", "-np", "2"]) == ExitCode.USAGE
    assert "--cache-reuse works with one slot" in capsys.readouterr().err

"""llama-server's code-completion presets (`--fim-qwen-7b-spec` ...) for `specgguf serve`.

Each preset is llama-server's choice of model (and draft) with the settings an editor plugin
expects, the preset rows of the flag table (specgguf.flag_table.table.EDITOR_SETTINGS): port
8012 (llama.vscode's and llama.vim's default endpoint), batches and micro-batches of 1024, the
model's whole training context (-c 0) and --cache-reuse (64 here: the table says why). A
preset expands, before the
command line is parsed, into those flags placed first, so that any flag the user gives
after it wins. The model a preset names is specgguf's own where it is the pulled Qwen2.5-
Coder 1.5B (served with its 0.5B draft, as `serve` without -m is); the larger ones are not
pulled by specgguf, so without -m such a preset is refused naming the model it would need.
"""

from __future__ import annotations

from dataclasses import dataclass

from specgguf.errors import ExitCode, SpecggufError, UsageError
from specgguf.flag_table.table import EDITOR_SETTINGS

#: what every preset sets
SETTINGS = EDITOR_SETTINGS


@dataclass(frozen=True)
class FimPreset:
    flag: str
    #: the model llama-server downloads for it (its Hugging Face repository)
    model: str
    #: specgguf serves its pulled pair for it (no -m needed)
    pulled: bool = False
    #: llama-server pairs it with the Qwen2.5-Coder 0.5B draft
    spec: bool = False


PRESETS: tuple[FimPreset, ...] = (
    FimPreset("--fim-qwen-1.5b-default", "ggml-org/Qwen2.5-Coder-1.5B-Q8_0-GGUF", pulled=True),
    FimPreset("--fim-qwen-3b-default", "ggml-org/Qwen2.5-Coder-3B-Q8_0-GGUF"),
    FimPreset("--fim-qwen-7b-default", "ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF"),
    FimPreset("--fim-qwen-7b-spec", "ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF", spec=True),
    FimPreset("--fim-qwen-14b-spec", "ggml-org/Qwen2.5-Coder-14B-Q8_0-GGUF", spec=True),
    FimPreset("--fim-qwen-30b-default", "ggml-org/Qwen3-Coder-30B-A3B-Instruct-Q8_0-GGUF"),
)
BY_FLAG = {p.flag: p for p in PRESETS}
MODEL_FLAGS = ("-m", "--model")


def expand(argv: list[str]) -> list[str]:
    """`serve`'s argv with a preset flag replaced by its settings (put first: later flags
    win); other commands' argv as it is. UsageError for two presets; SpecggufError (exit 6)
    for a preset whose model specgguf does not pull, without -m."""
    if not argv or argv[0] != "serve":
        return argv
    end = argv.index("--") if "--" in argv else len(argv)
    given = [a for a in argv[1:end] if a in BY_FLAG]
    if not given:
        return argv
    if len(given) > 1:
        raise UsageError(f"{given[0]} and {given[1]} are two presets: give one")
    preset = BY_FLAG[given[0]]
    rest = [a for i, a in enumerate(argv[1:], start=1) if not (i < end and a == preset.flag)]
    has_model = any(a in MODEL_FLAGS or a.startswith("--model=") for a in rest)
    if not preset.pulled and not has_model:
        draft = " with the Qwen2.5-Coder 0.5B draft (-md)" if preset.spec else ""
        raise SpecggufError(
            f"{preset.flag} serves {preset.model}{draft}, which specgguf does not pull: give "
            "its GGUF with -m (or use --fim-qwen-1.5b-default, the pulled pair)",
            ExitCode.PULL,
        )
    return ["serve", *SETTINGS, *rest]

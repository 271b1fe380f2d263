"""The prompts bench runs: the built-in set, -p, or -f (JSON Lines or one plain-text prompt),
filtered by class."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specgguf.errors import PromptError, UsageError, open_user_file, read_bounded
from specgguf.io import json_input

#: the prompt set shipped with specgguf (one JSON object per line: {"class", "prompt"})
BUILTIN_PROMPTS = Path(__file__).resolve().parents[2] / "scripts" / "bench_prompts.jsonl"


@dataclass(frozen=True)
class BenchPrompt:
    cls: str
    text: str

def parse_prompt_lines(data: str, where: str) -> list[BenchPrompt] | None:
    """JSON Lines of {"prompt": ..., "class": ...}; None if `data` is not such a file."""
    prompts: list[BenchPrompt] = []
    for n, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json_input.loads(line)  # bounded: no RecursionError, no lone surrogate
        except json_input.JsonInputError as e:
            if e.code == "invalid_value":
                raise PromptError(f"{where}:{n}: {e}") from None
            if n == 1 or not prompts:
                return None  # not JSON Lines: the whole file is one prompt
            raise PromptError(f"{where}:{n}: not a JSON object") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
            if not prompts and not isinstance(obj, dict):
                return None
            raise PromptError(f'{where}:{n}: expected {{"class": ..., "prompt": "..."}}')
        cls = obj.get("class", "custom")
        prompts.append(BenchPrompt(str(cls), obj["prompt"]))
    return prompts or None

def load_prompts(
    text: str | None = None,
    file: Path | None = None,
    classes: Sequence[str] | None = None,
    per_class: int = 0,
) -> list[BenchPrompt]:
    """-p TEXT, else -f FILE (JSON Lines, or plain text = one prompt), else the built-in set;
    then keep the classes asked for (--prompt-class) and at most `per_class` of each."""
    if text is not None:
        prompts = [BenchPrompt("custom", text)]
    else:
        path = Path(file) if file is not None else BUILTIN_PROMPTS
        if file is None and not path.is_file():
            raise UsageError(
                f"the built-in prompt set {path} is missing: pass -p TEXT or -f FILE"
            )
        with open_user_file(path, "-f") as f:
            data = read_bounded(f, f"-f {path}", PromptError)
        try:
            decoded = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise PromptError(f"{path}: not valid UTF-8 (byte {e.start})") from None
        parsed = parse_prompt_lines(decoded, str(path))
        prompts = parsed if parsed is not None else [BenchPrompt("custom", decoded)]
    if classes:
        wanted = [c.strip() for c in classes if c.strip()]
        known = sorted({p.cls for p in prompts})
        unknown = [c for c in wanted if c not in known]
        if unknown:
            raise UsageError(
                f"--prompt-class {unknown[0]!r}: no such class in the prompts "
                f"(have: {', '.join(known)})"
            )
        prompts = [p for p in prompts if p.cls in wanted]
    if per_class > 0:
        seen: dict[str, int] = {}
        kept = []
        for p in prompts:
            seen[p.cls] = seen.get(p.cls, 0) + 1
            if seen[p.cls] <= per_class:
                kept.append(p)
        prompts = kept
    if not prompts:
        raise PromptError("no prompts to benchmark")
    return prompts

"""Write the flags of llama.cpp's `llama-server`, `llama-cli` and `llama-completion` --help as
data (specgguf/flag_table/llama_cpp_help.json), read from the C++ source that declares them.

Usage: python scripts/llama_help_flags.py [path/to/llama.cpp/common/arg.cpp]

Each option of that file is one `add_opt(common_arg(...))` statement: brace lists of its
spellings (a second list: its negative spellings), zero to two value hints, its help text, a
handler, then chained setters for the programs it applies to, the ones it is excluded from and
its environment variable. An option belongs to a program's --help when it names the program or
the common set, and is not excluded from it. The output is committed, so that the tests need
no copy of the C++ source; rerun this when the pinned llama-cpp-python changes.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

DEFAULT_SOURCE = Path(
    "/work/ref/llama_cpp_python-0.3.36/vendor/llama.cpp/common/arg.cpp"
)
OUT = Path(__file__).resolve().parent.parent / "specgguf" / "flag_table" / "llama_cpp_help.json"
#: the programs whose --help is recorded, by the name the source gives them
PROGRAMS = {"SERVER": "llama-server", "CLI": "llama-cli", "COMPLETION": "llama-completion"}

_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def without_comments(source: str) -> str:
    """`source` with its // line comments removed (string literals left whole)."""
    return re.sub(r'("(?:[^"\\\n]|\\.)*")|//[^\n]*', lambda m: m.group(1) or "", source)


def code_chars(text: str, start: int = 0):
    """(index, character) of `text` from `start`, string literals (and their escapes)
    skipped: the characters a bracket or comma scan may count."""
    i, in_str = start, False
    while i < len(text):
        c = text[i]
        if in_str:
            if c == "\\":
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        else:
            yield i, c
        i += 1


def closing(text: str, start: int) -> int:
    """The index just past the parenthesis that closes the one at `start` (strings skipped)."""
    depth = 0
    for i, c in code_chars(text, start):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError(f"unbalanced parentheses from offset {start}")


def statements(source: str) -> list[str]:
    """The text of every add_opt(common_arg(...)...); statement, parentheses balanced."""
    source = without_comments(source)
    return [source[m.start(): closing(source, m.start() + len("add_opt"))]
            for m in re.finditer(r"add_opt\(common_arg\(", source)]


def top_level_items(text: str) -> list[str]:
    """`text` split at commas outside brackets and strings."""
    items, depth, start = [], 0, 0
    for i, c in code_chars(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    return items


def strings(text: str) -> list[str]:
    return [s.encode().decode("unicode_escape") for s in _STRING.findall(text)]


def parse_option(stmt: str) -> dict:
    body_start = stmt.index("common_arg(") + len("common_arg(")
    # the constructor's arguments end where its parenthesis closes: the chained setters follow
    i = closing(stmt, body_start - 1)
    args, chain = top_level_items(stmt[body_start: i - 1]), stmt[i:]
    lists = [a for a in args if a.startswith("{")]
    rest = [a for a in args[len(lists):] if not a.startswith("[")]
    spellings = strings(lists[0])
    negative = strings(lists[1]) if len(lists) > 1 else []
    hints = [strings(h)[0] if h.startswith('"') else h for h in rest[:-1]]
    help_expr = rest[-1] if rest else ""
    help_text = " ".join(strings(help_expr)) if help_expr else ""
    default = re.search(r"default:\s*([^)]*)\)", help_text)

    def setter(name: str) -> str | None:
        m = re.search(rf"\.{name}\(([^)]*)\)", chain)
        return m.group(1) if m else None

    examples = re.findall(r"LLAMA_EXAMPLE_(\w+)", setter("set_examples") or "") or ["COMMON"]
    excludes = re.findall(r"LLAMA_EXAMPLE_(\w+)", setter("set_excludes") or "")
    env = setter("set_env")
    return {
        "spellings": spellings,
        "negative": negative,
        "values": hints,
        "default": default.group(1).strip() if default and "%" not in default.group(1) else None,
        "env": strings(env)[0] if env else None,
        "sampling": ".set_sparam()" in chain or ".set_sampling()" in chain,
        "speculative": ".set_spec()" in chain,
        "preset_only": ".set_preset_only()" in chain,
        "programs": [
            prog for ex, prog in PROGRAMS.items()
            if (ex in examples or "COMMON" in examples) and ex not in excludes
        ],
        "help": help_text.split("\n(env:")[0].strip(),
    }


def main(argv: list[str]) -> int:
    source = Path(argv[1]) if len(argv) > 1 else DEFAULT_SOURCE
    options = [parse_option(s) for s in statements(source.read_text())]
    options = [o for o in options if o["programs"] and not o["preset_only"]]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(options, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(options)} options of {', '.join(PROGRAMS.values())} -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

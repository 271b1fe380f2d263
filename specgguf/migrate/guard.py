"""The second line of defence of `specgguf migrate`: a token scan of every file it checks.

The structured rewrite (specgguf.migrate.text) understands commands it can find: a shell
line that names llama-server, a compose `command:` under a llama.cpp image, and so on. Real
files hide flags in many more places (a shell variable, a bash array, `$(...)`, a `.bat` with
`^` continuations, a custom YAML schema, a Python subprocess list, a bare flag in a Markdown
block). Whatever the rewrite did not change, this scan still sees: every removed llama.cpp or
vLLM flag name, removed `--spec-type` value and removed/renamed environment variable left in
the text where it could be an argument is reported, so `--check` can never pass such a file. A
false "cannot migrate safely" costs a look; a false pass costs a server that dies at start.

Exempt: full-line comments of the file's language (and trailing shell comments), lines opted
out with `specgguf-migrate: ignore` (see `ignored_lines`), `specgguf migrate ...` example lines,
and spans the structured scan knows to be free text (the value of `-p "say --draft-max"`).

Pure: no I/O, only the standard library.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass

from specgguf.migrate import removed_flags as lg

#: vLLM's pre-0.8 speculative flags (folded into --speculative-config) and V0-only knobs
VLLM_REMOVED_FLAGS = frozenset({*lg.VLLM_KEYS, *lg.VLLM_GONE})
#: names other tools use too (`gh pr create --draft`, `cd`): reported only in files that
#: mention llama.cpp, GGUF or speculative decoding somewhere
AMBIGUOUS = frozenset({"--draft", "-cd"})
_LLAMA_HINT = re.compile(r"llama|gguf|ggml|LLAMA_ARG|spec-type|model-draft|speculat|draft-p-min"
                         r"|(?<![\w-])-md(?![\w-])", re.I)
_OTHER_DRAFT_TOOL = re.compile(r"\b(gh|hub|glab|tea)\s+(pr|mr|release)\b|create-pull-request"
                               r"|\bpulls?\b.*--draft|\bgit\b")

_ALL_FLAGS = sorted({*lg.REMOVED_BY_NAME, *VLLM_REMOVED_FLAGS}, key=len, reverse=True)


def _flag_pattern(name: str) -> str:
    # llama.cpp and vLLM read `--a_b` as `--a-b`: both spellings are the same option
    if name.startswith("--"):
        return "--" + "[-_]".join(re.escape(p) for p in name[2:].split("-"))
    return re.escape(name)


_FLAG_RE = re.compile(r"(?<![\w-])(" + "|".join(_flag_pattern(n) for n in _ALL_FLAGS)
                      + r")(?![\w-])")
_ENV_NAMES = sorted({*lg.REMOVED_ENV, *lg.RENAMED_ENV, *lg.DEAD_ENV}, key=len, reverse=True)
_ENV_RE = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(_ENV_NAMES) + r")(?![A-Za-z0-9_])")
# `--spec-type draft`, `--spec-type=ngram-mod,draft`, `"--spec-type", "draft"`,
# `LLAMA_ARG_SPEC_TYPE=draft`, `spec-type: draft`
_SPEC_TYPE_RE = re.compile(
    r"(?<![\w-])(?:--spec[-_]type|LLAMA_ARG_SPEC_TYPE|spec[-_]type)(?![\w-])"
    r"[\s=:\"',\[\]\\^`]{0,12}?((?:[\w-]+,)*)(draft)(?![\w-])")
# keys current vLLM's SpeculativeConfig rejects, inside an existing --speculative-config JSON
_VLLM_GONE_KEYS = re.compile(r"[\"']?(disable_by_batch_size|speculative_disable_by_batch_size"
                             r"|disable_mqa_scorer|acceptance_method)[\"']?\s*:")
_MIGRATE_EXAMPLE = re.compile(r"specgguf\s+migrate\b")

_IGNORE = re.compile(r"specgguf-migrate:\s*(ignore(?:-(?:start|end|next-line|file))?)\b")


@dataclass(frozen=True)
class Hit:
    """A removed name left in the text: offsets into the text, and the name as written."""

    start: int
    end: int
    name: str
    kind: str  # "flag", "env", "spec-type", "vllm-key"

    def message(self) -> str:
        if self.kind == "env":
            return (f"{self.name} is still set here (llama.cpp "
                    f"{'refuses' if self.name in lg.REMOVED_ENV else 'ignores'} it now); "
                    "migrate it by hand or mark the line `specgguf-migrate: ignore`")
        if self.kind == "vllm-key":
            return (f"{self.name} is not a key current vLLM's speculative config accepts "
                    "(it refuses to start); remove it by hand or mark the line "
                    "`specgguf-migrate: ignore`")
        if self.kind == "spec-type":
            return (f"--spec-type {self.name} is still here "
                    f"({lg.removed_type_reason(self.name)}); migrate it by hand or mark the "
                    "line `specgguf-migrate: ignore`")
        owner = "vLLM" if self.name.replace("_", "-") in VLLM_REMOVED_FLAGS else "llama.cpp"
        return (f"{self.name} is still here ({owner} removed it); migrate it by hand or mark "
                "the line `specgguf-migrate: ignore`")


def ignored_lines(text: str) -> tuple[set[int], bool]:
    """Line numbers (1-based) opted out, and whether the whole file is.

    `specgguf-migrate: ignore` on a line ignores that line; `ignore-next-line` the line after
    it; `ignore-start` ... `ignore-end` every line in between (both included);
    `ignore-file` the whole file. Any comment syntax works: `#`, `//`, `<!-- -->`, `REM`.
    """
    out: set[int] = set()
    block_from: int | None = None
    whole = False
    for n, line in enumerate(text.split("\n"), start=1):
        m = _IGNORE.search(line)
        if block_from is not None:
            out.add(n)
        if not m:
            continue
        what = m.group(1)
        if what == "ignore":
            out.add(n)
        elif what == "ignore-next-line":
            out.update((n, n + 1))
        elif what == "ignore-start":
            block_from = n
            out.add(n)
        elif what == "ignore-end":
            block_from = None
            out.add(n)
        elif what == "ignore-file":
            whole = True
    return out, whole


def _comment_spans(text: str, kind: str) -> list[tuple[int, int]]:
    """Comments where nothing is ever an argument: full lines, and trailing shell comments."""
    spans: list[tuple[int, int]] = []
    if kind == "json":
        return spans
    if kind == "markdown":  # <!-- ... -->: never rendered, never run
        return [(m.start(), m.end()) for m in re.finditer(r"<!--.*?(?:-->|\Z)", text, re.S)]
    full = {
        "bat": re.compile(r"[ \t]*(?:@?rem(?:\s|$)|::)", re.I),
        "python": re.compile(r"[ \t]*#"),
        "source": re.compile(r"[ \t]*(?://|#|--|;)"),
        "ini": re.compile(r"[ \t]*[#;]"),
    }.get(kind, re.compile(r"[ \t]*#"))
    pos = 0
    for line in text.split("\n"):
        end = pos + len(line)
        if full.match(line):
            spans.append((pos, end))
        elif kind in ("shell", "make", "yaml", "dockerfile", "ini"):
            at = _trailing_comment(line)
            if at is not None:
                spans.append((pos + at, end))
        pos = end + 1
    return spans


def _trailing_comment(line: str) -> int | None:
    """Where a ` # comment` starts outside quotes, or None."""
    quote = ""
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == "\\":
            i += 2
            continue
        elif c == "#" and i > 0 and line[i - 1] in " \t":
            return i
        i += 1
    return None


def has_removed_name(text: str) -> bool:
    """Whether `text` holds a removed flag name anywhere (a cheap test before a closer look)."""
    return bool(_FLAG_RE.search(text) or _ENV_RE.search(text))


class _Lines:
    """Whether a line of one text matches a pattern, each line searched once per pattern: a
    long line holding many hits (a minified file, thousands of commands joined by `;`) must
    not be searched again for every hit on it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.newlines = [m.start() for m in re.finditer("\n", text)]
        self._seen: dict[tuple[str, int], bool] = {}

    def matches(self, pattern: re.Pattern[str], at: int) -> bool:
        k = bisect.bisect_left(self.newlines, at)
        key = (pattern.pattern, k)
        if key not in self._seen:
            a = self.newlines[k - 1] + 1 if k else 0
            b = self.newlines[k] if k < len(self.newlines) else len(self.text)
            self._seen[key] = bool(pattern.search(self.text[a:b]))
        return self._seen[key]


def someone_elses(text: str, at: int, name: str, hinted: bool | None = None,
                  lines: _Lines | None = None) -> bool:
    """Whether the flag `name` at `at` belongs to another tool (`gh pr create --draft`, a
    `-cd` in a file that never mentions llama.cpp): such a name is neither reported nor
    rewritten."""
    if lg.normalize_flag(name) not in AMBIGUOUS:
        return False
    if hinted is None:
        hinted = bool(_LLAMA_HINT.search(text))
    if not hinted:
        return True
    return (lines or _Lines(text)).matches(_OTHER_DRAFT_TOOL, at)


def scan_tokens(text: str, kind: str, exempt: Iterable[tuple[int, int]] = ()) -> list[Hit]:
    """Every removed name in `text` that could be an argument, in text order."""
    ignored, whole = ignored_lines(text)
    if whole:
        return []
    spans = [*_comment_spans(text, kind), *exempt]
    hinted = bool(_LLAMA_HINT.search(text))
    lines = _Lines(text)
    hits: list[Hit] = []
    for m in _FLAG_RE.finditer(text):
        name = m.group(1)
        if someone_elses(text, m.start(), name, hinted, lines):
            continue
        hits.append(Hit(m.start(), m.end(), name, "flag"))
    hits += [Hit(m.start(1), m.end(1), m.group(1), "env") for m in _ENV_RE.finditer(text)]
    hits += [Hit(m.start(2), m.end(2), "draft", "spec-type")
             for m in _SPEC_TYPE_RE.finditer(text)]
    if "speculative" in text:
        hits += [Hit(m.start(1), m.end(1), m.group(1), "vllm-key")
                 for m in _VLLM_GONE_KEYS.finditer(text)]
    merged = _merge(spans)
    starts = [a for a, _ in merged]
    out = []
    for h in sorted(hits, key=lambda h: h.start):
        k = bisect.bisect_right(starts, h.start) - 1
        if k >= 0 and h.end <= merged[k][1]:
            continue  # a comment, or free text the rewrite knows
        if lines.matches(_MIGRATE_EXAMPLE, h.start):
            continue
        if ignored and bisect.bisect_left(lines.newlines, h.start) + 1 in ignored:
            continue
        out.append(h)
    return out


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, non-overlapping spans: one lookup per hit instead of one per span."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out

"""One file's text through the migration: the structured rewrite for its kind, then the token
scan (guard), so that no removed flag the rewrite could not place passes unreported.
"""

from __future__ import annotations

import bisect
import re

from specgguf.migrate import guard
from specgguf.migrate.edit import ShellStyle, apply_edits
from specgguf.migrate.scan import Finding, Scan
from specgguf.migrate.scan_dockerfile import scan_dockerfile
from specgguf.migrate.scan_markdown import scan_markdown
from specgguf.migrate.scan_shell import scan_shell
from specgguf.migrate.scan_source import scan_source
from specgguf.migrate.scan_yaml import scan_yaml

#: the comment syntaxes of source files whose list literals are read (scan_source)
SOURCE_COMMENTS = ("python", "json", "ini", "source")


def scan_text(text: str, kind: str) -> list[Finding]:
    """Every finding in one file's text, in file order."""
    return _scan_text(text, kind).findings


def _scan_text(text: str, kind: str, base: str | None = None,
               draft_kind: str | None = None) -> Scan:
    """Run the scanner for `kind`, then the LLAMA_ARG_* pass over the regions it read."""
    scan = Scan(text, draft_kind)
    scan.base = base
    if kind == "markdown":
        regions = scan_markdown(scan)
    else:
        regions = [(0, len(text))]
        if kind == "dockerfile":
            scan_dockerfile(scan)
        elif kind == "yaml":
            scan_yaml(scan)
        else:
            scan.bat, scan.ps = kind == "bat", kind == "powershell"
            scan_shell(scan, 0, len(text), ShellStyle(make=kind == "make"))
    for a, b in regions:
        scan.env(a, b)
    scan.resolve_overlaps()
    scan.findings.sort(key=lambda f: (f.line, f.old))
    return scan


def migrate_text(text: str, kind: str) -> tuple[str, list[Finding]]:
    """The structured rewrite alone: the new text and its findings (no token scan)."""
    findings = scan_text(text, kind)
    return apply_edits(text, [e for f in findings for e in f.edits]), findings


def check_text(text: str, kind: str | None, comments: str | None = None,
               base: str | None = None, draft_kind: str | None = None
               ) -> tuple[str, list[Finding]]:
    """The structured rewrite, then the token scan: what `migrate FILE` does with one text.

    Findings on lines opted out with `specgguf-migrate: ignore` are dropped (the rewrite does
    not touch them either). Every removed name the rewrite leaves behind becomes a finding of
    its own that cannot be migrated safely, so a file never passes `--check` with one.
    """
    ignored, whole = guard.ignored_lines(text)
    if whole:
        return text, []
    if kind:
        scan = _scan_text(text, kind, base, draft_kind)
    else:  # program source: the argument lists that name their tool
        scan = Scan(text, draft_kind)
        scan.base = base
        if comments in SOURCE_COMMENTS:
            scan_source(scan, comments)
            scan.resolve_overlaps()
    findings = [f for f in scan.findings if not _touches(text, f, ignored)]
    edits = [e for f in findings for e in f.edits]
    hits = guard.scan_tokens(text, comments or kind or "shell", scan.exempt)
    # sorted intervals: one lookup per hit, whatever the number of edits and findings
    changed = guard._merge([(e.start, e.end) for e in edits])
    reported = guard._merge([f.span for f in findings if f.unsafe])
    for hit in hits:
        if _touching(changed, hit.start, hit.end):
            continue  # the rewrite changes this very token
        if _touching(reported, hit.start, hit.start, closed=False):
            continue  # its command is reported already, with the reason
        line = scan.line_of(hit.start)
        message = hit.message() + _where(text, hit, comments or kind or "shell")
        findings.append(Finding(line, hit.name, hit.name, [], [message], [],
                                (hit.start, hit.end)))
    findings.sort(key=lambda f: (f.line, f.old))
    return apply_edits(text, edits), findings


_SOURCE_KINDS = frozenset({"python", "source", "json", "ini"})
_LLAMA_LINE = re.compile(r"\.gguf\b|--spec-type|llama-(?:server|cli)|-ngl\b")


def _where(text: str, hit: guard.Hit, comments: str) -> str:
    """What the token scan knows about where a name it found stands (see reasons)."""
    if comments in _SOURCE_KINDS:
        return " (inside program source: a string the rewrite does not edit)"
    a = text.rfind("\n", 0, hit.start) + 1
    b = text.find("\n", hit.end)
    if hit.name.replace("_", "-") in guard.VLLM_REMOVED_FLAGS \
            and _LLAMA_LINE.search(text[a:len(text) if b < 0 else b]):
        return " (among llama.cpp options: a fork's flag)"
    return ""


def _touching(spans: list[tuple[int, int]], a: int, b: int, closed: bool = True) -> bool:
    """Whether [a, b] meets one of the sorted, merged `spans` (its ends included if closed)."""
    k = bisect.bisect_right(spans, (b, len(spans) and spans[-1][1] + 1)) - 1
    if k < 0:
        return False
    x, y = spans[k]
    return (x <= b and y >= a) if closed else (x <= a < y)


def _touches(text: str, finding: Finding, ignored: set[int]) -> bool:
    if not ignored:
        return False
    lines = {text.count("\n", 0, e.start) + 1 for e in finding.edits}
    lines.add(finding.line)
    return bool(lines & ignored)

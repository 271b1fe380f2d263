"""The Markdown scanner: fenced code blocks, each read as the language its info string names
(shell and its relatives, YAML, Dockerfile, Makefile), and inline code in prose.

Inline code that names a tool is a command and is migrated as one; inline code that only names
flags (`--draft-max`, `--draft 16`) gets the new names where the replacement is one-to-one, and
is reported where it is not (a flag with no successor, one that needs a word added). A prose
line that is about the old flags (see `about_old_flags`) is left alone, and not reported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from specgguf.migrate.argv import find_anchor
from specgguf.migrate.edit import ShellStyle
from specgguf.migrate.lines import split_lines
from specgguf.migrate.scan import Scan
from specgguf.migrate.scan_dockerfile import scan_dockerfile
from specgguf.migrate.scan_shell import scan_shell
from specgguf.migrate.scan_source import scan_source
from specgguf.migrate.scan_yaml import scan_yaml

_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})[ \t]*([^\n`]*)")
_SOURCE_LANGS = {"python": "python", "py": "python", "python3": "python", "json": "json",
                 "jsonc": "json", "js": "source", "javascript": "source", "ts": "source",
                 "typescript": "source"}
_BAT_LANGS = {"bat", "cmd", "batch"}
_PS_LANGS = {"powershell", "ps1", "ps", "pwsh"}
_SHELL_LANGS = {"", "sh", "bash", "shell", "console", "zsh", "ksh", "shell-session",
                "shellsession", "text", "txt", "plaintext", "powershell", "ps1", "ps", "pwsh",
                "bat", "cmd", "batch", "nohighlight", "terminal"}


def _markdown_blocks(text: str) -> Iterable[tuple[str, int, int]]:
    """(language, start, end) of each fenced code block's content."""
    lines = split_lines(text, 0, len(text))
    n = 0
    while n < len(lines):
        m = _FENCE.fullmatch(lines[n].text(text))
        if not m:
            n += 1
            continue
        fence = m.group(1)
        lang = (m.group(2).split() or [""])[0].strip("{}.").lower()
        close = re.compile(r"[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*")
        k = n + 1
        while k < len(lines) and not close.fullmatch(lines[k].text(text)):
            k += 1
        start = lines[n + 1].start if n + 1 < len(lines) else len(text)
        end = lines[k].start if k < len(lines) else len(text)
        yield lang, start, end
        n = k + 1


_INDENTED = re.compile(r"(?: {4}|\t)[ \t]*(?:\$[ \t]+)?(\S+)")


def _indented_blocks(text: str, fenced: list[tuple[int, int]]) -> Iterable[tuple[int, int]]:
    """(start, end) of each indented code block (four spaces or a tab, after a blank line)
    whose first line runs a tool (`    llama-server -m t.gguf ...`, `    $ ./llama-cli ...`):
    an indented paragraph of a list item is prose, so a block that runs nothing is left to the
    token scan."""
    lines = [ln for ln in split_lines(text, 0, len(text))
             if not any(a <= ln.start < b for a, b in fenced)]
    n, blank_before = 0, True
    while n < len(lines):
        m = _INDENTED.match(lines[n].text(text))
        if not (blank_before and m and find_anchor([m.group(1)]) is not None):
            blank_before = not lines[n].text(text).strip()
            n += 1
            continue
        k = n
        while k + 1 < len(lines) and _INDENTED.match(lines[k + 1].text(text)):
            k += 1
        yield lines[n].start, lines[k].end
        n, blank_before = k + 1, False


#: words that say a line is about the old flags (a changelog, a migration note)
_ABOUT_OLD = re.compile(r"\b(removed|deprecated|renamed|replaced|replaces|no longer|formerly|"
                        r"instead of|used to be|legacy)\b|->|\u2192", re.I)
#: headings under which every prose line is about history
_HISTORY_HEADING = re.compile(r"#{1,6}[ \t]+.*\b(change ?log|changes|release notes|history|"
                              r"what'?s new|migrat\w*)\b", re.I)
_HEADING = re.compile(r"(#{1,6})[ \t]")
_INLINE = re.compile(r"(`+)([^`\n]+?)\1(?!`)")


def about_old_flags(line: str, headings: list[str]) -> bool:
    """A prose line is about the old flags, not an instruction to use them, when it says so
    (removed, deprecated, renamed, replaced, no longer, formerly, instead of, legacy, an
    arrow) or sits under a changelog-like heading (Changelog, Changes, Release notes, History,
    What's new, Migration) at any level above it."""
    return bool(_ABOUT_OLD.search(line) or any(_HISTORY_HEADING.match(h) for h in headings))


def _prose_lines(text: str, blocks: list[tuple[int, int]]
                 ) -> Iterable[tuple[int, int, list[str]]]:
    """(start, end, headings above) of each line outside the fenced blocks and their fences."""
    headings: list[tuple[int, str]] = []  # (level, text) of the headings above, outermost first
    for line in split_lines(text, 0, len(text)):
        inside = any(a <= line.start < b for a, b in blocks)
        s = line.text(text)
        if inside or _FENCE.fullmatch(s):
            continue
        m = _HEADING.match(s)
        if m:
            level = len(m.group(1))
            headings = [h for h in headings if h[0] < level] + [(level, s)]
            continue
        yield line.start, line.end, [h for _, h in headings]


def scan_markdown(scan: Scan) -> list[tuple[int, int]]:
    """Scan the code blocks and inline code; returns the regions read, where LLAMA_ARG_* names
    are looked for."""
    scan.docs = True
    regions = []
    blocks = list(_markdown_blocks(scan.text))
    fenced = [(x, y) for _, x, y in blocks]
    blocks += [("", x, y) for x, y in _indented_blocks(scan.text, fenced)]
    for a, b, headings in _prose_lines(scan.text, [(x, y) for _, x, y in blocks]):
        line = scan.text[a:b]
        if about_old_flags(line, headings):
            scan.exempt.append((a, b))
            continue
        for m in _INLINE.finditer(line):
            x, y = a + m.start(2), a + m.end(2)
            scan_shell(scan, x, y, ShellStyle(renames_only=find_anchor(
                scan.text[x:y].split()[:1]) is None))
            scan.env_renames(x, y)
    for lang, a, b in blocks:
        if lang in ("yaml", "yml"):
            scan_yaml(scan, a, b)
        elif lang in ("dockerfile", "docker", "containerfile"):
            scan_dockerfile(scan, a, b)
        elif lang in ("make", "makefile", "mk"):
            scan_shell(scan, a, b, ShellStyle(make=True))
        elif lang in _SOURCE_LANGS:  # the argument lists that name their tool
            scan_source(scan, _SOURCE_LANGS[lang], a, b)
        elif lang in _SHELL_LANGS:  # a Windows block continues lines its own way
            scan.bat, scan.ps = lang in _BAT_LANGS, lang in _PS_LANGS
            scan_shell(scan, a, b, ShellStyle())
            scan.bat = scan.ps = False
        else:
            continue
        regions.append((a, b))
    return regions

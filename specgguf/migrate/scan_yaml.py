"""The YAML scanner (compose, Kubernetes, CI): `command:` / `entrypoint:` / `args:` as strings
or lists, and `run:` / `script:` shell, in every scalar and list form YAML has.

Not a YAML parser: it reads keys and their values line by line, which keeps every byte it
does not edit as it was. An argv-only key (`args:`, a compose `command:` list) runs the tool
its sibling `command:`/`entrypoint:` names, or the tool its `image:` runs by default.
"""

from __future__ import annotations

import re

from specgguf.migrate import guard
from specgguf.migrate.argv import find_anchor, image_tool
from specgguf.migrate.edit import BlockListStyle, BlockMapListStyle, FlowListStyle, ShellStyle
from specgguf.migrate.lines import Line, split_lines
from specgguf.migrate.list_lexer import compose_dynamic, lex_list, quoted_string
from specgguf.migrate.scan import Scan
from specgguf.migrate.scan_shell import scan_shell, scan_words
from specgguf.migrate.word import Word, link_words

_YAML_KEY = re.compile(r"(?P<lead>[ \t]*(?:-[ \t]+)*)(?P<key>[A-Za-z_][\w.-]*)[ \t]*:"
                       r"(?:[ \t]+|$)(?P<rest>[^\n]*)")
_BLOCK_HEADER = re.compile(r"[|>][-+0-9]*[ \t]*(?:#[^\n]*)?\r?")
_FLAG_ITEM = re.compile(r"(--?[A-Za-z][\w-]*):[ \t]+(\S.*)")
_ARGV_KEYS = {"command", "entrypoint", "args", "cmd"}
#: a block item that is a mapping (`- cmd: ...`): read under its own key
_MAPPING_ITEM = re.compile(r"[A-Za-z_][\w.-]*:(?:\s|$)")
_SCRIPT_KEYS = {"run", "script", "before_script", "after_script"}


def _indent(s: str) -> int:
    return len(s) - len(s.lstrip(" \t"))


def _is_blank(s: str) -> bool:
    return not s.strip() or s.lstrip().startswith("#")


def scan_yaml(scan: Scan, start: int = 0, end: int | None = None) -> None:
    """command:/entrypoint:/args: (strings and lists) and run:/script: shell in YAML files."""
    end = len(scan.text) if end is None else end
    lines = split_lines(scan.text, start, end)
    for n, line in enumerate(lines):
        m = _YAML_KEY.fullmatch(line.text(scan.text))
        if not m:
            continue
        col = len(m.group("lead"))
        value_at = line.start + m.start("rest")
        key = m.group("key")
        if key not in _ARGV_KEYS | _SCRIPT_KEYS and not _holds_options(scan.text, lines, n, col):
            continue  # any other key is read only when its value holds options we know
        implicit = _yaml_implicit_tool(scan.text, lines, n, col) if key in _ARGV_KEYS else None
        _scan_yaml_value(scan, lines, n, col, value_at, key, implicit)


def _holds_options(text: str, lines: list[Line], n: int, col: int) -> bool:
    """Whether a key's value (its line and the lines indented under it) names a removed
    option, or a tool: a schema of its own (`start_command:`, `flags:`) holds commands too."""
    end = lines[n].end
    for line in lines[n + 1:]:
        s = line.text(text)
        if s.strip() and not s.lstrip().startswith("#") and _indent(s) <= col \
                and not s.lstrip().startswith("- "):
            break
        end = line.end
    value = text[lines[n].start:end]
    return bool(guard.has_removed_name(value))


def _scan_yaml_value(scan: Scan, lines: list[Line], n: int, col: int, at: int, key: str,
                     implicit: str | None) -> None:
    text = scan.text
    script = key in _SCRIPT_KEYS
    rest = text[at:lines[n].end]
    head = rest.lstrip()[:1]
    if head in ("", "#"):
        items, bodies = _block_items(text, lines, n + 1, col)
        for a, b, folded in bodies:
            scan_shell(scan, a, b, ShellStyle(), newline_is_space=folded)
        if script or (key not in _ARGV_KEYS and _command_lines(items)):
            for item, style in items:  # (Taskfile's `cmds:`, any list of command lines)
                if not (style is not None and not item.quote and _MAPPING_ITEM.match(item.value)):
                    _scan_yaml_scalar_words(scan, item, style)  # (`- cmd: ...`: its own key)
        elif items:
            mapping = any(style is None for _, style in items)
            scan_words(scan, [w for w, _ in items],
                       BlockMapListStyle() if mapping else BlockListStyle(), implicit)
    elif head in "|>":
        body = _following(text, lines, n + 1, col)
        if body:
            scan_shell(scan, body[0].start, body[-1].end, ShellStyle(),
                        newline_is_space=not script or (head == ">" and _folds(text, body)),
                        implicit=implicit)
    elif head == "[":
        parsed = lex_list(text, at, len(text), yaml=True)
        if parsed is not None:
            if script:
                for w in parsed[0]:
                    _scan_yaml_scalar_words(scan, w, FlowListStyle(yaml=True).nested(w.quote))
            else:
                scan_words(scan, parsed[0], FlowListStyle(yaml=True), implicit)
    elif head in "\"'":
        parsed_q = quoted_string(text, at + len(rest) - len(rest.lstrip()), len(text),
                                  yaml_single=head == "'")
        if parsed_q is not None:
            word = parsed_q[0]
            scan_shell(scan, word.start + 1, word.end - 1,
                        ShellStyle("yaml-sq" if head == "'" else "yaml-dq"),
                        newline_is_space=not script, implicit=implicit)
    else:
        stop = _plain_end(text, at, lines[n].end)
        cont = _plain_continuation(text, lines, n + 1, col)
        scan_shell(scan, at, cont[-1].end if cont else stop, ShellStyle("yaml-plain"),
                    newline_is_space=True, implicit=implicit)


def _folds(text: str, body: list[Line]) -> bool:
    """Whether a folded scalar (`run: >`) is one line to the shell: YAML joins its lines with
    spaces unless a line is blank or more indented (those keep their newlines)."""
    indents = {_indent(line.text(text)) for line in body}
    return len(indents) == 1 and all(line.text(text).strip() for line in body)


def _command_lines(items: list[tuple[Word, ShellStyle | None]]) -> bool:
    """Whether a list's items are whole command lines (`- ./llama-server -m t.gguf ...`), not
    one argument each: some item's first word runs a tool and more words follow it."""
    return any(style is not None and len(word.value.split()) > 1
               and find_anchor(word.value.split()[:1]) is not None for word, style in items)


def _scan_yaml_scalar_words(scan: Scan, word: Word, style: ShellStyle | None) -> None:
    """One script line given as a YAML scalar: a shell command in its own right."""
    if style is None:
        return
    a, b = (word.start + 1, word.end - 1) if word.quote else (word.start, word.end)
    scan_shell(scan, a, b, style)


def _plain_end(text: str, at: int, eol: int) -> int:
    m = re.compile(r"[ \t]+#").search(text, at, eol)
    stop = m.start() if m else eol
    while stop > at and text[stop - 1] in " \t\r":
        stop -= 1
    return stop


def _plain_continuation(text: str, lines: list[Line], n: int, col: int) -> list[Line]:
    out: list[Line] = []
    for line in lines[n:]:
        s = line.text(text)
        if not s.strip() or _indent(s) <= col or s.lstrip().startswith(("#", "- ")) \
                or re.search(r":(\s|$)", s):
            break
        out.append(line)
    return out


def _following(text: str, lines: list[Line], n: int, col: int) -> list[Line]:
    """The lines of a block scalar: indented deeper than its key (blank lines inside)."""
    body: list[Line] = []
    pending: list[Line] = []
    for line in lines[n:]:
        s = line.text(text)
        if not s.strip():
            pending.append(line)
            continue
        if _indent(s) <= col:
            break
        body += [*pending, line]
        pending = []
    return body


def _block_items(text: str, lines: list[Line], n: int, col: int
                 ) -> tuple[list[tuple[Word, ShellStyle | None]], list[tuple[int, int, bool]]]:
    """The `- item` lines under a key: each item as a Word, with the style of its scalar; and
    (start, end, folded) of each item that is a block scalar (`- |` then a script)."""
    items: list[tuple[Word, ShellStyle | None]] = []
    bodies: list[tuple[int, int, bool]] = []
    item_col = None
    k = n
    while k < len(lines):
        line = lines[k]
        k += 1
        s = line.text(text)
        if _is_blank(s):
            continue
        m = re.compile(r"([ \t]*)-[ \t]+").match(s)
        if not m or len(m.group(1)) < col or (item_col is not None
                                              and len(m.group(1)) != item_col):
            break
        item_col = len(m.group(1))
        at = line.start + m.end()
        if _BLOCK_HEADER.fullmatch(text, at, line.end):  # `- |`: a script, its lines below
            body = _following(text, lines, k, item_col)
            if body:
                bodies.append((body[0].start, body[-1].end, text[at] == ">"))
                k += len(body)  # the body starts right below, blank lines included
            continue
        word = _block_scalar_word(text, at, line.end)
        if word is None:
            break
        pair = _FLAG_ITEM.fullmatch(word.value) if not word.quote else None
        if pair:  # `- --draft-max: 16`: the flag and its value, as two words
            for j in (1, 2):
                a, b = word.start + pair.start(j), word.start + pair.end(j)
                items.append((Word(text[a:b], a, b, tuple(range(a, b)),
                                   compose_dynamic(text[a:b])), None))
            continue
        word.dynamic = compose_dynamic(word.value)
        items.append((word, BlockListStyle().nested(word.quote)))
    link_words([w for w, _ in items])
    return items, bodies


def _block_scalar_word(text: str, at: int, eol: int) -> Word | None:
    if at < eol and text[at] in "\"'":
        parsed = quoted_string(text, at, eol, yaml_single=text[at] == "'")
        return parsed[0] if parsed else None
    stop = _plain_end(text, at, eol)
    return Word(text[at:stop], at, stop, tuple(range(at, stop)))


def _yaml_implicit_tool(text: str, lines: list[Line], n: int, col: int) -> str | None:
    """The tool an argv-only key runs: a sibling command:/entrypoint: naming it, or the image:."""
    for key, value in _siblings(text, lines, n, col):
        if key in ("command", "entrypoint") and value:
            anchor = find_anchor(re.findall(r"[\w./:\\-]+", value))
            if anchor:
                return anchor[1]
        if key == "image":
            tool = image_tool(value.strip().strip("\"'"))
            if tool:
                return tool
    return None


def _siblings(text: str, lines: list[Line], n: int, col: int) -> list[tuple[str, str]]:
    """Keys at the same column in the same mapping as line n, with their value text."""
    out: list[tuple[str, str]] = []
    for step in (-1, 1):
        k = n + step
        while 0 <= k < len(lines):
            s = lines[k].text(text)
            if _is_blank(s):
                k += step
                continue
            m = _YAML_KEY.fullmatch(s)
            if m and len(m.group("lead")) == col and k != n:
                value = m.group("rest")
                if not value.strip():
                    value = " ".join(ln.text(text) for ln in lines[k + 1:k + 12])
                out.append((m.group("key"), value))
            if _indent(s) < col and (step == 1 or not (m and len(m.group("lead")) == col)):
                break
            if step == -1 and m and len(m.group("lead")) == col and "-" in m.group("lead"):
                break  # the first key of this list item
            k += step
    return out

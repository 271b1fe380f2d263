"""Behaviour-preserving migration of LLAMA_ARG_* variables (compose, .env, k8s, systemd, ...).

Renaming LLAMA_ARG_DRAFT_MAX to LLAMA_ARG_SPEC_DRAFT_N_MAX is not enough: current llama.cpp
has no speculative type by default, so an env-only config that had a draft model would keep
loading it and never draft. Where the old config relied on that, the same block gets
LLAMA_ARG_SPEC_TYPE=draft-simple and the old defaults it relied on (n_max 16, p_min 0.75),
written in the block's own syntax by copying the line of a variable it already sets.

Where that cannot be decided from the file (no draft model in it, a draft path that is not
here to read, a drafter kind llama.cpp reads from the GGUF, a line shape we cannot copy), the
variables of that block are left as they are and reported: a half-migrated block would pass
`--check` and lose its drafting in silence.

Pure text work; `classify` (the drafter reader) is passed in.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from specgguf.migrate import removed_flags as lg

DRAFT_ENVS = ("LLAMA_ARG_MODEL_DRAFT", "LLAMA_ARG_SPEC_DRAFT_MODEL", "LLAMA_ARG_HF_REPO_DRAFT",
              "LLAMA_ARG_SPEC_DRAFT_HF")
#: old variables whose presence means "this block was written for the old draft defaults"
TRIGGERS = ("LLAMA_ARG_DRAFT_MAX", "LLAMA_ARG_DRAFT_MIN", "LLAMA_ARG_DRAFT_P_MIN",
            "LLAMA_ARG_MODEL_DRAFT")
_NEEDS_TYPE = ("LLAMA_ARG_DRAFT_MAX", "LLAMA_ARG_DRAFT_MIN")  # ngram-mod or draft: ambiguous

# what may stand before NAME on a line we copy, and what may follow its value
_PREFIX = re.compile(r"[ \t]*(?:-[ \t]+|export[ \t]+|ENV[ \t]+|Environment=|"
                     r"set[ \t]+(?:(?:-[A-Za-z]*x[A-Za-z]*|--export)[ \t]+)?|"
                     r"\$env:|-e[ \t]+|--env[ \t]+|env[ \t]+)?[\"']?", re.I)
_AFTER = re.compile(r"(?P<sep>[ \t]*[=:][ \t]*)(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'#,\]]*)"
                    r"(?P<tail>[\"']?[ \t]*(?:\\|\^|`)?[ \t]*)(?P<comment>#.*)?$")
#: forms that separate a name from its value by blanks: a Dockerfile's legacy `ENV NAME value`,
#: fish's `set -x NAME value` (`-gx`, `-Ux`, `--export`)
_SPACED_PREFIX = re.compile(r"[ \t]*(?:ENV|set[ \t]+(?:-[A-Za-z]*x[A-Za-z]*|--export))[ \t]+", re.I)
_AFTER_SPACED = re.compile(r"(?P<sep>[ \t]+)(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'#]+)"
                           r"(?P<tail>[ \t]*\\?[ \t]*)(?P<comment>#.*)?$")
#: what continues a command on the next line (sh, Dockerfile; Windows cmd; PowerShell)
_CONTINUATIONS = ("\\", "^", "`")
#: the start of one assignment among others on a line (`-e "NAME=`, `--set env.NAME=`, `NAME=`
#: in a flow list or after `export A=1`): an option word, an opening quote, a dotted path
_ITEM = re.compile(r"(?P<open>[\"']?)(?P<path>(?:[A-Za-z_][\w-]*\.)*)")
_ITEM_OPTIONS = ("-e", "--env", "--set", "--set-string")
_K8S_NAME = re.compile(r"(?P<lead>[ \t]*-[ \t]+)name:[ \t]*[\"']?$")
#: systemd's `Environment="A=1" "B=2"`: several quoted assignments on one line
_SYSTEMD_MANY = re.compile(r"[ \t]*Environment=(?:\"[^\"\n]*\"[ \t]+)+\"")
_SYSTEMD_LINE = re.compile(r"[ \t]*Environment=(?:\"[^\"\n]*\"[ \t]*)+")


#: (draft value, its offset, why it cannot be read or None) -> (kind, note on what was assumed)
Classify = Callable[[str, int, str | None], tuple[str, str]]


@dataclass
class EnvEdit:
    start: int
    end: int
    text: str

    @property
    def shown(self) -> str:
        """The assignments added, for the report: one per line, without the marks that
        continue a command onto the next line or separate a flow list's items."""
        lines = (x.strip(" \t,").removesuffix("\\").removesuffix("^").removesuffix("`").strip()
                 for x in self.text.splitlines())
        return "; ".join(x for x in lines if x)


@dataclass
class EnvResult:
    """Per variable occurrence: (offset, old name, new name or None, notes, unsafe)."""

    renames: list[tuple[int, int, str]]  # start, end, new name
    inserts: list[EnvEdit]
    notes: list[tuple[int, str]]  # offset, note
    unsafe: list[tuple[int, str]]  # offset, reason


def _line_bounds(text: str, at: int) -> tuple[int, int]:
    a = text.rfind("\n", 0, at) + 1
    b = text.find("\n", at)
    b = len(text) if b < 0 else b
    if b > a and text[b - 1] == "\r":
        b -= 1
    return a, b


def _indent(text: str, at: int) -> int:
    a, b = _line_bounds(text, at)
    line = text[a:b]
    return len(line) - len(line.lstrip(" \t-"))


def _assignment(text: str, start: int, end: int) -> re.Match[str] | None:
    """NAME's separator, value, tail and comment, for NAME at text[start:end]."""
    a, b = _line_bounds(text, end)
    m = _AFTER.match(text, end, b)
    if m is None and _SPACED_PREFIX.fullmatch(text, a, start):
        m = _AFTER_SPACED.match(text, end, b)
    return m


def _value_after(text: str, start: int, end: int) -> str | None:
    a, b = _line_bounds(text, end)
    m = _assignment(text, start, end)
    if m and m.group("value"):
        return m.group("value").strip("\"'")
    # k8s: `- name: X` then `value: ...` on the next line
    nxt = b + (2 if text.startswith("\r\n", b) else 1)
    a2, b2 = _line_bounds(text, min(nxt, len(text)))
    m2 = re.match(r"[ \t]*value:[ \t]*(.*)$", text[a2:b2])
    return m2.group(1).strip().strip("\"'") if m2 else None


def _new_lines(text: str, start: int, end: int, entries: list[tuple[str, str]]
               ) -> EnvEdit | None:
    """Lines setting `entries` in the syntax of the line holding text[start:end], or None."""
    a, b = _line_bounds(text, start)
    newline = "\r\n" if text.startswith("\r\n", b) else "\n"
    prefix = text[a:start]
    if _K8S_NAME.fullmatch(prefix):
        nxt = b + len(newline)
        a2, b2 = _line_bounds(text, min(nxt, len(text)))
        m2 = re.match(r"([ \t]*value:[ \t]*)([\"']?)([^\"'\n]*)([\"']?)([ \t]*)$", text[a2:b2])
        if not m2:
            return None
        name_tail = text[end:b]
        out = "".join(f"{newline}{prefix}{name}{name_tail}{newline}{m2.group(1)}{m2.group(2)}"
                      f"{value}{m2.group(4)}" for name, value in entries)
        return EnvEdit(b2, b2, out)
    if _SYSTEMD_MANY.fullmatch(prefix) and _SYSTEMD_LINE.fullmatch(text, a, b):
        return EnvEdit(b, b, "".join(f' "{name}={value}"' for name, value in entries))
    if not _PREFIX.fullmatch(prefix):
        return None
    m = _assignment(text, start, end)
    if m is None:
        return None
    quote = m.group("value")[:1] if m.group("value")[:1] in "\"'" else ""
    tail = m.group("tail").rstrip() if m.group("comment") else m.group("tail")
    lines = [f"{prefix}{name}{m.group('sep')}{quote}{value}{quote}{tail}"
             for name, value in entries]
    before = text[:a].rstrip("\r\n").rstrip(" \t")
    mark = next((c for c in _CONTINUATIONS if before.endswith(c)), None)
    if mark is not None and not tail.rstrip().endswith(_CONTINUATIONS):
        # the last line of a continued command (`ENV A=1 \` then `    B=2`): the new lines
        # continue it too, or they would stand alone as lines of their own
        if m.group("comment"):
            return None
        return EnvEdit(b, b, "".join(f" {mark}{newline}{line}" for line in lines))
    return EnvEdit(b, b, "".join(newline + line for line in lines))


def _inline(text: str, start: int, end: int, entries: list[tuple[str, str]]) -> EnvEdit | None:
    """The new assignments right after NAME's on its own line, in the same form, where NAME
    is one of several on the line (`ENV A=1 NAME=2`, `export A=1 NAME=2`, `docker run -e
    "NAME=2"`, `helm --set env.NAME=2`, a flow list `[A=1, NAME=2]`); None for another shape."""
    a, b = _line_bounds(text, start)
    word = max(text.rfind(c, a, start) for c in " \t[,{") + 1
    item = _ITEM.fullmatch(text, max(word, a), start)
    if item is None:
        return None
    open_ = item.group("open")
    words = text[a:max(word, a)].split()
    option = words[-1] if words and words[-1] in _ITEM_OPTIONS else ""
    if open_:
        m = re.compile(rf"=(?P<value>[^{open_}\n]*){open_}").match(text, end, b)
    else:
        m = re.compile(r"=(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"',\]}#]*)").match(text, end, b)
    if m is None:
        return None
    value_quote = "" if open_ else m.group("value")[:1] if m.group("value")[:1] in "\"'" else ""
    after = m.end()
    sep = ", " if text[after:after + 1] in (",", "]", "}") else " "
    lead = f"{option} " if option else ""
    path = item.group("path")
    out = "".join(f"{sep}{lead}{open_}{path}{name}={value_quote}{value}{value_quote}{open_}"
                  for name, value in entries)
    return EnvEdit(after, after, out)


def migrate_env(text: str, spans: list[tuple[int, int, str]], *, spec_type_set: bool,
                flags_in_file: set[str], has_draft_flag: bool,
                classify: Classify) -> EnvResult:
    """Plan the edits for the old variables at `spans` ((start, end, name), in text order)."""
    res = EnvResult([], [], [], [])
    for group in _groups(text, spans):
        _one_block(text, group, res, spec_type_set=spec_type_set,
                   flags_in_file=flags_in_file, has_draft_flag=has_draft_flag,
                   classify=classify)
    return res


def _groups(text: str, spans: list[tuple[int, int, str]]) -> list[list[tuple[int, int, str]]]:
    """Occurrences in one block (one service's environment, one .env file) go together."""
    groups: list[list[tuple[int, int, str]]] = []
    for span in spans:
        if groups:
            prev = groups[-1][-1]
            col = _indent(text, span[0])
            between = text[prev[1]:span[0]].split("\n")[1:-1]
            left = any(s.strip() and not s.lstrip().startswith("#")
                       and len(s) - len(s.lstrip(" \t-")) < col for s in between)
            if not left:
                groups[-1].append(span)
                continue
        groups.append([span])
    return groups


def _block_names(text: str, group: list[tuple[int, int, str]]) -> dict[str, str | None]:
    """Every LLAMA_ARG_* set in the block around `group`, with its value where readable."""
    first, last = group[0][0], group[-1][1]
    col = _indent(text, first)
    a = text.rfind("\n", 0, first) + 1
    b = text.find("\n", last)
    lines_before = text[:a].split("\n")[:-1]
    lines_after = text[b + 1:].split("\n") if b >= 0 else []
    block = [text[a:len(text) if b < 0 else b]]
    for s in reversed(lines_before):
        if s.strip() and len(s) - len(s.lstrip(" \t-")) < col:
            break
        block.insert(0, s)
    for s in lines_after:
        if s.strip() and len(s) - len(s.lstrip(" \t-")) < col:
            break
        block.append(s)
    body = "\n".join(block)
    names: dict[str, str | None] = {}
    for m in re.finditer(r"(?<![A-Za-z0-9_])(LLAMA_ARG_[A-Z0-9_]+)", body):
        names.setdefault(m.group(1), _value_after(body, m.start(), m.end()))
    return names


def _one_block(text: str, group: list[tuple[int, int, str]], res: EnvResult, *,
               spec_type_set: bool, flags_in_file: set[str], has_draft_flag: bool,
               classify: Classify) -> None:
    names = _block_names(text, group)
    triggered = [g for g in group if g[2] in TRIGGERS]
    renames = [(s, e, lg.RENAMED_ENV[n]) for s, e, n in group if n in lg.RENAMED_ENV]
    if not triggered or spec_type_set or lg.SPEC_TYPE_ENV in names:
        res.renames += renames
        return
    draft_env = next((n for n in DRAFT_ENVS if n in names), None)
    at = triggered[0][0]
    if draft_env is None and not has_draft_flag:
        ambiguous = [g for g in triggered if g[2] in _NEEDS_TYPE]
        if ambiguous:
            res.unsafe.append((ambiguous[0][0], (
                f"{ambiguous[0][2]}: no draft model and no speculative type in this file, so it "
                "cannot be told whether it bounded a draft model (then set "
                f"{lg.SPEC_TYPE_ENV}=draft-simple here) or ngram-mod; set {lg.SPEC_TYPE_ENV} "
                "here, then migrate again")))
            return
        res.renames += renames
        return
    if draft_env is None:
        res.unsafe.append((at, (
            "the draft model comes from a command's -md, so it cannot be told whether this "
            f"block needs {lg.SPEC_TYPE_ENV}=draft-simple: set it here if the draft is a plain "
            "model (an MTP, EAGLE-3 or DFlash drafter needs none), then migrate again")))
        return
    value = names[draft_env] or ""
    hf = draft_env.endswith(("HF_REPO_DRAFT", "DRAFT_HF"))
    unread = f"{value or draft_env} is a Hugging Face repository" if hf \
        else f"{value} is decided when the command runs" if "$" in value else None
    kind, assumed = classify(value, at, unread)
    shown = f"{draft_env}={value}"
    if assumed:
        res.notes.append((at, assumed))
    res.renames += renames
    if kind != "plain":
        res.notes.append((at, f"{shown} is a {kind} drafter: llama.cpp takes its type from the "
                              "file, so no speculative type is added"))
        return
    entries = [(lg.SPEC_TYPE_ENV, "draft-simple")]
    added = [f"{lg.SPEC_TYPE_ENV}=draft-simple (llama.cpp uses the draft model only with it)"]
    for d in lg.OLD_DEFAULTS:
        if set(d.envs) & set(names) or {d.flag, *d.aliases} & flags_in_file:
            continue
        new_env = d.envs[-1]
        entries.append((new_env, d.old))
        added.append(f"{new_env}={d.old} (the old {d.what} default; the new one is {d.new})")
    # in the syntax of the block's last line that can be copied (the last one may be the second
    # assignment of a line, which no new line can start like)
    edit = next((e for e in (_new_lines(text, s, t, entries) for s, t, _ in reversed(group))
                 if e is not None), None)
    if edit is None and _line_bounds(text, group[0][0]) == _line_bounds(text, group[-1][0]):
        # several assignments on the one line the block is: the new ones join them there
        edit = _inline(text, group[-1][0], group[-1][1], entries)
    if edit is None:
        res.renames = [r for r in res.renames if r not in renames]
        res.unsafe.append((at, (
            "add " + ", ".join(f"{n}={v}" for n, v in entries) + " next to "
            f"{group[-1][2]} by hand (this line's form cannot be copied safely), then migrate "
            "again")))
        return
    res.inserts.append(edit)
    res.notes.append((at, "added " + "; ".join(added)))

"""A JSON schema's `pattern` rewritten for llama-cpp-python's regex -> GBNF translation.

That translation copies what it does not know into GBNF as it is: `\\d`, `\\w`, `\\s`, `\\.`,
`\\/` or `\\-` became GBNF escapes llama.cpp does not have ("unknown escape at \\d"), and a
character that JSON must escape inside a string (a quote, a backslash, a tab) came out raw,
so the answer did not parse as JSON. Here the pattern is read token by token and written
again in the small regex dialect the translation handles correctly, with every character as
its JSON encoding: a literal `"` as `\\"`, a tab as `\\t`, a class [...] without the
characters JSON escapes plus their escaped forms as alternatives, `\\d \\w \\s \\D \\W \\S` as
classes. A pattern is matched as a whole (as if between ^ and $: JSON Schema's pattern may
match anywhere, so this writes a subset of what it allows). What cannot be enforced is
refused (PatternRefused): lookarounds, backreferences, word boundaries, anchors inside the
pattern, Unicode properties.

Pure: text in, text out.
"""

from __future__ import annotations

import re

Ranges = list[tuple[int, int]]


class PatternRefused(ValueError):
    """A regex construct the grammar cannot enforce; the message names it."""


_SHORTHANDS: dict[str, Ranges] = {
    "d": [(0x30, 0x39)],
    "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    "s": [(0x09, 0x0D), (0x20, 0x20)],
}
_CHAR_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "v": "\v", "0": "\0"}
#: what JSON writes with a backslash: the quote, the backslash, the control characters
_UNSAFE: Ranges = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]
#: the escapes of those kept as alternatives where a class or negated class admits them
_JSON_SHORT = {'"': '"', "\\": "\\", "\b": "b", "\t": "t", "\n": "n", "\f": "f", "\r": "r"}
#: characters the translation reads as regex syntax unless escaped (it unescapes these)
_SYNTAX = set("[]()|{}*+?")
_QUANT = re.compile(r"\{(\d+)(,\d*)?\}")


def _encoded(ch: str) -> str:
    """The regex (for the translation) of one character's JSON encoding inside a string."""
    if ch in _JSON_SHORT:
        return "(\\\\" + ("\\\\" if ch == "\\" else _JSON_SHORT[ch]) + ")"
    if ord(ch) < 0x20:
        return f"(\\\\u{ord(ch):04x})"
    if ch == ".":
        return "[.]"
    if ch in _SYNTAX:
        return "\\" + ch
    return ch


def _class_char(cp: int) -> str:
    c = chr(cp)
    if 0x20 <= cp <= 0x7E and c not in "]\\^-[":
        return c
    if cp <= 0xFF:
        return f"\\x{cp:02X}"
    return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"


def _normalize(ranges: Ranges) -> Ranges:
    out: Ranges = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _minus(ranges: Ranges, cut: Ranges) -> Ranges:
    out = []
    for lo, hi in _normalize(ranges):
        for clo, chi in _normalize(cut):
            if chi < lo or clo > hi:
                continue
            if clo > lo:
                out.append((lo, clo - 1))
            lo = chi + 1
            if lo > hi:
                break
        if lo <= hi:
            out.append((lo, hi))
    return out


def _contains(ranges: Ranges, cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in ranges)


def _class(ranges: Ranges, negated: bool) -> str:
    """A character class as the regex of its JSON encodings: a GBNF-ready [...] of the
    characters written as they are, and the escaped ones as alternatives."""
    ranges = _normalize(ranges)
    specials = [c for c in _JSON_SHORT if _contains(ranges, ord(c)) != negated]
    if negated:
        body = "[^" + "".join(_render(_normalize(ranges + _UNSAFE))) + "]"
        alts = [body]
    else:
        safe = _minus(ranges, _UNSAFE)
        alts = ["[" + "".join(_render(safe)) + "]"] if safe else []
        # the other control characters, as \u00XX
        for lo, hi in ranges:
            for cp in range(lo, min(hi, 0x1F) + 1):
                if chr(cp) not in _JSON_SHORT:
                    specials.append(chr(cp))
    alts += [_encoded(c) for c in specials]
    if not alts:
        raise PatternRefused("a character class matches nothing a JSON string can hold")
    return alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")"


def _render(ranges: Ranges) -> list[str]:
    return [_class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}"
            for lo, hi in ranges]  # fmt: skip


def _escape(p: str, i: int, in_class: bool) -> tuple[str | Ranges, int]:
    """The escape at p[i] == "\\": (a character, or a shorthand's ranges; the index after)."""
    if i + 1 >= len(p):
        raise PatternRefused("it ends with a lone backslash")
    e = p[i + 1]
    if e in _SHORTHANDS:
        return _SHORTHANDS[e], i + 2
    if e in "DWS":
        if in_class:
            raise PatternRefused(f"'\\{e}' inside [...] is not supported")
        return [(-1, -1), *_SHORTHANDS[e.lower()]], i + 2  # (-1, -1) marks "negated"
    if e in _CHAR_ESCAPES:
        return _CHAR_ESCAPES[e], i + 2
    if e == "b" and in_class:
        return "\b", i + 2
    if e in "xu":
        cp, i = _hex(p, i, e)
        if 0xD800 <= cp <= 0xDBFF and p.startswith("\\u", i):  # a UTF-16 pair: one character
            low, after = _hex(p, i, "u")
            if 0xDC00 <= low <= 0xDFFF:
                cp, i = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00), after
        if 0xD800 <= cp <= 0xDFFF:
            raise PatternRefused(f"'\\u{cp:04X}' is half of a UTF-16 pair, not a character")
        return chr(cp), i
    if e.isalnum():
        raise PatternRefused(f"'\\{e}' is not supported")
    return e, i + 2


def _hex(p: str, i: int, e: str) -> tuple[int, int]:
    """The code point of the \\x (2 digits) or \\u (4) escape at p[i]; the index after."""
    n = 2 if e == "x" else 4
    digits = p[i + 2 : i + 2 + n]
    if len(digits) != n or not all(c in "0123456789abcdefABCDEF" for c in digits):
        raise PatternRefused(f"'\\{e}' needs {n} hexadecimal digits")
    return int(digits, 16), i + 2 + n


def _read_class(p: str, i: int) -> tuple[str, int]:
    """The class starting at p[i] == "[": its regex, and the index after its "]"."""
    i += 1
    negated = i < len(p) and p[i] == "^"
    i += negated
    ranges: Ranges = []
    first = True
    while True:
        if i >= len(p):
            raise PatternRefused("a '[' is not closed")
        c = p[i]
        if c == "]" and not first:
            i += 1
            break
        first = False
        if c == "\\":
            item, i = _escape(p, i, in_class=True)
            if isinstance(item, list):
                ranges += item
                continue
            lo = item
        elif c == "[" and p.startswith("[:", i):
            raise PatternRefused("POSIX classes [:...:] are not supported")
        else:
            lo, i = c, i + 1
        if i + 1 < len(p) and p[i] == "-" and p[i + 1] != "]":
            if p[i + 1] == "\\":
                hi, i = _escape(p, i + 1, in_class=True)
                if isinstance(hi, list):
                    raise PatternRefused("a range in [...] ends with a class")
            else:
                hi, i = p[i + 1], i + 2
            if ord(hi) < ord(lo):
                raise PatternRefused(f"the range {lo}-{hi} in [...] is backwards")
            ranges.append((ord(lo), ord(hi)))
        else:
            ranges.append((ord(lo), ord(lo)))
    return _class(ranges, negated), i


#: the characters the translation keeps as they are, and whether a quantifier may follow each
_KEPT = {".": True, "|": False, ")": True}


def for_converter(pattern: str) -> str:
    """`pattern` (a JSON schema's regex) as the translation's dialect, anchored ^...$."""
    p = pattern
    if p.startswith("^"):
        p = p[1:]
    if p.endswith("$"):
        backslashes = len(p[:-1]) - len(p[:-1].rstrip("\\"))
        if backslashes % 2 == 0:  # not an escaped "\$"
            p = p[:-1]
    out: list[str] = []
    i, depth = 0, 0
    quantifiable = False
    while i < len(p):
        c = p[i]
        if c == "\\":
            item, i = _escape(p, i, in_class=False)
            if isinstance(item, list):
                negated = item[0] == (-1, -1)
                out.append(_class(item[1:] if negated else item, negated))
            else:
                out.append(_encoded(item))
            quantifiable = True
        elif c == "[":
            text, i = _read_class(p, i)
            out.append(text)
            quantifiable = True
        elif c == "(":
            if p.startswith("(?:", i):
                i += 3
            elif (
                p.startswith("(?<", i)
                and not p.startswith(("(?<=", "(?<!"), i)
                or (p.startswith("(?P<", i))
            ):
                end = p.find(">", i)
                if end < 0:
                    raise PatternRefused("a named group's name is not closed")
                i = end + 1
            elif p.startswith("(?", i):
                what = p[i : i + (4 if p.startswith(("(?<=", "(?<!"), i) else 3)]
                raise PatternRefused(
                    f"'{what}' (lookarounds, flags and other (?...) groups) is not supported"
                )
            else:
                i += 1
            out.append("(")
            depth += 1
            quantifiable = False
        elif c in _KEPT:
            if c == ")":
                if depth == 0:
                    raise PatternRefused("a ')' has no '('")
                depth -= 1
            out.append(c)
            i += 1
            quantifiable = _KEPT[c]
        elif c in "*+?" or (c == "{" and _QUANT.match(p, i)):
            if not quantifiable:
                raise PatternRefused(f"the quantifier at {i} follows nothing")
            m = _QUANT.match(p, i) if c == "{" else None
            out.append(m.group(0) if m else c)
            i = m.end() if m else i + 1
            if i < len(p) and p[i] in "?+":  # lazy or possessive: the same strings as a whole
                i += 1
            quantifiable = False
        elif c in "^$":
            raise PatternRefused(f"'{c}' inside the pattern is not supported (only at its ends)")
        else:
            out.append(_encoded(c))
            i += 1
            quantifiable = True
    if depth:
        raise PatternRefused("a '(' is not closed")
    return "^(" + "".join(out) + ")$"

"""Gemma 4: each call `<|tool_call>call:NAME{...}<tool_call|>`, its arguments in Gemma's own
notation rather than JSON: keys bare, strings between `<|"|>` tokens, numbers, true, false,
null, [lists] and {objects} as in JSON,

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

and its thinking in a channel, `<|channel>thought ... <channel|>`, before the answer."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from specgguf.chat.dialects.base import (
    BlockCallStream,
    Dialect,
    PerToolForced,
    ToGbnf,
    Tools,
    named,
    not_containing,
)
from specgguf.chat.tools import gbnf_literal

OPEN, CLOSE, QUOTE = "<|tool_call>", "<tool_call|>", '<|"|>'
THOUGHT = ("<|channel>thought", "<channel|>")
_CALL = re.compile(r"<\|tool_call>call:([A-Za-z0-9_.-]{1,64})(\{.*\})<tool_call\|>", re.DOTALL)
_ATOM = re.compile(r"[^,}\]\s]+")
_MAX_DEPTH = 128  # as deep as a JSON request may nest


class _Bad(ValueError):
    """The text is not Gemma's notation."""


def _ws(s: str, i: int) -> int:
    while i < len(s) and s[i] in " \t\r\n":
        i += 1
    return i


def _items(s: str, i: int, close: str, depth: int, keyed: bool) -> tuple[Any, int]:
    """The members of an object (`keyed`) or the items of a list, s[i] just after its opening."""
    out: Any = {} if keyed else []
    i = _ws(s, i)
    if s.startswith(close, i):
        return out, i + 1
    while True:
        if keyed:
            colon = s.find(":", i)
            key = s[i:colon].strip() if colon >= 0 else ""
            if not key or "}" in key or "," in key:
                raise _Bad(key)
            value, i = _value(s, colon + 1, depth)
            out[key] = value
        else:
            value, i = _value(s, i, depth)
            out.append(value)
        i = _ws(s, i)
        if s.startswith(close, i):
            return out, i + 1
        if not s.startswith(",", i):
            raise _Bad(s[i : i + 1])
        i = _ws(s, i + 1)


def _value(s: str, i: int, depth: int = 0) -> tuple[Any, int]:
    """One value at s[i:] (blanks first allowed) and the index after it."""
    if depth > _MAX_DEPTH:
        raise _Bad("too deep")
    i = _ws(s, i)
    if s.startswith(QUOTE, i):
        end = s.find(QUOTE, i + len(QUOTE))
        if end < 0:
            raise _Bad("an open string")
        return s[i + len(QUOTE) : end], end + len(QUOTE)
    if s.startswith("{", i):
        return _items(s, i + 1, "}", depth + 1, keyed=True)
    if s.startswith("[", i):
        return _items(s, i + 1, "]", depth + 1, keyed=False)
    m = _ATOM.match(s, i)
    if m is None:
        raise _Bad(s[i : i + 1])
    try:
        value = json.loads(m.group(0))
    except ValueError:
        raise _Bad(m.group(0)) from None
    if isinstance(value, (dict, list, str)):
        raise _Bad(m.group(0))
    return value, m.end()


def to_json(text: str) -> dict[str, Any] | None:
    """Gemma's notation of an object -> the object (None when it is not one)."""
    try:
        value, end = _value(text, 0)
    except _Bad:
        return None
    return value if isinstance(value, dict) and not text[end:].strip() else None


def parse(block: str, tools: Tools) -> list[tuple[str, str, str | None]] | None:
    m = _CALL.fullmatch(block)
    if m is None or m.group(1) not in {t["function"]["name"] for t in tools}:
        return None
    args = to_json(m.group(2))
    return None if args is None else [(m.group(1), json.dumps(args, ensure_ascii=False), None)]


class GemmaForced(PerToolForced):
    """Gemma's notation, each key one of its object's properties and each value of the type
    its schema gives (a string's enum as its alternatives; a string, number, integer, boolean,
    null, list of typed items, or object of typed properties); what a schema says beyond
    that (required keys, lengths, bounds, patterns) is not held, nor the keys' order."""

    def args_gbnf(self, params: Mapping[str, Any], prefix: str, to_gbnf: ToGbnf) -> str:
        p = prefix
        rules = [
            f'{p}-obj ::= "{{" {p}-ws ({p}-okv ("," {p}-ws {p}-okv)* {p}-ws)? "}}"',
            f'{p}-okv ::= [^:}}, \\t\\n<]+ ":" {p}-ws {p}-value',
            f'{p}-list ::= "[" {p}-ws ({p}-value ("," {p}-ws {p}-value)* {p}-ws)? "]"',
            f"{p}-value ::= {p}-str | {p}-obj | {p}-list | {p}-num | \"true\" | \"false\" | "
            '"null"',
            f"{p}-str ::= {gbnf_literal(QUOTE)} {not_containing(QUOTE)} {gbnf_literal(QUOTE)}",
            f'{p}-num ::= "-"? [0-9]+ ("." [0-9]+)? ([eE] [-+]? [0-9]+)?',
            f'{p}-int ::= "-"? [0-9]+',
            f"{p}-ws ::= [ \\t\\n]*",
        ]  # fmt: skip
        root = _typed(params, p, f"{p}-root", rules, 0)
        rules.append(f"{p}-root ::= {root if root != f'{p}-value' else f'{p}-obj'}")
        return "\n".join(rules)


_PRIMITIVES = {"string": "str", "number": "num", "integer": "int"}


def _typed(schema: Any, p: str, name: str, rules: list[str], depth: int) -> str:
    """The GBNF expression of a value of `schema` in Gemma's notation (rules it needs are
    added to `rules`, named from `name`)."""
    if not isinstance(schema, Mapping) or depth > 16:
        return f"{p}-value"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        return "(" + " | ".join(gbnf_literal(f"{QUOTE}{v}{QUOTE}") for v in enum) + ")"
    kind = schema.get("type")
    if kind in _PRIMITIVES:
        return f"{p}-{_PRIMITIVES[kind]}"
    if kind == "boolean":
        return '("true" | "false")'
    if kind == "null":
        return '"null"'
    if kind == "array":
        item = _typed(schema.get("items"), p, f"{name}-item", rules, depth + 1)
        return f'"[" {p}-ws ({item} ("," {p}-ws {item})* {p}-ws)? "]"'
    props = schema.get("properties")
    if kind in ("object", None) and isinstance(props, Mapping) and props:
        kvs = []
        for i, (key, sub) in enumerate(sorted(props.items())):
            value = _typed(sub, p, f"{name}-{i}", rules, depth + 1)
            kvs.append(f'{gbnf_literal(str(key) + ":")} {p}-ws {value}')
        rules.append(f"{name}-kv ::= " + " | ".join(f"({kv})" for kv in kvs))
        return f'"{{" {p}-ws ({name}-kv ("," {p}-ws {name}-kv)* {p}-ws)? "}}"'
    return f"{p}-obj" if kind == "object" else f"{p}-value"


DIALECT = Dialect(
    name="gemma4",
    family="Gemma 4",
    markers=(f"'{OPEN}call:'",),
    stream=lambda tools, new_id: BlockCallStream(tools, new_id, start=OPEN, end=CLOSE, parse=parse),
    control_tokens=(OPEN, CLOSE, QUOTE, "<|channel>", "<channel|>"),
    thinking=THOUGHT,
    forced=GemmaForced(before="", after=CLOSE, between="", head=named(OPEN + "call:{name}"),
                       think=THOUGHT),  # fmt: skip
    triggers=(OPEN + "call:",),
    example='<|tool_call>call:f{k:<|"|>v<|"|>}<tool_call|>',
)

"""Forced calls of the families that write a tool's name outside its arguments (GPT-OSS,
DeepSeek, Kimi K2, GLM): the grammar is one alternative per tool, the family's frame around
the grammar of that tool's own parameters, with the thinking the family writes first allowed
before the calls.

The grammar is made in two steps because this package is pure: `schema` gives one JSON schema
that holds each tool's parameters (and, for families that write one value per parameter, each
parameter's schema) under $defs named `specgguf-args-I` (`specgguf-args-I-J`), which the
grammar layer converts into rules of those names; `grammar` then replaces the converted root
with the frames around them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specgguf.chat.reasoning import CLOSE as THINK_END
from specgguf.chat.reasoning import OPEN as THINK
from specgguf.chat.tools import gbnf_literal, rebased_refs

Tools = Sequence[Mapping[str, Any]]

ARGS_RULE = "specgguf-args"


@dataclass(frozen=True)
class Param:
    """One parameter of a tool, as a frame that writes one value per parameter sees it."""

    name: str
    rule: str  # the GBNF rule of its JSON value
    required: bool
    is_string: bool  # its schema wants a string (written as raw text by such families)


@dataclass(frozen=True)
class Frame:
    """What a family's frame is given for one tool."""

    name: str
    args_rule: str  # the GBNF rule of its arguments' JSON object
    params: tuple[Param, ...]


@dataclass(frozen=True)
class Framed:
    """How a family writes forced calls: `call(frame)` is the GBNF of one call; several calls
    are joined by `between` (GBNF; None: one call per answer) and enclosed by `open_all` and
    `close_all` (GBNF). `think` is the GBNF of the thinking allowed before the calls when the
    prompt did not open it, `think_opened` when it did (the thinking's rest and its closing)."""

    call: Callable[[Frame], str]
    between: str | None = None
    open_all: str = ""
    close_all: str = ""
    think: str = ""
    think_opened: str = ""
    #: extra rules the frames use (name ::= body lines)
    rules: str = ""

    def schema(self, tools: Tools, only: str | None = None) -> dict[str, Any]:
        """One schema holding every callable tool's parameters (and each parameter's schema)
        under the $defs the frames refer to."""
        defs: dict[str, Any] = {}
        refs = []
        for i, fn in _callable(tools, only):
            base = f"{ARGS_RULE}-{i}"
            params = rebased_refs(_parameters(fn), f"#/$defs/{base}")
            defs[base] = params
            refs.append({"$ref": f"#/$defs/{base}"})
            for j, (_, sub) in enumerate(_properties(fn)):
                defs[f"{base}-{j}"] = rebased_refs(sub, f"#/$defs/{base}")
                refs.append({"$ref": f"#/$defs/{base}-{j}"})  # a rule is made for a used one
        return {"anyOf": refs, "$defs": defs}

    def grammar(
        self, gbnf: str, *, parallel: bool, tools: Tools, only: str | None = None,
        opened: bool = False,
    ) -> str:  # fmt: skip
        """The forced answer's GBNF around the rules converted from `schema`."""
        body = "\n".join(line for line in gbnf.splitlines() if not line.startswith("root ::="))
        alts = []
        for i, fn in _callable(tools, only):
            base = f"{ARGS_RULE}-{i}"
            required = set(_parameters(fn).get("required") or ())
            params = tuple(
                Param(name, f"{base}-{j}", name in required, wants_string(sub))
                for j, (name, sub) in enumerate(_properties(fn))
            )
            alts.append(f"({self.call(Frame(fn['name'], base, params))})")
        call = "specgguf-call"
        calls = call
        if parallel and self.between is not None:
            calls = f"{call} ({self.between} {call})*".replace("( ", "(")
        think = self.think_opened if opened else self.think
        root = " ".join(p for p in (think, self.open_all, calls, self.close_all) if p)
        rules = f"\n{self.rules.strip()}" if self.rules.strip() else ""
        return f"root ::= {root}\n{call} ::= {' | '.join(alts)}{rules}\n{body}"


def think_first(opening: str = THINK, closing: str = THINK_END) -> dict[str, str]:
    """Framed's `think` and `think_opened` for a family that thinks between two tags: the
    thinking's text holds no '<', so that no marker can start inside it; blanks may come
    before the opening (GLM starts its answer with a line break) and after the closing."""
    close = f"{gbnf_literal(closing)} [ \\n]*"
    return {"think": f"([ \\n]* {gbnf_literal(opening)} [^<]* {close})?",
            "think_opened": f"[^<]* {close}"}  # fmt: skip


def _callable(tools: Tools, only: str | None) -> list[tuple[int, Mapping[str, Any]]]:
    return [
        (i, t["function"])
        for i, t in enumerate(tools)
        if only is None or t["function"]["name"] == only
    ]


def _parameters(fn: Mapping[str, Any]) -> Mapping[str, Any]:
    params = fn.get("parameters")
    return params if isinstance(params, Mapping) else {"type": "object"}


def _properties(fn: Mapping[str, Any]) -> list[tuple[str, Any]]:
    props = _parameters(fn).get("properties")
    return list(props.items()) if isinstance(props, Mapping) else []


def wants_string(schema: Any) -> bool:
    """Whether a parameter's schema wants a string (families that write one value per
    parameter write it as raw text then)."""
    if not isinstance(schema, Mapping):
        return False
    kind = schema.get("type")
    return kind == "string" or isinstance(kind, list) and kind[:1] == ["string"]

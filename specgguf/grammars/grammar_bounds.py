"""How large a grammar, or a JSON schema turned into one, may be: measured before it is built.

Two of the grammar paths spend unbounded memory or stack on small input, and neither can be
stopped once it has started:

- llama-cpp-python's JSON-schema converter writes every repetition out: `"minLength": 1e9` is
  a billion grammar items, gigabytes of text, before llama.cpp sees anything. The counts a
  schema asks for (minLength, maxLength, minItems, maxItems, and the `{m,n}` of its patterns)
  are therefore added up first and refused past MAX_SCHEMA_REPEATS.
- llama.cpp parses GBNF, and later walks its rules, recursively: a grammar nested some
  tens of thousands of groups deep, or a chain of as many rules each naming the next,
  overflows the C stack and kills the process (a server with it). Setting a grammar up takes
  time that grows faster than its alternatives do (an `enum` of 100,000 values: about two
  minutes before the first token, on the one thread every server slot decodes on), and each
  repetition `x{0,1999}` is expanded into that many nested rules (2,000 of them in a 24 KB
  grammar ran for over ten minutes, deaf to SIGTERM inside llama.cpp). Its parts (named
  rules, parenthesized groups, each of which llama.cpp makes a rule of, alternatives, and
  each repetition's count) are therefore counted on the text first and refused past
  MAX_GRAMMAR_PARTS.

Both bounds are far above what real schemas and grammars use (a schema with a few thousand
properties converts to about as many rules) and below what breaks or stalls.
"""

from __future__ import annotations

import re
from typing import Any

#: the most repetitions a JSON schema may ask for, all its counts added up
MAX_SCHEMA_REPEATS = 100_000
#: the most parts (named rules, parenthesized groups, alternatives) a GBNF grammar may have
MAX_GRAMMAR_PARTS = 20_000

#: the schema keywords whose value is a number of repetitions the converter writes out
COUNT_KEYWORDS = ("minLength", "maxLength", "minItems", "maxItems")

# a regex quantifier {m}, {m,} or {m,n} in a `pattern`
_QUANTIFIER = re.compile(r"\{(\d+)(?:,(\d*))?\}")
# what GBNF text holds that may contain "(", "|", "{" or "::=" without meaning them (string
# literals, character classes, comments), or one of those (a repetition `{m,n}` with its
# counts); matching never backtracks
_GBNF_TOKEN = re.compile(
    r'"(?:[^"\\\n]|\\.)*"|\[(?:[^\]\\\n]|\\.)*\]|#[^\n]*|(::=|\(|\|)'
    r"|\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}",
    re.DOTALL,
)


def schema_too_large(schema: Any) -> str | None:
    """Why the converter must not write `schema` out (its counts past MAX_SCHEMA_REPEATS),
    or None."""
    if schema_repeats(schema) <= MAX_SCHEMA_REPEATS:
        return None
    return (
        f"the schema asks for more than {MAX_SCHEMA_REPEATS} repetitions in all "
        f"({', '.join(COUNT_KEYWORDS)} and pattern counts), each written out in the grammar"
    )


def grammar_too_large(gbnf: str) -> str | None:
    """Why llama.cpp must not parse `gbnf` (its parts past MAX_GRAMMAR_PARTS), or None."""
    parts = grammar_parts(gbnf)
    if parts <= MAX_GRAMMAR_PARTS:
        return None
    return (
        f"the grammar has {parts} parts (rules, groups, alternatives and repeated items; "
        f"at most {MAX_GRAMMAR_PARTS})"
    )


def schema_repeats(schema: Any) -> int:
    """The repetitions `schema` asks for, added up over every count keyword and pattern
    quantifier anywhere in it (a value in `enum` or `const` that looks like one is counted
    too: an over-estimate, never an under-one). Iterative: the nesting is not bounded here.
    Stops adding once past MAX_SCHEMA_REPEATS."""
    total = 0
    stack = [schema]
    while stack and total <= MAX_SCHEMA_REPEATS:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
            continue
        if not isinstance(v, dict):
            continue
        for key, item in v.items():
            if key in COUNT_KEYWORDS and _is_count(item):
                total += int(min(item, MAX_SCHEMA_REPEATS + 1))
            elif key == "pattern" and isinstance(item, str):
                total += _pattern_repeats(item)
            elif isinstance(item, dict | list):
                stack.append(item)
    return total


def _is_count(v: Any) -> bool:
    # a float count (1e9) reaches the converter as well; NaN compares false and is left out
    return isinstance(v, int | float) and not isinstance(v, bool) and v > 0


def _pattern_repeats(pattern: str) -> int:
    total = 0
    for m in _QUANTIFIER.finditer(pattern):
        total += sum(_count(digits) for digits in m.groups())
    return total


def grammar_parts(gbnf: str) -> int:
    """The parts of `gbnf` that cost llama.cpp a rule or an alternative: its `::=`
    definitions, parenthesized groups and `|`, and for a repetition `{m,n}` the larger count
    (llama.cpp writes the item out that many times, in as many nested rules), all outside
    string literals, character classes and comments."""
    parts = 0
    for m in _GBNF_TOKEN.finditer(gbnf):
        if m.group(1):
            parts += 1
        elif m.group(0).startswith("{"):
            parts += max(_count(m.group(2)), _count(m.group(3)), 1)
    return parts


def _count(digits: str | None) -> int:
    if not digits:
        return 0
    # past nine digits the count is over any bound (and int() of thousands of digits is itself
    # refused by Python)
    return int(digits) if len(digits) <= 9 else MAX_SCHEMA_REPEATS + MAX_GRAMMAR_PARTS

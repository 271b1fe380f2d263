"""JSON schema -> GBNF: every keyword enforced by the grammar, or refused in words.

llama-cpp-python's port of llama.cpp's converter (llama_cpp.llama_grammar.SchemaConverter)
writes the rules; what a schema means is decided here. Its own dispatch reads the first
keyword it knows and drops the rest without a word: `minimum` and `maximum` ("TODO"),
`multipleOf`, `uniqueItems`, `minItems` next to a tuple, `minLength` next to a `pattern`, an
unknown `format`, the schemas of `not` / `if`, `required` names without `properties`... and a
`$ref` whose target refers back to itself (a tree), `true` / `false` as schemas, or a regex
escape such as `\\d` break it. So `visit` is replaced: each kind of schema consumes the keywords
it enforces, and any other validation keyword present is refused (SchemaRefused, one line
naming the keyword and where it is). Annotations (title, description, default, ...) and
keywords JSON Schema does not define are left alone, as every validator does.

What is enforced: type (one or a list), enum, const, anyOf / oneOf (oneOf as anyOf: the
alternatives are not kept apart), allOf over object properties, $ref within the schema (#/...,
recursion included), properties, required, additionalProperties, items, prefixItems,
minItems, maxItems, uniqueItems (by writing one item at most), minLength, maxLength,
pattern (specgguf.grammars.json_patterns), format
date / time / date-time / uuid, and for numbers minimum, maximum, exclusiveMinimum and
exclusiveMaximum (specgguf.grammars.json_ranges; for type number only whole-number bounds).
Where the grammar writes a subset of what the schema allows (no extra properties unless
additionalProperties says so, an optional tuple item always written, a pattern matched as a
whole), the output still validates.
"""

from __future__ import annotations

import json
import math
import urllib.parse
from typing import Any

from llama_cpp import llama_grammar as lg

from specgguf.grammars import json_patterns, json_ranges

#: keywords that describe, and constrain nothing
ANNOTATIONS = frozenset(
    [
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$id",
        "$comment",
        "$defs",
        "definitions",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$anchor",
        "$dynamicAnchor",
        "$vocabulary",
        "contentEncoding",
        "contentMediaType",
        "discriminator",
    ]
)
#: the validation keywords of each type (they constrain values of that type only)
FAMILIES = {
    "number": frozenset(
        ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"]
    ),
    "string": frozenset(["minLength", "maxLength", "pattern", "format"]),
    "array": frozenset(
        [
            "items",
            "prefixItems",
            "additionalItems",
            "minItems",
            "maxItems",
            "uniqueItems",
            "contains",
            "minContains",
            "maxContains",
            "unevaluatedItems",
        ]
    ),
    "object": frozenset(
        [
            "properties",
            "required",
            "additionalProperties",
            "patternProperties",
            "propertyNames",
            "minProperties",
            "maxProperties",
            "dependentRequired",
            "dependentSchemas",
            "dependencies",
            "unevaluatedProperties",
        ]
    ),
}
FAMILIES["integer"] = FAMILIES["number"]
#: keywords that apply to any value
GENERAL = frozenset(
    ["type", "enum", "const", "anyOf", "oneOf", "allOf", "not", "if", "then", "else", "$ref",
     "$dynamicRef", "$recursiveRef"]
)  # fmt: skip
TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")
STRING_FORMATS = ("date", "time", "date-time", "uuid")


#: how much schema text may be converted again in place (allOf's referenced parts, keywords
#: beside anyOf repeated in each alternative): what would otherwise grow with the square of
#: the schema's size
MAX_INLINED = 2_000_000


class SchemaRefused(ValueError):
    """A schema (or a keyword of it) the grammar cannot enforce; the message says which."""


def convert(schema: Any) -> str:
    """The GBNF grammar (root rule `root`) of `schema` (a parsed JSON schema: an object, or
    true / false). SchemaRefused for what cannot be enforced."""
    conv = _Converter(schema)
    conv.visit(schema, "")
    return conv.format_grammar().replace(_LOOSE_DOT, _JSON_DOT)


# the converter's `.` in a pattern admits a raw quote, backslash or control character, none of
# which JSON takes inside a string: a JSON string's character instead (its escapes of \b \f \t
# and the two that stand for themselves; the others are line breaks, which `.` excludes)
_LOOSE_DOT = "dot ::= " + lg.DOT
_JSON_DOT = r'dot ::= [^"\\\x7F\x00-\x1F] | "\\" ["\\/bft]'


def _where(name: str) -> str:
    return f"at '{name}'" if name else "at the root"


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


class _Converter(lg.SchemaConverter):
    def __init__(self, root: Any) -> None:
        super().__init__(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        self._root = root
        self._ref_rules: dict[str, str] = {}  # a $ref -> its rule (reserved before it is built)
        self._inlined = 0  # characters of schema converted again in place

    def _inline(self, part: Any, name: str) -> None:
        self._inlined += len(json.dumps(part))
        if self._inlined > MAX_INLINED:
            raise SchemaRefused(
                f"the schema repeats more than {MAX_INLINED} characters of itself in place "
                f"(allOf over references, keywords beside anyOf; {_where(name)})"
            )

    # -- the converter's helpers, corrected --------------------------------------------------

    def _format_literal(self, literal: str) -> str:
        # the converter's escapes leave a backslash as it is: "a\\b" became a\b (a backspace)
        return super()._format_literal(literal.replace("\\", "\\\\"))

    # -- what a schema means -----------------------------------------------------------------

    def visit(self, schema: Any, name: str) -> str:
        rule = name + "-" if name in lg.RESERVED_NAMES else name or "root"
        if schema is True:
            return self._add_rule(rule, self._add_primitive("value", lg.PRIMITIVE_RULES["value"]))
        if schema is False:
            raise SchemaRefused(f"the schema {_where(name)} is false: no value matches it")
        if not isinstance(schema, dict):
            raise SchemaRefused(f"the schema {_where(name)} must be an object, true or false")
        if "$ref" in schema:
            self._only(schema, {"$ref"}, name, "beside '$ref'")
            return self._add_rule(rule, self._ref(schema["$ref"], name))
        for key in ("$dynamicRef", "$recursiveRef", "not", "if", "then", "else"):
            if key in schema:
                raise SchemaRefused(f"'{key}' is not supported ({_where(name)})")
        if "anyOf" in schema or "oneOf" in schema:
            return self._union(schema, name, rule)
        if "allOf" in schema:
            return self.visit(self._all_of(schema, name), name)
        types = schema.get("type")
        if isinstance(types, list):
            if not types or not all(isinstance(t, str) for t in types):
                raise SchemaRefused(f"'type' {_where(name)} must be a type or a list of types")
            if len(types) == 1:
                return self.visit({**schema, "type": types[0]}, name)
            alts = [self._for_type(schema, t) for t in dict.fromkeys(types)]
            return self._add_rule(rule, self._generate_union_rule(name, alts))
        if types is not None and types not in TYPES:
            raise SchemaRefused(f"'type' {_where(name)}: {types!r} is not a JSON type")
        if "const" in schema or "enum" in schema:
            return self._add_rule(rule, self._constants(schema, name))
        if types is None:
            types = self._implied_type(schema, name)
            if types is None:  # no validation keyword: any value
                return self._add_rule(
                    rule, self._add_primitive("value", lg.PRIMITIVE_RULES["value"])
                )
        return getattr(self, "_" + types)(self._for_type(schema, types), name, rule)

    def _only(self, schema: dict, allowed: set[str], name: str, why: str) -> None:
        """Refuse the first validation keyword of `schema` outside `allowed`."""
        for key in schema:
            if key in allowed or key in ANNOTATIONS:
                continue
            if key in GENERAL or any(key in f for f in FAMILIES.values()):
                beside = f" {why}" if why else ""
                raise SchemaRefused(f"'{key}'{beside} is not supported ({_where(name)})")

    def _for_type(self, schema: dict, t: str) -> dict:
        """`schema` for values of type `t`: the keywords of the other types do not apply."""
        if t not in TYPES:
            raise SchemaRefused(f"'type': {t!r} is not a JSON type")
        other = set().union(*(f for k, f in FAMILIES.items() if f is not FAMILIES.get(t)))
        return {k: v for k, v in schema.items() if k not in other or k in FAMILIES.get(t, ())} | {
            "type": t
        }

    def _implied_type(self, schema: dict, name: str) -> str | None:
        found = [t for t in ("number", "string", "array", "object") if FAMILIES[t] & set(schema)]
        if len(found) > 1:
            raise SchemaRefused(
                f"the schema {_where(name)} has keywords of {' and '.join(found)} values but "
                "no 'type': give one"
            )
        return found[0] if found else None

    def _ref(self, ref: Any, name: str) -> str:
        if not isinstance(ref, str):
            raise SchemaRefused(f"'$ref' {_where(name)} must be a string")
        done = self._ref_rules.get(ref)
        if done is not None:
            return done  # built, or being built: a recursive schema refers to its own rule
        target = self._pointer(ref, name)
        base = lg.INVALID_RULE_CHARS_RE.sub("-", ref.rsplit("/", 1)[-1]) or "ref"
        rule = base if base not in lg.RESERVED_NAMES else base + "-"
        i = 0
        while rule in self._rules:
            rule, i = f"{base}-{i}", i + 1
        self._rules[rule] = "placeholder"  # reserved: its body may refer back to it
        self._ref_rules[ref] = rule
        self._rules[rule] = self.visit(target, rule + "-body")
        return rule

    def _pointer(self, ref: str, name: str) -> Any:
        if not ref.startswith("#"):
            raise SchemaRefused(
                f"'$ref' {ref!r} ({_where(name)}): only references within the schema "
                "(#/...) are supported"
            )
        target = self._root
        path = urllib.parse.unquote(ref[1:])
        if path and not path.startswith("/"):
            raise SchemaRefused(f"'$ref' {ref!r} ({_where(name)}): anchors are not supported")
        for part in path.split("/")[1:] if path else []:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isascii() and part.isdigit() and (
                int(part) < len(target)
            ):
                target = target[int(part)]
            else:
                raise SchemaRefused(f"'$ref' {ref!r} ({_where(name)}) does not resolve: "
                                    f"no {part!r} there")  # fmt: skip
        return target

    def _union(self, schema: dict, name: str, rule: str) -> str:
        if "anyOf" in schema and "oneOf" in schema:
            raise SchemaRefused(f"'anyOf' and 'oneOf' together are not supported ({_where(name)})")
        key = "anyOf" if "anyOf" in schema else "oneOf"
        alts = schema[key]
        if not isinstance(alts, list) or not alts:
            raise SchemaRefused(f"'{key}' {_where(name)} must be a non-empty list of schemas")
        rest = {k: v for k, v in schema.items() if k != key}
        if any(k not in ANNOTATIONS for k in rest):
            # keywords beside the alternatives hold in each of them
            for _ in alts:
                self._inline(rest, name)
            alts = [{"allOf": [rest, alt]} for alt in alts]
        alts = [a for a in alts if a is not False]
        if not alts:
            raise SchemaRefused(f"'{key}' {_where(name)}: every alternative is false")
        return self._add_rule(rule, self._generate_union_rule(name, alts))

    def _all_of(self, schema: dict, name: str) -> Any:
        """allOf as one schema: its parts' keywords together, where no keyword is in two
        parts (their properties are merged, their required lists joined)."""
        parts = schema["allOf"]
        if not isinstance(parts, list) or not parts:
            raise SchemaRefused(f"'allOf' {_where(name)} must be a non-empty list of schemas")
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        if len(parts) == 1 and all(k in ANNOTATIONS for k in merged):
            return parts[0]  # pydantic's {"allOf": [{"$ref": ...}], "description": ...}
        for part in parts:
            seen: set[int] = set()
            while isinstance(part, dict) and "$ref" in part and id(part) not in seen:
                seen.add(id(part))
                self._only(part, {"$ref"}, name, "beside '$ref'")
                part = self._pointer(part["$ref"], name)
                self._inline(part, name)
            if part is True:
                continue
            if not isinstance(part, dict):
                raise SchemaRefused(f"'allOf' {_where(name)}: a part is {json.dumps(part)}")
            for key, value in part.items():
                if key in ANNOTATIONS:
                    continue
                if key == "properties" and not isinstance(value, dict):
                    raise SchemaRefused(f"'properties' {_where(name)} must be an object")
                if key == "required" and not isinstance(value, list):
                    raise SchemaRefused(f"'required' {_where(name)} must be a list of names")
                if key not in merged:
                    merged[key] = value
                elif key == "properties" and isinstance(merged[key], dict):
                    for prop, sub in value.items():
                        if prop in merged[key] and merged[key][prop] != sub:
                            raise SchemaRefused(f"'allOf' {_where(name)}: property {prop!r} "
                                                "has two schemas")  # fmt: skip
                    merged[key] = {**merged[key], **value}
                elif key == "required" and isinstance(merged[key], list):
                    merged[key] = list(dict.fromkeys([*merged[key], *value]))
                elif merged[key] != value:
                    raise SchemaRefused(
                        f"'allOf' {_where(name)}: '{key}' in two parts is not supported"
                    )
        return merged

    def _constants(self, schema: dict, name: str) -> str:
        self._only(schema, {"type", "const", "enum"}, name, "beside 'enum' or 'const'")
        if "const" in schema:
            values = [schema["const"]]
            if "enum" in schema and schema["const"] not in schema["enum"]:
                raise SchemaRefused(f"'const' {_where(name)} is not in its 'enum'")
        else:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise SchemaRefused(f"'enum' {_where(name)} must be a non-empty list")
        t = schema.get("type")
        if t is not None:
            types = set(t) if isinstance(t, list) else {t}
            if "number" in types:
                types.add("integer")
            values = [v for v in values if _json_type(v) in types]
            if not values:
                raise SchemaRefused(f"'enum' {_where(name)}: no value is of type {t}")
        return " | ".join(self._generate_constant_rule(v) for v in values)

    def _generate_constant_rule(self, value: Any) -> str:
        return self._format_literal(json.dumps(value, ensure_ascii=False)) + " space"

    # -- one type each -----------------------------------------------------------------------

    def _null(self, schema: dict, name: str, rule: str) -> str:
        return self._add_rule(rule, self._add_primitive("null", lg.PRIMITIVE_RULES["null"]))

    def _boolean(self, schema: dict, name: str, rule: str) -> str:
        return self._add_rule(rule, self._add_primitive("boolean", lg.PRIMITIVE_RULES["boolean"]))

    def _integer(self, schema: dict, name: str, rule: str) -> str:
        return self._numeric(schema, name, rule, integer=True)

    def _number(self, schema: dict, name: str, rule: str) -> str:
        return self._numeric(schema, name, rule, integer=False)

    def _numeric(self, schema: dict, name: str, rule: str, *, integer: bool) -> str:
        self._only(schema, {"type", *FAMILIES["number"]} - {"multipleOf"}, name, "")
        kind = "integer" if integer else "number"
        lo = self._bound(schema, "minimum", "exclusiveMinimum", name, integer)
        hi = self._bound(schema, "maximum", "exclusiveMaximum", name, integer)
        if lo is None and hi is None:
            return self._add_rule(rule, self._add_primitive(kind, lg.PRIMITIVE_RULES[kind]))
        try:
            if integer:
                expr = json_ranges.integer_range(
                    None if lo is None else lo.value, None if hi is None else hi.value
                )
            else:
                expr = json_ranges.number_range(lo, hi)
        except json_ranges.EmptyRange:
            raise SchemaRefused(f"no {kind} is within the bounds {_where(name)}") from None
        return self._add_rule(rule, expr + " space")

    def _bound(
        self, schema: dict, inclusive: str, exclusive: str, name: str, integer: bool
    ) -> json_ranges.Bound | None:
        """The tighter of `inclusive` and `exclusive` (draft 4's boolean exclusive* too),
        as a whole bound: for an integer rounded inward to an inclusive one."""
        upper = inclusive == "maximum"
        cands: list[tuple[float, bool, str]] = []
        ex = schema.get(exclusive)
        if isinstance(ex, bool):  # draft 4: the flag makes `inclusive` exclusive
            if ex and inclusive not in schema:
                raise SchemaRefused(f"'{exclusive}': true needs '{inclusive}' ({_where(name)})")
            ex, flag = None, ex
        else:
            flag = False
        for key, value, is_excl in ((inclusive, schema.get(inclusive), flag),
                                    (exclusive, ex, True)):  # fmt: skip
            if value is None:
                continue
            if not _is_number(value):
                raise SchemaRefused(f"'{key}' {_where(name)} must be a number")
            cands.append((value, is_excl, key))
        if not cands:
            return None
        # the tighter: the larger lower bound, the smaller upper one; exclusive on a tie
        value, excl, key = (min if upper else max)(
            cands, key=lambda c: (c[0], (-1 if upper else 1) * c[1])
        )
        if integer:
            if upper:
                whole = math.ceil(value) - 1 if excl else math.floor(value)
            else:
                whole = math.floor(value) + 1 if excl else math.ceil(value)
            excl = False
        elif float(value).is_integer():
            whole = int(value)
        else:
            raise SchemaRefused(
                f"'{key}' {value} {_where(name)}: a number's bounds are enforced only when "
                "they are whole numbers (or give type integer)"
            )
        if len(str(abs(whole))) > json_ranges.FREE_DIGITS and (whole > 0) == upper:
            return None  # beyond every number the grammar writes anyway
        if len(str(abs(whole))) > json_ranges.MAX_BOUND_DIGITS:
            raise SchemaRefused(f"'{key}' {_where(name)} has more than "
                                f"{json_ranges.MAX_BOUND_DIGITS} digits")  # fmt: skip
        return json_ranges.Bound(whole, excl)

    def _string(self, schema: dict, name: str, rule: str) -> str:
        self._only(schema, {"type", *FAMILIES["string"]}, name, "")
        fmt = schema.get("format")
        if fmt is not None and fmt not in STRING_FORMATS:
            raise SchemaRefused(
                f"'format' {fmt!r} {_where(name)} is not enforced (only "
                f"{', '.join(STRING_FORMATS)} are)"
            )
        given = [k for k in ("pattern", "format") if k in schema]
        # a minLength of 0 asks for nothing
        lengths = [k for k in ("minLength", "maxLength") if k in schema]
        if schema.get("minLength") == 0:
            lengths.remove("minLength")
        if len(given) > 1 or (given and lengths):
            both = [*given, *lengths][:2]
            raise SchemaRefused(f"'{both[0]}' and '{both[1]}' together are not supported "
                                f"({_where(name)})")  # fmt: skip
        if "pattern" in schema:
            if not isinstance(schema["pattern"], str):
                raise SchemaRefused(f"'pattern' {_where(name)} must be a string")
            try:
                regex = json_patterns.for_converter(schema["pattern"])
            except json_patterns.PatternRefused as e:
                raise SchemaRefused(f"'pattern' {_where(name)}: {e}") from None
            return self._visit_pattern(regex, rule)
        if fmt is not None:
            if fmt == "uuid":
                return self._add_rule(rule, self._add_primitive("uuid", lg.PRIMITIVE_RULES["uuid"]))
            prim = f"{fmt}-string"
            return self._add_rule(rule, self._add_primitive(prim, lg.STRING_FORMAT_RULES[prim]))
        lo, hi = (self._count(schema, k, name) for k in ("minLength", "maxLength"))
        if lo == 0 and hi is None:
            return self._add_rule(rule, self._add_primitive("string", lg.PRIMITIVE_RULES["string"]))
        if hi is not None and hi < lo:
            raise SchemaRefused(f"'maxLength' is below 'minLength' ({_where(name)})")
        char = self._add_primitive("char", lg.PRIMITIVE_RULES["char"])
        return self._add_rule(rule, rf'"\"" {lg._build_repetition(char, lo, hi)} "\"" space')

    def _count(self, schema: dict, key: str, name: str) -> int | None:
        v = schema.get(key)
        if v is None:
            return 0 if key.startswith("min") else None
        if not _is_number(v) or v < 0 or not float(v).is_integer():
            raise SchemaRefused(f"'{key}' {_where(name)} must be a whole number, 0 or more")
        return int(v)

    def _array(self, schema: dict, name: str, rule: str) -> str:
        self._only(schema, {"type", "items", "prefixItems", "additionalItems", "minItems",
                            "maxItems", "uniqueItems"}, name, "")  # fmt: skip
        lo, hi = (self._count(schema, k, name) for k in ("minItems", "maxItems"))
        if schema.get("uniqueItems") not in (None, False):
            # kept by writing at most one item (pydantic's set[...]): a subset, always unique
            if lo > 1:
                raise SchemaRefused(
                    f"'uniqueItems' with 'minItems' {lo} {_where(name)} is not supported (it "
                    "is kept by writing one item at most)"
                )
            hi = 1 if hi is None else min(hi, 1)
        if hi is not None and hi < lo:
            raise SchemaRefused(f"'maxItems' is below 'minItems' ({_where(name)})")
        prefix = schema.get("prefixItems")
        items = schema.get("items", True)
        if isinstance(items, list):  # draft 4's tuple
            if prefix is not None:
                raise SchemaRefused(
                    f"'items' as a list and 'prefixItems' together ({_where(name)})"
                )
            prefix, items = items, schema.get("additionalItems", True)
        elif "additionalItems" in schema:
            raise SchemaRefused(f"'additionalItems' without a tuple 'items' ({_where(name)})")
        sub = f"{name}{'-' if name else ''}"
        if prefix is not None:
            if not isinstance(prefix, list):
                raise SchemaRefused(f"'prefixItems' {_where(name)} must be a list of schemas")
            # the whole tuple is written (shorter arrays are valid too, but not asked for)
            if hi is not None and hi < len(prefix):
                raise SchemaRefused(f"'maxItems' below the tuple's length ({_where(name)})")
            if lo > len(prefix):
                raise SchemaRefused(f"'minItems' past the tuple's length ({_where(name)})")
            parts = [self.visit(s, f"{sub}tuple-{i}") for i, s in enumerate(prefix)]
            body = ' "," space '.join(parts)
            return self._add_rule(rule, f'"[" space {body} "]" space')
        if items is False:
            if lo > 0:
                raise SchemaRefused(f"'items' false with 'minItems' ({_where(name)})")
            return self._add_rule(rule, '"[" space "]" space')
        item = self.visit(items, f"{sub}item")
        rep = lg._build_repetition(item, lo, hi, separator_rule='"," space')
        return self._add_rule(rule, f'"[" space {rep} "]" space')

    def _object(self, schema: dict, name: str, rule: str) -> str:
        self._only(schema, {"type", "properties", "required", "additionalProperties"}, name, "")
        props = schema.get("properties", {})
        required = schema.get("required", [])
        extra = schema.get("additionalProperties")
        if not isinstance(props, dict):
            raise SchemaRefused(f"'properties' {_where(name)} must be an object")
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise SchemaRefused(f"'required' {_where(name)} must be a list of names")
        if not props and not required and extra in (None, True):
            return self._add_rule(rule, self._add_primitive("object", lg.PRIMITIVE_RULES["object"]))
        props = dict(props)
        for key in required:
            if key not in props:  # required without a schema of its own
                if extra is False:
                    raise SchemaRefused(f"required {key!r} is not allowed by "
                                        f"'additionalProperties' ({_where(name)})")  # fmt: skip
                props[key] = True if extra is None else extra
        for key, sub in list(props.items()):
            if sub is False:
                if key in required:
                    raise SchemaRefused(f"required {key!r} has the schema false ({_where(name)})")
                del props[key]
        # without additionalProperties, only the listed properties are written (a subset)
        return self._add_rule(
            rule,
            self._build_object_rule(
                list(props.items()), set(required), name, None if extra is False else extra
            ),  # fmt: skip
        )

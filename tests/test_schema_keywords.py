"""Every validation keyword of a JSON schema is enforced by the grammar or refused in words,
never accepted and then ignored (specgguf.grammars.schema_gbnf). Enforced ones are checked on
libllama's grammar engine (the tiny model's vocabulary, one character per token): a value
that keeps the keyword is taken, one that breaks it is not. Also: `pattern`'s regex escapes
(specgguf.grammars.json_patterns, property-tested against Python's re), recursive references,
true / false, tools whose parameters refer to their own $defs, and bounded conversion."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgguf.binding.grammar import GrammarError, schema_to_gbnf
from specgguf.chat.tools import call_schema
from specgguf.grammars.grammar_bounds import MAX_GRAMMAR_PARTS, grammar_parts
from specgguf.grammars.schema_gbnf import FAMILIES, GENERAL
from tests.test_json_ranges import engine_accepts, model  # noqa: F401 - the fixture

NODE = {
    "type": "object",
    "properties": {"v": {"type": "integer"}, "kids": {"type": "array",
                                                       "items": {"$ref": "#/$defs/n"}}},
    "required": ["v", "kids"],
    "additionalProperties": False,
}  # fmt: skip

#: keyword -> (a schema using it, texts it takes, texts it refuses)
ENFORCED = {
    "type": ({"type": ["boolean", "null"]}, ["true", "null"], ["1", '"a"']),
    "enum": ({"enum": ["a", 1]}, ['"a"', "1"], ['"b"', "2"]),
    "const": ({"const": {"k": "a\\b"}}, [r'{"k": "a\\b"}'], [r'{"k": "a\b"}']),
    "anyOf": ({"anyOf": [{"type": "integer", "minimum": 5, "maximum": 5}, {"type": "null"}]},
              ["5", "null"], ["4", "true"]),
    "oneOf": ({"oneOf": [{"const": 1}, {"const": 2}]}, ["1", "2"], ["3"]),
    "allOf": ({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}},
                          "required": ["a"]},
                         {"properties": {"b": {"const": 1}}, "required": ["b"]}]},
              ['{"a": 3, "b": 1}'], ['{"a": 3}', '{"a": 3, "b": 2}']),
    "$ref": ({"$ref": "#/$defs/n", "$defs": {"n": NODE}},
             ['{"v": 1, "kids": [{"v": 2, "kids": [{"v": 3, "kids": []}]}]}'],
             ['{"v": 1, "kids": [{"v": 2}]}']),
    "minimum": ({"type": "integer", "minimum": 10}, ["10", "999"], ["9", "-10"]),
    "maximum": ({"type": "integer", "maximum": -3}, ["-3", "-70"], ["-2", "0", "3"]),
    "exclusiveMinimum": ({"type": "number", "exclusiveMinimum": 0}, ["0.5", "2"],
                         ["0", "0.0", "-1"]),
    "exclusiveMaximum": ({"type": "integer", "exclusiveMaximum": 100}, ["99", "-5"],
                         ["100", "101"]),
    "minLength": ({"type": "string", "minLength": 2}, ['"ab"', '"abc"'], ['"a"', '""']),
    "maxLength": ({"type": "string", "maxLength": 2}, ['"ab"', '""'], ['"abc"']),
    "pattern": ({"type": "string", "pattern": r"^\d+\.\d$"}, ['"12.5"'], ['"1a.5"', '"12x5"']),
    "format": ({"type": "string", "format": "date"}, ['"2024-01-31"'], ['"2024-13-01"']),
    "items": ({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 1}},
              ["[0, 1]", "[]"], ["[2]"]),
    "prefixItems": ({"type": "array", "prefixItems": [{"const": 1}, {"const": "a"}]},
                    ['[1, "a"]'], ['["a", 1]']),
    "additionalItems": ({"type": "array", "items": [{"const": 1}], "additionalItems": False},
                        ["[1]"], ["[1, 1]"]),
    "minItems": ({"type": "array", "items": {"const": 0}, "minItems": 2},
                 ["[0, 0]", "[0, 0, 0]"], ["[0]", "[]"]),
    "maxItems": ({"type": "array", "items": {"const": 0}, "maxItems": 1}, ["[0]", "[]"],
                 ["[0, 0]"]),
    "uniqueItems": ({"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True},
                    ["[1]", "[]"], ["[1, 2]", "[1, 1]"]),
    "properties": ({"type": "object", "properties": {"a": {"const": 1}}},
                   ['{"a": 1}', "{}"], ['{"a": 2}']),
    "required": ({"type": "object", "properties": {"a": {"const": 1}}, "required": ["a"]},
                 ['{"a": 1}'], ["{}"]),
    "additionalProperties": ({"type": "object", "properties": {"a": {"const": 1}},
                              "additionalProperties": {"type": "integer"}},
                             ['{"a": 1, "z": 2}', '{"z": 2}'], ['{"a": 1, "z": "x"}']),
}  # fmt: skip
#: keyword -> a schema using it: refused, naming the keyword
REFUSED = {
    "multipleOf": {"type": "integer", "multipleOf": 5},
    "contains": {"type": "array", "contains": {"const": 1}},
    "minContains": {"type": "array", "minContains": 1},
    "maxContains": {"type": "array", "maxContains": 1},
    "unevaluatedItems": {"type": "array", "unevaluatedItems": False},
    "patternProperties": {"type": "object", "patternProperties": {"^a": {}}},
    "propertyNames": {"type": "object", "propertyNames": {"maxLength": 3}},
    "minProperties": {"type": "object", "minProperties": 1},
    "maxProperties": {"type": "object", "maxProperties": 1},
    "dependentRequired": {"type": "object", "dependentRequired": {"a": ["b"]}},
    "dependentSchemas": {"type": "object", "dependentSchemas": {"a": {}}},
    "dependencies": {"type": "object", "dependencies": {"a": ["b"]}},
    "unevaluatedProperties": {"type": "object", "unevaluatedProperties": False},
    "not": {"not": {"type": "null"}},
    "if": {"if": {"type": "integer"}, "then": {"minimum": 0}},
    "then": {"then": {"minimum": 0}},
    "else": {"else": {"minimum": 0}},
    "$dynamicRef": {"$dynamicRef": "#node"},
    "$recursiveRef": {"$recursiveRef": "#"},
}


def test_every_validation_keyword_is_enforced_or_refused():
    known = set(GENERAL).union(*FAMILIES.values())
    assert set(ENFORCED) | set(REFUSED) == known
    assert not set(ENFORCED) & set(REFUSED)


@pytest.mark.parametrize("keyword", sorted(REFUSED))
def test_a_keyword_that_cannot_be_enforced_is_refused_by_name(keyword):
    with pytest.raises(GrammarError) as e:
        schema_to_gbnf(REFUSED[keyword], "-j")
    message = str(e.value)
    assert f"'{keyword}'" in message and "\n" not in message, message


@pytest.mark.parametrize("keyword", sorted(ENFORCED))
def test_an_enforced_keyword_holds_in_the_grammar(model, keyword):  # noqa: F811
    schema, good, bad = ENFORCED[keyword]
    gbnf = schema_to_gbnf(schema, "-j")
    for text in good:
        assert engine_accepts(model, gbnf, text), (keyword, text, gbnf)
    for text in bad:
        assert not engine_accepts(model, gbnf, text), (keyword, text, gbnf)


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "number", "maximum": 2.5}, "'maximum' 2.5"),  # fractional bounds of a number
        ({"type": "integer", "minimum": 1e300}, "more than 40 digits"),
        ({"type": "integer", "minimum": "3"}, "'minimum' at the root must be a number"),
        ({"type": "string", "format": "uri"}, "'format' 'uri'"),
        ({"$ref": "https://example.com/s.json"}, "only references within the schema"),
        ({"$ref": "#/$defs/missing", "$defs": {}}, "does not resolve: no 'missing' there"),
        ({"$ref": "#/$defs/a", "$defs": {"a": {}}, "minimum": 3}, "'minimum' beside '$ref'"),
        ({"type": "object", "properties": {"a": False}, "required": ["a"]}, "schema false"),
        ({"type": "string", "pattern": r"^\bx$"}, r"'\b' is not supported"),
        ({"type": "string", "pattern": r"^(a)\1$"}, r"'\1' is not supported"),
        ({"type": "string", "pattern": "^a$b$"}, "'$' inside the pattern"),
        ({"type": "frobnicate"}, "'frobnicate' is not a JSON type"),
        ({"type": "string", "pattern": r"^\uD83Dx$"}, "half of a UTF-16 pair"),
        ({"type": "string", "format": "uri", "maxLength": 9}, "'format' 'uri'"),
        ({"type": "array", "uniqueItems": True, "minItems": 2}, "'uniqueItems' with 'minItems' 2"),
        ({"type": "string", "pattern": "^a$", "maxLength": 0}, "'pattern' and 'maxLength'"),
        ({"type": "string", "pattern": "^(?<=a)b$"}, "'(?<=' (lookarounds"),
        ({"minimum": 1, "maxLength": 2}, "give one"),
        ({"allOf": [{"properties": 5}, {"properties": {}}]}, "'properties' at the root must be"),
    ],
)
def test_other_refusals_say_why(schema, words):
    with pytest.raises(GrammarError) as e:
        schema_to_gbnf(schema, "-j")
    assert words in str(e.value), str(e.value)


def test_true_false_and_keywords_of_other_types(model):  # noqa: F811
    anything = schema_to_gbnf(True)
    for text in ('"x"', "[1, {}]", "null", "-2.5e3"):
        assert engine_accepts(model, anything, text)
    with pytest.raises(GrammarError, match="is false: no value matches it"):
        schema_to_gbnf(False)
    # minimum applies to numbers only: the null of a nullable bounded integer stays
    nullable = schema_to_gbnf({"type": ["integer", "null"], "minimum": 3, "maxLength": 1})
    assert engine_accepts(model, nullable, "null") and engine_accepts(model, nullable, "12")
    assert not engine_accepts(model, nullable, "2")
    # a property whose schema is false is left out; required names without a schema are any
    obj = schema_to_gbnf({"type": "object", "properties": {"a": False, "b": {"const": 1}},
                          "required": ["b", "c"]})  # fmt: skip
    assert engine_accepts(model, obj, '{"b": 1, "c": [true]}')
    assert not engine_accepts(model, obj, '{"b": 1}')
    # what asks for nothing beside what is enforced is no reason to refuse
    for trivial in ({"type": "string", "pattern": "^a$", "minLength": 0},
                    {"type": "array", "uniqueItems": False, "minItems": 3}):  # fmt: skip
        schema_to_gbnf(trivial)


# -- patterns ------------------------------------------------------------------------------

PATTERNS = [
    r"^\d{2,4}$",
    r"[a-z]\w{0,5}\.\w{1,3}",
    r"^\s?\S{1,4}$",
    r"^(?:ab|c[\-\/]){1,3}$",
    r'^[^"]{1,5}$',
    r"^[ -~]{0,6}$",
    r"^\D\W\d$",
    r"^a\+b\?\(c\)\[d\]\{e\}$",
    r'^x"y\\z\t$',
    r"^[\d.]{1,3}\-\.?$",
    r"^(?P<year>\d{4})-(?P<m>[01]\d)$",
    r"^[\w.+-]{1,8}@[a-z]{1,5}\.(com|org)$",
]
ASCII = st.characters(min_codepoint=0x20, max_codepoint=0x7E) | st.sampled_from("\t\n")
SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip


@pytest.mark.parametrize("pattern", PATTERNS)
@SETTINGS
@given(data=st.data())
def test_a_pattern_takes_exactly_the_json_strings_its_regex_matches(model, pattern, data):  # noqa: F811
    gbnf = schema_to_gbnf({"type": "string", "pattern": pattern}, "-j")
    value = data.draw(st.from_regex(pattern, fullmatch=True, alphabet=ASCII))
    assert engine_accepts(model, gbnf, json.dumps(value)), (pattern, value)
    other = data.draw(st.text(ASCII, max_size=8))
    matches = re.fullmatch(pattern.removeprefix("^").removesuffix("$"), other, re.ASCII)
    assert engine_accepts(model, gbnf, json.dumps(other)) == bool(matches), (pattern, other)


def test_a_pattern_escape_of_a_utf16_pair_is_one_character(model):  # noqa: F811
    gbnf = schema_to_gbnf({"type": "string", "pattern": r"^a\uD83D\uDE00\x41$"})
    assert '"a\U0001F600A"' in gbnf
    assert engine_accepts(model, gbnf, '"a\U0001F600A"')
    assert not engine_accepts(model, gbnf, '"a\U0001F601A"')


# -- tools, and bounds ---------------------------------------------------------------------


def test_a_tools_own_defs_resolve_inside_the_call(model):  # noqa: F811
    params = {
        "$defs": {"Unit": {"enum": ["c", "f"]},
                  "Loc": {"type": "object", "properties": {"default": {"$ref": "#/$defs/Unit"}},
                          "required": ["default"], "additionalProperties": False}},
        "type": "object", "properties": {"loc": {"$ref": "#/$defs/Loc"}}, "required": ["loc"],
        "additionalProperties": False,
    }  # fmt: skip
    tools = [{"type": "function", "function": {"name": "w", "parameters": params}},
             {"type": "function", "function": {"name": "v", "parameters": params}}]  # fmt: skip
    for only in (None, "w"):
        gbnf = schema_to_gbnf(call_schema(tools, only), "'tools'")
        good = '{"name": "w", "arguments": {"loc": {"default": "c"}}}'
        assert engine_accepts(model, gbnf, good)
        assert not engine_accepts(model, gbnf, good.replace('"c"', '"k"'))
    # the tools themselves (rendered into the prompt) are left as they were
    assert tools[0]["function"]["parameters"]["properties"]["loc"]["$ref"] == "#/$defs/Loc"


def test_conversion_stays_bounded():
    wide = schema_to_gbnf({"type": "integer", "minimum": -(10**39), "maximum": 10**39 - 1})
    assert grammar_parts(wide) < MAX_GRAMMAR_PARTS // 10
    chain = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(5000)}
    chain["d5000"] = {"type": "integer"}
    with pytest.raises(GrammarError, match="nests too deeply"):
        schema_to_gbnf({"$ref": "#/$defs/d0", "$defs": chain})
    # a recursive reference is one rule, however often it is met
    many = {"type": "object", "properties": {f"p{i}": {"$ref": "#/$defs/n"} for i in range(300)},
            "$defs": {"n": NODE | {"properties": {**NODE["properties"]}}}}  # fmt: skip
    many["$defs"]["n"]["properties"]["kids"] = {"type": "array", "items": {"$ref": "#/$defs/n"}}
    assert schema_to_gbnf(many).count("::= n-body") == 1
    big = {"type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(2000)}}
    with pytest.raises(GrammarError, match="repeats more than"):
        schema_to_gbnf({**big, "anyOf": [{"required": [f"k{i}"]} for i in range(100)]})

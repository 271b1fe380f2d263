"""`specgguf run` with llama.cpp's grammar flags on the tiny models: --grammar,
--grammar-file, -j/--json-schema, -jf/--json-schema-file, and `grammar` / `json_schema` in
--jsonl lines; bad input is one line on stderr and exit 1 (a --jsonl line: that line's error)."""

from __future__ import annotations

import json

import pytest

from tests.test_grammar_tiny import RECORD, RECORD_RE, SCHEMA
from tests.test_run_cli import run  # noqa: F401 - the fixture

GREEDY = ["-n", "80", "--temp", "0"]


def out_of(result) -> str:
    code, out, err = result
    assert code == 0, err
    return out.rstrip("\n")


def test_grammar_flag_constrains_and_speculation_does_not_change_it(run):  # noqa: F811
    plain = out_of(run("-p", "the cat", *GREEDY, "--grammar", RECORD, "--spec-type", "none"))
    assert RECORD_RE.fullmatch(plain)
    spec = out_of(run("-p", "the cat", *GREEDY, "--grammar", RECORD, "--spec-draft-n-max", "4"))
    assert spec == plain


def test_grammar_file_and_schema_flags(run, tmp_path):  # noqa: F811
    g = tmp_path / "record.gbnf"
    g.write_text(RECORD)
    assert RECORD_RE.fullmatch(out_of(run("-p", "the cat", *GREEDY, "--grammar-file", g)))
    s = tmp_path / "schema.json"
    s.write_text(json.dumps(SCHEMA))
    by_file = out_of(run("-p", "the cat", *GREEDY, "-n", "120", "-jf", s))
    assert set(json.loads(by_file)) == {"name", "ok", "tags"}
    inline = out_of(run("-p", "the cat", *GREEDY, "-n", "120", "-j", json.dumps(SCHEMA)))
    assert inline == by_file
    obj = json.loads(out_of(run("-p", "x", *GREEDY, "--json", "-j", '{"type": "object"}')))
    assert isinstance(json.loads(obj["text"]), dict) and obj["stop_reason"] == "eos"


# a schema that does not convert, two grammars, a missing file: refused before loading
# (tests/test_cli_errors.py's table); a grammar that does not parse is refused when llama.cpp
# reads it against the model's vocabulary, as the first prompt starts
@pytest.mark.parametrize(
    "args,line",
    [
        (["--grammar", 'root ::= "a'], "--grammar: the grammar does not parse: "),
        (["--grammar", "root ::= x"], "Undefined rule identifier 'x'"),
    ],
)
def test_bad_grammar_input_is_one_line_and_exit_1(run, args, line):  # noqa: F811
    code, out, err = run("-p", "hi", "-n", "5", *args)
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and line in err, err


def test_a_dead_end_is_one_line_and_exit_1(run):  # noqa: F811
    grammar = r'root ::= "a" "\x00"'
    code, out, err = run("-p", "hi", "-n", "20", "--grammar", grammar, "-q", "--spec-type", "none")
    assert code == 1 and out.startswith("a")
    assert err.strip().splitlines() == [
        "error: --grammar: the grammar allows no token after 1 generated tokens"
    ]


def test_jsonl_lines_carry_their_own_grammar(run, tmp_path):  # noqa: F811
    lines = [
        {"prompt": "the cat", "grammar": RECORD, "temperature": 0, "n_predict": 80},
        {"prompt": "the cat", "json_schema": SCHEMA, "temperature": 0, "n_predict": 120},
        {"prompt": "the cat", "grammar": 'root ::= "a', "id": "bad"},
        {"prompt": "the cat", "json_schema": [1], "id": "notobj"},
        {"prompt": "the cat", "grammar": "root ::= [a]", "json_schema": {}, "id": "both"},
        {"prompt": "the cat", "temperature": 0, "n_predict": 3},
    ]
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    code, out, err = run("--jsonl", "-f", f, "-q")
    objs = [json.loads(x) for x in out.splitlines()]
    assert code == 8 and len(objs) == 6
    assert RECORD_RE.fullmatch(objs[0]["text"])
    assert set(json.loads(objs[1]["text"])) == {"name", "ok", "tags"}
    assert objs[2]["error"]["code"] == 1 and '"grammar": ' in objs[2]["error"]["message"]
    assert '"json_schema" must be a JSON schema object' in objs[3]["error"]["message"]
    assert "cannot be combined" in objs[4]["error"]["message"]
    assert "text" in objs[5]  # no grammar: free text

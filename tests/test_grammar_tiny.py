"""Constrained decoding through libllama's grammar sampler on the tiny GGUF models: under a
grammar or a JSON schema, speculative output equals constrained plain decoding (greedy and
seeded), matches the grammar, and a bad or dead-end grammar is one GrammarError."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from specgguf.binding.grammar import GrammarError
from specgguf.core.sampling import SamplerParams
from specgguf.generator import Generator, GenParams, OutputGrammar
from tests.test_speculative_tiny import make_session

GREEDY = SamplerParams(temp=0.0)
HOT = SamplerParams(temp=1.0, top_k=40, top_p=0.95, min_p=0.0)
#: bounded, so that generation ends where the grammar does (then only EOS is allowed)
RECORD = r'root ::= "{\"id\": " [1-9] [0-9]{0,2} ", \"tag\": \"" [a-z ]{1,12} "\"}"'
RECORD_RE = re.compile(r'\{"id": [1-9][0-9]{0,2}, "tag": "[a-z ]{1,12}"\}')
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3},
    },
    "required": ["name", "ok", "tags"],
    "additionalProperties": False,
}
PROMPTS = ["the cat sat on", "def main():\n    return", "Once upon a time, in a land"]


@pytest.fixture(scope="module")
def sessions(tiny_target, tiny_draft):
    made = {
        "plain": make_session(tiny_target, None, []),
        # one-hot drafts: with them seeded sampling is token for token plain sampling
        # (with the grammar drafter, which drafts what the grammar forces)
        "draft": make_session(
            tiny_target,
            tiny_draft,
            ["draft-simple"],
            n_max=4,
            draft_sampling="greedy",
            grammar_draft=True,
        ),
        "ngram": make_session(tiny_target, None, ["ngram-simple"]),
    }
    yield made
    for s in made.values():
        s.close()


def text_of(session, prompt, grammar, sampler=GREEDY, seed=0, n=80, trace=False):
    gen = Generator(session, sampler=sampler, n_predict=n, seed=seed)
    g = gen.generate(
        gen.tokenize(prompt), GenParams(grammar=grammar, seed=seed), trace_probs=trace
    )
    rounds = [c.round for c in g if c.round is not None]
    return g.text, g.stop_reason, rounds


@pytest.mark.parametrize("sampler,seed", [(GREEDY, 0), (HOT, 7), (HOT, 8)])
def test_grammar_output_is_the_same_with_and_without_speculation(sessions, sampler, seed):
    grammar = OutputGrammar(RECORD)
    for prompt in PROMPTS:
        ref, why, _ = text_of(sessions["plain"], prompt, grammar, sampler, seed)
        assert RECORD_RE.fullmatch(ref) and why == "eos", ref
        for kind in ("draft", "ngram"):
            got, why2, _ = text_of(sessions[kind], prompt, grammar, sampler, seed)
            assert (got, why2) == (ref, why), kind


def test_a_json_schema_constrains_to_that_schema_under_speculation(sessions):
    grammar = OutputGrammar.from_schema(SCHEMA)
    for prompt in PROMPTS:
        ref, _, _ = text_of(sessions["plain"], prompt, grammar, n=120)
        obj = json.loads(ref)
        assert set(obj) == {"name", "ok", "tags"} and isinstance(obj["ok"], bool)
        assert len(obj["name"]) <= 10 and set(obj["tags"]) <= {"x", "y"}
        got, _, rounds = text_of(sessions["draft"], prompt, grammar, n=120)
        assert got == ref
        assert sum(len(r.proposed) for r in rounds) > 0


def forbidden_proposals(session, prompt, grammar):
    """(proposals of each drafter, the ones the grammar forbids at their place as (round,
    position in it)), walking a fresh grammar state over the emitted text round by round."""
    gen = Generator(session, sampler=GREEDY, n_predict=80, seed=0)
    _, _, rounds = text_of(session, prompt, grammar)
    state = gen.constraint(grammar)
    proposed: dict[str, int] = {}
    forbidden = []
    for r in rounds:
        walk = state.clone()
        for i, t in enumerate(r.proposed):
            if not walk.allowed(np.array([t]))[0]:
                forbidden.append((r, i))
                break
            walk.accept(t)
        if r.drafter is not None:
            proposed[r.drafter] = proposed.get(r.drafter, 0) + len(r.proposed)
        for t in r.emitted:
            state.accept(t)
    return proposed, forbidden


def test_a_draft_model_proposes_nothing_the_grammar_forbids(sessions):
    # draft-simple follows the grammar over the output and masks its own rows with it (that
    # a forbidden proposal is rejected, as any drafter's would be: tests/test_constraint_toy)
    proposed: dict[str, int] = {}
    for prompt in PROMPTS:
        got, forbidden = forbidden_proposals(sessions["draft"], prompt, OutputGrammar(RECORD))
        assert forbidden == []
        for k, v in got.items():
            proposed[k] = proposed.get(k, 0) + v
    assert proposed.get("draft-simple", 0) > 0


def test_unconstrained_text_differs(sessions):
    free, _, _ = text_of(sessions["plain"], PROMPTS[0], None, n=30)
    assert not RECORD_RE.fullmatch(free)


@pytest.mark.parametrize(
    "gbnf,why",
    [
        ('root ::= "a', "does not parse: unexpected end of input"),
        ("root ::= nothing", "Undefined rule identifier 'nothing'"),
        ('start ::= "a"', "does not contain a 'root' symbol"),
        ('root ::= root "a"', "left recursion"),
        ("   ", "the grammar is empty"),
    ],
)
def test_a_bad_grammar_is_one_line_before_anything_runs(sessions, gbnf, why, capfd):
    gen = Generator(sessions["plain"], n_predict=5)
    with pytest.raises(GrammarError) as e:
        gen.generate(gen.tokenize("hi"), GenParams(grammar=OutputGrammar(gbnf, "--grammar")))
    msg = str(e.value)
    assert msg.startswith("--grammar: ") and why in msg and "\n" not in msg
    assert e.value.code == 1
    assert capfd.readouterr().err == ""  # llama.cpp's own complaint is not on stderr


@pytest.mark.parametrize(
    "schema,why",
    [
        ("{nope", "not valid JSON"),
        ("[1, 2]", "a JSON schema is an object"),
        ({"type": "frobnicate"}, "cannot be turned into a grammar"),
        ({"$ref": "#/definitions/missing"}, "cannot be turned into a grammar"),
    ],
)
def test_a_bad_schema_is_one_line(schema, why):
    with pytest.raises(GrammarError) as e:
        OutputGrammar.from_schema(schema, "-j")
    assert str(e.value).startswith("-j: ") and why in str(e.value)


@pytest.mark.parametrize("kind", ["plain", "draft"])
def test_a_grammar_with_a_dead_end_stops_with_one_error(sessions, kind):
    # after "a" the grammar wants a NUL byte, which no token can be: nothing is allowed
    gen = Generator(sessions[kind], n_predict=20)
    g = gen.generate(gen.tokenize("hi"), GenParams(grammar=OutputGrammar(r'root ::= "a" "\x00"')))
    with pytest.raises(GrammarError) as e:
        for _ in g:
            pass
    assert g.done
    # "a" is the first token (the prompt's pass, nothing drafted); the next round, drafted
    # or not, meets the dead end and emits nothing
    assert "allows no token after 1 generated tokens" in str(e.value) and g.text == "a"

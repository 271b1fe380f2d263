"""The lazy grammar of tool_choice auto (specgguf/core/lazy_grammar.py): free text until a
trigger, the grammar from the trigger's first byte on (a trigger split over tokens, or inside a
token that carries more text, is seen; a token whose completed trigger the grammar refuses is
not allowed); nothing in the thinking is a trigger; an at_start trigger only opens the answer.
On the tiny models: greedy text under the lazy grammar is the same with and without
speculation (several drafters, a draft crossing the trigger), and what the model writes after
the trigger is held to a well-formed call."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specgguf.core.lazy_grammar import LazyGrammar, LazyRules, Trigger, TriggerVocab

#: a toy vocabulary: token id -> bytes; ids 100+b: the single byte b
PIECES = {1: b"hi ", 2: b"<call>", 3: b"<ca", 4: b"ll>", 5: b"ll>x", 6: b"ll>{", 7: b"{",
          8: b"}", 9: b"<think>", 10: b"</think>", 11: b"  ", 12: b'{"', 13: b"end",
          **{100 + b: bytes([b]) for b in range(256)}}  # fmt: skip
IDS = np.array(sorted(PIECES))


class Literal:
    """A toy grammar: exactly the bytes of `text` (allowed: a token whose bytes continue it)."""

    def __init__(self, text: bytes, at: int = 0):
        self.text, self.at = text, at

    def allowed(self, ids):
        return np.array([self.text.startswith(PIECES[int(t)], self.at) for t in ids])

    def accept(self, token):
        assert self.text.startswith(PIECES[token], self.at)
        self.at += len(PIECES[token])

    def clone(self):
        return Literal(self.text, self.at)


def piece(token: int) -> bytes:
    return PIECES.get(token, b"")


def spell(text: bytes):
    return [100 + b for b in text]


def lazy(*triggers: Trigger, grammar=b"<call>{}", thinking=(b"<think>", b"</think>")):
    rules = LazyRules(triggers or (Trigger(b"<call>"),), thinking)
    return LazyGrammar(TriggerVocab(rules, piece, spell, max(PIECES) + 1), Literal(grammar))


def allowed(g) -> set[int]:
    return {int(t) for t in IDS[g.allowed(IDS)]}


def test_free_until_the_trigger_then_the_grammar():
    g = lazy()
    assert allowed(g) >= {1, 7, 8, 13} and not g.active
    g.accept(1)
    g.accept(2)  # the trigger in one token: the grammar has read it
    assert g.active and g.grammar.at == len(b"<call>")
    assert allowed(g) == {7, 100 + ord("{")}


def test_a_trigger_split_over_tokens_and_one_carrying_more_text():
    g = lazy()
    for t in (1, 3, 4):
        g.accept(t)
    assert g.active and g.grammar.at == 6
    g = lazy()
    g.accept(3)
    # "ll>{" completes the trigger and carries the grammar's next byte: allowed and fed;
    # "ll>x" completes it with a byte the grammar refuses: not allowed
    ok = allowed(g)
    assert 6 in ok and 5 not in ok and 4 in ok and 1 in ok
    g.accept(6)
    assert g.active and g.grammar.at == 7 and allowed(g) == {8, 100 + ord("}")}


def test_nothing_in_the_thinking_is_a_trigger():
    g = lazy()
    for t in (9, 2, 1):
        g.accept(t)
    assert g.thinking and not g.active and 5 in allowed(g)  # "ll>x" after "<ca": free
    g.accept(10)
    g.accept(2)
    assert g.active
    g = lazy()
    g.prime([1, 9])  # the prompt opened the thinking
    g.accept(2)
    assert not g.active
    g = lazy()
    g.prime([2])  # nothing in the prompt is a trigger
    g.accept(1)
    assert not g.active


def test_an_at_start_trigger_opens_the_answer_only():
    g = lazy(Trigger(b'{"', at_start=True), grammar=b'{"a"}')
    for t in (11, 7):  # blanks, then the trigger's first byte
        g.accept(t)
    assert not g.active
    g.accept(100 + ord('"'))
    assert g.active and g.grammar.at == 2
    g = lazy(Trigger(b'{"', at_start=True), grammar=b'{"a"}')
    g.accept(1)  # text first: the same opening later is text
    g.accept(12)
    assert not g.active
    g = lazy(Trigger(b'{"', at_start=True), grammar=b'{"a"}')
    for t in (9, 13, 10, 11, 12):  # a thinking block and blanks may come first
        g.accept(t)
    assert g.active


def test_clones_are_independent():
    g = lazy()
    g.accept(3)
    c = g.clone()
    c.accept(4)
    assert c.active and not g.active
    g.accept(1)
    assert not g.active and c.grammar.at == 6 and g.grammar.at == 0  # not fed through c


def test_rules_need_a_trigger():
    with pytest.raises(ValueError):
        LazyRules((), None)
    with pytest.raises(ValueError):
        LazyRules((Trigger(b""),), None)


def test_many_ids_are_asked_through_the_vocabulary_mask():
    g = lazy()
    g.accept(3)
    big = np.concatenate([IDS] * 3)
    ok = g.allowed(big)
    assert {int(t) for t in big[ok]} == allowed(g) and 5 not in allowed(g)


# -- on the tiny models -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def sessions(tiny_target, tiny_draft):
    from tests.test_speculative_tiny import make_session, plain_and_speculative

    with plain_and_speculative(tiny_target, tiny_draft) as made:
        made["grammar+ngram"] = make_session(
            tiny_target, None, ["ngram-simple"], n_max=4, grammar_draft=True
        )
        made["draft-k8"] = make_session(
            tiny_target, tiny_draft, ["draft-simple"], n_max=8, draft_sampling="greedy"
        )
        try:
            yield made
        finally:
            made["grammar+ngram"].close()
            made["draft-k8"].close()


PROMPT = "The weather in Paris is"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                   "required": ["city"], "additionalProperties": False},
}}]  # fmt: skip


def run(session, grammar, n=80):
    from specgguf.core.sampling import SamplerParams
    from specgguf.generator import Generator, GenParams

    gen = Generator(session, sampler=SamplerParams(temp=0.0), n_predict=n, seed=0)
    g = gen.generate(gen.tokenize(PROMPT), GenParams(grammar=grammar))
    chunks = list(g)
    tokens = [t for c in chunks if c.round is not None for t in c.round.emitted]
    return "".join(c.text for c in chunks), tokens, [c.round for c in chunks if c.round]


@pytest.fixture(scope="module")
def trigger(sessions):
    """A text the tiny target writes by itself, a few tokens in: the call's opening here."""
    free, _, _ = run(sessions["plain"], None)
    start = 12
    return free[start : start + 3], free


def call_grammar(trigger: str):
    """The lazy grammar of a Hermes-like family whose calls open with `trigger`."""
    from dataclasses import replace

    from specgguf.chat.dialects import hermes
    from specgguf.chat.dialects.base import Forced
    from specgguf.generator import OutputGrammar

    dialect = replace(hermes.DIALECT, forced=Forced(before=trigger + "\n"), triggers=(trigger,))
    return OutputGrammar.lazy_for_tools(TOOLS, dialect, parallel=False)


def test_after_the_trigger_a_malformed_call_is_held_to_a_well_formed_one(sessions, trigger):
    opening, free = trigger
    assert opening in free
    after = free[free.index(opening) + len(opening) :]
    with pytest.raises(ValueError):
        json.loads(after)  # what the model writes there by itself is no call
    text, _, _ = run(sessions["plain"], call_grammar(opening))
    head, _, call = text.partition(opening)
    assert head == free[: free.index(opening)]  # the free text before it is untouched
    obj = json.loads(call)
    assert obj["name"] == "get_weather" and obj["arguments"]["city"] in ("Paris", "Rome")


@pytest.mark.parametrize("kind", ["draft", "ngram", "grammar+ngram", "draft-k8"])
def test_speculation_gives_plain_decodings_text_under_the_lazy_grammar(sessions, trigger, kind):
    from tests.near_tie import assert_same_or_near_tie

    grammar = call_grammar(trigger[0])
    _, ref, _ = run(sessions["plain"], grammar)
    _, got, _ = run(sessions[kind], grammar)
    prompt = sessions["plain"].tokenize(PROMPT)
    assert_same_or_near_tie(sessions["plain"], prompt, ref, got, 1e-3, label=kind)


def test_a_draft_that_crosses_the_trigger_is_verified_under_the_grammar(sessions, trigger):
    opening = trigger[0]
    text, tokens, rounds = run(sessions["draft-k8"], call_grammar(opening))
    _, ref, _ = run(sessions["plain"], call_grammar(opening))
    assert tokens == ref
    detok = sessions["plain"].detokenize
    at = text.index(opening) + len(opening)  # where the grammar starts holding
    crossed, done = False, 0
    for rnd in rounds:
        before = len(detok(tokens[:done]))
        after_accepted = len(detok(tokens[: done + rnd.n_accepted]))
        crossed |= before < at < after_accepted
        done += len(rnd.emitted)
    assert crossed, "no accepted draft spanned the trigger: the test proves nothing"



# -- every family's triggers ------------------------------------------------------------------


def lazy_answers() -> list[tuple[str, str]]:
    """(dialect, an answer holding its calls as it writes them: thinking first in some)."""
    from tests.test_dialect_thinkers import FORCED as FRAMED
    from tests.test_dialects import FORCED

    out = [(name, text) for name, text in FORCED.items()]
    out += [(name, text) for name, opened, text, _ in FRAMED if not opened]
    return out


@pytest.fixture(scope="module")
def vocab(tiny_target):
    from specgguf.binding import engine

    return engine.Model(tiny_target)


def walk(model, dialect, text: str) -> LazyGrammar | None:
    """The dialect's lazy grammar after `text` (each character's tokens), or None where it
    refused a token."""
    from specgguf.binding.grammar import byte_speller, compile_grammar
    from specgguf.chat.dialects import by_name
    from specgguf.generator import OutputGrammar
    from tests.test_dialects import TOOLS as FAMILY_TOOLS

    grammar = OutputGrammar.lazy_for_tools(FAMILY_TOOLS, by_name(dialect))
    inner = compile_grammar(model, grammar.gbnf, "test")
    vocab = TriggerVocab(grammar.lazy, model.piece_special, byte_speller(model), model.n_vocab)
    g = LazyGrammar(vocab, inner)
    for ch in text:
        for tok in model.tokenize(ch, add_special=False, parse_special=False):
            if not g.allowed(np.array([tok]))[0]:
                return None
            g.accept(tok)
    return g


def test_every_family_with_a_forced_form_declares_triggers():
    from specgguf.chat.dialects import DIALECTS

    # functionary v3.2 names the recipient first, as its plain answers do; generic is JSON
    # from the first character: neither has an opening to wait for
    without = {d.name for d in DIALECTS if d.forced is not None and not d.triggers}
    assert without == {"functionary-v3.2", "generic"}


@pytest.mark.parametrize("dialect,text", lazy_answers(), ids=lambda v: v[:20])
def test_each_familys_calls_start_its_lazy_grammar_and_are_taken_whole(vocab, dialect, text):
    from specgguf.chat.dialects import by_name

    d = by_name(dialect)
    if not d.triggers:
        pytest.skip("no lazy grammar")
    lead = "" if d.triggers_at_start else "Sure, let me look. "
    g = walk(vocab, dialect, lead + text)
    assert g is not None and g.active
    assert g.allowed(np.array([vocab.eos]))[0]  # the calls are whole: the answer may end
    # the trigger followed by what is no call of the family: refused
    assert walk(vocab, dialect, lead + d.triggers[0] + "\x01nonsense") is None
    # words before the trigger, or the trigger in the thinking, leave the answer free
    think = d.thinking[0] + d.triggers[0] + " no call" + d.thinking[1]
    g = walk(vocab, dialect, think + " Words.")
    assert g is not None and not g.active
    if d.triggers_at_start:
        g = walk(vocab, dialect, "Words first. " + text)
        assert g is not None and not g.active


def test_the_docs_table_names_each_familys_triggers():
    import re
    from pathlib import Path

    from specgguf.chat.dialects import DIALECTS

    doc = (Path(__file__).parent.parent / "docs" / "structured-output.md").read_text()
    for d in DIALECTS:
        row = re.search(r"^\| `" + re.escape(d.name) + r"` \| .*\| ([^|]*(?:\\\|[^|]*)*) \|$",
                        doc, re.M)  # fmt: skip
        assert row is not None, d.name
        last = row.group(1).replace("\\|", "|")
        if not d.triggers:
            assert last.startswith("none"), d.name
        for t in d.triggers:
            assert f"`{t}`" in last, (d.name, t, last)
        assert ("first text" in last) == d.triggers_at_start, d.name


def test_the_server_adds_the_lazy_grammar_under_auto_only():
    from specgguf.chat.dialects import by_name
    from specgguf.server.protocol import parse_chat

    body = {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}
    hermes, generic = by_name("hermes"), by_name("generic")
    auto = parse_chat(body, hermes)
    assert auto.params.grammar.lazy.triggers[0].text == b"<tool_call>" and auto.forced is None
    assert parse_chat({**body, "tool_choice": "auto"}, hermes).params.grammar.lazy is not None
    required = parse_chat({**body, "tool_choice": "required"}, hermes).params.grammar
    assert required.lazy is None
    assert parse_chat(body, generic).params.grammar is None  # no trigger: free
    own = parse_chat({**body, "grammar": 'root ::= "x"'}, hermes).params.grammar
    assert own.lazy is None and own.gbnf == 'root ::= "x"'  # the request's grammar is kept
    assert parse_chat({**body, "tool_choice": "none"}, hermes).params.grammar is None

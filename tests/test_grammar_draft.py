"""The grammar drafter (--spec-type grammar): it proposes the text the grammar forces, which
the target then accepts; output stays that of constrained plain decoding."""

from __future__ import annotations

import numpy as np
import pytest

from specgguf.core.sampling import SamplerParams
from specgguf.drafters.grammar_draft import GrammarDrafter, GrammarDraftSource
from specgguf.drafters.registry import SPEC_TYPES, BuildContext
from specgguf.generator import Generator, GenParams, OutputGrammar
from tests.test_grammar_tiny import PROMPTS, RECORD, RECORD_RE
from tests.test_speculative_tiny import make_session

EOG = 200


class Words:
    """A toy grammar over a character vocabulary (token i spells chr(i)): the text must be
    one of `texts`, then the end."""

    def __init__(self, texts, done: str = "") -> None:
        self.texts, self.done = tuple(texts), done

    def allowed(self, ids):
        out = []
        for t in np.asarray(ids).tolist():
            if t == EOG:
                out.append(self.done in self.texts)
            else:
                out.append(any(x.startswith(self.done + chr(t)) for x in self.texts))
        return np.array(out, dtype=bool)

    def accept(self, token: int) -> None:
        assert self.allowed([token])[0]
        self.done += chr(token) if token != EOG else ""

    def clone(self):
        return Words(self.texts, self.done)


def drafter(texts) -> GrammarDrafter:
    chars = [chr(c) for c in range(32, 127)]
    return GrammarDrafter(
        GrammarDraftSource(
            Words(texts),
            np.array([ord(c) for c in chars]),
            chars,
            np.array([EOG]),
            lambda text: [ord(c) for c in text],
        )
    )


def test_it_proposes_exactly_the_forced_text():
    d = drafter(['{"year": 1999}', '{"year": 2001}', '{"title": "x"}'])
    d.begin([1, 2, 3])
    assert d.forced_text() == '{"'  # then "year" or "title"
    d.observe([ord(c) for c in '{"y'])
    assert d.forced_text() == 'ear": '  # then 1 or 2
    assert d.propose(3).tokens == [ord(c) for c in 'ear']  # capped at the budget
    d.observe([ord(c) for c in 'ear": 2'])
    assert d.forced_text() == "001}"
    d.observe([ord(c) for c in "001}"])
    assert d.forced_text() == "" and d.propose(8).tokens == []  # only the end is left


def test_without_a_grammar_it_never_proposes():
    d = SPEC_TYPES["grammar"].build(BuildContext())
    d.begin([1, 2])
    d.observe([3])
    assert d.name == "grammar" and d.free and d.propose(8).tokens == []


@pytest.fixture(scope="module")
def sessions(tiny_target, tiny_draft):
    made = {
        "plain": make_session(tiny_target, None, []),
        "ngram": make_session(tiny_target, None, ["ngram-simple"], grammar_draft=True),
        "exact": make_session(tiny_target, None, ["ngram-simple"]),
        "only": make_session(tiny_target, None, ["grammar"]),
    }
    yield made
    for s in made.values():
        s.close()


GREEDY = SamplerParams(temp=0.0)


def rounds_of(session, prompt, sampler=GREEDY, seed=0):
    gen = Generator(session, sampler=sampler, n_predict=80, seed=seed)
    g = gen.generate(gen.tokenize(prompt), GenParams(grammar=OutputGrammar(RECORD)))
    rounds = [c.round for c in g if c.round is not None]
    return g.text, rounds


@pytest.mark.parametrize(
    "sampler,seed", [(GREEDY, 0), (SamplerParams(temp=1.0, min_p=0.0), 5)]
)
def test_under_a_grammar_it_joins_when_asked_and_is_accepted(sessions, sampler, seed):
    for prompt in PROMPTS:
        ref, _ = rounds_of(sessions["plain"], prompt, sampler, seed)
        assert RECORD_RE.fullmatch(ref)
        for kind in ("ngram", "only"):
            text, rounds = rounds_of(sessions[kind], prompt, sampler, seed)
            assert text == ref, kind
            mine = [r for r in rounds if r.drafter == "grammar"]
            # '{"id": ' is forced at the start, ', "tag": "' after the digits
            assert len(mine) >= 2
            assert sum(r.n_accepted for r in mine) >= 0.8 * sum(len(r.proposed) for r in mine)
        # not asked for (the default): no grammar drafter
        text, rounds = rounds_of(sessions["exact"], prompt, sampler, seed)
        assert text == ref and all(r.drafter != "grammar" for r in rounds)

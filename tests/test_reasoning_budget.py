"""The thinking budget (specgguf/core/reasoning_budget.py, --reasoning-budget,
reasoning_budget_tokens): the closing of the thinking forced after N tokens of it (0: at once),
the thinking's own closing ending it first, a character's UTF-8 bytes completed before the
closing, a prompt that opened the thinking counting from its start; and on the tiny models the
text is the same with and without speculation, the thinking cut where the budget says."""

from __future__ import annotations

import os

import numpy as np
import pytest

from specgguf.core.reasoning_budget import (
    COUNTING,
    DONE,
    FORCING,
    IDLE,
    BudgetMarkers,
    ReasoningBudget,
    utf8_complete,
)

#: a toy vocabulary: token id -> bytes (7-8: the closing's two tokens)
PIECES = {1: b"<think>", 2: b"a", 3: b"b", 4: b"\xc3", 5: b"\xa9", 6: b"ok",
          7: b"</thi", 8: b"nk>", 9: b"<th", 10: b"ink>"}  # fmt: skip
MARKERS = BudgetMarkers(b"<think>", b"</think>", (7, 8))


def budget(n: int, inner=None) -> ReasoningBudget:
    return ReasoningBudget(MARKERS, n, PIECES.__getitem__, inner)


def allowed(b: ReasoningBudget) -> list[int]:
    ids = np.array(sorted(PIECES))
    return [int(i) for i in ids[b.allowed(ids)]]


def test_the_closing_is_forced_after_the_budget():
    b = budget(2)
    b.accept(2)
    assert b.state == IDLE  # no thinking yet: nothing counts
    for t in (1, 2, 3):
        b.accept(t)
    assert b.state == FORCING and allowed(b) == [7]
    b.accept(7)
    assert allowed(b) == [8]
    b.accept(8)
    assert b.state == DONE and allowed(b) == sorted(PIECES)


def test_a_budget_of_zero_closes_the_thinking_as_it_opens():
    b = budget(0)
    b.accept(1)
    assert allowed(b) == [7]


def test_its_own_closing_ends_the_thinking_and_a_new_opening_counts_again():
    b = budget(3)
    for t in (1, 2, 7, 8):  # the model closed it itself, in the closing's own tokens
        b.accept(t)
    assert b.state == DONE
    for t in (9, 10, 2, 2, 2):  # an opening spelled in other tokens is seen all the same
        b.accept(t)
    assert b.state == FORCING


def test_the_budget_waits_for_a_character_to_be_whole():
    b = budget(1)
    b.accept(1)
    b.accept(4)  # the first byte of é: the budget is spent, the character is not
    assert b.state != FORCING and allowed(b) == sorted(PIECES)
    b.accept(5)
    assert b.state == FORCING
    assert utf8_complete("é".encode()) and not utf8_complete("é".encode()[:1])
    assert utf8_complete(b"") and utf8_complete("漢".encode()) and not utf8_complete(b"\xe6\xbc")


def test_a_prompt_that_opened_the_thinking_counts_from_there():
    b = budget(2)
    b.prime([6, 1])
    assert b.state == COUNTING and b.remaining == 2
    # a marker whose last token carries more text (">\n") is seen too
    pieces = {**PIECES, 11: b"ink>\n", 12: b"</think>\n\nok"}
    b = ReasoningBudget(MARKERS, 5, pieces.__getitem__)
    b.prime([9, 11])
    assert b.state == COUNTING
    b.accept(12)
    assert b.state == DONE


class OnlyEven:
    """A toy inner constraint: even tokens only (accepting records the tokens)."""

    def __init__(self):
        self.seen = []

    def allowed(self, ids):
        return np.asarray(ids) % 2 == 0

    def accept(self, token):
        self.seen.append(token)

    def clone(self):
        c = OnlyEven()
        c.seen = list(self.seen)
        return c


def test_an_inner_constraint_holds_too_and_clones_are_independent():
    b = budget(5, OnlyEven())
    assert allowed(b) == [2, 4, 6, 8, 10]
    b.accept(2)
    c = b.clone()
    c.accept(4)
    assert b.inner.seen == [2] and c.inner.seen == [2, 4]
    b.prime([1])
    assert b.inner.seen == [2] and b.state == COUNTING


# -- on the tiny models -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def sessions(tiny_target, tiny_draft):
    from tests.test_speculative_tiny import plain_and_speculative

    with plain_and_speculative(tiny_target, tiny_draft) as made:
        yield made


#: the prompt opened the thinking; the grammar holds the answer to thinking, then a word
THINK_THEN_WORD = 'root ::= [a-z ]{0,60} "</think>" [a-z]{1,6}'


def thought(session, budget_tokens, sampler_temp=0.0, seed=0):
    from specgguf.core.sampling import SamplerParams
    from specgguf.generator import Generator, GenParams, OutputGrammar

    sampler = SamplerParams(temp=sampler_temp, top_k=40)
    gen = Generator(session, sampler=sampler, n_predict=60, seed=seed)
    params = GenParams(grammar=OutputGrammar(THINK_THEN_WORD), seed=seed,
                       reasoning_budget=budget_tokens)  # fmt: skip
    g = gen.generate(gen.tokenize("Let me see. <think>\n"), params)
    text = "".join(c.text for c in g)
    return text


@pytest.mark.parametrize("temp,seed", [(0.0, 0), (1.0, 1), (1.0, 6)])
def test_the_budget_cuts_the_thinking_and_speculation_changes_nothing(sessions, temp, seed):
    free = thought(sessions["plain"], None, temp, seed)
    assert "</think>" in free
    for n in (0, 3):
        ref = thought(sessions["plain"], n, temp, seed)
        head = ref.split("</think>")[0]
        assert free.startswith(head) and len(head) < len(free.split("</think>")[0]), (ref, free)
        if n == 0:
            assert head == ""
        for kind in ("draft", "ngram"):
            assert thought(sessions[kind], n, temp, seed) == ref, (kind, n)


# -- the flags ----------------------------------------------------------------------------------


def test_run_takes_the_budget_for_a_chat_answer(capfd, monkeypatch, tiny_target):
    from specgguf_cli.app import run_cli

    from tests.test_cli_errors import FAST

    for var in [v for v in os.environ if v.startswith("LLAMA_ARG_")]:
        monkeypatch.delenv(var)
    grammar = 'root ::= "<think>" [a-z ]{0,30} "</think>" [a-z]{1,5}'
    base = ["run", "-m", str(tiny_target), *FAST, "--chat", "-p", "hi", "-q", "-n", "60",
            "--temp", "0", "--grammar", grammar]  # fmt: skip
    assert run_cli([*base, "--reasoning-budget", "0"]) == 0
    out = capfd.readouterr().out
    assert out.startswith("<think></think>"), out
    assert run_cli([*base, "--reasoning-budget", "-2"]) != 0
    err = capfd.readouterr().err
    assert "--reasoning-budget must be -1" in err and "Traceback" not in err

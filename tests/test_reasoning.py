"""A thinking model's reasoning apart from its answer (specgguf/chat/reasoning.py): whole and
fed in random pieces, when the answer opens <think> and when the prompt already did, a call
written inside the thinking is no call; and on the server, message.reasoning_content and
streamed reasoning_content deltas, reasoning_format none leaving the text as it is."""

from __future__ import annotations

import random

import pytest

from specgguf.chat.reasoning import (
    CONTENT,
    REASONING,
    ReasoningSplit,
    prompt_opens_thinking,
    split_reasoning,
)
from specgguf.chat.tools import split_tool_calls
from tests.test_tools import CALL, TOOLS

CASES = [
    # (answer, the prompt opened <think>, reasoning, content)
    ("<think>\nI'm\nthinking\n</think>\n\nHello, world!", False, "I'm\nthinking", "Hello, world!"),
    ("I'm\nthinking\n</think>\n\nHello, world!", True, "I'm\nthinking", "Hello, world!"),
    ("Hello, world!", False, "", "Hello, world!"),
    ("  <think>a</think>b", False, "a", "b"),
    ("x <think>a</think>b", False, "", "x <think>a</think>b"),  # only where the answer begins
    ("<think>cut short", False, "cut short", ""),
    ("<thin", False, "", "<thin"),
    (f"<think>maybe {CALL}</think>\nDone.", False, f"maybe {CALL}", "Done."),
]


@pytest.mark.parametrize("text,opened,reasoning,content", CASES)
def test_split_whole_and_in_random_pieces(text, opened, reasoning, content):
    assert split_reasoning(text, opened=opened) == (reasoning, content)
    rng = random.Random(len(text))
    for _ in range(20):
        s = ReasoningSplit(opened=opened)
        i, got = 0, []
        while i < len(text):
            n = rng.randint(1, 6)
            got += s.feed(text[i : i + n])
            i += n
        got += s.close()
        assert "".join(t for k, t in got if k == CONTENT) == content
        assert "".join(t for k, t in got if k == REASONING).rstrip() == reasoning


def test_a_call_inside_the_thinking_is_no_call():
    text = f"<think>I could {CALL}</think>\nNo call needed."
    _, content = split_reasoning(text)
    assert split_tool_calls(content, TOOLS) == ("No call needed.", [])


def test_a_prompt_that_opens_thinking():
    assert prompt_opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n")

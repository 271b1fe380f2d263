"""The near-tie judge the greedy-equality tests share (tests.near_tie), on a stand-in target
whose logits are set by the test: it passes equal outputs and partings at a near-tie, and
fails partings at a clear winner or away from the top two."""

from __future__ import annotations

import numpy as np
import pytest

from tests.near_tie import assert_same_or_near_tie, first_difference, top_two


class Target:
    """Logits after any context: `row`; remembers what it was asked."""

    def __init__(self, row: list[float]) -> None:
        self.row = np.array(row, dtype=np.float32)
        self.asked: list[list[int]] = []

    def truncate(self, n: int) -> None:
        assert n == 0

    def decode(self, tokens, seq, outputs):
        assert outputs == "last"
        self.asked.append(list(tokens))
        return [self.row]


class Session:
    def __init__(self, row: list[float]) -> None:
        self.target = Target(row)


def test_top_two_and_first_difference():
    assert top_two([0.0, 3.0, 2.5, -1.0]) == (1, 2, 0.5)
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2, 3], [1, 2]) == 2


def test_equal_outputs_ask_nothing():
    s = Session([0.0, 1.0])
    assert_same_or_near_tie(s, [7], [1, 2], [1, 2], 0.25)
    assert s.target.asked == []


def test_a_parting_at_a_near_tie_passes_and_is_judged_after_the_common_prefix():
    s = Session([0.0, 2.0, 1.9])  # tokens 1 and 2 within 0.1
    assert_same_or_near_tie(s, [7, 8], [5, 1, 4], [5, 2, 9], 0.25)
    assert s.target.asked == [[7, 8, 5]]


@pytest.mark.parametrize(
    ("row", "got", "between_top_two"),
    [
        ([0.0, 2.0, 1.0], [5, 2], True),  # a clear winner (gap 1.0)
        ([1.95, 2.0, 1.9], [5, 2], True),  # a near tie, but token 2 is third
        ([0.0, 2.0, 1.0], [5, 2], False),
    ],
)
def test_a_parting_elsewhere_fails(row, got, between_top_two):
    with pytest.raises(AssertionError):
        assert_same_or_near_tie(
            Session(row), [7], [5, 1], got, 0.25, between_top_two=between_top_two
        )


def test_by_the_gap_alone_the_tokens_taken_may_be_any():
    assert_same_or_near_tie(Session([1.95, 2.0, 1.9]), [7], [5, 1], [5, 2], 0.25,
                            between_top_two=False)  # fmt: skip

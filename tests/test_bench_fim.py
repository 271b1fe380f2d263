"""scripts/bench_fim.py's judging of texts that part from speculation off's: where they
part, and whether a part is a near tie of the target's best two (tests/near_tie.py's rule)."""

from __future__ import annotations

from scripts.bench_fim import judge_part, parts
from tests.near_tie import REAL_NEAR_TIE

EOG = 99


def is_eog(token: int) -> bool:
    return token == EOG


def test_parts_finds_each_completions_first_difference() -> None:
    off = [{"tokens": [1, 2, 3], "content": "abc"}, {"tokens": [1, 2], "content": "ab"},
           {"tokens": [5, 6], "content": "ef"}]  # fmt: skip
    side = [{"tokens": [1, 2, 3], "content": "abc"}, {"tokens": [1, 2, 7], "content": "abg"},
            {"tokens": [5, 8], "content": "eh"}]  # fmt: skip
    assert parts(side, off) == [(1, 2), (2, 1)]


def test_the_same_text_with_its_end_token_listed_is_no_part() -> None:
    # llama-server lists the end-of-generation token among the answer's tokens, off does not
    off = [{"tokens": [1, 2], "content": "ab"}]
    assert parts([{"tokens": [1, 2, EOG], "content": "ab"}], off) == []


def test_a_part_between_the_best_two_under_the_bound_is_a_near_tie() -> None:
    v = judge_part([1, 2, 3], [1, 2, 4], 2, (4, 3, 0.05), is_eog)
    assert v["near_tie"] and (v["off"], v["side"]) == (3, 4)
    assert not judge_part([1, 2, 3], [1, 2, 4], 2, (4, 3, REAL_NEAR_TIE + 0.01), is_eog)[
        "near_tie"
    ]


def test_a_token_outside_the_best_two_is_no_near_tie_however_small_the_gap() -> None:
    assert not judge_part([1, 2, 3], [1, 2, 4], 2, (3, 5, 0.01), is_eog)["near_tie"]


def test_a_side_that_ended_took_an_end_of_generation_token() -> None:
    # off's tokens stop at the part: it ended there, so an end token must be among the two
    v = judge_part([1, 2], [1, 2, 4], 2, (EOG, 4, 0.1), is_eog)
    assert v["near_tie"] and v["off"] is None
    assert not judge_part([1, 2], [1, 2, 4], 2, (7, 4, 0.1), is_eog)["near_tie"]

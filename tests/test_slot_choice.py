"""--slot-prompt-similarity: which free slot a request takes. The slot whose cached prompt
shares the longest prefix with the request's, if that prefix is more than the threshold's
fraction of the prompt; else the least recently used slot (an empty one first).

The rule on a stand-in generator (no model), then on a served tiny model: a conversation's
next turn lands on the slot that holds its beginning, and reuses it, where the least
recently used slot is another."""

from __future__ import annotations

import pytest

from specgguf.generator import GenParams
from specgguf.server.scheduler import Job, Scheduler, SlotSettings
from tests.serve_helpers import FAST, serving


class _Caches:
    """A generator's slots as token lists (what shared_prefix reads), none owned by another
    key."""

    def __init__(self, caches: list[list[int]]) -> None:
        self.caches = caches
        self.n_slots = len(caches)
        self.rendezvous = None

    def shared_prefix(self, slot: int, tokens, namespace=None) -> int:
        n = 0
        for a, b in zip(self.caches[slot], tokens, strict=False):
            if a != b:
                break
            n += 1
        return n


def _chosen(caches: list[list[int]], prompt: list[int], threshold: float,
            used: tuple[int, ...] = ()) -> int:  # fmt: skip
    """The slot a request for `prompt` takes among all, free, after `used` were used in
    that order."""
    sched = Scheduler(_Caches(caches), slots=SlotSettings(prompt_similarity=threshold))  # type: ignore[arg-type]
    for slot in used:
        sched._used(slot)
    job = Job(prompt, GenParams(), None)  # type: ignore[arg-type]
    return sched._choose_slot(list(range(len(caches))), job)


PROMPT = list(range(100, 120))  # 20 tokens


def test_the_slot_holding_the_prompts_prefix_wins_over_the_least_recently_used():
    caches = [[1, 2, 3], PROMPT[:10], []]
    assert _chosen(caches, PROMPT, 0.1, used=(1, 0)) == 1  # 10/20 > 0.1, not slot 2 (empty)


def test_the_longest_prefix_wins():
    caches = [PROMPT[:4], PROMPT[:12], PROMPT[:8]]
    assert _chosen(caches, PROMPT, 0.1) == 1


def test_below_the_threshold_the_least_recently_used_slot():
    caches = [PROMPT[:5], PROMPT[:2], [7]]  # 5/20 and 2/20
    assert _chosen(caches, PROMPT, 0.3, used=(2, 1, 0)) == 2
    assert _chosen(caches, PROMPT, 0.3, used=(0, 2, 1)) == 0
    # exactly the threshold is not more than it
    assert _chosen(caches, PROMPT, 0.25, used=(2, 1, 0)) == 2


def test_an_empty_slot_is_the_least_recently_used():
    caches = [[7], [8], []]
    assert _chosen(caches, PROMPT, 0.1, used=(0, 1)) == 2
    # never used at all: the lowest index
    assert _chosen([[], [], []], PROMPT, 0.1) == 0


def test_zero_disables_the_prompt_match():
    caches = [[1], PROMPT, []]
    assert _chosen(caches, PROMPT, 0.0, used=(2, 1, 0)) == 2


# -- on a served tiny model ------------------------------------------------------------------

TEXTS = [
    "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm red mat "
    "near the door of the old house",
    "seven green apples fell from the tall tree into the river and floated away past the "
    "mill towards the sea at dawn",
    "a small robot counted the stars every night and wrote their numbers in a blue notebook "
    "that nobody ever read",
]


@pytest.fixture(scope="module")
def server(tiny_target):
    yield from serving(["-m", str(tiny_target), *FAST, "-c", "3072", "-np", "3"])


def _complete(server, prompt: str) -> dict:
    return server.post("/completion", {"prompt": prompt, "n_predict": 2})


def test_a_next_turn_lands_on_the_slot_that_holds_its_beginning(server):
    slots = [_complete(server, t)["id_slot"] for t in TEXTS]
    assert sorted(slots) == [0, 1, 2]  # three prompts, three slots (each new one empty)
    # the least recently used slot is the first text's; the second text's next turn goes to
    # the slot that holds it, and evaluates only what follows
    follow = TEXTS[1] + " and the fishermen"
    prompt_n = len(server.post("/tokenize", {"content": TEXTS[1]})["tokens"])
    answer = _complete(server, follow)
    assert answer["id_slot"] == slots[1]
    assert answer["timings"]["cache_n"] >= prompt_n - 1
    assert answer["tokens_cached"] > prompt_n


def test_a_new_prompt_takes_the_least_recently_used_slot(server):
    order = [_complete(server, t)["id_slot"] for t in TEXTS]
    answer = _complete(server, "an unrelated question about the weather on mars tomorrow")
    assert answer["id_slot"] == order[0]

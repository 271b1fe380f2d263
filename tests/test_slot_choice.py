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


# -- id_slot: a request that names its slot --------------------------------------------------


def test_a_job_waits_for_the_slot_it_names_while_others_go_ahead():
    """llama-server's id_slot: a job naming a busy slot waits (in its place in the queue), a
    job after it that names none takes a free slot meanwhile."""
    sched = Scheduler(_Caches([[], [], []]), slots=SlotSettings())  # type: ignore[arg-type]
    sched._active[1] = object()  # slot 1 busy
    named = Job(PROMPT, GenParams(id_slot=1), None)  # type: ignore[arg-type]
    anyone = Job(PROMPT, GenParams(), None)  # type: ignore[arg-type]
    sched._waiting.extend([named, anyone])
    started = sched._assign()
    assert started == [anyone] and anyone.slot in (0, 2)
    assert list(sched._waiting) == [named]
    del sched._active[1]  # the slot frees: the named job takes it, not another free one
    assert sched._assign() == [named] and named.slot == 1


def test_id_slot_runs_the_request_in_that_slot(server):
    """Each text's cache sits in another slot than the one named: the choice by prefix
    would pick that slot; the named one runs the request instead."""
    homes = [_complete(server, t)["id_slot"] for t in TEXTS]
    for i, text in enumerate(TEXTS):
        named = homes[(i + 1) % 3]
        answer = server.post("/completion", {"prompt": text + " again", "n_predict": 2,
                                             "id_slot": named})  # fmt: skip
        assert answer["id_slot"] == named


@pytest.mark.parametrize("bad", [3, -2, "1", 1.5])
def test_an_id_slot_the_server_has_not_is_a_400(server, bad):
    status, _, body = server.request("POST", "/completion", {"prompt": "hi", "n_predict": 1,
                                                             "id_slot": bad})  # fmt: skip
    assert status == 400
    assert "id_slot" in body["error"]["message"]

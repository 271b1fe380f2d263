"""A drafter's proposals as the loop received them, for tests that check what a draft carries
(its q distributions) rather than what was accepted."""

from __future__ import annotations


def record_proposals(drafter) -> list:
    """Every Draft `drafter.propose` returns from now on, in order; the drafter drafts as
    before."""
    seen: list = []
    propose = drafter.propose

    def spy(budget, gate=None):
        draft = propose(budget, gate)
        seen.append(draft)
        return draft

    drafter.propose = spy
    return seen

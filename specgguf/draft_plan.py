"""Before loading: should `run --spec-draft-n-max auto` load the draft model at all?

The library's answer for the command line (which reaches auto only through the library), read
from this machine's profile without importing the model runtime, so that it can be asked
before anything is loaded. The decision itself is specgguf.auto.preload's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specgguf.auto.preload import DraftLoadPlan, plan_draft_load
from specgguf.drafters.draft_lengths import AUTO_N_MAX_CAP

#: the drafter whose model `run` may leave unloaded where it cannot pay
DRAFT_MODEL_TYPE = "draft-simple"


def draft_load_plan(load: Any, types: Sequence[str]) -> DraftLoadPlan:
    """Whether to leave the draft model out (the profile is confident it cannot pay here), or
    load it and measure it again; `load` is the run's LoadOptions (what the profile's key is
    made of). A skip is counted in the profile at once, so that the re-check comes round
    however the run ends."""
    if DRAFT_MODEL_TYPE not in types or getattr(load, "model_draft", None) is None:
        return DraftLoadPlan()
    from specgguf.auto.profile import load_profile, note_skipped_load, profile_path

    path = profile_path(load)
    plan = plan_draft_load(load_profile(path), DRAFT_MODEL_TYPE, AUTO_N_MAX_CAP)
    if plan.skip is not None:
        note_skipped_load(path, DRAFT_MODEL_TYPE)
    return plan

"""The warm-up at load (llama.cpp's `--warmup`, on by default; `--no-warmup` skips it).

A model's first pass pays for set-up that no later pass pays (thread pools started, weights
read from the page cache or the disk for the first time, kernels chosen): llama.cpp runs one
empty pass of each model at load so that the first request does not. So does specgguf, and
under auto the same passes answer a question a fresh process cannot otherwise answer before
its first request: what a verify pass and a draft step cost on this machine. Without that,
auto's first rounds probe widths and the draft model (plain steps, wasted drafts, a draft
model made to read a long prompt that cannot pay here), and the first request is the worst.

So where the machine profile does not already know them (a fresh machine, new models or load
options), the warm-up times a 1-, 2- and 5-token target pass and a draft step, twice each
after one untimed pass: a few target steps (well under a second on a GPU, about a second for a
1.5B F16 model on two CPU cores). Those timings seed auto as a profile whose estimates count
CALIBRATION_WEIGHT samples (less than one round's measurement once a run has a few: the run's
own rounds take over at once) and are merged into the profile file, so the next process
starts from them without measuring again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specgguf.auto.profile import CostProfile
from specgguf.cost_curve import measure_cost_curve

if TYPE_CHECKING:
    from specgguf.loading.session import Session

#: the target pass widths the warm-up times: a plain step and two verify widths (auto judges
#: whether a draft can pay at all only once it knows two)
WIDTHS = (1, 2, 5)
#: timed repetitions of each (the median of two: one stall cannot make a decision)
REPS = 2
#: what each timing counts as in the profile: one sample, under what `run` needs before it
#: leaves a draft model out altogether (specgguf.auto.preload), so that verdict always waits
#: for a real run's measurements
CALIBRATION_WEIGHT = 1.0
#: the text the timed passes read (what it says does not matter to a pass's cost)
TEXT = "def main():\n    print("


def needs_calibration(prior: CostProfile | None, draft_type: str | None) -> bool:
    """Whether `prior` lacks what auto's first rounds would otherwise probe for: two verify
    widths, and the draft step of `draft_type` (None: no draft model or head)."""
    if prior is None or sum(1 for k in prior.verify if k >= 1) < 2:
        return True
    return draft_type is not None and draft_type not in prior.draft


def warm_up(session: Session, *, auto: bool, prior: CostProfile | None) -> CostProfile | None:
    """One untimed pass of the target and of the draft (the KV caches are left empty); under
    `auto`, where `prior` (the machine profile) lacks what the first rounds would probe for,
    the timed passes too, returned as a profile (None when nothing was timed)."""
    tokens = session.target_model.tokenize(TEXT)
    target, draft, draft_tokens, draft_type = session.timing_contexts(tokens)
    timeable = _timeable(session)
    if auto and timeable and needs_calibration(prior, draft_type if draft is not None else None):
        curve = measure_cost_curve(session, tokens, max(WIDTHS) - 1, reps=REPS, grid=WIDTHS,
                                   warm=True)  # fmt: skip
        timed = curve.to_profile(weight=CALIBRATION_WEIGHT)
        timed.stored = False
        return timed
    target.decode(tokens[:1], 0, outputs="last")
    target.truncate(0)
    if draft is not None and timeable:
        draft.decode((draft_tokens or tokens)[:1], 0, outputs="last")
        draft.truncate(0)
    return None


def _timeable(session: Session) -> bool:
    """A draft model (or none, or an MTP head) steps on its own; the EAGLE-3 and DFlash heads
    read the target's hidden states, so a lone step of theirs is not what a round costs (they
    are warmed by the first request and measured by auto's rounds)."""
    return session.info.eagle3 is None and session.info.dflash is None

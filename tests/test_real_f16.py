"""The regime a draft model pays in: the default target as F16 (`specgguf pull target-f16`),
whose 3.4 GB are read on every step as a ~6B Q4 model's would be, with the 0.5B Q4 draft.

Correctness only (speed belongs in `specgguf bench`): greedy drafting equals plain greedy
decoding but at near-ties of the target's top two logits (a (K+1)-token pass and a 1-token
pass round differently), and consecutive default runs through one profile stay lossless while
the profile learns the pair's acceptance.
"""

from __future__ import annotations

import pytest

from specgguf.auto.profile import load_profile
from specgguf.core.sampling import SamplerParams
from specgguf.loading.session import LoadOptions, Session, SpecOptions
from specgguf.modelfiles.models import DRAFT, TARGET_F16, is_present, model_path
from tests.near_tie import REAL_NEAR_TIE, assert_same_or_near_tie, greedy
from tests.test_real_pair import CODE_PROMPTS

GREEDY = SamplerParams(temp=0.0)

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(
        not (is_present(TARGET_F16) and is_present(DRAFT)),
        reason="run `specgguf pull target-f16 draft` first",
    ),
]


@pytest.fixture(scope="module")
def plain():
    load = LoadOptions(model=model_path(TARGET_F16), n_ctx=1024)
    s = Session(load, SpecOptions(types=[]))
    yield s
    s.close()


def test_f16_draft_simple_matches_plain_or_parts_at_a_near_tie(plain):
    load = LoadOptions(model=model_path(TARGET_F16), model_draft=model_path(DRAFT), n_ctx=1024)
    spec = Session(load, SpecOptions(types=["draft-simple"], n_max=4))
    try:
        tokens = plain.tokenize(CODE_PROMPTS[0])
        ref, _ = greedy(plain, tokens, 48)
        got, stats = greedy(spec, tokens, 48)
        assert stats.n_drafted > 0 and stats.n_accept > 0
        assert_same_or_near_tie(plain, tokens, ref, got, REAL_NEAR_TIE, label="draft-simple")
    finally:
        spec.close()


def test_default_runs_through_one_profile_stay_lossless_and_remember_acceptance(plain):
    """Two default (auto) runs as `run` makes them: each seeded from the machine profile and
    saving to it."""
    from specgguf.generator import Generator, GenParams, spec_options

    load = LoadOptions(model=model_path(TARGET_F16), model_draft=model_path(DRAFT), n_ctx=1024)
    session = Session(load, spec_options(["draft-simple"], None))
    try:
        tokens = plain.tokenize(CODE_PROMPTS[0])
        ref, _ = greedy(plain, tokens, 32)
        for run in range(2):
            gen = Generator(session, sampler=GREEDY, auto=True, profile=True)
            got = [
                t for c in gen.generate(tokens, GenParams(n_predict=32)) if c.round
                for t in c.round.emitted
            ]  # fmt: skip
            gen.save_profile()
            assert_same_or_near_tie(plain, tokens, ref, got, REAL_NEAR_TIE, label=f"run {run}")
            assert gen.profile_file is not None
            if run == 0 and gen.summary()["drafters"]["draft-simple"]["rounds"] > 0:
                remembered = load_profile(gen.profile_file).acceptance["draft-simple"]
                assert remembered.rate() is not None and remembered.rate() > 0.3
    finally:
        session.close()

"""The warm-up at load (specgguf.warmup): a pass of each model, and under auto the timings a
fresh process would otherwise probe for, leaving both KV caches empty and the output exact."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specgguf.auto.profile import CostProfile, Estimate
from specgguf.generator import Generator
from specgguf.loading.session import LoadOptions, Session, SpecOptions
from specgguf.warmup import needs_calibration, warm_up


@pytest.fixture(scope="module")
def spec_session(tiny_target, tiny_draft):
    load = LoadOptions(model=tiny_target, model_draft=tiny_draft, n_ctx=256, threads=1,
                       flash_attn="off")  # fmt: skip
    s = Session(load, SpecOptions(types=["ngram-simple", "draft-simple"], n_max=8))
    yield s
    s.close()


def test_a_fresh_auto_generator_starts_from_the_warm_ups_timings(spec_session):
    timed = warm_up(spec_session, auto=True, prior=None)
    assert timed is not None and not timed.stored
    assert set(timed.verify) == {1, 4}  # passes of 2 and 5 tokens against one of 1
    assert set(timed.draft) == {"draft-simple"}
    assert spec_session.target.n_past == 0 and spec_session.draft_ctx.n_past == 0
    assert warm_up(spec_session, auto=False, prior=None) is None  # a pass, nothing timed
    # (a tiny model's passes take microseconds: on a busy machine one timing may be dropped
    # as implausible when seeded, never all of them)
    policy = Generator(spec_session, auto=True, profile=False, warmup=True).policy()
    assert policy.warmed and not policy.seeded  # no stored profile was read


def test_no_warmup_times_nothing(spec_session):
    policy = Generator(spec_session, auto=True, profile=False, warmup=False).policy()
    assert not policy.warmed and not policy.cost.prior_verify


def test_what_a_profile_already_knows_is_not_timed_again():
    known = CostProfile(verify={1: Estimate(1.1, 5.0), 4: Estimate(1.3, 5.0)},
                        draft={"draft-simple": Estimate(0.2, 5.0)})  # fmt: skip
    assert needs_calibration(None, "draft-simple")
    assert not needs_calibration(known, "draft-simple")
    assert not needs_calibration(known, None)
    assert needs_calibration(known, "draft-eagle3")  # another draft's step is not known
    one_width = CostProfile(verify={4: Estimate(1.3, 5.0)})
    assert needs_calibration(one_width, None)


def test_the_warm_ups_timings_reach_the_profile_file_and_greedy_output_is_plain(
    tiny_target, tiny_draft, capsys
):
    """`run` under auto on a machine with no profile: the warm-up's timings are stored (a
    second process need not time them again) and the text is plain greedy decoding's."""
    from specgguf_cli.app import run_cli

    def run(*args: str) -> dict:
        argv = ["run", "-m", str(tiny_target), "-t", "1", "-c", "256", "-fa", "off", "-p",
                "the cat sat on", "-n", "24", "--temp", "0", "--ignore-eos", "--json", *args]
        code = run_cli(argv)
        out = capsys.readouterr()
        assert code == 0, out.err
        return json.loads(out.out)

    speculative = run("-md", str(tiny_draft))
    (stored,) = Path(os.environ["SPECGGUF_PROFILES"]).glob("*.json")
    profile = json.loads(stored.read_text())
    assert {"1", "4"} <= set(profile["verify"]) and "draft-simple" in profile["draft"]
    assert speculative["auto"]["warm_up_seeded"] and not speculative["auto"]["profile_seeded"]
    assert speculative["text"] == run("--spec-type", "none")["text"]

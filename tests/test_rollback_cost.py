"""auto on a target whose rejections cost a restore and a re-decode (a recurrent or hybrid
model): the cost model charges that rollback to every round that may reject, the estimator
learns it from the rounds' rollback_ms, and auto on the tiny hybrid stays lossless."""

from __future__ import annotations

import json

import pytest
from specgguf_cli.app import run_cli

from specgguf.auto.cost_estimator import CostEstimator
from specgguf.auto.cost_model import Costs, best_k, speedups, worth_continuing
from specgguf.auto.policy import AdaptivePolicy
from specgguf.core.rounds import Round
from tests.tiny_hybrid import build_tiny_qwen35
from tests.tiny_models import DRAFT_PERTURB, TARGET_SEED

CURVE = (1.0, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9)


def test_a_rollback_is_charged_by_the_chance_of_a_rejection():
    free = Costs(verify=CURVE, draft=0.1)
    dear = Costs(verify=CURVE, draft=0.1, rollback=1.5)
    # all accepted: no round ever rolls back, the price is the same
    assert speedups(dear, 1.0, 8) == pytest.approx(speedups(free, 1.0, 8))
    # otherwise every k pays (1 - a^k) * rollback more
    a = 0.7
    pairs = zip(speedups(free, a, 8), speedups(dear, a, 8), strict=True)
    for k, (s_free, s_dear) in enumerate(pairs):
        if k == 0:
            assert s_free == s_dear == 1.0
            continue
        expected = (1 - a ** (k + 1)) / (1 - a)
        cost = 0.1 * k + CURVE[k] + (1 - a**k) * 1.5
        assert s_dear == pytest.approx(expected / cost)
        assert s_dear < s_free
    # where drafting paid on an attention target, a dear rollback makes it shorter or plain
    k_free, _ = best_k(free, 0.5, 8)
    k_dear, _ = best_k(Costs(verify=CURVE, draft=0.1, rollback=3.0), 0.5, 8)
    assert k_free > 0 and k_dear < k_free


def test_worth_continuing_counts_the_added_chance_of_a_rejection():
    args = dict(position=1, p_reach=0.6, a_next=0.5, future=0.5, n_max=4)
    assert worth_continuing(Costs(verify=CURVE, draft=0.05), **args)
    assert not worth_continuing(Costs(verify=CURVE, draft=0.05, rollback=4.0), **args)


def test_the_estimator_learns_the_rollback_relative_to_a_plain_step():
    est = CostEstimator(8)
    assert est.rollback_rel() == 0.0  # nothing timed: attention-like
    for _ in range(4):
        est.add_verify(0, 10.0)
        est.add_rollback(25.0)
    assert est.rollback_rel() == pytest.approx(2.5)


def test_the_policy_prices_rejections_from_the_rounds():
    policy = AdaptivePolicy(4)
    for _ in range(6):
        plain = Round(None, [], 0, [1], draft_ms=0.0, verify_ms=10.0)
        policy.observe(plain)
        # a rejected round: its rollback is what the policy learns; a full acceptance is not
        rejected = Round("ngram-simple", [5, 6], 1, [5, 7], 0.0, 12.0, rollback_ms=30.0)
        policy.observe(rejected)
        policy.observe(Round("ngram-simple", [5, 6], 2, [5, 6, 8], 0.0, 12.0, rollback_ms=99.0))
    assert policy.costs("ngram-simple").rollback == pytest.approx(3.0)


def test_auto_on_the_hybrid_target_is_lossless(tiny_models_dir, capsys):
    target = build_tiny_qwen35(tiny_models_dir / "qwen35-auto.gguf", seed=TARGET_SEED)
    draft = build_tiny_qwen35(
        tiny_models_dir / "qwen35-auto-draft.gguf",
        seed=99,
        perturb_from_seed=TARGET_SEED,
        perturb_scale=DRAFT_PERTURB,
    )
    base = ["run", "-m", str(target), "-md", str(draft), "-t", "1", "-c", "512", "-fa", "off",
            "-p", "the cat sat on", "-n", "48", "--temp", "0", "--json", "-q"]  # fmt: skip

    def run(*args):
        assert run_cli([*base, *args]) == 0
        return json.loads(capsys.readouterr().out)

    got = run("--spec-draft-n-max", "auto")
    assert got["auto"] is not None and got["kv_rollback"]["target"]["removal"] == "full"
    assert got["text"] == run("--spec-type", "none")["text"]

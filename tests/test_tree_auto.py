"""auto's choice between chains and trees: the cost model's veto (a tree that cannot beat the
chain even if every round kept all it could) and the measured rates (TreeChoice), and auto
with trees on tiny models still giving the target's text."""

from __future__ import annotations

from specgguf.auto.cost_model import Costs, speedups, tree_ceiling
from specgguf.auto.tree_choice import TreeChoice
from specgguf.core.tree import AUTO_TREE, CHAIN, TreeShape

#: a compute-bound CPU: every row of a pass costs about a step (a Q4 target on 2 cores)
LINEAR = Costs(verify=tuple(1.0 + 0.9 * k for k in range(17)), draft=0.3)
#: a weight-bound device: a pass of 16 rows costs about a step
FLAT = Costs(verify=tuple(1.0 + 0.01 * k for k in range(17)), draft=0.05)


def test_the_ceiling_vetoes_trees_where_each_node_costs_a_row():
    # on LINEAR, 10 nodes instead of 4 cost ~5 steps more: no tree of depth 4 can win
    assert tree_ceiling(LINEAR, 0.7, 4, 10) < 1.0
    # where rows are nearly free, a tree could win while the chain loses tokens
    assert tree_ceiling(FLAT, 0.7, 4, 10) > 1.2
    # and a chain-sized "tree" is the chain
    assert tree_ceiling(FLAT, 0.7, 4, 4) == 1.0


def test_the_ceiling_is_the_best_case_over_the_chain_or_plain_decoding():
    depth, nodes = 3, 8
    best = (depth + 1) / (FLAT.draft * depth + FLAT.verify_cost(nodes))
    chain = speedups(FLAT, 0.5, depth)[depth]
    assert chain > 1.0
    assert abs(tree_ceiling(FLAT, 0.5, depth, nodes) - best / chain) < 1e-12
    # where even the chain loses to plain decoding, the tree must beat plain decoding
    slow = Costs(verify=LINEAR.verify, draft=0.6)
    assert speedups(slow, 0.7, 4)[4] < 1.0
    best = 5 / (0.6 * 4 + slow.verify_cost(10))
    assert abs(tree_ceiling(slow, 0.7, 4, 10) - best) < 1e-12 and best < 1.0


def feed(choice: TreeChoice, name: str, rounds: int, *, tree_rate: float, chain_rate: float):
    """Let `choice` pick for `rounds` rounds, each round then taking 1 ms per rate unit."""
    picks = []
    for _ in range(rounds):
        tree = choice.wants_tree(name, can_pay=True)
        picks.append(tree)
        choice.observe(name, tree=tree, tokens=10, ms=10 / (tree_rate if tree else chain_rate))
    return picks


def test_a_tree_that_measures_faster_is_kept_with_a_chain_now_and_then():
    choice = TreeChoice()
    picks = feed(choice, "draft-simple", 200, tree_rate=1.3, chain_rate=1.0)
    late = picks[100:]
    assert sum(late) / len(late) > 0.8  # mostly trees
    assert not all(late)  # the chain is still measured


def test_a_tree_that_measures_slower_is_only_rechecked():
    choice = TreeChoice()
    picks = feed(choice, "draft-simple", 400, tree_rate=0.7, chain_rate=1.0)
    late = picks[100:]
    assert 0 < sum(late) <= len(late) / 40  # a recheck every 64 rounds
    assert sum(picks[:100]) >= choice.samples  # it was measured first


def test_a_vetoed_tree_is_never_drafted():
    choice = TreeChoice()
    assert not any(choice.wants_tree("d", can_pay=False) for _ in range(100))


def test_the_shape_the_flags_give_depends_on_the_mode():
    unset = TreeShape(topk=0, nodes=0, p_split=0.2)
    assert unset.resolved(adaptive=False) == TreeShape(1, 0, 0.2)
    auto = unset.resolved(adaptive=True)
    assert (auto.topk, auto.nodes, auto.p_split) == (AUTO_TREE.topk, AUTO_TREE.nodes, 0.2)
    assert TreeShape(4, 12).resolved(adaptive=True) == TreeShape(4, 12)
    assert CHAIN.resolved(adaptive=True) == CHAIN


def test_auto_with_trees_on_tiny_models_gives_the_targets_text(tiny_target, tiny_draft):
    """Under auto the policy decides round by round; whatever it decides, greedy output is
    plain greedy (on the tiny pair, whose draft costs a target step, it keeps chains)."""
    from specgguf.loading.session import LoadOptions, Session, SpecOptions
    from tests.test_speculative_tiny import greedy_under_auto

    load = LoadOptions(model=tiny_target, model_draft=tiny_draft, n_ctx=512, threads=1,
                       flash_attn="off")  # fmt: skip
    plain = Session(load, SpecOptions(types=[]))
    auto = Session(load, SpecOptions(["draft-simple"], n_max=8, adaptive=True, tree=AUTO_TREE))
    try:
        for prompt in ["the cat sat on", "def main():\n    return", "Once upon a time"]:
            greedy_under_auto(plain, auto, prompt)
    finally:
        auto.close()
        plain.close()


class _Shaped:
    """What the policy reads of a drafter whose shape branches."""

    name = "draft-simple"
    max_draft = 8
    free = False
    asks_per_token = True
    timing = None
    tree = AUTO_TREE


def test_the_policy_asks_the_cost_model_then_the_rates(monkeypatch):
    from specgguf.auto import policy as pol

    p = pol.AdaptivePolicy(n_max_cap=8)
    p.attach([_Shaped()])
    p._plans["draft-simple"] = pol._Plan(k=4, speedup=1.2, probe=False)
    monkeypatch.setattr(p, "acceptance", lambda name: [0.7] * 8)
    monkeypatch.setattr(p, "costs", lambda name: LINEAR)
    monkeypatch.setattr(p.cost, "likely_curve", lambda: LINEAR.verify)
    assert not p.allows_tree("draft-simple")  # vetoed: every node costs a row
    # the veto reads the curve as it likely is, not the prior a plan is priced at
    monkeypatch.setattr(p.cost, "likely_curve", lambda: FLAT.verify)
    assert p.allows_tree("draft-simple")  # could pay, unmeasured: explored
    p._plans["draft-simple"] = pol._Plan(k=4, speedup=1.2, probe=True)
    assert not p.allows_tree("draft-simple")  # a probe measures a chain
    p._plans["draft-simple"] = pol._Plan(k=0, speedup=1.0, probe=False)
    assert not p.allows_tree("draft-simple")  # nothing drafted this round


def test_a_tree_rounds_first_chain_is_what_the_chain_acceptance_learns():
    from specgguf.auto.policy import _first_chain_outcome
    from specgguf.core.rounds import Round

    # nodes 0-1-2 the first chain, 3 a sibling of 1, 4 a sibling of 0
    parents = [-1, 0, 1, 0, -1]
    kept_sibling = Round("draft-simple", [5, 6, 7, 8, 9], 2, [5, 8, 1], 1.0, 1.0,
                         parents=parents, path=(0, 3))  # fmt: skip
    assert _first_chain_outcome(kept_sibling) == (3, 1)
    off_root = Round("draft-simple", [5, 6, 7, 8, 9], 1, [9, 1], 1.0, 1.0,
                     parents=parents, path=(4,))  # fmt: skip
    assert _first_chain_outcome(off_root) == (3, 0)
    assert kept_sibling.off_chain and off_root.off_chain
    chain = Round("draft-simple", [5, 6, 7], 2, [5, 6, 1], 1.0, 1.0)
    assert _first_chain_outcome(chain) == (3, 2) and not chain.off_chain

"""Token probabilities on the numpy toy target, whose rows do not depend on a pass's width:
with chains and with trees (the accepted branch's rows, off the drafter's first chain too),
greedy and seeded, each emitted token's figures are exactly plain decoding's, before and
after the sampler chain (penalties included: the row's state after its drafted prefix)."""

from __future__ import annotations

import pytest

from specgguf.core.loop import SpeculativeDecoder
from specgguf.core.rounds import GenerationConfig
from specgguf.core.sampling import PositionRandom, SamplerParams
from specgguf.core.token_probs import ProbsRequest
from tests.test_loop_toy import EOS, PROMPT, NoisyOracle, ToyContext
from tests.test_tree_toy import ToyTreeContext, TreeOracle

SAMPLERS = {
    "greedy": SamplerParams(temp=0.0),
    "warm": SamplerParams(temp=1.1),
    "penalised": SamplerParams(temp=0.9, penalty_repeat=1.5, penalty_present=0.7,
                               penalty_last_n=8),  # fmt: skip
}


def figures(target, drafters, sampler, asked, n=50):
    dec = SpeculativeDecoder(
        target, drafters, GenerationConfig(n_predict=n, n_max=8, sampler=sampler, probs=asked),
        PositionRandom(5), is_eog=lambda t: t == EOS,
    )  # fmt: skip
    tokens, probs = [], []
    for rnd in dec.generate(PROMPT):
        tokens += rnd.emitted
        probs += rnd.probs or []
        assert rnd.probs is None if asked is None else len(rnd.probs) == len(rnd.emitted)
    return tokens, probs, dec.stats


@pytest.mark.parametrize("post", [False, True])
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_chains_and_trees_report_plain_decodings_figures(name, post):
    sampler, asked = SAMPLERS[name], ProbsRequest(4, post_sampling=post)
    ref_tokens, ref, _ = figures(ToyContext(), [], sampler, asked)
    assert [e.token for e in ref] == ref_tokens
    for target, drafter in (
        (ToyContext(), NoisyOracle(0.3, 5)),
        (ToyTreeContext(), TreeOracle(0.3, 7, seed=4)),
    ):
        tokens, got, stats = figures(target, [drafter], sampler, asked)
        assert tokens == ref_tokens
        assert got == ref  # exact: the toy's rows are the same in any pass
        assert stats.n_accept > 0


def test_nothing_is_read_unless_asked():
    _, probs, _ = figures(ToyContext(), [NoisyOracle(0.3, 5)], SAMPLERS["warm"], None)
    assert probs == []


class WidthRecorder(ToyContext):
    """The toy target, remembering how many rows each pass evaluated after the prompt's."""

    def __init__(self) -> None:
        super().__init__()
        self.widths: list[int] = []

    def decode(self, tokens, pos0, *, outputs="last", hear=None):
        if outputs == "all":
            self.widths.append(len(tokens))
        return super().decode(tokens, pos0, outputs=outputs, hear=hear)


@pytest.mark.parametrize("cap", [1, 3])
def test_a_row_cap_keeps_every_verify_pass_that_narrow(cap):
    """Where wider passes compute other rows (specgguf.binding.exact_rows), a generation that
    reports figures keeps its passes to `max_rows`, drafting still, with plain decoding's
    text and figures; without the cap the same drafter's passes are wider (the mutant that
    ignores the cap fails the first assertion)."""
    sampler = SAMPLERS["greedy"]
    ref_tokens, ref, _ = figures(ToyContext(), [], sampler, ProbsRequest(2))
    capped = WidthRecorder()
    tokens, got, stats = figures(capped, [NoisyOracle(0.3, 5)], sampler,
                                 ProbsRequest(2, max_rows=cap))  # fmt: skip
    assert max(capped.widths) <= cap
    assert (tokens, got) == (ref_tokens, ref)
    assert (stats.n_accept > 0) == (cap > 1)
    free = WidthRecorder()
    figures(free, [NoisyOracle(0.3, 5)], sampler, ProbsRequest(2))
    assert max(free.widths) > cap

"""Every sampler of the chain on the real Qwen2.5-Coder pair (select with `-m real`; needs
`specgguf pull`): with draft-simple speculation and one-hot drafts, the text is plain
decoding's token for token, greedy and seeded, with penalties, DRY, XTC, mirostat v1 and v2,
typical, top-n-sigma, dynamic temperature and a logit bias on.

The rows are asked for their figures (a ProbsRequest), so the verify passes are kept as
narrow as passes whose rows equal 1-token passes (specgguf.binding.exact_rows): both sides
then sample from the same rows, and a parting can only be the chain's fault (its state not
advanced through a drafted row, say). On a machine whose narrow passes round within that
measure's tolerance without being bit-identical, a parting is accepted only after a row
whose figures differ between the sides, never after identical rows.

The mutant whose rows all read the round's starting state (history not advanced through the
drafted rows: tests/test_chain_speculation.py's) fails the seeded penalties case here."""

from __future__ import annotations

import pytest

from specgguf.core.sampler_vocab import SamplerVocab
from specgguf.core.sampling import SamplerParams
from specgguf.core.token_probs import ProbsRequest
from specgguf.loading.session import SpecOptions
from tests.near_tie import first_difference
from tests.real_pair import REAL_PAIR, pair_session

N = 40
PROMPT = "def quicksort(arr):\n"
#: one-hot drafts: seeded speculative text is then plain decoding's token for token
SPEC = SpecOptions(types=["draft-simple"], n_max=4, draft_sampling="greedy")
PLAIN = SpecOptions(types=[])
ASKED = ProbsRequest(3)
WARM = {"temp": 0.8}

SETTINGS = {
    # a short window, so what the drafted tokens of a pass push in and out of it changes the
    # next rows' choices (what a chain whose state is not advanced through them gets wrong)
    "penalties": {"penalty_repeat": 1.5, "penalty_freq": 0.5, "penalty_present": 1.0,
                  "penalty_last_n": 4},
    "dry": {"dry_multiplier": 2.0, "dry_base": 2.0, "dry_allowed_length": 1},
    "logit-bias": {"logit_bias": (("\n", -3.0), (" return", -2.0))},
    "xtc": {"xtc_probability": 0.5, "xtc_threshold": 0.1},
    "mirostat-1": {"mirostat": 1},
    "mirostat-2": {"mirostat": 2},
    "typical": {"typ_p": 0.9},
    "top-n-sigma": {"top_n_sigma": 1.0},
    "dynatemp": {"dynatemp_range": 0.5},
}
#: the samplers that change a greedy text (the others act on a distribution)
GREEDY = ("penalties", "dry", "logit-bias")
CASES = [(name, 0.0) for name in GREEDY] + [(name, 0.8) for name in SETTINGS]

pytestmark = REAL_PAIR


@pytest.fixture(scope="module")
def session():
    yield from pair_session(SPEC)


@pytest.fixture(scope="module")
def vocab(session):
    model = session.target_model

    def plain(text: str) -> list[int]:
        return model.tokenize(text, add_special=False, parse_special=False)

    return SamplerVocab(model.n_vocab, model.piece_special, plain)


def generate(session, sampler, spec):
    dec = session.decoder(sampler, N, 11, spec=spec, probs=ASKED, reuse_prefix=False)
    tokens, probs = [], []
    for rnd in dec.generate(session.tokenize(PROMPT)):
        tokens += rnd.emitted
        probs += rnd.probs
    return tokens, probs, dec.stats


@pytest.mark.parametrize(("name", "temp"), CASES)
def test_each_sampler_under_speculation_writes_plain_decodings_text(session, vocab, name, temp):
    sampler = vocab.ready(SamplerParams(**{**SETTINGS[name], "temp": temp}))
    ref, ref_probs, _ = generate(session, sampler, PLAIN)
    got, got_probs, stats = generate(session, sampler, SPEC)
    assert stats.n_accept > 0, "nothing drafted was accepted: the chain was not exercised"
    k = first_difference(ref, got)
    if k is not None:
        # the row that decided the parting token, or one before it, must differ
        pairs = zip(ref_probs[: k + 1], got_probs[: k + 1], strict=False)
        assert any(a.top != b.top for a, b in pairs), (
            f"{name} at temp {temp}: parted at token {k} after identical rows"
        )

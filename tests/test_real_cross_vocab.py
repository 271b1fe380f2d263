"""SmolLM2-135M (another vocabulary) drafting for Qwen2.5-Coder-1.5B through text (select with
`-m real`; needs `specgguf pull`). Greedy text must be plain decoding's, allowing only a
divergence at a near-tie of the target's two best tokens (a wide pass and a 1-token pass
round differently on CPU builds, as for the same-vocabulary pair), and the target must accept
some of the translated drafts on code and on chat."""

from __future__ import annotations

import pytest

from specgguf.loading.session import LoadOptions, Session, SpecOptions
from specgguf.modelfiles.models import OTHER, TARGET, is_present, model_path
from tests.near_tie import REAL_NEAR_TIE, assert_same_or_near_tie, greedy

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(
        not (is_present(TARGET) and is_present(OTHER)), reason="run `specgguf pull` first"
    ),
]

PROMPTS = {
    "code": "def quicksort(arr):",
    "chat": (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nExplain in two sentences what a hash table is.<|im_end|>\n"
        "<|im_start|>assistant\n"
    ),
}


@pytest.fixture(scope="module")
def sessions():
    load = LoadOptions(model=model_path(TARGET), model_draft=model_path(OTHER), n_ctx=1024)
    plain = Session(load, SpecOptions(types=[]))
    spec = Session(load, SpecOptions(types=["draft-simple"], n_max=4))
    assert spec.cross_vocab
    yield plain, spec
    spec.close()
    plain.close()


@pytest.mark.parametrize("kind", sorted(PROMPTS))
def test_smollm_drafts_for_qwen_losslessly(sessions, kind):
    plain, spec = sessions
    tokens = plain.tokenize(PROMPTS[kind])
    ref, _ = greedy(plain, tokens, 48)
    got, stats = greedy(spec, tokens, 48)
    print(
        f"\n{kind}: accept {100 * stats.accept_rate:.1f}% of {stats.n_drafted} drafted, "
        f"mean acceptance length {stats.mean_acceptance_length:.2f}, "
        f"translate {stats.translate_ms / max(1, stats.translate_rounds):.2f} ms per round"
    )
    assert stats.n_drafted > 0 and stats.n_accept > 0
    assert_same_or_near_tie(plain, tokens, ref, got, REAL_NEAR_TIE, label=kind)

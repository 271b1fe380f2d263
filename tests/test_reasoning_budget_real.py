"""--reasoning-budget on the real pair (`-m real`; needs `specgguf pull`): under a template
whose prompt opens the thinking (llama.cpp's DeepSeek R1 template), the thinking is closed
after the budget, with the budget message, and greedy speculative decoding under the budget
gives plain decoding's tokens (or parts from them only at a near-tie of the target's logits,
tests/near_tie.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgguf.core.sampling import SamplerParams
from specgguf.generator import Generator, GenParams
from specgguf.loading.session import LoadOptions, Session, SpecOptions
from specgguf.modelfiles.models import DRAFT, TARGET, is_present, model_path
from tests.near_tie import REAL_NEAR_TIE, assert_same_or_near_tie

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(
        not (is_present(TARGET) and is_present(DRAFT)), reason="run `specgguf pull` first"
    ),
]

TEMPLATE = Path(__file__).parent / "data" / "templates" / "llama-cpp-deepseek-r1.jinja"
BUDGET = GenParams(reasoning_budget=8, reasoning_budget_message=" (enough)")


@pytest.fixture(scope="module")
def sessions():
    load = LoadOptions(model=model_path(TARGET), model_draft=model_path(DRAFT), n_ctx=1024)
    plain = Session(load, SpecOptions(types=[]))
    spec = Session(load, SpecOptions(types=["draft-simple", "ngram-simple"], n_max=4))
    yield plain, spec
    spec.close()
    plain.close()


def budgeted(session: Session, gen: Generator, prompt: list[int]) -> list[int]:
    budget = gen.thinking_budget(BUDGET, prompt, None)
    # the budget's 8 tokens, the message and the closing, and a few tokens of the answer
    dec = session.decoder(SamplerParams(temp=0.0), 24, 0, constraint=budget)
    return [t for rnd in dec.generate(prompt) for t in rnd.emitted]


def test_the_budget_closes_the_thinking_under_speculation_as_without(sessions):
    plain, spec = sessions
    gen = Generator(plain, template_src=TEMPLATE.read_text())
    prompt = gen.tokenize(gen.chat_prompt([{"role": "user", "content": "What is 17 * 23?"}]))
    ref = budgeted(plain, gen, prompt)
    thought, closed, _ = plain.detokenize(ref).partition(" (enough)</think>")
    assert closed and thought.strip(), plain.detokenize(ref)
    got = budgeted(spec, gen, prompt)
    assert_same_or_near_tie(plain, prompt, ref, got, REAL_NEAR_TIE, label="budget, speculative")

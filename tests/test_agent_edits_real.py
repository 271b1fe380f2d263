"""A coding agent's edit through a tool call, on the real Q4 target: the agent benchmark's
write turn (a 47-line file as read_file's result, `tool_choice` forcing write_file, greedy).

Inside the call's JSON string the file is escaped; the n-gram lookups find it only through the
prompt's text views (specgguf.drafters.text_views). Checked: the constrained greedy text with
the views equals constrained plain decoding (or parts from it at a near tie only), every
call parses, and the views are what makes the lookup draft: far more accepted with them than
without (measured 174 against 16 on this request)."""

from __future__ import annotations

import json

import pytest

from scripts.bench_agent import TOOLS, Task, write_messages
from specgguf.chat.tools import split_tool_calls
from specgguf.core.sampling import SamplerParams
from specgguf.generator import Generator, GenParams, OutputGrammar
from specgguf.loading.session import LoadOptions, Session, SpecOptions
from specgguf.modelfiles.models import TARGET, is_present, model_path
from tests.near_tie import REAL_NEAR_TIE, assert_same_or_near_tie

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(not is_present(TARGET), reason="run `specgguf pull` first"),
]

#: the agent benchmark's write turn (scripts/bench_agent.py), its assistant call's content
#: as the server reads it ("" for OpenAI's null)
MESSAGES = [{**m, "content": m["content"] or ""} for m in write_messages(Task.load())]
N_PREDICT = 500


def write_file_call(types: list[str], *, views: bool = True):
    session = Session(
        LoadOptions(model=model_path(TARGET), n_ctx=2048),
        SpecOptions(types=types, text_views=views),
    )
    try:
        gen = Generator(session, sampler=SamplerParams(temp=0), n_predict=N_PREDICT)
        tokens = gen.tokenize(gen.chat_prompt(MESSAGES, TOOLS))
        grammar = OutputGrammar.for_tools(TOOLS, "write_file", parallel=False)
        g = gen.generate(tokens, GenParams(grammar=grammar))
        out = [t for chunk in g if chunk.round is not None for t in chunk.round.emitted]
        return session, tokens, out, g.text, g.stats
    except BaseException:
        session.close()
        raise


@pytest.fixture(scope="module")
def plain():
    session, tokens, out, text, _ = write_file_call([])
    yield session, tokens, out, text
    session.close()


def test_the_escaped_file_is_drafted_and_the_text_is_plain_decodings(plain):
    ref_session, tokens, ref, ref_text = plain
    session, _, got, text, stats = write_file_call(["ngram-map-k"])
    session.close()
    assert_same_or_near_tie(ref_session, tokens, ref, got, REAL_NEAR_TIE, label="views")
    content, calls = split_tool_calls(text, TOOLS)
    assert not content and len(calls) == 1 and calls[0].name == "write_file"
    args = json.loads(calls[0].arguments)
    assert "def mean" in args["content"]
    print(f"\nwith views: {stats.n_accept} accepted of {stats.n_drafted} drafted")
    # the lookup copies the escaped file: most of the answer came from drafts
    assert stats.n_accept >= 150, stats.timings()


def test_without_the_views_the_lookup_finds_almost_nothing(plain):
    session, _, _, _, stats = write_file_call(["ngram-map-k"], views=False)
    session.close()
    print(f"\nwithout views: {stats.n_accept} accepted of {stats.n_drafted} drafted")
    assert stats.n_accept < 50

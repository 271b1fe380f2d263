"""Tool calls under tool_choice "auto" on the real Qwen2.5-Coder target, as agent clients send
them: the model writes its call in a ```json fence on its own, and the server must hand it back
as `tool_calls` (finish_reason tool_calls), whole and streamed with the arguments in pieces."""

from __future__ import annotations

import json

import pytest

from specgguf.modelfiles.models import TARGET, is_present, model_path
from tests.serve_helpers import openai_client, serving
from tests.test_serve_tools import TOOLS

pytestmark = [
    pytest.mark.real,
    pytest.mark.skipif(not is_present(TARGET), reason="run `specgguf pull` first"),
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def client():
    for server in serving(["-m", str(model_path(TARGET)), "--temp", "0", "-c", "2048"],
                          timeout=300):  # fmt: skip
        yield openai_client(server)


def test_auto_call_of_the_real_model_is_a_call_whole_and_streamed(client):
    kw = dict(model="m", messages=ASK, tools=TOOLS, max_tokens=80)
    whole = client.chat.completions.create(**kw).choices[0]
    assert whole.finish_reason == "tool_calls" and not whole.message.content
    (call,) = whole.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"] == "Paris"
    pieces, finish = [], None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if chunk.choices:
            assert not chunk.choices[0].delta.content
            pieces += chunk.choices[0].delta.tool_calls or []
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and pieces[0].function.name == "get_weather"
    # the name, then the arguments as they were decoded (a piece per round: drafts accepted
    # together arrive together), not in one piece when the call closes
    assert len(pieces) >= 3 and pieces[0].function.arguments == ""
    assert "".join(p.function.arguments or "" for p in pieces) == call.function.arguments

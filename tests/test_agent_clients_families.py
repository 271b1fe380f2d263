"""The agent clients' two-turn tool loop (a call, the tool's result, a final answer) against
`specgguf serve` on the tiny models under three families' templates: Qwen3's (Hermes
<tool_call> JSON), a Llama-3.1-style stand-in (a bare {"name", "parameters"} object; Llama's
own template is not shipped) and Mistral Nemo's ([TOOL_CALLS] and the 9-character call ids its
template requires).

A tiny random model answers nonsense, so the first turn is forced (a named function), and what
each client sees is asserted: a parsed call of the right name with JSON arguments in the
schema, an id in the family's shape (the server's own), then a second turn whose history holds
that call and its result, which the template renders (Mistral's raises on any other id) and
which comes back as content. Each client is skipped when it is not installed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import pytest

from tests.agent_weather import ASK, CITIES, weather_agent
from tests.serve_helpers import FAST, serving

pydantic = pytest.importorskip("pydantic")

TEMPLATES = Path(__file__).parent / "data" / "templates"
#: family -> (its template, the shape of the call ids the server gives)
FAMILIES = {
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", r"call_[0-9a-f]{24}"),
    "llama3.1": ("standins/llama3.1.jinja", r"call_[0-9a-f]{24}"),
    "mistral-nemo": ("mistralai-Mistral-Nemo-Instruct-2407.jinja", r"[A-Za-z0-9]{9}"),
}
N = 120


class GetWeather(pydantic.BaseModel):
    """The weather in a city."""

    model_config = pydantic.ConfigDict(extra="forbid")
    city: Literal["Paris", "Oslo"]


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tiny_target, tiny_draft):
    """(the family's name, its server, the id shape): one server per family."""
    template, ids = FAMILIES[request.param]
    args = ["-m", str(tiny_target), "-md", str(tiny_draft), *FAST, "-c", "4096",
            "--chat-template-file", str(TEMPLATES / template)]  # fmt: skip
    for server in serving(args, timeout=120):
        yield request.param, server, ids


@pytest.fixture(scope="module")
def openai_mod():
    return pytest.importorskip("openai")


def assert_own_id(ident: str, shape: str) -> None:
    assert re.fullmatch(shape, ident), ident


def test_openai_agents_runs_the_tool_and_answers(family, openai_mod):
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)  # no trace upload to OpenAI
    name, server, ids = family
    called: list[str] = []

    # the first turn forced; after the tool ran, the agent resets the choice to the model's
    # (auto) and asks again with the call and its result in the history
    agent = weather_agent(agents, server, openai_mod, called, max_tokens=N,
                          stop_on_first_tool=False, tool_choice="get_weather")  # fmt: skip
    result = agents.Runner.run_sync(agent, ASK, max_turns=3)
    assert len(called) == 1 and called[0] in CITIES, name
    calls = [i.raw_item for i in result.new_items if i.type == "tool_call_item"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert_own_id(calls[0].call_id, ids)
    assert isinstance(result.final_output, str)  # the second turn's content


def test_instructor_call_then_a_second_turn_on_the_raw_client(family, openai_mod):
    instructor = pytest.importorskip("instructor")
    name, server, ids = family
    raw = openai_mod.OpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0,
                            timeout=server.timeout)  # fmt: skip
    client = instructor.from_openai(raw, mode=instructor.Mode.TOOLS)
    ask = [{"role": "user", "content": ASK}]
    weather, completion = client.chat.completions.create_with_completion(
        model="m", response_model=GetWeather, max_tokens=N, messages=ask,
        parallel_tool_calls=False,
    )  # fmt: skip
    assert weather.city in CITIES, name
    call = completion.choices[0].message.tool_calls[0]
    assert call.function.name == "GetWeather"
    assert_own_id(call.id, ids)
    tools = [{"type": "function", "function": {
        "name": "GetWeather", "parameters": GetWeather.model_json_schema()}}]  # fmt: skip
    history = [
        *ask,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": f"sunny in {weather.city}"},
    ]
    second = raw.chat.completions.create(model="m", messages=history, tools=tools,
                                         max_tokens=N, temperature=0)  # fmt: skip
    assert isinstance(second.choices[0].message.content, str)


def test_langchain_call_tool_message_and_answer(family):
    lc = pytest.importorskip("langchain_openai")
    messages = pytest.importorskip("langchain_core.messages")
    name, server, ids = family

    def model():
        return lc.ChatOpenAI(model="m", base_url=server.base + "/v1", api_key="x",
                             temperature=0, max_tokens=N, max_retries=0,
                             timeout=server.timeout)  # fmt: skip

    ask = messages.HumanMessage(ASK)
    forced = model().bind_tools([GetWeather], tool_choice="GetWeather", parallel_tool_calls=False)
    msg = forced.invoke([ask])
    assert [c["name"] for c in msg.tool_calls] == ["GetWeather"], name
    city = GetWeather(**msg.tool_calls[0]["args"]).city
    assert_own_id(msg.tool_calls[0]["id"], ids)
    result = messages.ToolMessage(f"sunny in {city}", tool_call_id=msg.tool_calls[0]["id"])
    final = model().bind_tools([GetWeather]).invoke([ask, msg, result])
    assert isinstance(final.content, str)

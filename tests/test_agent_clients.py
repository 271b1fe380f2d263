"""Agent and structured-output clients against `specgguf serve` on the tiny models (Qwen2.5's
chat template): instructor (nested pydantic models, whole and create_partial), openai-agents
(a function tool run by the agent loop, whole and streamed) and langchain-openai (bind_tools,
with_structured_output, streamed tool-call chunks).

A tiny random model writes no call of its own under tool_choice "auto", so the calls here are
forced (a named function: the grammar makes them parse), and "auto" is driven with a request
grammar that makes the model write the fenced call Qwen2.5-Coder writes on its own: the server
must read it as a call, or the client never runs its tool. Each client is skipped when it is
not installed (they come with the `test` extra)."""

from __future__ import annotations

import asyncio
import functools
import json
import operator
from typing import Literal

import pytest

from tests.agent_weather import ASK, CITIES, weather_agent
from tests.serve_helpers import tool_serving

pydantic = pytest.importorskip("pydantic")
Field = pydantic.Field


class BaseModel(pydantic.BaseModel):
    # additionalProperties false: else the grammar lets a random model add keys until max_tokens
    model_config = pydantic.ConfigDict(extra="forbid")


N = 160


class City(BaseModel):
    name: Literal["Paris", "Oslo", "Rome"]
    population_m: int = Field(ge=0, le=40)


class Trip(BaseModel):
    """Nested: a list of objects under $defs, an enum, bounded integers and strings."""

    title: str = Field(max_length=8)
    stops: list[City] = Field(min_length=1, max_length=2)
    nights: int = Field(ge=1, le=9)


class GetWeather(BaseModel):
    """The weather in a city."""

    city: Literal["Paris", "Oslo"]


def gbnf_literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def fenced_call_grammar(name: str, arguments: dict) -> str:
    """A grammar that makes the model write one ```json-fenced call, as Qwen2.5-Coder does
    under tool_choice auto (sent with the request: the tools stay "auto")."""
    call = json.dumps({"name": name, "arguments": arguments})
    return "root ::= " + gbnf_literal(f"I will look it up.\n```json\n{call}\n```")


@pytest.fixture(scope="module")
def server(tiny_target, tiny_draft):
    yield from tool_serving(tiny_target, tiny_draft, timeout=120)


@pytest.fixture(scope="module")
def openai_mod():
    return pytest.importorskip("openai")


# -- instructor ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def instructor_client(server, openai_mod):
    instructor = pytest.importorskip("instructor")
    raw = openai_mod.OpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0,
                            timeout=server.timeout)  # fmt: skip
    return instructor.from_openai(raw, mode=instructor.Mode.TOOLS)


def trip_request():
    # one call: a random model would add calls until max_tokens (parallel is the default)
    return dict(model="m", response_model=Trip, max_tokens=N * 2, parallel_tool_calls=False,
                messages=[{"role": "user", "content": "Plan a short trip."}])  # fmt: skip


def test_instructor_nested_models_validate(instructor_client):
    trip = instructor_client.chat.completions.create(**trip_request())
    assert isinstance(trip, Trip) and 1 <= len(trip.stops) <= 2
    assert all(isinstance(s, City) for s in trip.stops)


def test_instructor_create_partial_yields_the_object_as_it_grows(instructor_client):
    whole = instructor_client.chat.completions.create(**trip_request())
    partials = [p.model_dump() for p in
                instructor_client.chat.completions.create_partial(**trip_request())]  # fmt: skip
    # arguments streamed in fragments: many growing objects, not one at the end
    distinct = [p for i, p in enumerate(partials) if i == 0 or p != partials[i - 1]]
    assert len(distinct) >= 4, partials
    assert partials[-1] == whole.model_dump()


# -- openai-agents ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def agents(server, openai_mod):
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)  # no trace upload to OpenAI
    return agents


def test_openai_agents_runs_a_forced_tool(agents, server, openai_mod):
    called: list[str] = []
    agent = weather_agent(
        agents, server, openai_mod, called, max_tokens=N, tool_choice="get_weather"
    )
    result = agents.Runner.run_sync(agent, ASK, max_turns=2)
    assert len(called) == 1 and called[0] in CITIES
    assert result.final_output == f"sunny in {called[0]}"


def test_openai_agents_runs_a_tool_from_a_streamed_answer(agents, server, openai_mod):
    called: list[str] = []
    agent = weather_agent(
        agents, server, openai_mod, called, max_tokens=N, tool_choice="get_weather"
    )

    async def run():
        result = agents.Runner.run_streamed(agent, ASK, max_turns=2)
        kinds = [ev.type async for ev in result.stream_events()]
        return result, kinds

    result, kinds = asyncio.run(run())
    assert len(called) == 1 and result.final_output == f"sunny in {called[0]}"
    assert "raw_response_event" in kinds


def test_openai_agents_runs_a_fenced_call_under_auto(agents, server, openai_mod):
    # tool_choice left to the model, which writes the call in a ```json fence
    called: list[str] = []
    grammar = fenced_call_grammar("get_weather", {"city": "Oslo"})
    agent = weather_agent(
        agents, server, openai_mod, called, max_tokens=N, extra_body={"grammar": grammar}
    )
    result = agents.Runner.run_sync(agent, ASK, max_turns=2)
    assert called == ["Oslo"] and result.final_output == "sunny in Oslo"


# -- langchain-openai ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_model(server):
    lc = pytest.importorskip("langchain_openai")
    return functools.partial(
        lc.ChatOpenAI, model="m", base_url=server.base + "/v1", api_key="x", temperature=0,
        max_tokens=N, max_retries=0, timeout=server.timeout,
    )  # fmt: skip


def test_langchain_bind_tools_forced_call(chat_model):
    bound = chat_model().bind_tools([GetWeather], tool_choice="GetWeather",
                                    parallel_tool_calls=False)  # fmt: skip
    msg = bound.invoke(ASK)
    assert [c["name"] for c in msg.tool_calls] == ["GetWeather"]
    assert GetWeather(**msg.tool_calls[0]["args"]).city in CITIES
    assert msg.response_metadata["finish_reason"] == "tool_calls"


def test_langchain_streamed_tool_call_chunks_add_up_to_the_call(chat_model):
    bound = chat_model().bind_tools([GetWeather], tool_choice="GetWeather",
                                    parallel_tool_calls=False)  # fmt: skip
    # streamed first, on a question no earlier test asked: the server's suffix drafter
    # copies earlier outputs, so a repeated answer may come whole in one round
    ask = "Is it raining in Oslo right now?"
    chunks = list(bound.stream(ask))
    whole = bound.invoke(ask)
    with_args = [c for c in chunks if any(t.get("args") for t in c.tool_call_chunks)]
    assert len(with_args) >= 2  # the arguments came in fragments
    merged = functools.reduce(operator.add, chunks)
    assert [(c["name"], c["args"]) for c in merged.tool_calls] == [
        (c["name"], c["args"]) for c in whole.tool_calls
    ]


def test_langchain_structured_output_nested_models(chat_model):
    llm = chat_model(max_tokens=N * 2).with_structured_output(Trip, method="function_calling")
    trip = llm.invoke("Plan a short trip.")
    assert isinstance(trip, Trip) and all(isinstance(s, City) for s in trip.stops)


def test_langchain_bind_tools_reads_a_fenced_call_under_auto(chat_model):
    grammar = fenced_call_grammar("GetWeather", {"city": "Paris"})
    msg = chat_model(extra_body={"grammar": grammar}).bind_tools([GetWeather]).invoke(ASK)
    assert [(c["name"], c["args"]) for c in msg.tool_calls] == [("GetWeather", {"city": "Paris"})]
    assert msg.content == "I will look it up."

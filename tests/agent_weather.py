"""The weather tool and the openai-agents agent that calls it, shared by the agent-client tests
(one template in test_agent_clients, three template styles in test_agent_clients_families)."""

from __future__ import annotations

from typing import Any, Literal

CITIES = ("Paris", "Oslo")
ASK = "What is the weather in Paris?"


def weather_agent(
    agents: Any,
    server: Any,
    openai_mod: Any,
    called: list,
    *,
    max_tokens: int,
    stop_on_first_tool: bool = True,
    **settings: Any,
) -> Any:
    """An agent with the one weather tool over `server`'s /v1; each call's city is appended to
    `called`. `stop_on_first_tool`: the tool's result is the answer; else the agent asks again
    with the call and its result in the history (a second turn)."""

    @agents.function_tool
    def get_weather(city: Literal["Paris", "Oslo"]) -> str:
        """The weather in a city."""
        called.append(city)
        return f"sunny in {city}"

    client = openai_mod.AsyncOpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0,
                                    timeout=server.timeout)  # fmt: skip
    behaviour = {"tool_use_behavior": "stop_on_first_tool"} if stop_on_first_tool else {}
    return agents.Agent(
        name="weather",
        instructions="Answer with the weather tool.",
        tools=[get_weather],
        model=agents.OpenAIChatCompletionsModel(model="m", openai_client=client),
        model_settings=agents.ModelSettings(
            temperature=0, max_tokens=max_tokens, parallel_tool_calls=False, **settings
        ),
        **behaviour,
    )

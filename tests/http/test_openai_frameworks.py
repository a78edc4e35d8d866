"""The agent frameworks people reach the OpenAI-compatible route with, as a new user would
use them, over a real uvicorn server (served alone and mounted in FastAPI, on both
stores): ``openai-agents`` (an ``Agent`` with a function tool, and one with agentcore's
own MCP server, on ``OpenAIChatCompletionsModel``) and ``langchain-openai``
(``bind_tools``, ``with_structured_output``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.mcp import MCPServerStreamableHttp
from conftest import Keys
from helpers import Recorder, open_with
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI, BadRequestError
from pydantic import BaseModel

from agentcore import AgentCore
from agentcore.chat_models import ChatRequest, ChatResult, ToolCall

QUESTION = "What is the weather in Paris?"


class Weather(BaseModel):
    """The weather in a city."""

    city: str
    sky: str


def answer(request: ChatRequest) -> ChatResult:
    """Calls the tool it is told to, else the first it is offered (not the handoff), once;
    then answers with what the tool returned."""
    if request.steps:
        return ChatResult(text=f"The tool says: {request.steps[-1].result}")
    offered = [tool.name for tool in request.tools if tool.name != "handoff_to_human"]
    if request.tool_choice not in ("auto", "required"):
        offered = [request.tool_choice]
    if not offered:  # quotes the first passage, and cites it
        passage = request.passages[0]
        return ChatResult(text=passage.text, used_passage_ids=[passage.id])
    arguments: dict[str, Any] = {"city": "Paris", "sky": "sunny"}
    if offered[0] == "search_knowledge":
        arguments = {"query": "vacation days"}
    return ChatResult(text="", tool_calls=[ToolCall("call_1", offered[0], arguments)])


class JsonRecorder(Recorder):
    """A scripted model that can answer in the JSON it is asked for."""

    accepts_response_format = True


def in_json(request: ChatRequest) -> ChatResult:
    """The weather as the JSON schema ``Weather`` the request asks for."""
    assert request.response_format is not None
    assert request.response_format["json_schema"]["name"] == "Weather"
    return ChatResult(text=json.dumps({"city": "Paris", "sky": "sunny"}))


@pytest.fixture
def model() -> Recorder:
    return Recorder("scripted", answer)


@pytest.fixture
def core(store_url: str, model: Recorder) -> Iterator[AgentCore]:
    """conftest's core (SQLite or PostgreSQL) with the scripted chat models."""
    with open_with(store_url, model, JsonRecorder("json", in_json)) as instance:
        yield instance


@pytest.fixture
def key(keys: Keys) -> str:
    return keys.make(scopes=("read",)).secret


@pytest.fixture
def agent(core: AgentCore, key: str) -> str:
    ws = core.workspace("acme", "test")
    ws.knowledge.ingest_text("handbook.md", "Employees get 25 vacation days per year.")
    return ws.agents.create(name="W", model="scripted").id


def openai_agents_model(base_url: str, key: str, agent: str) -> OpenAIChatCompletionsModel:
    set_tracing_disabled(True)  # nothing is sent to OpenAI's trace servers
    client = AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)
    return OpenAIChatCompletionsModel(model=agent, openai_client=client)


def test_openai_agents_runs_a_function_tool(served_v1: str, key: str, agent: str) -> None:
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city now."""
        asked.append(city)
        return f"sunny in {city}"

    traveller = Agent(
        name="Travel helper",
        instructions="Answer with the weather.",
        tools=[get_weather],
        model=openai_agents_model(served_v1, key, agent),
    )
    result = asyncio.run(Runner.run(traveller, QUESTION))
    assert asked == ["Paris"]
    assert result.final_output == "The tool says: sunny in Paris"


def test_openai_agents_keeps_the_citations_as_annotations(
    served_v1: str, key: str, agent: str
) -> None:
    helper = Agent(name="HR helper", model=openai_agents_model(served_v1, key, agent))
    result = asyncio.run(Runner.run(helper, "How many vacation days do I get?"))
    assert result.final_output == "Employees get 25 vacation days per year."
    (said,) = result.new_items[-1].raw_item.content  # type: ignore[union-attr]
    (cited,) = said.annotations  # type: ignore[union-attr]
    assert (cited.type, cited.url, cited.title) == (
        "url_citation",
        "handbook.md#page=1",
        "handbook.md, page 1",
    )
    assert (cited.start_index, cited.end_index) == (0, len(result.final_output))


def test_openai_agents_calls_agentcores_mcp_server(
    served_v1: str, key: str, agent: str, model: Recorder
) -> None:
    async def run() -> Any:
        params = {"url": f"{served_v1}/mcp", "headers": {"Authorization": f"Bearer {key}"}}
        async with MCPServerStreamableHttp(params=params, name="agentcore") as server:  # type: ignore[arg-type]
            researcher = Agent(
                name="Researcher",
                instructions="Look it up in the knowledge core.",
                mcp_servers=[server],
                model=openai_agents_model(served_v1, key, agent),
            )
            return await Runner.run(researcher, "How many vacation days do I get?")

    result = asyncio.run(run())
    offered = {tool.name for tool in model.requests[0].tools}
    assert {"search_knowledge", "chat_with_agent"} <= offered
    assert "25 vacation days" in result.final_output


def test_langchain_binds_tools_and_sends_their_outputs(
    served_v1: str, key: str, agent: str
) -> None:
    def get_weather(city: str) -> str:
        """The weather in a city now."""
        return f"sunny in {city}"

    llm = ChatOpenAI(model=agent, base_url=served_v1, api_key=key, max_retries=0)  # type: ignore[arg-type]
    with_tools = llm.bind_tools([get_weather])
    question = HumanMessage(QUESTION)
    first = with_tools.invoke([question])
    (call,) = first.tool_calls  # type: ignore[attr-defined]
    assert call["name"] == "get_weather" and call["args"]["city"] == "Paris"
    output = ToolMessage(get_weather(call["args"]["city"]), tool_call_id=call["id"])
    second = with_tools.invoke([question, first, output])
    assert second.content == "The tool says: sunny in Paris"


def test_langchain_structured_output_through_a_json_schema(
    served_v1: str, key: str, core: AgentCore, agent: str
) -> None:
    llm = ChatOpenAI(model=agent, base_url=served_v1, api_key=key, max_retries=0)  # type: ignore[arg-type]
    with pytest.raises(BadRequestError) as refused:  # the scripted model cannot
        llm.with_structured_output(Weather).invoke(QUESTION)
    assert refused.value.body["code"] == "response_format_unsupported"  # type: ignore[index]

    speaks_json = core.workspace("acme", "test").agents.create(name="J", model="json").id
    llm = ChatOpenAI(model=speaks_json, base_url=served_v1, api_key=key, max_retries=0)  # type: ignore[arg-type]
    assert llm.with_structured_output(Weather).invoke(QUESTION) == Weather(
        city="Paris", sky="sunny"
    )


def test_langchain_structured_output_through_a_function(
    served_v1: str, key: str, agent: str, model: Recorder
) -> None:
    llm = ChatOpenAI(model=agent, base_url=served_v1, api_key=key, max_retries=0)  # type: ignore[arg-type]
    structured = llm.with_structured_output(Weather, method="function_calling")
    found = structured.invoke(QUESTION)
    assert found == Weather(city="Paris", sky="sunny")
    assert model.requests[-1].tool_choice == "Weather"
    assert json.loads(json.dumps(model.requests[-1].tools[0].parameters))["type"] == "object"

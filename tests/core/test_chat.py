"""Chat: cited answers from PDFs, state rules per environment, conversations, events."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from conftest import Api, Keys
from helpers import Recorder, core_with, where_cited
from pdfs import make_pdf

import agentcore
from agentcore import AgentCore, Event
from agentcore.chat import build_citations, wants_human
from agentcore.chat_models import ChatRequest, ChatResult, Passage, ToolCall
from agentcore.core import MODEL_THREADS
from agentcore.plugins.extractive import NO_ANSWER
from agentcore_starlette import create_app

FILLER = "This page describes the history of the company picnic and the parking rules. " * 4
PAGES = [
    FILLER,
    "The warehouse in Rotterdam stores spare turbine blades for the northern wind farms. " * 2,
    FILLER,
    "The emergency generator is tested every Tuesday at 7 am by the facilities team. " * 2,
]


def record(core: AgentCore, kind: str = "*") -> list[Event]:
    events: list[Event] = []
    core.events.subscribe(kind, events.append)
    return events


@pytest.fixture
def manual(api: Api) -> str:
    response = api.post(
        "/v1/knowledge/documents",
        files={"file": ("operations-manual.pdf", make_pdf(PAGES), "application/pdf")},
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def create_agent(api: Api, deploy: bool = True, **fields: Any) -> str:
    response = api.post("/v1/agents", json={"name": "Ops", "role": "support", **fields})
    assert response.status_code == 201, response.text
    agent_id = str(response.json()["id"])
    if deploy:
        assert api.post(f"/v1/agents/{agent_id}/deploy").status_code == 200
    return agent_id


def chat(api: Api, agent_id: str, message: str, **extra: Any) -> Any:
    return api.post("/v1/chat/message", json={"agentId": agent_id, "message": message, **extra})


def test_a_fact_on_page_four_is_cited_with_its_source_and_page(api: Api, manual: str) -> None:
    agent_id = create_agent(api)
    response = chat(api, agent_id, "When is the emergency generator tested?")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["agentId"] == agent_id
    assert "Tuesday" in body["response"]
    assert where_cited(body["citations"]) == [{"source": "operations-manual.pdf", "pages": [4]}]
    assert body["conversationId"].startswith("conv_")


def test_an_unrelated_question_gets_no_answer_and_no_citations(api: Api, manual: str) -> None:
    agent_id = create_agent(api)
    body = chat(api, agent_id, "What is the boiling point of liquid nitrogen?").json()
    assert body["response"] == NO_ANSWER
    assert body["citations"] == []


def test_asking_for_a_human_hands_off(api: Api, core: AgentCore, manual: str) -> None:
    events = record(core)
    agent_id = create_agent(api)
    body = chat(api, agent_id, "I want to talk to a human").json()
    assert body["citations"] == []
    handoffs = [e for e in events if e.type == "agent.handoff"]
    assert len(handoffs) == 1
    assert handoffs[0].data["reason"] == "user_requested"
    assert handoffs[0].data["agent_id"] == agent_id
    assert handoffs[0].data["conversation_id"] == body["conversationId"]


def test_nothing_relevant_hands_off_when_configured(api: Api, core: AgentCore, manual: str) -> None:
    events = record(core, "agent.handoff")
    agent_id = create_agent(api, handoff_on_no_answer=True)
    chat(api, agent_id, "What is the boiling point of liquid nitrogen?")
    assert [e.data["reason"] for e in events] == ["no_relevant_knowledge"]
    chat(api, agent_id, "Where are the spare turbine blades stored?")
    assert len(events) == 1  # an answered question does not hand off


def test_actions_are_published(api: Api, core: AgentCore, manual: str) -> None:
    events = record(core, "agent.action")
    agent_id = create_agent(api)
    chat(api, agent_id, "Where are spare turbine blades stored?")
    actions = [e.data["action"] for e in events]
    assert actions == ["knowledge_lookup", "reply_sent"]
    assert events[0].data["results"] > 0
    assert where_cited(events[1].data["citations"]) == [
        {"source": "operations-manual.pdf", "pages": [2]}
    ]


@pytest.mark.parametrize(
    ("env", "status", "expected"),
    [
        ("test", "draft", 200),
        ("test", "deployed", 200),
        ("test", "archived", 409),
        ("live", "draft", 409),
        ("live", "deployed", 200),
        ("live", "archived", 409),
    ],
)
def test_state_rules_per_environment(
    api: Api, keys: Keys, env: str, status: str, expected: int
) -> None:
    scoped = api.with_key(keys.make(env=env).secret)
    agent_id = create_agent(scoped, deploy=status == "deployed")
    if status == "archived":
        assert scoped.delete(f"/v1/agents/{agent_id}").status_code == 200
    response = chat(scoped, agent_id, "hello")
    assert response.status_code == expected, response.text
    if expected == 409:
        code = "agent_archived" if status == "archived" else "agent_not_deployed"
        assert response.json()["code"] == code
        assert response.json()["param"] == "agentId"


def test_bad_requests(api: Api, keys: Keys, core: AgentCore) -> None:
    agent_id = create_agent(api)
    unknown = chat(api, "agt_doesnotexist", "hi")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "resource_missing")
    too_long = chat(api, agent_id, "x" * (core.settings.max_message_chars + 1))
    assert (too_long.status_code, too_long.json()["code"]) == (422, "message_too_long")
    at_limit = chat(api, agent_id, "x" * core.settings.max_message_chars)
    assert at_limit.status_code == 200
    assert chat(api, agent_id, "   ").json()["code"] == "empty_message"
    missing = api.post("/v1/chat/message", json={"message": "hi"})
    assert (missing.status_code, missing.json()["param"]) == (422, "agentId")
    other_org = api.with_key(keys.make(org="globex").secret)
    assert chat(other_org, agent_id, "hi").status_code == 404
    other_env = api.with_key(keys.make(env="live").secret)
    assert chat(other_env, agent_id, "hi").status_code == 404
    read_only = api.with_key(keys.make(scopes=("read",)).secret)
    assert chat(read_only, agent_id, "hi").status_code == 200


def test_conversation_continuity_and_bounded_history(tmp_path: Any) -> None:
    model = Recorder("echo", lambda r: ChatResult(text=f"echo {len(r.history)}"))
    core = core_with(tmp_path, model, history_turns=4)
    ws = core.workspace("acme", "test")
    agent = ws.agents.create(name="E", model="echo")
    first = ws.chat.send(agent.id, "one")
    assert first.response == "echo 0"
    for word in ("two", "three", "four"):
        reply = ws.chat.send(agent.id, word, first.conversationId)
        assert reply.conversationId == first.conversationId
    history = model.requests[-1].history
    assert [(t.role, t.content) for t in history] == [
        ("user", "two"),
        ("assistant", "echo 2"),
        ("user", "three"),
        ("assistant", "echo 4"),
    ]
    other = ws.agents.create(name="F", model="echo")
    with pytest.raises(agentcore.Conflict) as mismatch:
        ws.chat.send(other.id, "hi", first.conversationId)
    assert mismatch.value.code == "conversation_agent_mismatch"
    with pytest.raises(agentcore.NotFound):
        ws.chat.send(agent.id, "hi", "conv_missing")
    with pytest.raises(agentcore.NotFound):  # another environment's conversation
        core.workspace("acme", "live").chat.send(agent.id, "hi", first.conversationId)
    core.close()


def test_tools_run_through_the_hook_and_results_go_back_to_the_model(tmp_path: Any) -> None:
    def answer(request: ChatRequest) -> ChatResult:
        if not request.steps:
            return ChatResult(text="", tool_calls=[ToolCall("c1", "order_status", {"id": "42"})])
        return ChatResult(text=f"Your order is {request.steps[0].result}.")

    class Tools:
        calls: list[tuple[str, dict[str, Any]]] = []

        workspaces: list[Any] = []

        @agentcore.hookimpl
        def agentcore_run_tool(
            self, workspace: Any, agent_id: str, name: str, arguments: Any
        ) -> Any:
            self.calls.append((name, arguments))
            self.workspaces.append(workspace)
            return "shipped" if name == "order_status" else None

    tools = Tools()
    model = Recorder("tooly", answer)
    core = core_with(tmp_path, model, tools)
    events = record(core, "agent.action")
    ws = core.workspace("acme", "test")
    schema = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    agent = ws.agents.create(
        name="T", model="tooly", tools=[{"name": "order_status", "parameters": schema}]
    )
    reply = ws.chat.send(agent.id, "Where is order 42?")
    assert reply.response == "Your order is shipped."
    assert tools.calls == [("order_status", {"id": "42"})]
    # the hook gets the calling workspace with its services, as the plugins page shows
    (given,) = tools.workspaces
    assert isinstance(given, agentcore.WorkspaceServices) and given == ws
    assert given.knowledge.list().documents == []
    offered = [t.name for t in model.requests[0].tools]
    assert offered == ["order_status", "handoff_to_human"]
    calls = [e.data for e in events if e.data["action"] == "tool_call"]
    assert calls == [
        {
            "agent_id": agent.id,
            "conversation_id": reply.conversationId,
            "action": "tool_call",
            "tool": "order_status",
            "arguments": {"id": "42"},
        }
    ]
    core.close()


def test_unknown_tools_are_reported_and_steps_are_bounded(tmp_path: Any) -> None:
    def always_calls(request: ChatRequest) -> ChatResult:
        if not request.tools:
            return ChatResult(text="I could not look that up.")
        return ChatResult(text="", tool_calls=[ToolCall(f"c{len(request.steps)}", "lookup", {})])

    model = Recorder("loop", always_calls)
    core = core_with(tmp_path, model, max_tool_steps=3)
    events = record(core, "agent.action")
    ws = core.workspace("acme", "test")
    agent = ws.agents.create(name="L", model="loop", tools=[{"name": "other"}])
    reply = ws.chat.send(agent.id, "Look it up")
    assert reply.response == "I could not look that up." and reply.status == "completed"
    assert len(model.requests) == 4  # three tool rounds, then a final call without tools
    assert model.requests[-1].tools == []
    assert "unknown tool 'lookup'" in model.requests[1].steps[0].result
    assert sum(1 for e in events if e.data["action"] == "tool_call") == 3
    core.close()


def test_the_model_can_hand_off_with_the_builtin_tool(tmp_path: Any) -> None:
    model = Recorder(
        "handy",
        lambda r: ChatResult(
            text="", tool_calls=[ToolCall("h", "handoff_to_human", {"reason": "angry customer"})]
        ),
    )
    core = core_with(tmp_path, model)
    events = record(core, "agent.handoff")
    ws = core.workspace("acme", "test")
    agent = ws.agents.create(name="H", model="handy")
    reply = ws.chat.send(agent.id, "This is unacceptable!")
    assert reply.citations == []
    assert [e.data["reason"] for e in events] == ["angry customer"]
    core.close()


@pytest.mark.slow
def test_a_model_timeout_is_a_504_problem_and_an_agent_error(tmp_path: Any, keys: Keys) -> None:
    release, finished = threading.Event(), threading.Event()

    def hang(request: ChatRequest) -> ChatResult:
        try:
            release.wait(60)  # until the test lets it answer
            return ChatResult(text="too late")
        finally:
            finished.set()

    model = Recorder("sleepy", hang)
    core = core_with(tmp_path, model, model_timeout=0.2)
    errors = record(core, "agent.error")
    core.create_organization("acme")
    api = Api(create_app(core), None, core.keys.create("acme", "test").secret)
    agent_id = create_agent(api, model="sleepy")
    response = chat(api, agent_id, "hello?")
    answered_first = not finished.is_set()  # at the model's timeout, not when it answered
    release.set()
    assert response.status_code == 504
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "provider_timeout"
    assert answered_first
    assert [e.data["error"] for e in errors] == ["provider_timeout"]
    assert errors[0].data["agent_id"] == agent_id
    core.close()


def test_abandoned_model_calls_still_queued_are_never_made(tmp_path: Any) -> None:
    # clients that give up at once, many more than the model pool's threads: the calls
    # still queued are dropped with their turns (once every one was made later, paid for
    # by nobody, and a fresh request behind them timed out)
    calls: list[float] = []
    lock = threading.Lock()
    release = threading.Event()  # the calls made hold the pool's threads until then

    def slow(request: ChatRequest) -> ChatResult:
        with lock:
            calls.append(time.monotonic())
        release.wait(60)
        return ChatResult(text="late")

    core = core_with(tmp_path, Recorder("slow", slow), model_timeout=3)
    ws = core.workspace("acme", "test")
    agent = ws.agents.create(name="S", model="slow")
    try:
        for _ in range(4 * MODEL_THREADS):
            with pytest.raises(agentcore.DeadlineExceeded):
                ws.chat.send(agent.id, "hi", cancellation=agentcore.Cancellation(timeout=0.02))
        release.set()  # the threads are free again: the abandoned calls queued are dropped
        reply = ws.chat.send(agent.id, "hi", cancellation=agentcore.Cancellation(timeout=30))
        assert reply.response == "late"
        assert len(calls) <= MODEL_THREADS + 1  # those already running, and the fresh one
    finally:
        release.set()
        core.close()


def test_a_stopped_turn_starts_no_more_tools(tmp_path: Any) -> None:
    # the model asks for three tool calls; the client leaves while the first runs (the
    # tool itself says when: a timer could fire before it started on a busy machine):
    # it ends, and neither of the others starts (their side effects would be done for
    # nothing, and done again by a retry)
    def answer(request: ChatRequest) -> ChatResult:
        if not request.steps:
            calls = [ToolCall(f"c{i}", "refund", {"n": i}) for i in range(3)]
            return ChatResult(text="", tool_calls=calls)
        return ChatResult(text="Refunded.")

    class Refunds:
        def __init__(self) -> None:
            self.ran: list[int] = []

        @agentcore.hookimpl
        def agentcore_run_tool(
            self, workspace: Any, agent_id: str, name: str, arguments: Any
        ) -> Any:
            stop.cancel("client disconnected")
            self.ran.append(arguments["n"])
            return "ok"

    refunds = Refunds()
    core = core_with(tmp_path, Recorder("m", answer), refunds, model_timeout=20)
    ws = core.workspace("acme", "test")
    tool = {"name": "refund", "parameters": {"type": "object", "properties": {"n": {}}}}
    agent = ws.agents.create(name="T", model="m", tools=[tool])
    try:
        stop = agentcore.Cancellation()
        with pytest.raises(agentcore.Cancelled):
            ws.chat.send(agent.id, "refund me", cancellation=stop)
        assert refunds.ran == [0]
        assert ws.conversations.list().conversations == []
    finally:
        core.close()


def test_a_cancelled_send_stops_at_once_and_stores_nothing(tmp_path: Any) -> None:
    release, called, finished = threading.Event(), threading.Event(), threading.Event()

    def held(request: ChatRequest) -> ChatResult:
        called.set()
        try:
            release.wait(60)  # until the test lets it answer
            return ChatResult(text="too late")
        finally:
            finished.set()

    core = core_with(tmp_path, Recorder("held", held), model_timeout=20)
    actions = record(core, "agent.action")
    ws = core.workspace("acme", "test")
    agent = ws.agents.create(name="H", model="held")
    try:
        stop = agentcore.Cancellation()
        # the client leaves once the model has the turn (a timer could fire before)
        leaves = lambda: called.wait(60) and stop.cancel("client disconnected")  # noqa: E731
        threading.Thread(target=leaves, daemon=True).start()
        with pytest.raises(agentcore.Cancelled, match="client disconnected"):
            ws.chat.send(agent.id, "hello?", cancellation=stop)
        called.clear()
        with pytest.raises(agentcore.DeadlineExceeded):  # a deadline nobody fires
            ws.chat.send(agent.id, "hello?", cancellation=agentcore.Cancellation(timeout=2))
        assert called.is_set() and not finished.is_set()  # neither waited for the model
        release.set()
        time.sleep(0.2)
        assert ws.conversations.list().conversations == []
        assert [e.data["action"] for e in actions] == ["knowledge_lookup"] * 2
        with pytest.raises(agentcore.Cancelled):  # cancelled before it starts: no model call
            ws.chat.send(agent.id, "hello?", cancellation=stop)
        reply = ws.chat.send(agent.id, "hello?", cancellation=agentcore.Cancellation(10))
        assert reply.response == "too late"
        assert ws.conversations.get(reply.conversationId).message_count == 2
    finally:
        release.set()
        core.close()


def test_unknown_model_is_refused_at_configuration_time(api: Api) -> None:
    response = api.post("/v1/agents", json={"name": "X", "model": "gpt-nonexistent"})
    assert (response.status_code, response.json()["code"]) == (422, "unknown_model")
    assert response.json()["param"] == "model"


def test_citations_group_by_source_with_sorted_unique_pages() -> None:
    passages = [
        Passage("P1", "a", "b.pdf", [4, 5], 0.9),
        Passage("P2", "b", "a.pdf", [2], 0.8),
        Passage("P3", "c", "b.pdf", [1, 4], 0.7),
        Passage("P4", "d", "c.pdf", [9], 0.6),
    ]
    citations = build_citations(passages, ["P3", "P1", "P2"])
    # nothing in an empty answer is traced: each passage quotes its opening, in order
    assert [c.model_dump() for c in citations] == [
        {"source": "b.pdf", "pages": [1, 4, 5], "quote": "a", "quotes": ["a", "c"]},
        {"source": "a.pdf", "pages": [2], "quote": "b"},
    ]
    assert build_citations(passages, []) == []


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("I want to talk to a human", True),
        ("Can I speak with a real person please?", True),
        ("connect me to an agent", True),
        ("representative", True),
        ("How do humans perceive color?", False),
        ("What does the agent registry do?", False),
    ],
)
def test_wants_human(message: str, expected: bool) -> None:
    assert wants_human(message) is expected


def test_a_quote_cites_only_its_own_page_and_a_paraphrase_cites_the_chunk() -> None:
    from agentcore.chat import quoted_pages
    from agentcore.knowledge._chunking import chunk_pages

    [chunk] = chunk_pages(["Cats sleep all day long. " * 3, "Dogs bark at the mailman daily."])
    assert chunk.pages == [1, 2]
    passage = Passage("P1", chunk.text, "pets.txt", chunk.pages, 0.9, "doc", chunk.page_offsets)
    assert quoted_pages(passage, "Dogs bark at the mailman daily.") == [2]
    assert quoted_pages(passage, "Cats sleep all day long.") == [1]
    assert quoted_pages(passage, "Pets are noisy and sleepy.") == [1, 2]


@pytest.mark.slow
def test_a_slow_openai_compatible_server_is_a_504_and_an_agent_error(tmp_path: Any) -> None:
    """End to end: a real HTTP provider on 127.0.0.1 that answers too late."""
    import http.server

    release, answered = threading.Event(), threading.Event()

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            release.wait(60)  # until the test lets it answer
            answered.set()
            self.send_response(500)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    core = core_with(
        tmp_path,
        openai_base_url=f"http://127.0.0.1:{server.server_port}/v1",
        openai_model="slow",
        model_timeout=0.5,
    )
    try:
        errors = record(core, "agent.error")
        core.create_organization("acme")
        api = Api(create_app(core), None, core.keys.create("acme", "test").secret)
        agent_id = create_agent(api, model="openai:slow")
        response = chat(api, agent_id, "Anyone there?")
        assert not answered.is_set()  # the model's timeout, not the server's late answer
        assert response.status_code == 504
        assert response.json()["code"] == "provider_timeout"
        assert [(e.data["error"], e.data["model"]) for e in errors] == [
            ("provider_timeout", "openai:slow")
        ]
    finally:
        release.set()
        server.shutdown()
        server.server_close()
        core.close()

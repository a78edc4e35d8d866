"""Chat: agent → retrieval → chat model (with tools) → answer with page citations.

The pipeline of ``POST /v1/chat/message``. Events on the core's bus mark what the
agent does: ``agent.action`` (knowledge lookup, tool call, reply sent),
``agent.handoff`` (a human is needed) and ``agent.error`` (the model provider failed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from concurrent.futures import Executor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, Protocol

from agentcore.chat_models import (
    ChatModel,
    ChatRequest,
    ChatResult,
    ChatTurn,
    Passage,
    ToolSpec,
    ToolStep,
)
from agentcore.errors import (
    AgentCoreError,
    Conflict,
    InvalidRequest,
    NotFound,
    ProviderError,
    ProviderTimeout,
    ValidationFailed,
)
from agentcore.knowledge.chunking import pages_in_span, split_sentences
from agentcore.models import HANDOFF_TOOL, Agent, ChatMessageResponse, Citation
from agentcore.storage.base import AgentStorage, ConversationStorage
from agentcore.storage.records import StoredChunk, StoredMessage

if TYPE_CHECKING:
    from agentcore.config import Settings
    from agentcore.workspace import Workspace

HANDOFF_REPLY = (
    "I'm handing this conversation to a human colleague, who will follow up here shortly."
)
HANDOFF_SPEC = ToolSpec(
    name=HANDOFF_TOOL,
    description="Hand the conversation to a human when the user asks for one or you cannot help.",
    parameters={
        "type": "object",
        "properties": {"reason": {"type": "string", "description": "Why a human is needed."}},
    },
)
_HUMAN_REQUEST = re.compile(
    r"\b(talk|speak|chat|connect|transfer|put)\b[^.?!]{0,40}\b(human|person|agent|someone|"
    r"representative|operator|staff|people)\b|\b(real|live|actual) (person|human|agent)\b|"
    r"\bhuman (agent|being|support)\b|\brepresentative\b",
    re.IGNORECASE,
)
_GUARD_SLACK = 2.0  # seconds past the model time-out before a hung plugin is abandoned


def wants_human(message: str) -> bool:
    """Whether the user asks for a person ("I want to talk to a human", ...)."""
    return _HUMAN_REQUEST.search(message) is not None


def quoted_pages(passage: Passage, answer: str) -> list[int]:
    """The pages of ``passage`` that ``answer`` quotes, or all its pages if it quotes none.

    An answer that repeats sentences of a chunk spanning pages 3-4 verbatim, all from
    page 4, cites page 4 only; a paraphrase cites the chunk's pages.
    """
    if len(passage.pages) < 2 or not answer:
        return list(passage.pages)
    found: set[int] = set()
    for sentence in split_sentences(answer):
        sentence = " ".join(sentence.split())
        if len(sentence) < 12:
            continue
        start = passage.text.find(sentence)
        if start >= 0:
            found.update(
                pages_in_span(passage.pages, passage.page_offsets, start, start + len(sentence))
            )
    return sorted(found) or list(passage.pages)


def build_citations(
    passages: list[Passage], used_ids: list[str], answer: str = ""
) -> list[Citation]:
    """Citations from the passages an answer used: grouped by source, pages sorted, unique."""
    used = set(used_ids)
    pages: dict[str, set[int]] = {}
    for passage in passages:
        if passage.id in used:
            pages.setdefault(passage.source, set()).update(quoted_pages(passage, answer))
    return [Citation(source=source, pages=sorted(found)) for source, found in pages.items()]


class ChatStore(AgentStorage, ConversationStorage, Protocol):
    """What chat keeps: it reads agents and writes conversations."""


class Retriever(Protocol):
    """Finds the passages a chat turn answers from (``KnowledgeService.retrieve``)."""

    def retrieve(
        self, query: str, k: int, min_score: float | None = None
    ) -> list[tuple[StoredChunk, float]]:
        """The top ``k`` chunks and scores for ``query``."""
        ...


class ToolRunner(Protocol):
    """Runs a tool an agent's model called (the ``agentcore_run_tool`` hook)."""

    def __call__(
        self, *, workspace: Workspace, agent_id: str, name: str, arguments: dict[str, Any]
    ) -> Any:
        """The tool's result, or ``None`` when no plugin runs a tool of that name."""
        ...


class ChatService:
    """Chat with the agents of one workspace; reached as ``workspace.chat``.

    :param workspace: whose agents and conversations, the caller's scopes, and where
        the turn's events are published (``workspace.publish``).
    :param store: agents (read) and conversations (read and written).
    :param settings: message, retrieval, history, tool-step and model-time limits.
    :param chat_models: the registered chat models, by name.
    :param knowledge: the workspace's retrieval (its ``KnowledgeService``).
    :param run_tool: runs tools the model calls (the plugins' hook).
    :param guard_pool: the core's threads that model calls run on, so a hung plugin
        cannot hold a request past its time-out.
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        store: ChatStore,
        settings: Settings,
        chat_models: Mapping[str, ChatModel],
        knowledge: Retriever,
        run_tool: ToolRunner,
        guard_pool: Executor,
    ) -> None:
        self._ws = workspace
        self._store = store
        self._settings = settings
        self._chat_models = chat_models
        self._knowledge = knowledge
        self._run_tool = run_tool
        self._guard_pool = guard_pool

    def send(
        self, agent_id: str, message: str, conversation_id: str | None = None
    ) -> ChatMessageResponse:
        """Send ``message`` to an agent and return its answer with citations. Read scope."""
        ws = self._ws
        ws.require("read")
        if not message.strip():
            raise ValidationFailed("The message is empty.", code="empty_message", param="message")
        if len(message) > self._settings.max_message_chars:
            raise ValidationFailed(
                f"The message is longer than {self._settings.max_message_chars} characters.",
                code="message_too_long",
                param="message",
            )
        agent = self._answering_agent(agent_id)
        conversation_id = self._conversation(agent.id, conversation_id)
        turn = _Turn(self, agent, conversation_id, message)
        text, citations = turn.run()
        self._store.add_messages(
            conversation_id,
            [
                StoredMessage("user", message, []),
                StoredMessage("assistant", text, [c.model_dump() for c in citations]),
            ],
        )
        turn.action("reply_sent", citations=[c.model_dump() for c in citations])
        return ChatMessageResponse(
            agentId=agent.id, response=text, citations=citations, conversationId=conversation_id
        )

    def _answering_agent(self, agent_id: str) -> Agent:
        ws = self._ws
        agent = self._store.get_agent(ws.organization_id, ws.environment, agent_id)
        if agent is None:
            raise NotFound(f"No agent with id {agent_id!r}.", param="agentId")
        if agent.status == "archived":
            raise Conflict("The agent is archived.", code="agent_archived", param="agentId")
        if ws.environment == "live" and agent.status != "deployed":
            raise Conflict(
                "Live keys can only chat with deployed agents; deploy it or use a test key.",
                code="agent_not_deployed",
                param="agentId",
            )
        return agent

    def _conversation(self, agent_id: str, conversation_id: str | None) -> str:
        ws = self._ws
        if conversation_id is None:
            return self._store.create_conversation(ws.organization_id, ws.environment, agent_id)
        owner = self._store.conversation_agent(ws.organization_id, ws.environment, conversation_id)
        if owner is None:
            raise NotFound(f"No conversation with id {conversation_id!r}.", param="conversationId")
        if owner != agent_id:
            raise Conflict(
                "That conversation belongs to another agent.",
                code="conversation_agent_mismatch",
                param="conversationId",
            )
        return conversation_id

    def model_for(self, agent: Agent) -> ChatModel:
        """The chat model an agent names (or the default), or a 400 naming the known ones."""
        name = agent.model or self._settings.default_chat_model
        model = self._chat_models.get(name)
        if model is None:
            known = ", ".join(sorted(self._chat_models)) or "none"
            raise InvalidRequest(
                f"The agent's model {name!r} is not available (available: {known}).",
                code="model_unavailable",
                param="model",
            )
        return model


class _Turn:
    """One user message going through the pipeline."""

    def __init__(self, service: ChatService, agent: Agent, conversation_id: str, message: str):
        self.service = service
        self.ws = service._ws
        self.settings = service._settings
        self.agent = agent
        self.conversation_id = conversation_id
        self.message = message

    def event(self, kind: str, **data: Any) -> None:
        self.ws.publish(
            kind, {"agent_id": self.agent.id, "conversation_id": self.conversation_id, **data}
        )

    def action(self, action: str, **data: Any) -> None:
        self.event("agent.action", action=action, **data)

    def handoff(self, reason: str) -> tuple[str, list[Citation]]:
        self.event("agent.handoff", reason=reason, message=self.message)
        return HANDOFF_REPLY, []

    def run(self) -> tuple[str, list[Citation]]:
        if wants_human(self.message):
            return self.handoff("user_requested")
        results = self.service._knowledge.retrieve(self.message, self.settings.chat_top_k)
        self.action(
            "knowledge_lookup",
            query=self.message,
            results=len(results),
            top_score=results[0][1] if results else None,
        )
        passages = [
            Passage(
                id=f"P{number}",
                text=chunk.text,
                source=chunk.source,
                pages=chunk.pages,
                score=score,
                document_id=chunk.document_id,
                page_offsets=chunk.page_offsets,
            )
            for number, (chunk, score) in enumerate(results, 1)
        ]
        history = [
            ChatTurn(role="user" if m.role == "user" else "assistant", content=m.content)
            for m in self.service._store.recent_messages(
                self.conversation_id, self.settings.history_turns
            )
        ]
        tools = [ToolSpec(t.name, t.description, t.parameters) for t in self.agent.tools] + [
            HANDOFF_SPEC
        ]
        steps: list[ToolStep] = []
        model = self.service.model_for(self.agent)
        for step in range(self.settings.max_tool_steps + 1):
            offer = tools if step < self.settings.max_tool_steps else []
            request = ChatRequest(
                system_prompt=self.agent.system_prompt,
                message=self.message,
                passages=passages,
                history=history,
                tools=offer,
                steps=list(steps),
                timeout=self.settings.model_timeout,
            )
            result = self.complete(model, request)
            if not result.tool_calls:
                break
            for call in result.tool_calls:
                if call.name == HANDOFF_TOOL:
                    return self.handoff(str(call.arguments.get("reason") or "model_requested"))
                steps.append(ToolStep(call, self.run_tool(call.name, call.arguments)))
        if not result.used_passage_ids and self.agent.handoff_on_no_answer:
            return self.handoff("no_relevant_knowledge")
        return result.text, build_citations(passages, result.used_passage_ids, result.text)

    def run_tool(self, name: str, arguments: dict[str, Any]) -> str:
        self.action("tool_call", tool=name, arguments=arguments)
        known = {tool.name for tool in self.agent.tools}
        if name not in known:
            return json.dumps({"error": f"unknown tool {name!r}"})
        outcome = self.service._run_tool(
            workspace=self.ws, agent_id=self.agent.id, name=name, arguments=arguments
        )
        if outcome is None:
            return json.dumps({"error": "this tool is not available here"})
        return outcome if isinstance(outcome, str) else json.dumps(outcome, default=str)

    def complete(self, model: ChatModel, request: ChatRequest) -> ChatResult:
        """Call the model, bounded in time even if the plugin itself hangs."""
        pool = self.service._guard_pool
        future = pool.submit(model.complete, request)
        try:
            return future.result(timeout=request.timeout + _GUARD_SLACK)
        except FutureTimeout:
            error: AgentCoreError = ProviderTimeout(
                f"The model {model.name!r} did not answer within {request.timeout:g} s."
            )
        except (ProviderError, ProviderTimeout) as exc:
            error = exc
        except AgentCoreError:
            raise
        except Exception as exc:  # a broken plugin is a provider failure, not a 500
            error = ProviderError(f"The model {model.name!r} failed: {type(exc).__name__}.")
        self.event("agent.error", error=error.code, detail=error.detail, model=model.name)
        raise error

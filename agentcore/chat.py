"""Chat: agent → retrieval → chat model (with tools) → answer with page citations.

The pipeline of ``POST /v1/chat/message``. Events on the core's bus mark what the
agent does: ``agent.action`` (knowledge lookup, tool call, reply sent),
``agent.handoff`` (a human is needed) and ``agent.error`` (the model provider failed).

One pipeline serves ``send`` and ``stream``: a turn is a generator of text deltas
that returns the answer; ``send`` drains it (calling the model's ``complete``),
``stream`` hands the deltas out as the model generates them (``stream``).
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, InvalidStateError, wait
from dataclasses import asdict, dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import ValidationError

from agentcore._cancellation import Cancellation
from agentcore._ids import new_id
from agentcore._logs import get_logger
from agentcore.chat_models import (
    ChatModel,
    ChatRequest,
    ChatResult,
    ChatTurn,
    Passage,
    ToolCall,
    ToolSpec,
    ToolStep,
    stream_answer,
    whole_answer,
)
from agentcore.conversations import Publisher, check_message, publish_message, question_text
from agentcore.errors import (
    AgentCoreError,
    Conflict,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    ProviderError,
    ProviderTimeout,
    ValidationFailed,
    check_unicode,
    invalid_fields,
)
from agentcore.events import finite
from agentcore.knowledge import check_user, support, supporting_pages
from agentcore.knowledge.terms import TermStats
from agentcore.mcp_tools import McpFailure, McpTools, RemoteTool
from agentcore.observer import Observer, unobserved
from agentcore.schema import (
    HANDOFF_TOOL,
    Agent,
    ChatMessageResponse,
    Citation,
    ConversationStatus,
    EndUser,
    Filter,
    RequestedToolCall,
    SearchMode,
    ToolApproval,
    ToolOutput,
    Usage,
)
from agentcore.storage.base import AgentStore, ConversationStore
from agentcore.storage.records import PendingTurn, StoredChunk, StoredMessage
from agentcore.workspace import CHAT_STATUSES

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
MAX_QUOTES = 5  # the most passages one citation quotes
_GUARD_SLACK = 2.0  # seconds past the model time-out before a hung plugin is abandoned
_END = object()  # what ``next`` returns for a model stream that ended without a result
# the result a model sees for a caller's tool it called on its last step (tools are not
# offered then, so the turn does not wait for the caller)
_NOT_OFFERED = json.dumps({"error": "no more tool calls in this turn"})
# what a model sees for a call that needs a person's approval, asked through a client
# that cannot give one (OpenAI's API): the call is not made
_NO_APPROVER = json.dumps(
    {"error": "this tool needs a person's approval, which is not possible here"}
)

log = get_logger("agentcore.chat")  # masks keys and secrets in every record


def passages_of(results: Sequence[tuple[StoredChunk, float]]) -> list[Passage]:
    """Retrieved chunks and their scores as the passages a model is given, ``P1``,
    ``P2``, ... in rank order."""
    return [
        Passage(
            id=f"P{number}",
            text=chunk.text,
            source=chunk.source,
            pages=chunk.pages,
            score=score,
            document_id=chunk.document_id,
            page_offsets=chunk.page_offsets,
            location=chunk.location,
        )
        for number, (chunk, score) in enumerate(results, 1)
    ]


def wants_human(message: str) -> bool:
    """Whether the user asks for a person ("I want to talk to a human", ...)."""
    return _HUMAN_REQUEST.search(message) is not None


def quoted_pages(passage: Passage, answer: str) -> list[int]:
    """The pages of ``passage`` that ``answer`` draws on, when it cites only that one."""
    return supporting_pages([(passage.text, passage.pages, passage.page_offsets)], answer)[0]


def build_citations(
    passages: list[Passage], used_ids: list[str], answer: str = ""
) -> list[Citation]:
    """Citations from the passages an answer used: grouped by source and location (a
    deck's slides, a workbook's sheets, a document's headings are cited apart), pages
    sorted, unique, each with the passages it quotes.

    A used passage cites the pages of the sentences the answer draws on: those it
    quotes, and for a paraphrase those that best match it (see ``support``), and quotes
    those sentences verbatim. An answer that repeats sentences of a chunk spanning pages
    3-4, all from page 4, cites page 4 only and quotes them; a passage nothing in the
    answer can be traced to cites all its pages and quotes its opening. A citation keeps
    at most ``MAX_QUOTES`` quotes, those traced to the answer first.
    """
    used = set(used_ids)
    cited = [passage for passage in passages if passage.id in used]
    found = support([(p.text, p.pages, p.page_offsets) for p in cited], answer)
    pages: dict[tuple[str, str | None], set[int]] = {}
    # (source, location) -> (traced, untraced)
    quotes: dict[tuple[str, str | None], tuple[list[str], list[str]]] = {}
    for passage, supported in zip(cited, found, strict=True):
        part = (passage.source, passage.location)
        pages.setdefault(part, set()).update(supported.pages)
        traced, untraced = quotes.setdefault(part, ([], []))
        (traced if supported.traced else untraced).extend(supported.quotes)
    citations = []
    for (source, location), cited_pages in pages.items():
        traced, untraced = quotes[source, location]
        kept = list(dict.fromkeys(traced or untraced))[:MAX_QUOTES]
        citations.append(
            Citation(
                source=source,
                pages=sorted(cited_pages),
                quote=kept[0] if kept else None,
                quotes=kept if len(kept) > 1 else None,
                location=location,
            )
        )
    return citations


@dataclass(frozen=True)
class CallerOptions:
    """What one request adds to a turn: tools it offers beside the agent's own, which the
    caller runs (OpenAI's ``tools``), and what the caller already ran of this turn:
    ``steps`` (each call with its output), taken over ``rounds`` model steps (they count
    towards ``max_tool_steps``).

    ``choice`` is ``auto``, ``none`` (no tool is offered, the agent's included),
    ``required`` or the name of the tool the model must call; the model is told.
    ``kept``: whether a turn that pauses for the caller is kept in the store, to be
    resumed with ``tool_outputs`` (``False``: the caller sends the whole turn again
    with its outputs as ``steps``, as OpenAI's Chat Completions API has it).
    ``response_format``: the JSON the caller wants the answer in.
    """

    tools: Sequence[ToolSpec] = ()
    steps: Sequence[ToolStep] = ()
    rounds: int = 0
    choice: str = "auto"
    kept: bool = True
    response_format: Mapping[str, Any] | None = None
    """The JSON the answer must be (OpenAI's ``response_format``), for a model whose
    ``accepts_response_format`` is true; ``None``: text."""
    approves: bool = True
    """Whether the caller can approve calls (``approvals``): when not (OpenAI's API has
    no way to), a call that needs approval is not made, and the model is told so."""


def _check_caller_options(
    agent: Agent, caller: CallerOptions | None, model_for: Callable[[Agent], ChatModel]
) -> None:
    """422 when a caller's tool takes the name of one of the agent's (or of the built-in
    handoff tool), or ``choice`` names a tool that is not offered; 400
    ``response_format_unsupported`` when the caller wants JSON from a model (the agent's,
    by ``model_for``) that cannot be told to answer in it."""
    if caller is None:
        return
    taken = {tool.name for tool in agent.tools} | {HANDOFF_TOOL}
    for at, tool in enumerate(caller.tools):
        if tool.name in taken:
            raise ValidationFailed(
                f"The agent already has a tool named {tool.name!r}: give yours another name.",
                code="duplicate_tool_name",
                param=f"tools.{at}",
            )
        taken.add(tool.name)
    if caller.choice not in ("auto", "none", "required") and caller.choice not in taken:
        raise ValidationFailed(
            f"tool_choice names {caller.choice!r}, which is not a tool of this request or"
            " of the agent.",
            code="unknown_tool",
            param="tool_choice",
        )
    if caller.response_format is not None:
        model = model_for(agent)
        if not getattr(model, "accepts_response_format", False):
            raise InvalidRequest(
                f"The agent's model {model.name!r} cannot be asked for JSON: leave"
                " response_format out (or set it to text), or give the agent a model that can"
                " (an OpenAI-compatible one).",
                code="response_format_unsupported",
                param="response_format",
            )


_Given = TypeVar("_Given", ToolOutput, ToolApproval)


def _each(
    given: Sequence[_Given | Mapping[str, Any]], model: type[_Given], param: str
) -> list[_Given]:
    """Each of ``given`` as ``model``; a 422 names the first bad field (``param.N....``)."""
    found: list[_Given] = []
    for at, item in enumerate(given):
        try:
            found.append(item if isinstance(item, model) else model.model_validate(item))
        except ValidationError as exc:
            raise invalid_fields(exc, prefix=(param, at)) from None
    return found


def _checked_outputs(
    tool_outputs: Sequence[ToolOutput | Mapping[str, Any]], max_chars: int
) -> dict[str, str]:
    """The outputs by the id of the call they answer, each checked (a 422 names the
    first bad one; an output is at most ``max_chars`` characters)."""
    found: dict[str, str] = {}
    for at, output in enumerate(_each(tool_outputs, ToolOutput, "tool_outputs")):
        check_unicode(output.output, param=f"tool_outputs.{at}.output")
        if len(output.output) > max_chars:
            raise ValidationFailed(
                f"A tool output may hold at most {max_chars} characters.",
                code="tool_output_too_long",
                param=f"tool_outputs.{at}.output",
            )
        found[output.tool_call_id] = output.output
    return found


def _checked_approvals(
    approvals: Sequence[ToolApproval | Mapping[str, Any]],
) -> dict[str, ToolApproval]:
    """The decisions by the id of the call they decide, each checked (a 422 names the
    first bad one)."""
    found: dict[str, ToolApproval] = {}
    for at, decision in enumerate(_each(approvals, ToolApproval, "approvals")):
        check_unicode(decision.reason, param=f"approvals.{at}.reason")
        found[decision.tool_call_id] = decision
    return found


class ChatStore(AgentStore, ConversationStore, Protocol):
    """What chat keeps: it reads agents and writes conversations."""


class Retriever(Protocol):
    """Finds the passages a chat turn answers from (``KnowledgeService.retrieve``)."""

    def retrieve(
        self,
        query: str,
        k: int,
        min_score: float | None = None,
        *,
        filter: Filter | None = None,
        mode: SearchMode = "vector",
        user: EndUser | None = None,
        rerank: bool = False,
    ) -> list[tuple[StoredChunk, float]]:
        """The top ``k`` chunks and cosine scores for ``query`` among the documents
        ``filter`` selects that ``user`` may read, ranked as ``mode`` says (and reranked
        with ``rerank``)."""
        ...

    def term_stats(self, text: str) -> TermStats:
        """How rare each word of ``text`` is in the knowledge (``ChatRequest.term_stats``)."""
        ...


class ToolRunner(Protocol):
    """Runs a tool an agent's model called in this workspace (the ``agentcore_run_tool``
    hook, given the workspace by the core)."""

    def __call__(self, *, agent_id: str, name: str, arguments: dict[str, Any]) -> Any:
        """The tool's result, or ``None`` when no plugin runs a tool of that name."""
        ...


class ChatService:
    """Chat with the agents of one workspace; reached as ``workspace.chat``.

    :param workspace: whose agents and conversations, and the caller's scopes.
    :param store: agents (read) and conversations (read and written).
    :param settings: message, retrieval, history, tool-step and model-time limits.
    :param chat_models: the registered chat models, by name.
    :param knowledge: the workspace's retrieval (its ``KnowledgeService``).
    :param run_tool: runs tools the model calls (the plugins' hook).
    :param mcp_tools: lists and calls the tools of agents' remote MCP servers.
    :param events: where the turn's events are published, in the workspace.
    :param guard_pool: the core's threads that model calls run on, so a hung plugin
        cannot hold a request past its time-out.
    :param observer: told how each turn went (the core's metrics).
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
        mcp_tools: McpTools,
        events: Publisher,
        guard_pool: Executor,
        observer: Observer = unobserved,
    ) -> None:
        self._ws = workspace
        self._store = store
        self._settings = settings
        self._chat_models = chat_models
        # what a turn works with (``_Turn`` reads nothing else of this service)
        self._context = _TurnContext(
            workspace=workspace,
            store=store,
            settings=settings,
            knowledge=knowledge,
            run_tool=run_tool,
            mcp_tools=mcp_tools,
            events=events,
            guard_pool=guard_pool,
            observer=observer,
            model_for=self.model_for,
        )

    def send(
        self,
        agent_id: str,
        message: str | None = None,
        conversation_id: str | None = None,
        *,
        history: Sequence[ChatTurn] | None = None,
        cancellation: Cancellation | None = None,
        tool_outputs: Sequence[ToolOutput | Mapping[str, Any]] | None = None,
        caller: CallerOptions | None = None,
        approvals: Sequence[ToolApproval | Mapping[str, Any]] | None = None,
        user: EndUser | Mapping[str, Any] | None = None,
    ) -> ChatMessageResponse:
        """Send ``message`` to an agent and return its answer with citations. Read scope.

        When the model calls tools the caller runs (an agent's tools no plugin runs),
        the answer has ``status="requires_action"`` and ``tool_calls``: send their
        outputs as ``tool_outputs`` (``[{"tool_call_id", "output"}]``, one for each
        call) with the ``conversation_id`` and no ``message`` to continue the turn. A
        call of a tool that needs approval waits as ``type="approval"``: decide it in
        ``approvals`` (``[{"tool_call_id", "approve", "reason"}]``), with the outputs of
        the other calls, if any.

        :param conversation_id: continue this conversation: its stored turns are the
            model's context. Without it a new conversation starts; it is stored with
            the turn's answer, so a turn that fails leaves no conversation behind.
        :param history: the earlier turns to give the model instead, oldest first (a
            client that keeps the conversation itself, as OpenAI's API does); the last
            ``history_turns`` of them are used. Only with a new conversation: the turn
            is stored in it, the given history is not.
        :param cancellation: stops the turn (the HTTP request's deadline or its client
            going away): the model call is abandoned at once, nothing is stored, and
            its ``DeadlineExceeded`` or ``Cancelled`` is raised.
        :param caller: what the request adds (``CallerOptions``): tools beside the
            agent's own, which the caller runs, the calls of this turn it already ran,
            the tool choice and the answer's format (OpenAI's ``tools``, tool messages,
            ``tool_choice`` and ``response_format``).
        :param user: answer for this end user (``{"id": ..., "groups": [...]}``): the
            turn retrieves, cites and quotes only documents they may read (``access``).
        """
        answer = self._open(
            agent_id,
            message,
            conversation_id,
            history,
            streaming=False,
            cancellation=cancellation,
            tool_outputs=tool_outputs,
            caller=caller,
            approvals=approvals,
            user=user,
        )
        if cancellation is not None:
            cancellation.on_cancel(answer.close)  # wakes the turn waiting for its model
        for _ in answer:
            pass
        if cancellation is not None and not answer.finished:
            cancellation.check()  # closed by the cancellation: say why
        return answer.response

    def stream(
        self,
        agent_id: str,
        message: str | None = None,
        conversation_id: str | None = None,
        *,
        history: Sequence[ChatTurn] | None = None,
        tool_outputs: Sequence[ToolOutput | Mapping[str, Any]] | None = None,
        caller: CallerOptions | None = None,
        approvals: Sequence[ToolApproval | Mapping[str, Any]] | None = None,
        user: EndUser | Mapping[str, Any] | None = None,
    ) -> ChatStream:
        """Send ``message`` and get the answer as it is generated. Read scope.

        Iterating the returned ``ChatStream`` yields the answer's text in pieces;
        once it is exhausted, ``stream.response`` is the same ``ChatMessageResponse``
        ``send`` returns (its ``response`` is the pieces joined). Bad input, an
        unknown agent or conversation raise here, before anything is generated;
        model failures raise from the iteration. ``close()`` (or leaving a ``with``
        block) stops the model; an answer that did not complete is not stored.
        ``conversation_id``, ``history``, ``tool_outputs``, ``caller``,
        ``approvals`` and ``user`` are as for ``send``.
        """
        return self._open(
            agent_id,
            message,
            conversation_id,
            history,
            streaming=True,
            tool_outputs=tool_outputs,
            caller=caller,
            approvals=approvals,
            user=user,
        )

    def agents(self) -> list[Agent]:
        """Every agent this key may chat with, newest first: with a test key the agents
        in ``draft`` and ``deployed``, with a live key the deployed ones (a client token:
        only its ``agents``, if it names some). Read scope."""
        ws = self._ws
        ws.require("read", end_users=True)
        found: list[Agent] = []
        after: str | None = None
        while True:
            page, more = self._store.list_agents(
                ws.organization_id,
                ws.environment,
                limit=self._settings.max_page_size,
                starting_after=after,
                statuses=CHAT_STATUSES[ws.environment],
            )
            found.extend(page)
            if not more or not page:
                client = ws.client
                return found if client is None else [a for a in found if client.allows_agent(a.id)]
            after = page[-1].id

    def _open(
        self,
        agent_id: str,
        message: str | None,
        conversation_id: str | None,
        history: Sequence[ChatTurn] | None,
        *,
        streaming: bool,
        cancellation: Cancellation | None = None,
        tool_outputs: Sequence[ToolOutput | Mapping[str, Any]] | None = None,
        caller: CallerOptions | None = None,
        approvals: Sequence[ToolApproval | Mapping[str, Any]] | None = None,
        user: EndUser | Mapping[str, Any] | None = None,
    ) -> ChatStream:
        """Check the request, then return the turn, ready to run on first iteration."""
        ws = self._ws
        ws.require("read", end_users=True)
        check_unicode(agent_id, param="agentId")
        check_unicode(conversation_id, param="conversationId")
        reader = ws.reader(check_user(user))
        if tool_outputs is not None or approvals is not None:
            if message is not None or history is not None:
                raise ValidationFailed(
                    "Send either a message or the tool_outputs and approvals a turn waits"
                    " for, not both.",
                    code="message_with_tool_outputs",
                    param="tool_outputs" if tool_outputs is not None else "approvals",
                )
            return self._resume(
                agent_id,
                conversation_id,
                tool_outputs or (),
                approvals or (),
                streaming,
                cancellation,
                caller,
                reader,
            )
        if message is None:
            raise ValidationFailed(
                "Give the user's message (or the tool_outputs a turn waits for).",
                param="message",
            )
        check_message(message, max_chars=self._settings.max_message_chars, param="message")
        for at, earlier in enumerate(history or ()):
            check_unicode(earlier.content, param=f"history.{at}.content")
        if history is not None and conversation_id is not None:
            raise ValidationFailed(
                "Give the earlier turns either as a history or as a conversation id, not both.",
                code="history_with_conversation",
                param="conversationId",
            )
        agent = self._answering_agent(agent_id)
        _check_caller_options(agent, caller, self.model_for)
        cancel: Future[None] = Future()
        conversation, status = self._conversation(agent.id, conversation_id, reader)
        if conversation_id is not None and self._store.pending_turn(conversation, time.time()):
            raise Conflict(
                "The conversation's turn waits for the outputs of the tools the caller runs:"
                " send them as tool_outputs (it stops waiting after tool_call_timeout).",
                code="conversation_requires_action",
                param="conversationId",
            )
        if status == "handed_off":
            kept = self._keep_for_operator(agent.id, conversation, message, reader)
            return ChatStream(kept, cancel)
        turn = _Turn(
            self._context,
            agent,
            conversation,
            message,
            cancel=cancel,
            streaming=streaming,
            cancellation=cancellation,
        )
        turn.caller = caller or CallerOptions()
        turn.reader = reader
        if conversation_id is None:  # named now (for the turn's events), stored with it
            turn.new_conversation = True
            turn.history = []
        if history is not None:
            turns = list(history)
            turn.history = turns[max(len(turns) - self._settings.history_turns, 0) :]
        return ChatStream(self._answer(turn), cancel)

    def _resume(
        self,
        agent_id: str,
        conversation_id: str | None,
        tool_outputs: Sequence[ToolOutput | Mapping[str, Any]],
        approvals: Sequence[ToolApproval | Mapping[str, Any]],
        streaming: bool,
        cancellation: Cancellation | None,
        caller: CallerOptions | None = None,
        reader: EndUser | None = None,
    ) -> ChatStream:
        """The turn waiting in a conversation, held for this resume and given the
        outputs of its tool calls and the decisions on those that wait for approval
        (each checked), ready to run on first iteration. The caller's tools are those it
        offered when the turn paused, unless it offers them again (``caller``)."""
        if conversation_id is None:
            raise ValidationFailed(
                "tool_outputs continue a conversation's turn: give its conversationId.",
                code="conversation_required",
                param="conversationId",
            )
        if not tool_outputs and not approvals:
            raise ValidationFailed(
                "Give at least one tool output or approval.",
                code="tool_outputs_empty",
                param="tool_outputs",
            )
        outputs = _checked_outputs(tool_outputs, self._settings.max_tool_output_chars)
        decided = _checked_approvals(approvals)
        agent = self._answering_agent(agent_id)
        _check_caller_options(agent, caller, self.model_for)
        conversation, _ = self._conversation(agent.id, conversation_id, reader)
        settings = self._settings
        now = time.time()
        # a resume runs at most every remaining model step; a crashed one lets go then
        held_for = (settings.model_timeout + _GUARD_SLACK) * (settings.max_tool_steps + 1)
        pending = self._store.claim_pending_turn(conversation, now, now + held_for)
        if pending is None:
            raise Conflict(
                "No tool calls of this conversation wait for outputs: they were answered,"
                " or waited longer than tool_call_timeout.",
                code="no_tool_calls_pending",
                param="tool_outputs",
            )
        waiting = pending.state["waiting"]
        run = [call["id"] for call in waiting if call.get("kind", "function") == "function"]
        approve = [call["id"] for call in waiting if call.get("kind") == "approval"]
        checks: list[tuple[list[str], list[str], int, str, str]] = [
            (list(outputs), run, len(tool_outputs), "tool_outputs", "an output"),
            (list(decided), approve, len(approvals), "approvals", "a decision"),
        ]
        for given, wanted, count, param, what in checks:
            if sorted(given) != sorted(wanted) or len(given) != count:
                self._store.release_pending_turn(conversation, pending.id)
                raise ValidationFailed(
                    f"Give {what} for each call the turn waits for, all at once: "
                    + (", ".join(wanted) or "none")
                    + ".",
                    code="tool_outputs_mismatch",
                    param=param,
                )
        turn = _Turn(
            self._context,
            agent,
            conversation,
            str(pending.state["message"]),
            cancel=Future(),
            streaming=streaming,
            cancellation=cancellation,
        )
        turn.resumed, turn.outputs, turn.approvals = pending, outputs, decided
        turn.caller = caller or CallerOptions(
            tools=[ToolSpec(**spec) for spec in pending.state.get("offered_tools", [])],
            choice=str(pending.state.get("tool_choice", "auto")),
            response_format=pending.state.get("response_format"),
        )
        turn.reader = reader
        return ChatStream(self._answer(turn), turn.cancel)

    def _answer(self, turn: _Turn) -> Generator[str, None, ChatMessageResponse]:
        """Run ``turn``, passing its deltas on; store and announce the finished answer
        (or the turn paused for the caller's tools). A resume that does not finish lets
        the paused turn go, for another resume."""
        stored = False
        try:
            text, citations = yield from turn.run()
            turn.stop_if_cancelled()  # answered past the deadline: the client was told 504
            calls = self._store_turn(turn, text, citations)
            stored = True
        finally:
            if not stored and turn.resumed is not None:
                try:
                    self._store.release_pending_turn(turn.conversation_id, turn.resumed.id)
                except Exception:  # the turn's own failure is what the caller must see
                    log.exception("releasing a paused chat turn failed")
        if calls:
            turn.action("requires_action", tool_calls=[c.model_dump() for c in calls])
        else:
            turn.action("reply_sent", citations=[c.model_dump() for c in citations])
        self._context.observer.answered(
            turn.model_name, time.perf_counter() - turn.began, turn.usage
        )
        return ChatMessageResponse(
            agentId=turn.agent.id,
            status="requires_action" if calls else "completed",
            response=text,
            citations=citations,
            conversationId=turn.conversation_id,
            usage=turn.usage,
            tool_calls=calls or None,
        )

    def _store_turn(
        self, turn: _Turn, text: str, citations: list[Citation]
    ) -> list[RequestedToolCall]:
        """Store what the turn said: the user's message (or the outputs a resume gave),
        then the answer, or the calls it waits for with the paused turn; those calls."""
        said: list[StoredMessage] = []
        if turn.resumed is None:
            said.append(turn.stored_question())
        else:
            said.extend(
                StoredMessage("tool", turn.outputs[call["id"]], [], tool_call_id=call["id"])
                for call in turn.resumed.state["waiting"]
            )
        calls = [
            RequestedToolCall(
                id=call.id,
                type="approval" if turn.kinds.get(call.id) == "approval" else "function",
                name=call.name,
                arguments=finite(call.arguments),
                server_label=turn.server_of(call.name),
            )
            for call in turn.waiting
        ]
        pending: PendingTurn | None = None
        if calls:
            listed = [call.model_dump() for call in calls]
            said.append(StoredMessage("assistant", text, [], usage=turn.usage, tool_calls=listed))
            if turn.caller.kept:
                expires = time.time() + self._settings.tool_call_timeout
                pending = PendingTurn(new_id("turn"), turn.paused_state(), expires)
        else:
            said.append(turn.stored_answer(text, citations))
        # a turn that did not hand off leaves the status as it is: an operator may have
        # taken the conversation over while the model was answering
        handed_off: ConversationStatus | None = (
            None if turn.handoff_reason is None else "handed_off"
        )
        if turn.new_conversation:
            ws = self._ws
            self._store.create_conversation(
                ws.organization_id,
                ws.environment,
                turn.agent.id,
                said,
                conversation_id=turn.conversation_id,
                status=handed_off or "active",
                pending=pending,
                user=None if turn.reader is None else turn.reader.id,
            )
        else:
            resumed = None if turn.resumed is None else turn.resumed.id
            self._store.add_messages(
                turn.conversation_id, said, status=handed_off, pending=pending, resumed=resumed
            )
        return calls

    def _keep_for_operator(
        self, agent_id: str, conversation_id: str, message: str, reader: EndUser | None
    ) -> Generator[str, None, ChatMessageResponse]:
        """A message to a handed-off conversation: stored and announced for the person
        who has it (``conversation.message``); no model answers. Runs on first
        iteration, as a turn does."""
        kept = StoredMessage("user", message, [], question=question_text(message))
        self._store.add_messages(conversation_id, [kept])
        publish_message(
            self._context.events,
            self._ws,
            agent_id,
            conversation_id,
            "user",
            message,
            user=None if reader is None else reader.id,
        )
        return ChatMessageResponse(
            agentId=agent_id,
            status="handed_off",
            response="",
            citations=[],
            conversationId=conversation_id,
        )
        yield  # a generator, as a turn is: nothing is said

    def _answering_agent(self, agent_id: str) -> Agent:
        ws = self._ws
        agent = self._store.get_agent(ws.organization_id, ws.environment, agent_id)
        if agent is None:
            raise NotFound(f"No agent with id {agent_id!r}.", param="agentId")
        if ws.client is not None and not ws.client.allows_agent(agent_id):
            raise PermissionDenied(
                "This client token may not chat with that agent.",
                code="agent_not_allowed",
                param="agentId",
            )
        if agent.status == "archived":
            raise Conflict("The agent is archived.", code="agent_archived", param="agentId")
        if agent.status not in CHAT_STATUSES[ws.environment]:
            raise Conflict(
                "Live keys can only chat with deployed agents; deploy it or use a test key.",
                code="agent_not_deployed",
                param="agentId",
            )
        return agent

    def _conversation(
        self, agent_id: str, conversation_id: str | None, reader: EndUser | None = None
    ) -> tuple[str, ConversationStatus]:
        """The id and status of the conversation the turn is stored in: a new one's
        (created with the turn's messages once it completes), or the given one's, checked:
        a conversation of another end user than ``reader`` is not found for them (for a
        client token, nor is one started for no one)."""
        ws = self._ws
        if conversation_id is None:
            return new_id("conv"), "active"
        found = self._store.get_conversation(ws.organization_id, ws.environment, conversation_id)
        if found is None or not _visible(found.user, reader, own_only=ws.client is not None):
            raise NotFound(f"No conversation with id {conversation_id!r}.", param="conversationId")
        if found.agentId != agent_id:
            raise Conflict(
                "That conversation belongs to another agent.",
                code="conversation_agent_mismatch",
                param="conversationId",
            )
        return conversation_id, found.status

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


class ChatStream:
    """An answer arriving in pieces, from ``workspace.chat.stream(...)``.

    Iterate it for the text deltas (``str``); when the iteration ends,
    ``response`` holds the whole ``ChatMessageResponse`` (the deltas joined are its
    ``response``). Failures raise ``AgentCoreError`` from the iteration. ``close()``
    may be called from any thread: it stops the model call (the model's stream is
    closed as soon as its pending read returns) and ends the iteration.
    """

    def __init__(self, parts: Generator[str, None, ChatMessageResponse], cancel: Future[None]):
        self._parts = parts
        self._cancel = cancel
        self._response: ChatMessageResponse | None = None

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        if self._cancel.done():
            raise StopIteration
        try:
            delta = next(self._parts)
        except StopIteration as end:
            self._response = end.value
            raise StopIteration from None
        except _Cancelled:
            raise StopIteration from None
        if self._cancel.done():  # closed while this delta was coming: nobody wants it
            self._parts.close()
            raise StopIteration
        return delta

    @property
    def response(self) -> ChatMessageResponse:
        """The complete answer; only once the iteration has ended."""
        if self._response is None:
            raise RuntimeError("The answer is not complete: iterate the stream to its end.")
        return self._response

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._cancel.done()

    @property
    def finished(self) -> bool:
        """Whether the answer completed (and was stored): ``response`` is ready."""
        return self._response is not None

    def close(self) -> None:
        """Stop generating: cancel the model call and release it. Idempotent."""
        with contextlib.suppress(InvalidStateError):  # closed by another thread meanwhile
            self._cancel.set_result(None)
        with contextlib.suppress(ValueError):  # running in another thread, which sees the cancel
            self._parts.close()

    def __enter__(self) -> ChatStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Cancelled(Exception):
    """The stream was closed while the model was working."""


@dataclass(frozen=True, kw_only=True)
class _TurnContext:
    """What a chat turn works with: its workspace and the core's parts it calls."""

    workspace: Workspace
    store: ChatStore
    settings: Settings
    knowledge: Retriever
    run_tool: ToolRunner
    mcp_tools: McpTools
    events: Publisher
    guard_pool: Executor
    observer: Observer
    model_for: Callable[[Agent], ChatModel]


class _Turn:
    """One user message going through the pipeline."""

    def __init__(
        self,
        context: _TurnContext,
        agent: Agent,
        conversation_id: str,
        message: str,
        *,
        cancel: Future[None],
        streaming: bool,
        cancellation: Cancellation | None = None,
    ):
        self.context = context
        self.ws = context.workspace
        self.settings = context.settings
        self.agent = agent
        self.conversation_id = conversation_id
        self.message = message
        self.cancel = cancel
        self.cancellation = cancellation
        self.streaming = streaming
        self.new_conversation = False  # stored, with its first messages, when the turn is
        self.usage: Usage | None = None  # summed over the model calls that reported it
        self.began = time.perf_counter()
        # the metrics' label: a registered model's name (or the default's), never a tenant's
        self.model_name = agent.model or context.settings.default_chat_model
        # the model's earlier turns: None reads them from the stored conversation
        self.history: list[ChatTurn] | None = None
        # the turn ended in a handoff (a person has it next): why, as announced
        self.handoff_reason: str | None = None
        # a resume: the paused turn, and the caller's outputs by the id of their call
        self.resumed: PendingTurn | None = None
        self.outputs: dict[str, str] = {}
        # a pause: the calls the caller runs, and what the turn goes on from
        self.waiting: list[ToolCall] = []
        self.kinds: dict[str, str] = {}  # "approval" for a waiting call that needs one
        self.approvals: dict[str, ToolApproval] = {}  # a resume: the decisions, by call id
        self.remote: dict[str, RemoteTool] = {}  # the MCP servers' tools offered, by name
        self._paused: dict[str, Any] = {}
        self.caller = CallerOptions()  # the tools this request offers and what it ran
        self.reader: EndUser | None = None  # the end user it answers for (their documents)

    def stop_if_cancelled(self) -> None:
        """Raise if the turn was stopped: the request's cancellation's error (its
        deadline passed, its client went away), or ``_Cancelled`` for a closed stream."""
        if self.cancellation is not None:
            self.cancellation.check()
        if self.cancel.done():
            raise _Cancelled

    def stored_question(self) -> StoredMessage:
        """The user's message as stored, with its normalised text (an agent's stats
        group questions by it)."""
        return StoredMessage("user", self.message, [], question=question_text(self.message))

    def stored_answer(self, text: str, citations: list[Citation]) -> StoredMessage:
        """The answer as stored: its citations and tokens, and what an agent's stats
        count it by, the question it answers (normalised) and why it handed off."""
        return StoredMessage(
            "assistant",
            text,
            [c.model_dump() for c in citations],
            self.usage,
            question=question_text(self.message),
            handoff=self.handoff_reason,
        )

    def event(self, kind: str, **data: Any) -> None:
        # the data quotes the model (tool arguments, which a provider may send as NaN):
        # what a model says must not fail the chat, so such numbers are sent as null
        # the end user the turn is for, when it is for one (webhook receivers route by it)
        user = {} if self.reader is None else {"user": self.reader.id}
        self.context.events.publish(
            kind,
            {
                "agent_id": self.agent.id,
                "conversation_id": self.conversation_id,
                **user,
                **finite(data),
            },
            organization_id=self.ws.organization_id,
            environment=self.ws.environment,
        )

    def action(self, action: str, **data: Any) -> None:
        self.event("agent.action", action=action, **data)

    def handoff(
        self, reason: str, said: str = ""
    ) -> Generator[str, None, tuple[str, list[Citation]]]:
        """Announce the handoff and say so, after whatever the model already said; the
        conversation is stored ``handed_off``."""
        self.event("agent.handoff", reason=reason, message=self.message)
        self.handoff_reason = reason
        reply = f"\n\n{HANDOFF_REPLY}" if said else HANDOFF_REPLY
        yield reply
        return said + reply, []

    def run(self) -> Generator[str, None, tuple[str, list[Citation]]]:
        """Yield the answer's deltas; return its text (the deltas joined) and citations.

        Text the model writes is passed on as it comes, also beside a tool call (it
        is already on the user's screen, so it stays part of the answer). For an agent
        with ``handoff_on_no_answer`` each model step's text is held until its result
        shows whether the answer used the knowledge core: a no-answer is replaced by
        the handoff, never sent and then taken back.
        """
        if self.resumed is not None:
            passages, history, steps, first = self.restored()
        else:
            if wants_human(self.message):
                return (yield from self.handoff("user_requested"))
            passages = self.retrieve()
            history = self.stored_history() if self.history is None else self.history
            steps, first = list(self.caller.steps), self.caller.rounds
        term_stats = self.context.knowledge.term_stats(self.message) if passages else None
        tools = [ToolSpec(t.name, t.description, t.parameters) for t in self.agent.tools]
        tools += self.remote_tools({t.name for t in [*tools, *self.caller.tools]})
        tools += [*self.caller.tools, HANDOFF_SPEC]
        choice = self.caller.choice
        if choice == "none":
            tools, choice = [], "auto"
        wanted = self.caller.response_format
        answer_format = None if wanted is None else dict(wanted)
        model = self.context.model_for(self.agent)
        hold = self.agent.handoff_on_no_answer
        said = held = ""
        result: ChatResult | None = None
        for step in range(first, self.settings.max_tool_steps + 1):
            offer = tools if step < self.settings.max_tool_steps else []
            request = ChatRequest(
                system_prompt=self.agent.system_prompt,
                message=self.message,
                passages=passages,
                history=history,
                tools=offer,
                steps=list(steps),
                timeout=self.settings.model_timeout,
                term_stats=term_stats,
                tool_choice=choice,
                response_format=answer_format,
            )
            held = ""
            for item in self.call_model(model, request):
                if isinstance(item, ChatResult):
                    result = item
                    if item.usage is not None:
                        self.usage = item.usage if self.usage is None else self.usage + item.usage
                elif hold:
                    held += item
                else:
                    said += item
                    yield item
            assert result is not None  # call_model always ends with the result
            if not result.tool_calls:
                break
            if held:
                said += held
                yield held
            waiting: list[ToolCall] = []
            for call in result.tool_calls:
                if call.name == HANDOFF_TOOL:
                    reason = str(call.arguments.get("reason") or "model_requested")
                    return (yield from self.handoff(reason, said))
                self.take(call, steps, waiting)
            if waiting and step < self.settings.max_tool_steps:
                # the caller runs these: the turn waits, stored, for their outputs
                self.pause(waiting, step, passages, history, steps, answer_format)
                return said, []
            steps.extend(ToolStep(call, _NOT_OFFERED) for call in waiting)
        assert result is not None
        if not result.used_passage_ids and hold:
            return (yield from self.handoff("no_relevant_knowledge", said))
        if held:
            said += held
            yield held
        return said, build_citations(passages, result.used_passage_ids, said)

    def take(self, call: ToolCall, steps: list[ToolStep], waiting: list[ToolCall]) -> None:
        """Run one call the model made (its result joins ``steps``), or set it aside in
        ``waiting`` for the caller: its output, or a person's approval."""
        self.stop_if_cancelled()  # a stopped turn starts no more tools (one running ends)
        if self.needs_approval(call.name):
            server = self.server_of(call.name)
            on = {} if server is None else {"server": server}
            self.action("tool_call", tool=call.name, arguments=call.arguments, **on)
            if not self.caller.approves:
                steps.append(ToolStep(call, _NO_APPROVER))
                return
            named = self.named(call, steps, waiting)
            self.kinds[named.id] = "approval"
            waiting.append(named)
            return
        output = self.run_tool(call.name, call.arguments)
        if output is None:
            waiting.append(self.named(call, steps, waiting))
        else:
            steps.append(ToolStep(call, output))

    def pause(
        self,
        waiting: list[ToolCall],
        step: int,
        passages: list[Passage],
        history: list[ChatTurn],
        steps: list[ToolStep],
        answer_format: dict[str, Any] | None,
    ) -> None:
        """End the turn waiting for ``waiting``: what a resume goes on from is kept as
        ``paused_state``."""
        self.waiting = waiting
        self._paused = {
            "message": self.message,
            "passages": [asdict(passage) for passage in passages],
            "history": [asdict(turn) for turn in history],
            "steps": [{"call": asdict(s.call), "result": s.result} for s in steps],
            "waiting": [
                {
                    **asdict(call),
                    "kind": self.kinds.get(call.id, "function"),
                    "server": self.server_of(call.name),
                }
                for call in waiting
            ],
            "step": step,
            "offered_tools": [asdict(tool) for tool in self.caller.tools],
            "tool_choice": self.caller.choice,
            "response_format": answer_format,
        }

    def paused_state(self) -> dict[str, Any]:
        """What a resume of this paused turn goes on from (JSON): its message, passages
        and history, the tool steps taken, the calls it waits for, the step it is at."""
        return finite(self._paused)  # type: ignore[no-any-return]

    def restored(self) -> tuple[list[Passage], list[ChatTurn], list[ToolStep], int]:
        """A resumed turn's passages, history and tool steps (the caller's outputs
        last), and the step it goes on at."""
        assert self.resumed is not None
        state = self.resumed.state
        steps = [ToolStep(ToolCall(**s["call"]), s["result"]) for s in state["steps"]]
        for waited in state["waiting"]:
            call = ToolCall(waited["id"], waited["name"], waited["arguments"])
            if waited.get("kind") == "approval":
                self.stop_if_cancelled()
                decision = self.approvals[call.id]
                self.outputs[call.id] = self.decide(call, decision, waited.get("server"))
            steps.append(ToolStep(call, self.outputs[call.id]))
        return (
            [Passage(**passage) for passage in state["passages"]],
            [ChatTurn(**turn) for turn in state["history"]],
            steps,
            int(state["step"]) + 1,
        )

    def needs_approval(self, name: str) -> bool:
        """Whether calls of the agent's tool ``name`` wait for a person's approval: a
        tool so marked, or one on an MCP server so marked."""
        remote = self.remote.get(name)
        if remote is not None:
            return any(
                server.label == remote.server and server.require_approval == "always"
                for server in self.agent.mcp_servers
            )
        return any(
            tool.name == name and tool.require_approval == "always" for tool in self.agent.tools
        )

    def decide(self, call: ToolCall, decision: ToolApproval, server: str | None = None) -> str:
        """Run an approved call (on the MCP server labelled ``server``, else with the
        plugin that runs it), or tell the model that a person refused it (``approval``
        action events both)."""
        on = {} if server is None else {"server": server}
        self.action(
            "approval",
            tool=call.name,
            tool_call_id=call.id,
            approve=decision.approve,
            reason=decision.reason,
            **on,
        )
        if not decision.approve:
            refused = {"error": "a person refused this call", "reason": decision.reason}
            return json.dumps(refused)
        if server is not None:
            return self.call_remote(server, call.name, call.arguments)
        outcome = self.context.run_tool(
            agent_id=self.agent.id, name=call.name, arguments=call.arguments
        )
        if outcome is None:
            return json.dumps({"error": "this tool is not available here"})
        return outcome if isinstance(outcome, str) else json.dumps(outcome, default=str)

    def remote_tools(self, taken: set[str]) -> list[ToolSpec]:
        """The tools of the agent's MCP servers, offered beside its own: a name already
        ``taken`` (the agent's own tools, the request's, an earlier server's) is not
        offered again; a server that cannot be listed is announced (``agent.error``)
        and left out of this turn."""
        specs: list[ToolSpec] = []
        for server in self.agent.mcp_servers:
            self.stop_if_cancelled()
            try:
                listed = self.context.mcp_tools.tools(self.agent.id, server)
            except McpFailure as failure:
                self.mcp_failed(failure, server.label)
                continue
            for tool in listed:
                if tool.name in taken:
                    continue
                taken.add(tool.name)
                self.remote[tool.name] = tool
                specs.append(ToolSpec(tool.name, tool.description, tool.parameters))
        return specs

    def server_of(self, name: str) -> str | None:
        """The label of the MCP server the offered tool ``name`` is on, if it is on one."""
        remote = self.remote.get(name)
        return None if remote is None else remote.server

    def call_remote(self, label: str, name: str, arguments: dict[str, Any]) -> str:
        """Call ``name`` on the agent's MCP server ``label``: its result, or the error
        the model is told (a failure is also announced as ``agent.error``)."""
        server = next((s for s in self.agent.mcp_servers if s.label == label), None)
        if server is None:  # removed from the agent while a call waited for approval
            return json.dumps({"error": f"the MCP server {label!r} is no longer configured"})
        try:
            return self.context.mcp_tools.call(server, name, arguments)
        except McpFailure as failure:
            self.mcp_failed(failure, label, name)
            return json.dumps({"error": failure.detail, "code": failure.code})

    def mcp_failed(self, failure: McpFailure, server: str, tool: str | None = None) -> None:
        """Announce an MCP server's failure as ``agent.error`` (the turn goes on)."""
        called = {} if tool is None else {"tool": tool}
        self.event(
            "agent.error", error=failure.code, detail=failure.detail, server=server, **called
        )

    @staticmethod
    def named(call: ToolCall, steps: list[ToolStep], waiting: list[ToolCall]) -> ToolCall:
        """``call`` with an id the caller can answer it by: the model's, or a new one
        when the model gave none or one this turn already used."""
        used = {step.call.id for step in steps} | {other.id for other in waiting}
        return call if call.id and call.id not in used else replace(call, id=new_id("call"))

    def retrieve(self) -> list[Passage]:
        """The passages for the message, from the agent's knowledge (``knowledge_lookup``)."""
        knowledge = self.agent.knowledge
        results = self.context.knowledge.retrieve(
            self.message,
            self.settings.chat_top_k,
            filter=None if knowledge is None else knowledge.filter,
            mode=self.settings.chat_search_mode,
            user=self.reader,
            rerank=knowledge is not None and knowledge.rerank,
        )
        self.action(
            "knowledge_lookup",
            query=self.message,
            results=len(results),
            top_score=results[0][1] if results else None,
        )
        return passages_of(results)

    def stored_history(self) -> list[ChatTurn]:
        """The conversation's last messages as the model's earlier turns: the user's,
        and the agent's and operators' as the assistant's (tool calls and outputs are
        not: the model saw them in their own turn)."""
        return [
            ChatTurn(role="user" if m.role == "user" else "assistant", content=m.content)
            for m in self.context.store.recent_messages(
                self.conversation_id, self.settings.history_turns
            )
            if m.role != "tool" and m.content
        ]

    def run_tool(self, name: str, arguments: dict[str, Any]) -> str | None:
        """Run a tool the model called: its result for the model, or ``None`` for one
        of the agent's tools that no plugin runs (the caller runs it)."""
        server = self.server_of(name)
        on = {} if server is None else {"server": server}
        self.action("tool_call", tool=name, arguments=arguments, **on)
        if server is not None:
            return self.call_remote(server, name, arguments)
        known = {tool.name for tool in self.agent.tools}
        theirs = {tool.name for tool in self.caller.tools}
        if name not in known | theirs:
            return json.dumps({"error": f"unknown tool {name!r}"})
        outcome = None
        if name not in theirs:  # the caller's own tools are never a plugin's
            outcome = self.context.run_tool(agent_id=self.agent.id, name=name, arguments=arguments)
        if outcome is None:
            size = len(json.dumps(arguments, default=str))
            if size > self.settings.max_tool_output_chars:
                return json.dumps({"error": f"the arguments are too long ({size} characters)"})
            return None
        return outcome if isinstance(outcome, str) else json.dumps(outcome, default=str)

    def call_model(self, model: ChatModel, request: ChatRequest) -> Iterator[str | ChatResult]:
        """The model's deltas, then its result, each bounded in time even if the plugin
        hangs: the first item and every next one must come within the model time-out.

        ``send`` calls the model's ``complete`` (one delta), ``stream`` its ``stream``.
        The items are fetched on the guard pool, so a cancel (``ChatStream.close``) is
        seen at once; the model's iterator is closed when its pending item returns.
        """
        self.stop_if_cancelled()
        items = stream_answer(model, request) if self.streaming else whole_answer(model, request)
        pool = self.context.guard_pool
        pending: Future[Any] | None = None
        said = ""
        try:
            while True:
                pending = pool.submit(next, items, _END)
                item = self._wait(model, request, pending)
                pending = None
                if isinstance(item, ChatResult):
                    # the result's text is the deltas joined; send a tail they lack
                    if item.text.startswith(said) and len(item.text) > len(said):
                        yield item.text[len(said) :]
                    yield item
                    return
                said += item
                yield item
        finally:
            _close_when_done(items, pending)

    def _wait(
        self, model: ChatModel, request: ChatRequest, pending: Future[Any]
    ) -> str | ChatResult:
        """The pending item, or the error it became (announced as ``agent.error``)."""
        until = time.monotonic() + request.timeout + _GUARD_SLACK
        while True:
            limit = until - time.monotonic()
            remaining = None if self.cancellation is None else self.cancellation.remaining
            if remaining is not None:  # a passing deadline calls nobody: wake for it
                limit = min(limit, remaining)
            done, _ = wait(
                [pending, self.cancel], timeout=max(limit, 0.0), return_when=FIRST_COMPLETED
            )
            self.stop_if_cancelled()
            if done or time.monotonic() >= until:
                break
        error: AgentCoreError
        if not done:
            error = ProviderTimeout(
                f"The model {model.name!r} did not answer within {request.timeout:g} s."
            )
        else:
            try:
                item = pending.result()
            except (ProviderError, ProviderTimeout) as exc:
                error = exc
            except AgentCoreError:
                raise
            except Exception as exc:  # a broken plugin is a provider failure, not a 500
                error = ProviderError(f"The model {model.name!r} failed: {type(exc).__name__}.")
            else:
                if isinstance(item, str | ChatResult):
                    return item
                what = "ended without a result" if item is _END else "sent a non-text delta"
                error = ProviderError(f"The model {model.name!r} {what}.")
        self.event("agent.error", error=error.code, detail=error.detail, model=model.name)
        self.context.observer.chat_failed(model.name, error.code)
        raise error


def _close_when_done(items: Iterator[str | ChatResult], pending: Future[Any] | None) -> None:
    """Close a model's iterator now, or when its in-flight ``next`` returns; a ``next``
    still queued (the guard pool busy) is cancelled, so an abandoned turn never calls
    the model later."""
    if pending is not None:
        pending.cancel()  # still queued: never runs (done at once); running: no effect
    close = getattr(items, "close", None)
    if close is None:
        return

    def quietly(_: object = None) -> None:
        try:
            close()
        except Exception:  # a plugin's cleanup failing must not mask the answer
            log.exception("closing the model stream failed")

    if pending is None or pending.done():
        quietly()
    else:
        pending.add_done_callback(quietly)


def _visible(owner: str | None, reader: EndUser | None, *, own_only: bool) -> bool:
    """Whether a conversation of ``owner`` may be continued for ``reader``: any, for no
    reader; their own or one of no one's, for a user a key acts for; only their own,
    with ``own_only`` (a client token)."""
    if reader is None:
        return True
    return owner == reader.id or (owner is None and not own_only)

"""httpx clients for the /v1 API (sync ``Client``, async ``AsyncClient``) that return
the same pydantic models as the core, and stream chat answers over server-sent events.

Both clients build each request with the same ``_Request`` builders below, so they
cannot drift apart; they differ only in how the request is sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import EllipsisType, TracebackType
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from httpx_sse import EventSource, ServerSentEvent, aconnect_sse, connect_sse
from pydantic import BaseModel

import agentcore.errors as errors
from agentcore.schema import (
    STORED,
    Agent,
    AgentList,
    AgentStats,
    ChatMessageResponse,
    ClientToken,
    ClientTokenRevocation,
    Conversation,
    ConversationList,
    Deleted,
    DeliveryList,
    Document,
    DocumentAccess,
    DocumentList,
    EndUser,
    Filter,
    Message,
    MessageList,
    SearchMode,
    SearchResponse,
    ToolApproval,
    ToolOutput,
    VerifyResponse,
    WebhookList,
    WebhookSubscriptionWithSecret,
    WebhookTestSent,
)
from agentcore.webhooks.schedule import parse_retry_after

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class _Request(Generic[M]):
    """One API call: what to send and the model its answer parses into."""

    model: type[M]
    method: str
    path: str
    kwargs: dict[str, Any] = field(default_factory=dict)


Moment = datetime | str | None
"""A bound of a stats window: a time (naive: UTC), an ISO 8601 timestamp, or none."""
ToolOutputs = Sequence[ToolOutput | Mapping[str, Any]]
"""The outputs of the calls a turn waits for: ``[{"tool_call_id": ..., "output": ...}]``."""
Approvals = Sequence[ToolApproval | Mapping[str, Any]]
"""Decisions on the calls that wait for approval: ``[{"tool_call_id", "approve", "reason"}]``."""


def _plain(value: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    """A model or a mapping as the JSON object a request body holds."""
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else dict(value)


def _chat_body(
    agent_id: str,
    message: str | None,
    conversation_id: str | None,
    tool_outputs: ToolOutputs | None = None,
    approvals: Approvals | None = None,
    user: EndUser | Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"agentId": agent_id}
    if user is not None:
        body["user"] = _plain(user)
    if message is not None:
        body["message"] = message
    if conversation_id is not None:
        body["conversationId"] = conversation_id
    if tool_outputs is not None:
        body["tool_outputs"] = [
            o.model_dump() if isinstance(o, ToolOutput) else dict(o) for o in tool_outputs
        ]
    if approvals is not None:
        body["approvals"] = [
            a.model_dump(exclude_none=True) if isinstance(a, ToolApproval) else dict(a)
            for a in approvals
        ]
    return body


class _Requests:
    """The request of each operation, shared by ``Client`` and ``AsyncClient``."""

    @staticmethod
    def verify() -> _Request[VerifyResponse]:
        return _Request(VerifyResponse, "GET", "/auth/verify")

    @staticmethod
    def create_client_token(fields: dict[str, Any]) -> _Request[ClientToken]:
        body = {name: value for name, value in fields.items() if value is not None}
        return _Request(ClientToken, "POST", "/client_tokens", {"json": body})

    @staticmethod
    def revoke_client_tokens(user: str) -> _Request[ClientTokenRevocation]:
        body = {"user": user}
        return _Request(ClientTokenRevocation, "POST", "/client_tokens/revoke", {"json": body})

    @staticmethod
    def list_agents(params: dict[str, Any]) -> _Request[AgentList]:
        return _Request(AgentList, "GET", "/agents", {"params": params})

    @staticmethod
    def create_agent(fields: dict[str, Any]) -> _Request[Agent]:
        return _Request(Agent, "POST", "/agents", {"json": fields})

    @staticmethod
    def get_agent(agent_id: str) -> _Request[Agent]:
        return _Request(Agent, "GET", f"/agents/{_segment(agent_id)}")

    @staticmethod
    def update_agent(agent_id: str, fields: dict[str, Any]) -> _Request[Agent]:
        return _Request(Agent, "PATCH", f"/agents/{_segment(agent_id)}", {"json": fields})

    @staticmethod
    def agent_action(agent_id: str, action: str) -> _Request[Agent]:
        return _Request(Agent, "POST", f"/agents/{_segment(agent_id)}/{action}")

    @staticmethod
    def archive_agent(agent_id: str) -> _Request[Agent]:
        return _Request(Agent, "DELETE", f"/agents/{_segment(agent_id)}")

    @staticmethod
    def agent_stats(agent_id: str, since: Moment, until: Moment) -> _Request[AgentStats]:
        window = {"since": since, "until": until}
        params = {
            name: value.isoformat() if isinstance(value, datetime) else value
            for name, value in window.items()
            if value is not None
        }
        return _Request(
            AgentStats, "GET", f"/agents/{_segment(agent_id)}/stats", {"params": params}
        )

    @staticmethod
    def upload(
        path: str | Path,
        content_type: str | None,
        metadata: Mapping[str, Any] | None,
        external_id: str | None,
        access: DocumentAccess | Mapping[str, Any] | None = None,
    ) -> _Request[Document]:
        file = Path(path)
        files = {"file": (file.name, file.read_bytes(), content_type or "application/octet-stream")}
        kwargs: dict[str, Any] = {"files": files}
        fields: dict[str, str] = {}
        if metadata is not None:
            fields["metadata"] = json.dumps(dict(metadata))
        if external_id is not None:
            fields["external_id"] = external_id
        if access is not None:
            fields["access"] = json.dumps(_plain(access))
        if fields:
            kwargs["data"] = fields
        return _Request(Document, "POST", "/knowledge/documents", kwargs)

    @staticmethod
    def add_text(
        source: str,
        text: str,
        metadata: Mapping[str, Any] | None,
        external_id: str | None,
        access: DocumentAccess | Mapping[str, Any] | None = None,
    ) -> _Request[Document]:
        body: dict[str, Any] = {"source": source, "text": text}
        if access is not None:
            body["access"] = _plain(access)
        if metadata is not None:
            body["metadata"] = dict(metadata)
        if external_id is not None:
            body["external_id"] = external_id
        return _Request(Document, "POST", "/knowledge/documents", {"json": body})

    @staticmethod
    def get_document(document_id: str) -> _Request[Document]:
        return _Request(Document, "GET", f"/knowledge/documents/{_segment(document_id)}")

    @staticmethod
    def update_document(
        document_id: str, metadata: Mapping[str, Any] | None, access: Any = ...
    ) -> _Request[Document]:
        body: dict[str, Any] = {}
        if metadata is not None:
            body["metadata"] = dict(metadata)
        if access is not ...:
            body["access"] = None if access is None else _plain(access)
        return _Request(
            Document, "PATCH", f"/knowledge/documents/{_segment(document_id)}", {"json": body}
        )

    @staticmethod
    def list_documents(params: dict[str, Any]) -> _Request[DocumentList]:
        return _Request(DocumentList, "GET", "/knowledge/documents", {"params": params})

    @staticmethod
    def delete_document(document_id: str) -> _Request[Deleted]:
        return _Request(Deleted, "DELETE", f"/knowledge/documents/{_segment(document_id)}")

    @staticmethod
    def search(
        query: str,
        top_k: int | None,
        min_score: float | None,
        filter: Filter | Mapping[str, Any] | None,
        mode: SearchMode | None,
        user: EndUser | Mapping[str, Any] | None = None,
        rerank: bool = False,
    ) -> _Request[SearchResponse]:
        body: dict[str, Any] = {"query": query}
        if rerank:
            body["rerank"] = True
        if user is not None:
            body["user"] = _plain(user)
        if top_k is not None:
            body["top_k"] = top_k
        if min_score is not None:
            body["min_score"] = min_score
        if filter is not None:
            body["filter"] = (
                filter.model_dump(mode="json") if isinstance(filter, BaseModel) else filter
            )
        if mode is not None:
            body["mode"] = mode
        return _Request(SearchResponse, "POST", "/knowledge/search", {"json": body})

    @staticmethod
    def chat(
        agent_id: str,
        message: str | None,
        conversation_id: str | None,
        tool_outputs: ToolOutputs | None = None,
        approvals: Approvals | None = None,
        user: EndUser | Mapping[str, Any] | None = None,
    ) -> _Request[ChatMessageResponse]:
        body = _chat_body(agent_id, message, conversation_id, tool_outputs, approvals, user)
        return _Request(ChatMessageResponse, "POST", "/chat/message", {"json": body})

    @staticmethod
    def list_conversations(params: dict[str, Any]) -> _Request[ConversationList]:
        return _Request(ConversationList, "GET", "/conversations", {"params": params})

    @staticmethod
    def get_conversation(conversation_id: str) -> _Request[Conversation]:
        return _Request(Conversation, "GET", f"/conversations/{_segment(conversation_id)}")

    @staticmethod
    def list_messages(conversation_id: str, params: dict[str, Any]) -> _Request[MessageList]:
        path = f"/conversations/{_segment(conversation_id)}/messages"
        return _Request(MessageList, "GET", path, {"params": params})

    @staticmethod
    def delete_conversation(conversation_id: str) -> _Request[Deleted]:
        return _Request(Deleted, "DELETE", f"/conversations/{_segment(conversation_id)}")

    @staticmethod
    def reply(conversation_id: str, content: str) -> _Request[Message]:
        path = f"/conversations/{_segment(conversation_id)}/messages"
        return _Request(Message, "POST", path, {"json": {"content": content}})

    @staticmethod
    def feedback(
        conversation_id: str, message_id: str, rating: str, reason: str | None
    ) -> _Request[Message]:
        path = (
            f"/conversations/{_segment(conversation_id)}/messages/{_segment(message_id)}/feedback"
        )
        body: dict[str, Any] = {"rating": rating}
        if reason is not None:
            body["reason"] = reason
        return _Request(Message, "POST", path, {"json": body})

    @staticmethod
    def release(conversation_id: str) -> _Request[Conversation]:
        path = f"/conversations/{_segment(conversation_id)}/release"
        return _Request(Conversation, "POST", path)

    @staticmethod
    def subscribe(url: str, events: list[str]) -> _Request[WebhookSubscriptionWithSecret]:
        body = {"url": url, "events": events}
        return _Request(
            WebhookSubscriptionWithSecret, "POST", "/webhooks/subscribe", {"json": body}
        )

    @staticmethod
    def list_webhooks(params: dict[str, Any]) -> _Request[WebhookList]:
        return _Request(WebhookList, "GET", "/webhooks", {"params": params})

    @staticmethod
    def delete_webhook(webhook_id: str) -> _Request[Deleted]:
        return _Request(Deleted, "DELETE", f"/webhooks/{_segment(webhook_id)}")

    @staticmethod
    def test_webhook(webhook_id: str) -> _Request[WebhookTestSent]:
        return _Request(WebhookTestSent, "POST", f"/webhooks/{_segment(webhook_id)}/test")

    @staticmethod
    def webhook_deliveries(webhook_id: str, params: dict[str, Any]) -> _Request[DeliveryList]:
        path = f"/webhooks/{_segment(webhook_id)}/deliveries"
        return _Request(DeliveryList, "GET", path, {"params": params})


def _segment(resource_id: str) -> str:
    """An id as one path segment: escaped, so ``../`` in an id cannot name another
    resource (httpx resolves dot segments); an empty id, ``.`` or ``..`` is refused."""
    if resource_id in ("", ".", ".."):
        raise errors.ValidationFailed(f"Not an id: {resource_id!r}.", param="id")
    return quote(resource_id, safe="")


def api_base(base_url: str) -> str:
    """The ``/v1`` base of a server's address: ``http://host:8000`` and
    ``http://host:8000/v1`` (the base the OpenAI SDK wants) name the same API, and so do
    ``.../api`` and ``.../api/v1`` for one mounted under ``/api``."""
    base = base_url.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


def _http_options(base_url: str, api_key: str, timeout: float) -> dict[str, Any]:
    return {
        "base_url": api_base(base_url),
        "headers": {"Authorization": f"Bearer {api_key}"},
        "timeout": timeout,
    }


def _parse(request: _Request[M], response: httpx.Response) -> M:
    if not 200 <= response.status_code < 300:  # a redirect is no answer either
        raise _error(response)
    # what the server returns is what it stored: values older versions accepted included
    return request.model.model_validate_json(response.content, context=STORED)


class _StreamReader:
    """Turns the events of a streamed answer into deltas, the response, or an error."""

    def __init__(self) -> None:
        self.response: ChatMessageResponse | None = None

    def delta(self, event: ServerSentEvent) -> str | None:
        """The event's text, or None once the answer is complete; raises for ``error``."""
        if event.event == "response.delta":
            delta = json.loads(event.data)["delta"]
            return str(delta)
        if event.event in ("response.completed", "response.requires_action"):
            self.response = ChatMessageResponse.model_validate_json(event.data)
            return None
        if event.event == "error":
            problem = json.loads(event.data)
            raise _problem_error(problem, int(problem.get("status") or 500), "Error")
        return ""  # an event kind added later: skip it

    @staticmethod
    def incomplete() -> errors.AgentCoreError:
        return errors.AgentCoreError(
            "The stream ended before the answer was complete.", code="stream_incomplete"
        )


class ChatEventStream:
    """A chat answer streamed by ``Client.chat.stream``: iterate for the text deltas;
    then ``response`` is the whole ``ChatMessageResponse``.

    The request is sent when the ``with`` block starts (or at the first iteration);
    an error before the stream started (404, 422, 429, ...) raises there, one after
    it raises from the iteration. Leaving the block closes the connection, which
    stops the model on the server.
    """

    def __init__(self, opener: AbstractContextManager[EventSource]) -> None:
        self._opener: AbstractContextManager[EventSource] | None = opener
        self._events: Iterator[ServerSentEvent] | None = None
        self._reader = _StreamReader()
        self._closed = False
        self._entered = False

    def _open(self) -> Iterator[ServerSentEvent]:
        if self._events is None:
            if self._opener is None or self._closed:
                raise RuntimeError("The stream is closed.")
            source = self._opener.__enter__()
            self._entered = True
            response = source.response
            if response.status_code >= 400:
                response.read()
                self.close()
                raise _error(response)
            self._events = source.iter_sse()
        return self._events

    @property
    def response(self) -> ChatMessageResponse:
        """The complete answer; only once the iteration has ended."""
        if self._reader.response is None:
            raise RuntimeError("The answer is not complete: iterate the stream to its end.")
        return self._reader.response

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        if self._reader.response is not None:
            raise StopIteration
        events = self._open()
        try:
            for event in events:
                delta = self._reader.delta(event)
                if delta is None:
                    self.close()
                    raise StopIteration
                if delta:
                    return delta
        except BaseException:
            self.close()
            raise
        self.close()
        raise self._reader.incomplete()

    def close(self) -> None:
        """Close the connection (the server then stops the model). Idempotent."""
        if self._opener is not None and not self._closed:
            self._closed = True
            if self._entered:
                self._opener.__exit__(None, None, None)

    def __enter__(self) -> ChatEventStream:
        self._open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncChatEventStream:
    """A chat answer streamed by ``AsyncClient.chat.stream``: ``async for`` the text
    deltas; then ``response`` is the whole ``ChatMessageResponse``.

    Used as ``async with client.chat.stream(...) as stream: async for delta in
    stream: ...``; errors raise as in ``ChatEventStream``.
    """

    def __init__(self, opener: AbstractAsyncContextManager[EventSource]) -> None:
        self._opener = opener
        self._events: AsyncIterator[ServerSentEvent] | None = None
        self._reader = _StreamReader()
        self._closed = False
        self._entered = False

    async def _open(self) -> AsyncIterator[ServerSentEvent]:
        if self._events is None:
            if self._closed:
                raise RuntimeError("The stream is closed.")
            source = await self._opener.__aenter__()
            self._entered = True
            response = source.response
            if response.status_code >= 400:
                await response.aread()
                await self.aclose()
                raise _error(response)
            self._events = source.aiter_sse()
        return self._events

    @property
    def response(self) -> ChatMessageResponse:
        """The complete answer; only once the iteration has ended."""
        if self._reader.response is None:
            raise RuntimeError("The answer is not complete: iterate the stream to its end.")
        return self._reader.response

    def __aiter__(self) -> AsyncIterator[str]:
        return self

    async def __anext__(self) -> str:
        if self._reader.response is not None:
            raise StopAsyncIteration
        events = await self._open()
        try:
            async for event in events:
                delta = self._reader.delta(event)
                if delta is None:
                    await self.aclose()
                    raise StopAsyncIteration
                if delta:
                    return delta
        except BaseException:
            await self.aclose()
            raise
        await self.aclose()
        raise self._reader.incomplete()

    async def aclose(self) -> None:
        """Close the connection (the server then stops the model). Idempotent."""
        if not self._closed:
            self._closed = True
            if self._entered:
                await self._opener.__aexit__(None, None, None)

    async def __aenter__(self) -> AsyncChatEventStream:
        await self._open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class ChatClient:
    """``client.chat``: call it to send a message, or ``.stream(...)`` it."""

    def __init__(self, http: httpx.Client) -> None:
        self._http = http

    def __call__(
        self, agent_id: str, message: str, conversation_id: str | None = None
    ) -> ChatMessageResponse:
        """``POST /v1/chat/message``: the whole answer."""
        return self.send(agent_id, message, conversation_id)

    def send(
        self,
        agent_id: str,
        message: str | None = None,
        conversation_id: str | None = None,
        *,
        tool_outputs: ToolOutputs | None = None,
        approvals: Approvals | None = None,
        user: EndUser | Mapping[str, Any] | None = None,
    ) -> ChatMessageResponse:
        """``POST /v1/chat/message``: the whole answer. An answer with ``status ==
        "requires_action"`` waits for its ``tool_calls``' outputs: send them as
        ``tool_outputs`` (and the ``approvals`` of calls of ``type == "approval"``) with
        the ``conversation_id`` and no ``message``. ``user`` (``{"id", "groups"}``):
        answer for that end user, from the documents they may read."""
        request = _Requests.chat(agent_id, message, conversation_id, tool_outputs, approvals, user)
        response = self._http.request(request.method, request.path, **request.kwargs)
        return _parse(request, response)

    def stream(
        self,
        agent_id: str,
        message: str | None = None,
        conversation_id: str | None = None,
        *,
        tool_outputs: ToolOutputs | None = None,
        approvals: Approvals | None = None,
        user: EndUser | Mapping[str, Any] | None = None,
    ) -> ChatEventStream:
        """``POST /v1/chat/message`` with ``stream: true``: the answer as it is generated.

        ``with client.chat.stream(agent_id, "Hi") as stream: for delta in stream: ...``
        then ``stream.response``.
        """
        body = {
            **_chat_body(agent_id, message, conversation_id, tool_outputs, approvals, user),
            "stream": True,
        }
        return ChatEventStream(connect_sse(self._http, "POST", "/chat/message", json=body))


class AsyncChatClient:
    """``async_client.chat``: await it to send a message, or ``.stream(...)`` it."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http

    async def __call__(
        self, agent_id: str, message: str, conversation_id: str | None = None
    ) -> ChatMessageResponse:
        """``POST /v1/chat/message``: the whole answer."""
        return await self.send(agent_id, message, conversation_id)

    async def send(
        self,
        agent_id: str,
        message: str | None = None,
        conversation_id: str | None = None,
        *,
        tool_outputs: ToolOutputs | None = None,
        approvals: Approvals | None = None,
        user: EndUser | Mapping[str, Any] | None = None,
    ) -> ChatMessageResponse:
        """``POST /v1/chat/message``: the whole answer. An answer with ``status ==
        "requires_action"`` waits for its ``tool_calls``' outputs: send them as
        ``tool_outputs`` (and the ``approvals`` of calls of ``type == "approval"``) with
        the ``conversation_id`` and no ``message``. ``user`` (``{"id", "groups"}``):
        answer for that end user, from the documents they may read."""
        request = _Requests.chat(agent_id, message, conversation_id, tool_outputs, approvals, user)
        response = await self._http.request(request.method, request.path, **request.kwargs)
        return _parse(request, response)

    def stream(
        self,
        agent_id: str,
        message: str | None = None,
        conversation_id: str | None = None,
        *,
        tool_outputs: ToolOutputs | None = None,
        approvals: Approvals | None = None,
        user: EndUser | Mapping[str, Any] | None = None,
    ) -> AsyncChatEventStream:
        """``POST /v1/chat/message`` with ``stream: true``: the answer as it is generated.

        ``async with client.chat.stream(agent_id, "Hi") as stream: async for delta in
        stream: ...`` then ``stream.response``.
        """
        body = {
            **_chat_body(agent_id, message, conversation_id, tool_outputs, approvals, user),
            "stream": True,
        }
        return AsyncChatEventStream(aconnect_sse(self._http, "POST", "/chat/message", json=body))


class Client:
    """Talks to an agentcore server: ``Client("http://127.0.0.1:8000", "ak_test_...")``
    (``"http://127.0.0.1:8000/v1"``, the base URL the OpenAI SDK takes, works too).

    Failures raise the same ``agentcore.errors`` classes the core raises, with the
    server's ``code``, ``param`` and request id (in ``extra``). Pass ``transport`` to
    use, e.g., ``httpx.ASGITransport`` or a mounted prefix in ``base_url``.
    ``AsyncClient`` has the same methods, as coroutines.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(**_http_options(base_url, api_key, timeout), transport=transport)
        self.chat = ChatClient(self._http)
        """``client.chat(agent_id, message)`` or ``client.chat.stream(agent_id, message)``."""

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, request: _Request[M]) -> M:
        response = self._http.request(request.method, request.path, **request.kwargs)
        return _parse(request, response)

    # auth and agents -----------------------------------------------------------------

    def verify(self) -> VerifyResponse:
        """``GET /v1/auth/verify``."""
        return self._run(_Requests.verify())

    def create_client_token(
        self,
        user: str,
        *,
        groups: list[str] | None = None,
        agents: list[str] | None = None,
        ttl_seconds: int | None = None,
    ) -> ClientToken:
        """``POST /v1/client_tokens`` (write key): a short-lived token for the end user
        ``user``, for their browser or app; ``token`` is shown only here."""
        fields = {"user": user, "groups": groups, "agents": agents, "ttl_seconds": ttl_seconds}
        return self._run(_Requests.create_client_token(fields))

    def revoke_client_tokens(self, user: str) -> ClientTokenRevocation:
        """``POST /v1/client_tokens/revoke``: end every live token of ``user``."""
        return self._run(_Requests.revoke_client_tokens(user))

    def list_agents(self, **params: Any) -> AgentList:
        """``GET /v1/agents`` (``limit``, ``starting_after``, ``status``)."""
        return self._run(_Requests.list_agents(params))

    def create_agent(self, **fields: Any) -> Agent:
        """``POST /v1/agents``."""
        return self._run(_Requests.create_agent(fields))

    def get_agent(self, agent_id: str) -> Agent:
        """``GET /v1/agents/{id}``."""
        return self._run(_Requests.get_agent(agent_id))

    def update_agent(self, agent_id: str, **fields: Any) -> Agent:
        """``PATCH /v1/agents/{id}``."""
        return self._run(_Requests.update_agent(agent_id, fields))

    def deploy_agent(self, agent_id: str) -> Agent:
        """``POST /v1/agents/{id}/deploy``."""
        return self._run(_Requests.agent_action(agent_id, "deploy"))

    def undeploy_agent(self, agent_id: str) -> Agent:
        """``POST /v1/agents/{id}/undeploy``."""
        return self._run(_Requests.agent_action(agent_id, "undeploy"))

    def archive_agent(self, agent_id: str) -> Agent:
        """``DELETE /v1/agents/{id}``."""
        return self._run(_Requests.archive_agent(agent_id))

    def agent_stats(self, agent_id: str, since: Moment = None, until: Moment = None) -> AgentStats:
        """``GET /v1/agents/{id}/stats``: the messages at or after ``since``, before ``until``."""
        return self._run(_Requests.agent_stats(agent_id, since, until))

    # knowledge ---------------------------------------------------------------------

    def upload(
        self,
        path: str | Path,
        *,
        content_type: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        external_id: str | None = None,
        access: DocumentAccess | Mapping[str, Any] | None = None,
    ) -> Document:
        """``POST /v1/knowledge/documents`` with a file (and its ``metadata``; an
        ``external_id`` replaces the document under it once this one is ready; ``access``
        ``{"users", "groups"}`` says who may read it)."""
        return self._run(_Requests.upload(path, content_type, metadata, external_id, access))

    def add_text(
        self,
        source: str,
        text: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        external_id: str | None = None,
        access: DocumentAccess | Mapping[str, Any] | None = None,
    ) -> Document:
        """``POST /v1/knowledge/documents`` with ``{source, text, metadata?, external_id?,
        access?}``."""
        return self._run(_Requests.add_text(source, text, metadata, external_id, access))

    def get_document(self, document_id: str) -> Document:
        """``GET /v1/knowledge/documents/{id}``."""
        return self._run(_Requests.get_document(document_id))

    def update_document(
        self,
        document_id: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        access: DocumentAccess | Mapping[str, Any] | None | EllipsisType = ...,
    ) -> Document:
        """``PATCH /v1/knowledge/documents/{id}``: replace its metadata, and its access
        list when ``access`` is given (``None``: everyone may read it)."""
        return self._run(_Requests.update_document(document_id, metadata, access))

    def list_documents(self, **params: Any) -> DocumentList:
        """``GET /v1/knowledge/documents``."""
        return self._run(_Requests.list_documents(params))

    def delete_document(self, document_id: str) -> Deleted:
        """``DELETE /v1/knowledge/documents/{id}``."""
        return self._run(_Requests.delete_document(document_id))

    def search(
        self,
        query: str,
        *,
        top_k: int | None = None,
        min_score: float | None = None,
        filter: Filter | Mapping[str, Any] | None = None,
        mode: SearchMode | None = None,
        user: EndUser | Mapping[str, Any] | None = None,
        rerank: bool = False,
    ) -> SearchResponse:
        """``POST /v1/knowledge/search`` (``user``: for that end user, among the
        documents they may read; ``rerank``: the top candidates reordered by the
        server's reranker, each with its ``rerank_score``)."""
        return self._run(_Requests.search(query, top_k, min_score, filter, mode, user, rerank))

    # conversations -----------------------------------------------------------------

    def list_conversations(self, **params: Any) -> ConversationList:
        """``GET /v1/conversations`` (``agentId``, ``limit``, ``starting_after``)."""
        return self._run(_Requests.list_conversations(params))

    def get_conversation(self, conversation_id: str) -> Conversation:
        """``GET /v1/conversations/{id}``."""
        return self._run(_Requests.get_conversation(conversation_id))

    def list_messages(self, conversation_id: str, **params: Any) -> MessageList:
        """``GET /v1/conversations/{id}/messages`` (``limit``, ``starting_after``, ``order``)."""
        return self._run(_Requests.list_messages(conversation_id, params))

    def delete_conversation(self, conversation_id: str) -> Deleted:
        """``DELETE /v1/conversations/{id}``."""
        return self._run(_Requests.delete_conversation(conversation_id))

    def reply(self, conversation_id: str, content: str) -> Message:
        """``POST /v1/conversations/{id}/messages``: an operator's reply, which takes the
        conversation over."""
        return self._run(_Requests.reply(conversation_id, content))

    def feedback(
        self, conversation_id: str, message_id: str, rating: str, reason: str | None = None
    ) -> Message:
        """``POST /v1/conversations/{id}/messages/{message_id}/feedback``: rate an answer
        ``"up"`` or ``"down"`` (a second rating replaces the first)."""
        return self._run(_Requests.feedback(conversation_id, message_id, rating, reason))

    def release(self, conversation_id: str) -> Conversation:
        """``POST /v1/conversations/{id}/release``: hand it back to its agent."""
        return self._run(_Requests.release(conversation_id))

    # webhooks ---------------------------------------------------------------------

    def subscribe(self, url: str, events: list[str]) -> WebhookSubscriptionWithSecret:
        """``POST /v1/webhooks/subscribe``; keep the returned ``secret``."""
        return self._run(_Requests.subscribe(url, events))

    def list_webhooks(self, **params: Any) -> WebhookList:
        """``GET /v1/webhooks``."""
        return self._run(_Requests.list_webhooks(params))

    def delete_webhook(self, webhook_id: str) -> Deleted:
        """``DELETE /v1/webhooks/{id}``."""
        return self._run(_Requests.delete_webhook(webhook_id))

    def test_webhook(self, webhook_id: str) -> WebhookTestSent:
        """``POST /v1/webhooks/{id}/test``."""
        return self._run(_Requests.test_webhook(webhook_id))

    def webhook_deliveries(self, webhook_id: str, **params: Any) -> DeliveryList:
        """``GET /v1/webhooks/{id}/deliveries``."""
        return self._run(_Requests.webhook_deliveries(webhook_id, params))


class AsyncClient:
    """The async twin of ``Client`` over ``httpx.AsyncClient``: the same methods, as
    coroutines; ``client.chat.stream(...)`` is used with ``async with`` / ``async for``.

    ``async with AsyncClient("http://127.0.0.1:8000", "ak_test_...") as client: ...``
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            **_http_options(base_url, api_key, timeout), transport=transport
        )
        self.chat = AsyncChatClient(self._http)
        """``await client.chat(agent_id, message)`` or ``client.chat.stream(...)``."""

    async def close(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self, request: _Request[M]) -> M:
        response = await self._http.request(request.method, request.path, **request.kwargs)
        return _parse(request, response)

    # auth and agents -----------------------------------------------------------------

    async def verify(self) -> VerifyResponse:
        """``GET /v1/auth/verify``."""
        return await self._run(_Requests.verify())

    async def create_client_token(
        self,
        user: str,
        *,
        groups: list[str] | None = None,
        agents: list[str] | None = None,
        ttl_seconds: int | None = None,
    ) -> ClientToken:
        """``POST /v1/client_tokens`` (write key): a short-lived token for the end user
        ``user``, for their browser or app; ``token`` is shown only here."""
        fields = {"user": user, "groups": groups, "agents": agents, "ttl_seconds": ttl_seconds}
        return await self._run(_Requests.create_client_token(fields))

    async def revoke_client_tokens(self, user: str) -> ClientTokenRevocation:
        """``POST /v1/client_tokens/revoke``: end every live token of ``user``."""
        return await self._run(_Requests.revoke_client_tokens(user))

    async def list_agents(self, **params: Any) -> AgentList:
        """``GET /v1/agents`` (``limit``, ``starting_after``, ``status``)."""
        return await self._run(_Requests.list_agents(params))

    async def create_agent(self, **fields: Any) -> Agent:
        """``POST /v1/agents``."""
        return await self._run(_Requests.create_agent(fields))

    async def get_agent(self, agent_id: str) -> Agent:
        """``GET /v1/agents/{id}``."""
        return await self._run(_Requests.get_agent(agent_id))

    async def update_agent(self, agent_id: str, **fields: Any) -> Agent:
        """``PATCH /v1/agents/{id}``."""
        return await self._run(_Requests.update_agent(agent_id, fields))

    async def deploy_agent(self, agent_id: str) -> Agent:
        """``POST /v1/agents/{id}/deploy``."""
        return await self._run(_Requests.agent_action(agent_id, "deploy"))

    async def undeploy_agent(self, agent_id: str) -> Agent:
        """``POST /v1/agents/{id}/undeploy``."""
        return await self._run(_Requests.agent_action(agent_id, "undeploy"))

    async def archive_agent(self, agent_id: str) -> Agent:
        """``DELETE /v1/agents/{id}``."""
        return await self._run(_Requests.archive_agent(agent_id))

    async def agent_stats(
        self, agent_id: str, since: Moment = None, until: Moment = None
    ) -> AgentStats:
        """``GET /v1/agents/{id}/stats``: the messages at or after ``since``, before ``until``."""
        return await self._run(_Requests.agent_stats(agent_id, since, until))

    # knowledge ---------------------------------------------------------------------

    async def upload(
        self,
        path: str | Path,
        *,
        content_type: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        external_id: str | None = None,
        access: DocumentAccess | Mapping[str, Any] | None = None,
    ) -> Document:
        """``POST /v1/knowledge/documents`` with a file (and its ``metadata``; an
        ``external_id`` replaces the document under it once this one is ready; ``access``
        ``{"users", "groups"}`` says who may read it)."""
        return await self._run(_Requests.upload(path, content_type, metadata, external_id, access))

    async def add_text(
        self,
        source: str,
        text: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        external_id: str | None = None,
        access: DocumentAccess | Mapping[str, Any] | None = None,
    ) -> Document:
        """``POST /v1/knowledge/documents`` with ``{source, text, metadata?, external_id?,
        access?}``."""
        return await self._run(_Requests.add_text(source, text, metadata, external_id, access))

    async def get_document(self, document_id: str) -> Document:
        """``GET /v1/knowledge/documents/{id}``."""
        return await self._run(_Requests.get_document(document_id))

    async def update_document(
        self,
        document_id: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        access: DocumentAccess | Mapping[str, Any] | None | EllipsisType = ...,
    ) -> Document:
        """``PATCH /v1/knowledge/documents/{id}``: replace its metadata, and its access
        list when ``access`` is given (``None``: everyone may read it)."""
        return await self._run(_Requests.update_document(document_id, metadata, access))

    async def list_documents(self, **params: Any) -> DocumentList:
        """``GET /v1/knowledge/documents``."""
        return await self._run(_Requests.list_documents(params))

    async def delete_document(self, document_id: str) -> Deleted:
        """``DELETE /v1/knowledge/documents/{id}``."""
        return await self._run(_Requests.delete_document(document_id))

    async def search(
        self,
        query: str,
        *,
        top_k: int | None = None,
        min_score: float | None = None,
        filter: Filter | Mapping[str, Any] | None = None,
        mode: SearchMode | None = None,
        user: EndUser | Mapping[str, Any] | None = None,
        rerank: bool = False,
    ) -> SearchResponse:
        """``POST /v1/knowledge/search`` (``user``: for that end user, among the
        documents they may read; ``rerank``: the top candidates reordered by the
        server's reranker, each with its ``rerank_score``)."""
        return await self._run(
            _Requests.search(query, top_k, min_score, filter, mode, user, rerank)
        )

    # conversations -----------------------------------------------------------------

    async def list_conversations(self, **params: Any) -> ConversationList:
        """``GET /v1/conversations`` (``agentId``, ``limit``, ``starting_after``)."""
        return await self._run(_Requests.list_conversations(params))

    async def get_conversation(self, conversation_id: str) -> Conversation:
        """``GET /v1/conversations/{id}``."""
        return await self._run(_Requests.get_conversation(conversation_id))

    async def list_messages(self, conversation_id: str, **params: Any) -> MessageList:
        """``GET /v1/conversations/{id}/messages`` (``limit``, ``starting_after``, ``order``)."""
        return await self._run(_Requests.list_messages(conversation_id, params))

    async def delete_conversation(self, conversation_id: str) -> Deleted:
        """``DELETE /v1/conversations/{id}``."""
        return await self._run(_Requests.delete_conversation(conversation_id))

    async def reply(self, conversation_id: str, content: str) -> Message:
        """``POST /v1/conversations/{id}/messages``: an operator's reply, which takes the
        conversation over."""
        return await self._run(_Requests.reply(conversation_id, content))

    async def feedback(
        self, conversation_id: str, message_id: str, rating: str, reason: str | None = None
    ) -> Message:
        """``POST /v1/conversations/{id}/messages/{message_id}/feedback``: rate an answer
        ``"up"`` or ``"down"`` (a second rating replaces the first)."""
        return await self._run(_Requests.feedback(conversation_id, message_id, rating, reason))

    async def release(self, conversation_id: str) -> Conversation:
        """``POST /v1/conversations/{id}/release``: hand it back to its agent."""
        return await self._run(_Requests.release(conversation_id))

    # webhooks ---------------------------------------------------------------------

    async def subscribe(self, url: str, events: list[str]) -> WebhookSubscriptionWithSecret:
        """``POST /v1/webhooks/subscribe``; keep the returned ``secret``."""
        return await self._run(_Requests.subscribe(url, events))

    async def list_webhooks(self, **params: Any) -> WebhookList:
        """``GET /v1/webhooks``."""
        return await self._run(_Requests.list_webhooks(params))

    async def delete_webhook(self, webhook_id: str) -> Deleted:
        """``DELETE /v1/webhooks/{id}``."""
        return await self._run(_Requests.delete_webhook(webhook_id))

    async def test_webhook(self, webhook_id: str) -> WebhookTestSent:
        """``POST /v1/webhooks/{id}/test``."""
        return await self._run(_Requests.test_webhook(webhook_id))

    async def webhook_deliveries(self, webhook_id: str, **params: Any) -> DeliveryList:
        """``GET /v1/webhooks/{id}/deliveries``."""
        return await self._run(_Requests.webhook_deliveries(webhook_id, params))


def _error(response: httpx.Response) -> errors.AgentCoreError:
    try:
        problem = response.json()
    except ValueError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    return _problem_error(problem, response.status_code, response.reason_phrase, response.headers)


def _problem_error(
    problem: dict[str, Any], status: int, reason: str, headers: httpx.Headers | None = None
) -> errors.AgentCoreError:
    """The ``agentcore.errors`` class for ``status``, carrying the problem's members and
    the facts its headers state: ``retry_after`` of a 429 or 503 (``Retry-After``), the
    ``allowed`` methods of a 405 (``Allow``)."""
    cls = errors.error_class(status, problem.get("code"))
    facts: dict[str, Any] = {}
    if headers is not None:
        if issubclass(cls, errors.RateLimited | errors.ServiceUnavailable):
            facts["retry_after"] = parse_retry_after(headers.get("retry-after"), now=time.time())
        elif cls is errors.MethodNotAllowed:
            allowed = headers.get("allow", "").split(",")
            facts["allowed"] = [name.strip() for name in allowed if name.strip()]
    return cls(
        str(problem.get("detail") or reason),
        code=problem.get("code"),
        param=problem.get("param"),
        extra={"request_id": problem.get("request_id"), "status": status},
        **facts,
    )

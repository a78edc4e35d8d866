"""Declarative API routes: one table drives dispatch, body parsing and the OpenAPI document."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel
from starlette.datastructures import Headers, QueryParams

from agentcore import Cancellation, WorkspaceServices
from agentcore.errors import ValidationFailed

BodyKind = Literal["none", "json", "json_or_upload"]


@dataclass(frozen=True)
class Upload:
    """A file sent as multipart ``file``, its ``metadata`` field (JSON, parsed), its
    ``external_id`` field and its ``access`` field (JSON, parsed)."""

    filename: str
    content_type: str | None
    data: bytes
    metadata: dict[str, Any] | None = None
    external_id: str | None = None
    access: dict[str, Any] | None = None


@dataclass
class Call:
    """What a handler gets: the caller's workspace and the parsed request.

    ``cancellation`` fires when the request's deadline passes or the client
    disconnects; long handlers pass it on to the core.
    """

    workspace: WorkspaceServices
    path: Mapping[str, str]
    query: QueryParams
    headers: Headers
    body: Any = None
    upload: Upload | None = None
    cancellation: Cancellation = field(default_factory=Cancellation)

    def int_query(self, name: str) -> int | None:
        """An integer query parameter, or 422 naming it."""
        raw = self.query.get(name)
        if raw is None:
            return None
        try:
            return int(raw)
        except ValueError:
            raise ValidationFailed(f"'{name}' must be an integer.", param=name) from None

    def str_query(self, name: str, choices: tuple[str, ...] | None = None) -> str | None:
        """A string query parameter (one of ``choices`` if given), or 422 naming it."""
        raw = self.query.get(name)
        if raw is None or (raw == "" and choices is None):
            return None
        if choices is not None and raw not in choices:  # an empty value is not a choice
            raise ValidationFailed(f"'{name}' must be one of {', '.join(choices)}.", param=name)
        return raw


@dataclass(frozen=True)
class QueryParam:
    """A documented query parameter."""

    name: str
    schema: dict[str, Any]
    description: str = ""


PAGINATION = (
    QueryParam("limit", {"type": "integer", "minimum": 1, "maximum": 100}, "Page size."),
    QueryParam("starting_after", {"type": "string"}, "Id of the last object of the previous page."),
)


@dataclass(frozen=True)
class StreamEvent:
    """One kind of event of a route's ``text/event-stream`` answer (for OpenAPI)."""

    name: str
    data: type[BaseModel]
    description: str


@dataclass(frozen=True, kw_only=True)
class ApiRoute:
    """One operation of the /v1 API (every field by keyword: the table reads as a form).

    ``handler(call)`` returns a pydantic model; it runs in a worker thread unless
    ``blocking`` is False. ``scope`` is checked before the body is read (the core
    checks it again). A route with ``events`` answers ``text/event-stream`` when its
    JSON body says ``"stream": true`` (the handler then returns a ``ChatStream``).
    """

    method: str
    path: str
    handler: Callable[[Call], Any]
    response: type[BaseModel]
    summary: str
    scope: Literal["any", "read", "write"]
    tag: str
    body: BodyKind = "none"
    request: type[BaseModel] | None = None
    status_code: int = 200
    query: tuple[QueryParam, ...] = field(default_factory=tuple)
    blocking: bool = True  # False: the handler neither does I/O nor heavy work; run inline
    # a blocking handler that is often quick: it runs inline on the event loop while
    # quick_when(call) holds and its recent runs in the caller's workspace took at most
    # Settings.inline_budget (a thread hop costs more than the work); see Api.endpoint
    quick_when: Callable[[Call], bool] | None = None
    # quick calls answered together: those with the same batch_key (not None) that reach
    # the event loop in one turn run as one batch(calls), which returns their results in
    # order (a search: one matrix product for all the queries); see Api._batched
    batch_key: Callable[[Call], Hashable | None] | None = None
    batch: Callable[[list[Call]], list[Any]] | None = None
    events: tuple[StreamEvent, ...] = ()  # the events of its streamed answer, if it has one
    # how its failures are answered: RFC 9457 problems, or OpenAI's error envelope (the
    # OpenAI-compatible routes, whose clients parse that); see problems.RESPONDER
    error_format: Literal["problem", "openai"] = "problem"
    # whether a POST honours Idempotency-Key (OpenAI's routes do not, as at OpenAI)
    idempotency: bool = True
    # whether a client token (an end user's browser or app) may call it; such routes are
    # also the only ones AGENTCORE_CORS_ORIGINS opens to browsers
    end_users: bool = False

    def streams(self, body: Any) -> bool:
        """Whether a request with this parsed ``body`` is answered as an event stream."""
        return bool(self.events) and getattr(body, "stream", False) is True

    # answers 202 instead of status_code for results it returns True for (queued work)
    accepted: Callable[[Any], bool] | None = None

    def status_for(self, result: Any) -> int:
        """The success status of ``result``: 202 when it is accepted, queued work."""
        if self.accepted is not None and self.accepted(result):
            return 202
        return self.status_code

    @property
    def operation_id(self) -> str:
        """The OpenAPI operationId: the handler's name."""
        return self.handler.__name__

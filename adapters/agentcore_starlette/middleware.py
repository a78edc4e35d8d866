"""ApiMiddleware: each request's id, the limits on its head, and problems for failures.

A plain ASGI middleware installed through Starlette's ``middleware=`` seam, so it wraps
routing and every endpoint of the API (and only the API: a host that mounts the app
keeps its own stack around it).
"""

from __future__ import annotations

import asyncio

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentcore.adapters import get_logger, new_id
from agentcore.errors import AgentCoreError, HeadersTooLarge, ShuttingDown, UriTooLong
from agentcore_starlette.problems import problem_response, responder_of

log = get_logger("agentcore.http")  # masks keys and secrets in every record

REQUEST_ID = b"request-id"


class ApiMiddleware:
    """Gives every request an id (``Request-Id`` on its answer, ``request_id`` in
    ``scope["state"]``), refuses a head over the limits (414, 431), and turns any
    failure raised before the answer started into a problem document (or the error
    format its route chose: ``problems.responder_of``).

    An unexpected exception becomes a 500 problem with no stack trace in the body; the
    trace goes to the log with the request id (the log never holds the Authorization
    header). A client that left mid-request (``ClientDisconnect``) gets no answer. A
    request the server cancels before its answer started (uvicorn does once its
    graceful shutdown timeout passes) gets a 503 ``server_shutting_down``.

    :param max_url_bytes: longest request target (path and query string).
    :param max_header_bytes: largest header section (names and values together).
    """

    def __init__(self, app: ASGIApp, *, max_url_bytes: int, max_header_bytes: int) -> None:
        self.app = app
        self.max_url_bytes = max_url_bytes
        self.max_header_bytes = max_header_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = new_id("req")
        scope.setdefault("state", {})["request_id"] = request_id
        refused = self.refusal(scope)
        if refused is not None:
            await problem_response(refused, request_id)(scope, receive, send)
            return
        tag = (REQUEST_ID, request_id.encode())
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = message.get("headers", ())
                for name, _ in headers:
                    if name == REQUEST_ID:  # the answer has its own (a problem's)
                        break
                else:
                    message = {**message, "headers": [*headers, tag]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except ClientDisconnect:  # the client left mid-request: nobody to answer
            return
        except asyncio.CancelledError:
            if started:
                raise
            # the server gave up waiting for this request (it is shutting down): the
            # client gets a problem to retry on, not the server's plain-text 500. The
            # cancellation is answered here, at the top of the request's task
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            exc = ShuttingDown("The server is shutting down; retry the request.")
            await responder_of(scope)(exc, request_id)(scope, receive, send)
        except Exception as exc:
            if started:  # too late for a problem document; let the server close it
                raise
            if not isinstance(exc, AgentCoreError):
                log.exception(
                    "unhandled error in %s %s [%s]", scope["method"], scope["path"], request_id
                )
                exc = AgentCoreError("The server hit an unexpected error.")
            await responder_of(scope)(exc, request_id)(scope, receive, send)

    def refusal(self, scope: Scope) -> AgentCoreError | None:
        """The error for a request whose head is over the limits, else ``None``.

        Servers hand the head whole (uvicorn, hypercorn, ...): these are the API's own
        limits wherever it is mounted. ``agentcore serve`` also bounds a head that is
        still arriving (``agentcore_starlette.protocol``).
        """
        query: bytes = scope.get("query_string", b"")
        raw_path: bytes | None = scope.get("raw_path")
        path = len(raw_path) if raw_path is not None else len(scope["path"].encode())
        target = path + len(query) + (1 if query else 0)  # "?" joins them
        if target > self.max_url_bytes:
            return UriTooLong(
                f"The request target is {target} bytes long; the limit is"
                f" {self.max_url_bytes}. Send long input in a JSON body.",
            )
        size = 0
        for name, value in scope["headers"]:  # a plain loop: the quickest sum here
            size += len(name) + len(value)
        if size > self.max_header_bytes:
            return HeadersTooLarge(
                f"The request headers take {size} bytes; the limit is {self.max_header_bytes}.",
            )
        return None

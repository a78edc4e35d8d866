"""Reading request bodies within limits: size, media type, JSON syntax, depth and text."""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request

from agentcore.adapters import may_decode_to_lone_surrogate
from agentcore.errors import (
    InvalidRequest,
    PayloadTooLarge,
    RequestTimeout,
    UnsupportedMediaType,
    check_unicode,
    invalid_fields,
)

M = TypeVar("M", bound=BaseModel)


async def read_limited(
    request: Request,
    limit: int,
    *,
    timeout: float,
    deadline: float,
    what: str = "request body",
) -> bytes:
    """The raw body, refused with 413 past ``limit`` bytes without reading it all, and
    with 408 when it stalls (no byte for ``timeout`` seconds) or when it has not all
    arrived ``deadline`` seconds after reading began, however steadily it trickles.

    A declared ``Content-Length`` over the limit is refused before a byte is read;
    a chunked body is counted as it streams and dropped once it crosses the limit.
    Every refusal closes the connection (``problems.CLOSES_CONNECTION``): the rest of
    the body is not read.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise InvalidRequest(
                "Content-Length is not a number.", code="invalid_request"
            ) from None
        if size > limit:
            raise _too_large(what, limit)
    chunks: list[bytes] = []
    received = 0
    more = True
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    # one timer for the whole body, moved on at each chunk but never past ``end``: a
    # stall trips it, and so does a body trickling a byte at a time, which would
    # otherwise hold its connection for as long as the size limit lets it
    # (asyncio.timeout costs a timer handle; wait_for, a task each)
    whole = False  # whether the timer is set at ``end`` (else at a stall)

    def next_bound() -> float:
        nonlocal whole
        stall = loop.time() + timeout
        whole = stall >= end
        return end if whole else stall

    try:
        async with asyncio.timeout(next_bound()) as timer:
            while more:  # the ASGI messages themselves: Request.stream() adds a generator
                message = await request.receive()
                if message["type"] == "http.disconnect":
                    raise ClientDisconnect()
                chunk: bytes = message.get("body", b"")
                more = message.get("more_body", False)
                received += len(chunk)
                if received > limit:
                    raise _too_large(what, limit)
                chunks.append(chunk)
                if more:
                    timer.reschedule(next_bound())
    except TimeoutError:
        raise (_late(what, deadline) if whole else _stalled(what, timeout)) from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(what: str, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The {what} exceeds the limit of {limit} bytes.", code="body_too_large")


def _stalled(what: str, timeout: float) -> RequestTimeout:
    return RequestTimeout(
        f"The {what} stalled: no data for {timeout:g} s. Send the whole body promptly.",
        code="body_timeout",
    )


def _late(what: str, deadline: float) -> RequestTimeout:
    # the same code as a stall: for the client both mean "the body came too slowly"
    return RequestTimeout(
        f"The {what} did not arrive within {deadline:g} s. Send the whole body promptly.",
        code="body_timeout",
    )


def media_type(request: Request) -> str:
    """The request's media type, lower case, without parameters."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def require_json(request: Request) -> None:
    """415 unless the request says ``application/json`` (or a ``+json`` type)."""
    kind = media_type(request)
    if kind != "application/json" and not kind.endswith("+json"):
        raise UnsupportedMediaType(
            f"Send 'Content-Type: application/json' (got {kind or 'none'!r}).",
            code="unsupported_media_type",
        )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
"""One decoder for every body (``json.loads`` with an option builds one per call)."""


def parse_json(raw: bytes, *, max_depth: int) -> dict[str, Any]:
    """Decode a JSON object body: 400 for bad syntax, non-objects, NaN, or deep nesting;
    422 naming the field for a string with a lone surrogate (``refuse_lone_surrogates``)."""
    text, surrogates = _text(raw)
    try:
        value = _DECODER.decode(text)
    except ValueError as exc:
        raise InvalidRequest(f"The body is not valid JSON: {exc}.", code="invalid_json") from None
    except RecursionError:  # nested deeper than the decoder's stack: far past any limit
        raise InvalidRequest(
            f"The JSON body is nested deeper than {max_depth} levels.", code="json_too_deep"
        ) from None
    if not isinstance(value, dict):
        raise InvalidRequest("The body must be a JSON object.", code="invalid_json")
    # a body with at most max_depth brackets in all cannot nest deeper: skip the walk
    if raw.count(b"{") + raw.count(b"[") > max_depth and _depth(value) > max_depth:
        raise InvalidRequest(
            f"The JSON body is nested deeper than {max_depth} levels.", code="json_too_deep"
        )
    if surrogates or may_decode_to_lone_surrogate(text):
        check_unicode(value)
    return value


def refuse_lone_surrogates(raw: bytes) -> None:
    """The 422 ``parse_json`` gives for a string with a lone surrogate, for a JSON body
    that another parser reads (the MCP SDK's, which would call it a syntax error);
    anything else wrong with the body is left to that parser."""
    try:
        text, surrogates = _text(raw)
        if not (surrogates or may_decode_to_lone_surrogate(text)):
            return
        value = _DECODER.decode(text)
    except (ValueError, RecursionError):
        return
    check_unicode(value)


def _text(raw: bytes) -> tuple[str, bool]:
    """The body as text, decoded as ``json.loads`` decodes bytes (UTF-8, -16 or -32,
    told apart by the first bytes), and whether it holds a surrogate written as such
    (bytes a strict decoder refuses; the JSON check then names the field)."""
    encoding = json.detect_encoding(raw)
    try:
        return raw.decode(encoding), False
    except UnicodeDecodeError:
        pass
    try:
        return raw.decode(encoding, "surrogatepass"), True
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"The body is not valid JSON: {exc}.", code="invalid_json") from None


def _depth(value: Any) -> int:
    # iterative, so a hostile body cannot exhaust the Python stack
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in item)
    return deepest


def validate(model: type[M], data: dict[str, Any]) -> M:
    """``data`` as ``model``, or 422 naming the first offending field (all in ``errors``)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid_fields(exc) from None

"""The one exception hierarchy of agentcore; every error knows its HTTP status and code.

    AgentCoreError                    500 internal_error
    ├── InvalidRequest                400 invalid_request     (malformed JSON, bad cursor, ...)
    ├── AuthenticationError           401 invalid_api_key     (missing, malformed, unknown, ...)
    ├── PermissionDenied              403 insufficient_scope
    ├── NotFound                      404 resource_missing    (also other org / environment)
    ├── MethodNotAllowed              405 method_not_allowed  (carries the allowed methods)
    ├── RequestTimeout                408 request_timeout     (the request was not sent in time)
    ├── Conflict                      409 conflict            (invalid state transition, ...)
    ├── PayloadTooLarge               413 payload_too_large
    ├── UriTooLong                    414 uri_too_long
    ├── UnsupportedMediaType          415 unsupported_media_type
    ├── ValidationFailed              422 validation_error    (names the offending field)
    ├── RateLimited                   429 rate_limited        (carries retry_after seconds)
    ├── HeadersTooLarge               431 headers_too_large
    ├── ProviderError                 502 provider_error      (a model provider failed)
    ├── ServiceUnavailable            503 service_unavailable (the database is unreachable;
    │                                                          carries retry_after seconds)
    ├── ProviderTimeout               504 provider_timeout    (a model provider timed out)
    ├── Cancelled                     503 cancelled           (work stopped: shutdown, client left)
    └── DeadlineExceeded              504 deadline_exceeded   (the request ran too long)

Errors carry facts (``retry_after`` seconds, the methods a path allows), never header
strings: the HTTP adapter renders each one as RFC 9457 problem details, and writes its
headers, in one place. Messages never contain an API key: callers pass descriptions,
never secrets.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import ValidationError

from agentcore._unicode import LoneSurrogate, find_lone_surrogate
from agentcore.schema import FILTER_TAGS, Problem

#: The base of every problem's ``type`` URI; the code completes it.
PROBLEM_TYPE = "https://agentcore.dev/problems/"


@dataclass(frozen=True)
class Decision:
    """The outcome of one rate-limit check (``limits.RateLimiter``), and the key's bucket
    right after it: the facts ``RateLimited`` carries, and that an allowed request's
    ``RateLimit`` headers report.

    :param allowed: whether the request may run.
    :param limit: requests a second for this key (also the burst, if at least one).
    :param remaining: whole requests the bucket holds now.
    :param reset: seconds until the bucket is full again.
    :param retry_after: seconds until one more request would pass (0 when allowed).
    """

    allowed: bool
    limit: float
    remaining: int
    reset: float
    retry_after: float


class AgentCoreError(Exception):
    """Base of every error agentcore raises on purpose.

    :param detail: a human-readable explanation specific to this occurrence.
    :param code: a stable snake_case code; defaults to the class's code.
    :param param: the request field at fault, when there is one (dotted path).
    """

    status: ClassVar[int] = 500
    default_code: ClassVar[str] = "internal_error"
    title: ClassVar[str] = "Internal Server Error"

    def __init__(
        self,
        detail: str,
        *,
        code: str | None = None,
        param: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code or self.default_code
        self.param = param
        self.extra: dict[str, Any] = dict(extra or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.detail!r}, code={self.code!r}, param={self.param!r})"

    def as_dict(self) -> dict[str, Any]:
        """The error as plain data: title, status, detail, code, param, then ``extra``."""
        return {
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
            "param": self.param,
            **self.extra,
        }


class InvalidRequest(AgentCoreError):
    """The request is malformed (bad JSON, bad cursor, unusable input)."""

    status = 400
    default_code = "invalid_request"
    title = "Bad Request"


class AuthenticationError(AgentCoreError):
    """No usable API key: missing, malformed, unknown, revoked or expired."""

    status = 401
    default_code = "invalid_api_key"
    title = "Unauthorized"


class PermissionDenied(AgentCoreError):
    """The key is valid but lacks the scope the operation needs."""

    status = 403
    default_code = "insufficient_scope"
    title = "Forbidden"


class NotFound(AgentCoreError):
    """No such object in this organization and environment (existence never leaks)."""

    status = 404
    default_code = "resource_missing"
    title = "Not Found"


class MethodNotAllowed(AgentCoreError):
    """The path exists but not with this HTTP method; ``allowed`` lists the ones it has.

    :param allowed: the methods the path allows (the adapter sends them as ``Allow``).
    """

    status = 405
    default_code = "method_not_allowed"
    title = "Method Not Allowed"

    def __init__(
        self,
        detail: str,
        *,
        allowed: Iterable[str] = (),
        code: str | None = None,
        param: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail, code=code, param=param, extra=extra)
        self.allowed: tuple[str, ...] = tuple(allowed)


class RequestTimeout(AgentCoreError):
    """The client did not send its request (its head or its body) within the time allowed."""

    status = 408
    default_code = "request_timeout"
    title = "Request Timeout"


class Conflict(AgentCoreError):
    """The request conflicts with the object's state (e.g. an invalid transition)."""

    status = 409
    default_code = "conflict"
    title = "Conflict"


class PayloadTooLarge(AgentCoreError):
    """The request body or an uploaded file exceeds a configured limit."""

    status = 413
    default_code = "payload_too_large"
    title = "Content Too Large"


class UriTooLong(AgentCoreError):
    """The request's target (path and query string) is longer than the limit."""

    status = 414
    default_code = "uri_too_long"
    title = "URI Too Long"


class UnsupportedMediaType(AgentCoreError):
    """The request's Content-Type is not one this route accepts."""

    status = 415
    default_code = "unsupported_media_type"
    title = "Unsupported Media Type"


class ValidationFailed(AgentCoreError):
    """A field is missing or has a bad value; ``param`` names it."""

    status = 422
    default_code = "validation_error"
    title = "Unprocessable Content"


def invalid_fields(exc: ValidationError, *, prefix: tuple[str | int, ...] = ()) -> ValidationFailed:
    """A pydantic error as a 422 whose ``param`` is the first bad field's dotted path
    (all of them in ``errors``); ``prefix`` is where the validated value sits.

    Paths name fields and list positions only: the kind of filter pydantic tried (a
    union tag after ``filter`` or after a position in ``filters``) and the ``[key]``
    marker of a bad dictionary key are left out, so a bad key of ``metadata`` is
    ``metadata.<key>`` (``metadata`` for an empty key).
    """
    errors = []
    for err in exc.errors(include_url=False, include_input=False):
        parts: list[str | int] = []
        for part in (*prefix, *err["loc"]):
            tag = part in FILTER_TAGS and (
                not parts or parts[-1] == "filter" or isinstance(parts[-1], int)
            )
            if not tag and part not in ("[key]", ""):
                parts.append(part)
        errors.append({"param": ".".join(map(str, parts)) or None, "message": err["msg"]})
    first = errors[0]
    where = f" ({first['param']})" if first["param"] else ""
    return ValidationFailed(
        f"Invalid value{where}: {first['message']}.",
        param=first["param"],
        extra={"errors": errors},
    )


def unicode_error(found: LoneSurrogate) -> ValidationFailed:
    """A 422 ``validation_error`` for a string with a lone surrogate, naming its field in
    ``param`` (and, as ``invalid_fields`` does, in ``errors``)."""
    where = f" ({found.param})" if found.param else ""
    return ValidationFailed(
        f"Invalid value{where}: {found.message}.",
        param=found.param,
        extra={"errors": [{"param": found.param, "message": found.message}]},
    )


def check_unicode(value: Any, *, param: str | None = None) -> None:
    """Refuse a string, anywhere in ``value``, that holds a lone UTF-16 surrogate (no
    store or JSON answer can hold it): a 422 ``validation_error`` naming where it is,
    ``param`` being where ``value`` sits (``metadata``, ``messages.0``).

    Arguments of the Python API are checked with it before anything is stored, as
    request bodies are when they are decoded (``agentcore._unicode``).
    """
    found = find_lone_surrogate(value, prefix=tuple(param.split(".")) if param else ())
    if found is not None:
        raise unicode_error(found)


class RateLimited(AgentCoreError):
    """Too many requests for this key; ``retry_after`` says when to come back.

    :param decision: the rate limiter's facts (limit, remaining, reset, retry-after
        seconds); the HTTP adapter renders them as headers.
    :param retry_after: seconds to wait, when known without a decision (the HTTP
        client reads them from ``Retry-After``).
    """

    status = 429
    default_code = "rate_limited"
    title = "Too Many Requests"

    def __init__(
        self,
        detail: str,
        *,
        decision: Decision | None = None,
        retry_after: float | None = None,
        code: str | None = None,
        param: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail, code=code, param=param, extra=extra)
        self.decision = decision
        self._retry_after = retry_after

    @property
    def retry_after(self) -> float | None:
        """Seconds until the key may send again, when the limiter (or the server) said."""
        return self._retry_after if self.decision is None else self.decision.retry_after


class HeadersTooLarge(AgentCoreError):
    """The request's header fields together are larger than the limit."""

    status = 431
    default_code = "headers_too_large"
    title = "Request Header Fields Too Large"


class ProviderError(AgentCoreError):
    """A model or embedding provider failed or answered nonsense."""

    status = 502
    default_code = "provider_error"
    title = "Bad Gateway"


class ServiceUnavailable(AgentCoreError):
    """A backing service (the database) cannot be reached right now; retry later.

    Nothing was half-written.

    :param retry_after: seconds after which a retry may succeed, when known.
    """

    status = 503
    default_code = "service_unavailable"
    title = "Service Unavailable"

    def __init__(
        self,
        detail: str,
        *,
        retry_after: float | None = None,
        code: str | None = None,
        param: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail, code=code, param=param, extra=extra)
        self.retry_after = retry_after


class ShuttingDown(ServiceUnavailable):
    """The server (or this core) is shutting down: the work was refused, or its answer
    cut short, before anything was written; ask again (another node, or after the
    restart)."""

    default_code = "server_shutting_down"


class ProviderTimeout(AgentCoreError):
    """A model or embedding provider did not answer in time."""

    status = 504
    default_code = "provider_timeout"
    title = "Gateway Timeout"


class Cancelled(AgentCoreError):
    """Work was stopped before it committed anything (shutdown, or the client left)."""

    status = 503
    default_code = "cancelled"
    title = "Service Unavailable"


class DeadlineExceeded(AgentCoreError):
    """The request ran past the configured per-request deadline."""

    status = 504
    default_code = "deadline_exceeded"
    title = "Gateway Timeout"


def as_problem(error: AgentCoreError) -> Problem:
    """``error`` as a stored problem (a failed document's ``last_error``), without request id."""
    return Problem(
        type=PROBLEM_TYPE + error.code,
        title=error.title,
        status=error.status,
        detail=error.detail,
        code=error.code,
        param=error.param,
    )


def error_from_problem(problem: Problem) -> AgentCoreError:
    """The error a stored problem describes (a failed job's ``last_error``), to raise again.

    The class is the one whose default code matches, else the first with its status
    (``AgentCoreError`` itself for an unknown one); code, detail and param are kept.
    """
    return error_of(problem.status, problem.code, problem.detail, problem.param)


def error_of(status: int, code: str, detail: str, param: str | None) -> AgentCoreError:
    """The error with these fields, of the class ``error_class`` names."""
    return error_class(status, code)(detail, code=code, param=param)


def error_class(status: int, code: str | None) -> type[AgentCoreError]:
    """The class whose default code is ``code``, else the first with ``status``
    (``AgentCoreError`` itself for an unknown one): a 504 ``deadline_exceeded`` is a
    ``DeadlineExceeded``, not the ``ProviderTimeout`` its status alone would name."""
    classes = _error_classes()
    cls = next((c for c in classes if code is not None and c.default_code == code), None)
    return cls or next((c for c in classes if c.status == status), AgentCoreError)


def _error_classes() -> list[type[AgentCoreError]]:
    """``AgentCoreError`` and its subclasses, the hierarchy above first."""
    found: list[type[AgentCoreError]] = []
    pending: list[type[AgentCoreError]] = [AgentCoreError]
    while pending:
        cls = pending.pop(0)
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


__all__ = [
    "PROBLEM_TYPE",
    "AgentCoreError",
    "AuthenticationError",
    "Cancelled",
    "Conflict",
    "DeadlineExceeded",
    "HeadersTooLarge",
    "InvalidRequest",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "ProviderError",
    "ProviderTimeout",
    "RateLimited",
    "RequestTimeout",
    "ServiceUnavailable",
    "ShuttingDown",
    "UnsupportedMediaType",
    "UriTooLong",
    "ValidationFailed",
    "as_problem",
    "error_from_problem",
    "error_of",
]

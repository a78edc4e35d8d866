"""One webhook delivery attempt over HTTP, bounded in time and in what it reads back."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from agentcore.outbound import (
    DEFAULT_LIMITS,
    AddressPolicy,
    BlockedAddress,
    GuardedTransport,
    Resolver,
    deadline,
    default_resolver,
)
from agentcore.webhooks.schedule import parse_retry_after

RESPONSE_SNIPPET_BYTES = 4096
"""At most this much of a receiver's response body is read; the rest is never fetched."""


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """What one attempt produced: a status, or an error when no response came back."""

    status_code: int | None
    error: str | None
    retry_after: float | None
    duration_ms: float
    response_snippet: str

    @property
    def succeeded(self) -> bool:
        """Only a 2xx response counts as delivered (a 3xx is not followed)."""
        return self.status_code is not None and 200 <= self.status_code < 300

    @property
    def gone(self) -> bool:
        """The receiver answered 410 Gone: the subscription should be disabled."""
        return self.status_code == 410


def make_client(
    policy: AddressPolicy, *, timeout: float, resolver: Resolver = default_resolver
) -> httpx.Client:
    """An httpx client for deliveries: SSRF-guarded, no redirects, no proxies or netrc.

    ``accept-encoding: identity`` keeps a receiver from answering with a compression bomb.
    """
    return httpx.Client(
        transport=GuardedTransport(policy, resolver=resolver, limits=DEFAULT_LIMITS),
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
        headers={"accept-encoding": "identity"},
    )


def send(
    client: httpx.Client,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    timeout: float,
) -> AttemptResult:
    """POST one delivery and report what happened; never raises for network trouble.

    The whole attempt (connect, send, response head and snippet) is bounded by
    ``timeout`` seconds of wall time when ``client`` uses a guarded transport, and each
    operation by ``timeout`` in any case. Redirects are not followed. At most
    :data:`RESPONSE_SNIPPET_BYTES` of the response body are read.
    """
    started = time.monotonic()
    status: int | None = None
    error: str | None = None
    retry_after: float | None = None
    snippet = b""
    try:
        with deadline(timeout):
            request = client.build_request(
                "POST", url, headers=dict(headers), content=body, timeout=timeout
            )
            response = client.send(request, stream=True, follow_redirects=False)
            try:
                status = response.status_code
                retry_after = parse_retry_after(
                    response.headers.get("retry-after"), now=time.time()
                )
                snippet = _read_snippet(response)
            finally:
                response.close()  # an unread rest closes the connection instead of draining it
    except BlockedAddress as exc:
        error = str(exc)
    except httpx.TimeoutException as exc:
        error = f"timed out after {timeout:g} s ({type(exc).__name__})"
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return AttemptResult(
        status_code=status,
        error=error,
        retry_after=retry_after,
        duration_ms=(time.monotonic() - started) * 1000,
        response_snippet=snippet.decode("utf-8", errors="replace"),
    )


def _read_snippet(response: httpx.Response) -> bytes:
    """Up to the cap of the raw body; a body that stalls or breaks keeps what came."""
    received = bytearray()
    try:
        for chunk in response.iter_raw():
            received += chunk
            if len(received) >= RESPONSE_SNIPPET_BYTES:
                break
    except httpx.HTTPError:
        pass  # the status already decides the outcome
    return bytes(received[:RESPONSE_SNIPPET_BYTES])


__all__ = ["RESPONSE_SNIPPET_BYTES", "AttemptResult", "make_client", "send"]

"""uvicorn's httptools protocol with a bounded, timed request head (``agentcore serve``).

Stock uvicorn reads a request head for as long and as far as the client likes: httptools
has no size limit on the request line or headers, and no timer runs before a head is
complete (the keep-alive timer stops at the first byte). One connection could push a
276 MB URL; a thousand could hold their heads open for ever. ``HeadGuard`` adds the two
bounds the server needs, before the app sees anything:

- **size**: a head still arriving is refused once its URL is longer than
  ``max_url_bytes`` (414) or the head as a whole longer than ``max_head_bytes`` (431);
- **time**: a head must be complete ``header_timeout`` seconds after the connection
  opened or after the previous answer was sent; else 408 (or a silent close when not a
  byte of it came).

Either refusal is a problem document and closes the connection. The app checks the
exact limits again on every complete head (``ApiMiddleware``), wherever it is served.

Before either, a connection must fit in its client address's share of the server's
connections (``connections.ClientShare``); one past it is answered 429 and closed at
once, never taken on.

This subclasses a private uvicorn module, so it meets the project's three conditions
for framework internals: uvicorn is pinned below the next minor release
(``pyproject.toml``), ``tests/http/test_head_guard_contract.py`` fails when uvicorn's
methods it builds on change, and the win is measured (``benchmarks/slow_clients.py``,
``docs/decisions.md``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from agentcore.errors import AgentCoreError, HeadersTooLarge, RequestTimeout, UriTooLong
from agentcore_starlette.problems import problem_message
from agentcore_starlette.serve.connections import ClientShare
from agentcore_starlette.settings import HttpSettings

HEAD_SLACK = 8 * 1024
"""Bytes a head may hold beyond its URL and header limits: the method, the version,
the line breaks and ``": "`` separators, and whatever of a previous message shared the
read that began it."""


@dataclass(frozen=True)
class HeadLimits:
    """How large a request head may grow, and how long it may take, under ``HeadGuard``."""

    max_url_bytes: int
    max_head_bytes: int
    header_timeout: float

    @classmethod
    def of(cls, settings: HttpSettings) -> HeadLimits:
        """The limits ``settings`` set (``max_url_bytes``, ``max_header_bytes``,
        ``header_timeout``)."""
        return cls(
            max_url_bytes=settings.max_url_bytes,
            max_head_bytes=settings.max_url_bytes + settings.max_header_bytes + HEAD_SLACK,
            header_timeout=settings.header_timeout,
        )


class HeadGuard(HttpToolsProtocol):
    """uvicorn's httptools protocol refusing a head that grows too large or too slowly,
    and a connection past its client's share.

    uvicorn builds one per connection; ``agentcore serve`` passes ``limits`` and the
    server's ``share`` with ``functools.partial`` (a partial of this class pickles, for
    ``--workers``: each worker process then counts its own connections).
    """

    def __init__(
        self, *args: Any, limits: HeadLimits, share: ClientShare | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.share = share
        self.address: str | None = None  # the client's, once admitted to its share
        # when the wait for the current head began (None: a request is being answered);
        # one timer per connection checks it, so a request costs no timer of its own
        self.waiting_since: float | None = None
        self.head_timer: asyncio.TimerHandle | None = None
        self.in_head = False  # between the first byte of a request and its last header
        self.head_bytes = 0  # bytes read while this head was arriving (an upper bound)

    # the head's clock ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the connection, and the clock of its first head; or, past its client's
        share, hand it to a ``Refusal`` (uvicorn never sees it, so it takes no place
        under ``limit_concurrency``)."""
        address = _peer_address(transport)
        if self.share is not None and address is not None:
            if not self.share.admit(address):
                refusal = self.share.refusal(address)
                transport.set_protocol(refusal)
                refusal.connection_made(transport)
                return
            self.address = address
        super().connection_made(transport)
        self.waiting_since = self.loop.time()
        self.head_timer = self.loop.call_later(self.limits.header_timeout, self._check_head)

    def on_response_complete(self) -> None:
        """After an answer: the clock of the next head starts, unless another request
        (pipelined) is already being answered."""
        super().on_response_complete()
        if self.cycle is None or self.cycle.response_complete:
            self.waiting_since = self.loop.time()

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the clock, then close as uvicorn does."""
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        if self.share is not None and self.address is not None:
            self.share.release(self.address)
            self.address = None
        super().connection_lost(exc)

    def _check_head(self) -> None:
        """The connection's timer: close it if a head has been awaited too long, else
        look again when the current wait would run out."""
        self.head_timer = None
        if self.transport.is_closing():
            return
        timeout = self.limits.header_timeout
        since = self.waiting_since
        now = self.loop.time()
        if since is not None and now - since >= timeout:
            self._head_timed_out()
            return
        again = timeout if since is None else since + timeout - now
        self.head_timer = self.loop.call_later(again, self._check_head)

    def _head_timed_out(self) -> None:
        if not self.in_head:  # not a byte of a request: close, as for an idle keep-alive
            self.transport.close()
            return
        self._refuse(
            RequestTimeout(
                f"The request head did not arrive within {self.limits.header_timeout:g} s.",
                code="header_timeout",
            )
        )

    # the head's size ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        """A request's first byte: its head is being read."""
        super().on_message_begin()
        self.in_head = True
        self.head_bytes = 0

    def on_headers_complete(self) -> None:
        """The head is whole: stop its clock, then let uvicorn start the request."""
        self.in_head = False
        self.waiting_since = None
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        """Parse ``data``; refuse the head if it is still incomplete and over a limit.

        Counted after parsing, so a head that completes within this read is never
        refused here (the app checks the exact limits): what is held for a head is at
        most ``max_head_bytes`` plus one read.
        """
        super().data_received(data)
        if not self.in_head or self.transport.is_closing():
            return
        self.head_bytes += len(data)
        if len(self.url) > self.limits.max_url_bytes:
            self._refuse(
                UriTooLong(f"The request target is longer than {self.limits.max_url_bytes} bytes.")
            )
        elif self.head_bytes > self.limits.max_head_bytes:
            self._refuse(
                HeadersTooLarge(
                    f"The request head is larger than {self.limits.max_head_bytes} bytes."
                )
            )

    def _refuse(self, error: AgentCoreError) -> None:
        """Answer ``error`` as a problem document and close the connection."""
        self.in_head = False
        self.waiting_since = None
        self.logger.warning("Refused a request head: %s", error.detail)
        self.transport.write(problem_message(error))
        self.transport.close()


def _peer_address(transport: asyncio.BaseTransport) -> str | None:
    """The client's address (IPv4 or IPv6, without the port); ``None`` on a Unix socket."""
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple | list) and peer:
        return str(peer[0])
    return None

"""Each client address's share of ``agentcore serve``'s connections, and the refusal of
a connection past it.

``max_connections`` (uvicorn's ``limit_concurrency``) is one cap for everyone: a single
client holding that many connections, each with half a request head, made the server
answer every other client 503. ``ClientShare`` counts the open connections of each
client address in one server process; ``HeadGuard`` asks it before it takes a
connection on, and hands one past the share to ``Refusal``, which answers 429
``too_many_connections`` and closes it before it can hold anything (not a request head,
nor a place under ``max_connections``).

The address is the TCP peer's: behind a reverse proxy it is the proxy's, so there the
share is set to the whole cap (``max_connections_per_client``) and the proxy limits
each client (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import logging

from agentcore.adapters import new_id
from agentcore.errors import RateLimited
from agentcore_starlette.problems import problem_message
from agentcore_starlette.settings import HttpSettings

SHARE = 4
"""By default one address may hold a ``SHARE``-th of ``max_connections``."""

RETRY_AFTER = 1.0
"""Seconds a refused client is told to wait: until one of its connections closes, which
the server cannot foretell; a second spaces retries without stalling an honest client."""

LINGER = 2.0
"""Seconds a refused connection is kept to read what the client sends meanwhile: closing
a socket with unread bytes resets it, and a client may then lose the answer."""

log = logging.getLogger("uvicorn.error")  # where the server's other refusals are logged


def connections_per_client(settings: HttpSettings) -> int:
    """The most connections one client address may hold: ``max_connections_per_client``,
    else a ``SHARE``-th of ``max_connections`` (at least one)."""
    given = settings.max_connections_per_client
    return given if given is not None else max(1, settings.max_connections // SHARE)


class ClientShare:
    """The open connections of each client address in one server process, admitted up to
    ``limit`` each.

    ``server_options`` makes one per server; each connection's ``HeadGuard`` admits and
    releases through it, on the server's event loop (so without a lock). An address
    whose count falls to zero is forgotten, so the table holds only connected clients.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: dict[str, int] = {}
        self.warned: set[str] = set()  # addresses refused since they were last idle
        # the answer is the same but for its request id: made once, as a flood makes
        # thousands a second (rendering each took most of a refusal's time)
        self.sample_id = new_id("req").encode()
        self.answer = problem_message(
            RateLimited(
                f"This address holds {limit} connections to the server, as many as one"
                " client may; reuse them (keep-alive) or close one before opening another.",
                code="too_many_connections",
                retry_after=RETRY_AFTER,
            ),
            self.sample_id.decode(),
        )

    def admit(self, address: str) -> bool:
        """Count one more connection of ``address``, unless it holds ``limit`` already."""
        count = self.open.get(address, 0)
        if count >= self.limit:
            return False
        self.open[address] = count + 1
        return True

    def release(self, address: str) -> None:
        """One connection of ``address`` closed."""
        count = self.open.get(address, 0) - 1
        if count > 0:
            self.open[address] = count
        else:
            self.open.pop(address, None)
            self.warned.discard(address)

    def refusal(self, address: str) -> Refusal:
        """The protocol that answers a connection of ``address`` past its share (logged
        once until the address has no connection left: a flood is one line, not one a
        connection)."""
        if address not in self.warned:
            self.warned.add(address)
            log.warning(
                "Refusing new connections from %s: it holds %d, its share of the server's"
                " (max_connections_per_client)",
                address,
                self.limit,
            )
        # ids are all as long, so Content-Length stays right
        return Refusal(self.answer.replace(self.sample_id, new_id("req").encode()))


class Refusal(asyncio.Protocol):
    """A connection answered with ``message`` (a whole HTTP answer that closes it) and
    closed, in place of the HTTP protocol (``transport.set_protocol``), before a byte of
    a request is read.

    The answer goes out at once, followed by end of file; what the client sends
    meanwhile is read and dropped, for at most ``LINGER`` seconds or until the client
    closes its side, as a server does when it closes early (a socket closed with unread
    bytes is reset, and the reset may overtake the answer).
    """

    def __init__(self, message: bytes) -> None:
        self.message = message
        self.timer: asyncio.TimerHandle | None = None

    # a stream transport, not asyncio's class: uvloop's is not a subclass of it
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Answer and shut the sending side; close the rest after ``LINGER`` seconds."""
        transport.write(self.message)
        if transport.can_write_eof():
            transport.write_eof()
        self.timer = asyncio.get_running_loop().call_later(LINGER, transport.close)

    def data_received(self, data: bytes) -> None:
        """Drop what the client sends: it is not served."""

    def eof_received(self) -> bool:
        """The client closed its side: close the connection."""
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the linger timer."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

"""uvicorn's httptools protocol, sending a response's head and body in one write.

uvicorn writes the status line and headers as soon as the app sends
``http.response.start``, and the body in a second write. On a keep-alive connection
that is two TCP segments and two wake-ups of the client for one small JSON answer:
the client reads the head, parses it and sleeps again until the body comes. Here
the connection's writes are held until the response is complete, or else until the
end of the event loop's current step, and then written together: a response sent
whole (``start`` then its only ``body`` message, as every JSON answer is) leaves in
one write, as soon as its last part is sent. A streamed answer (server-sent events)
is not held back: its head leaves at the end of the step that sent it, each event at
the end of its own. The access line is written after the response (``DeferredLogger``).

``agentcore serve`` uses it when httptools is installed (the ``server`` extra); any
uvicorn host can too: ``uvicorn --http agentcore_starlette.protocol:HttpToolsProtocol``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as UvicornHttpToolsProtocol


class CoalescingTransport:
    """A transport whose writes made in one step of the loop leave as one write.

    Everything but writing and closing is the wrapped transport's own. Closing (or
    handing the connection to another protocol) first writes what is held.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.loop = loop
        self.held: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Hold ``data`` until the end of this step of the loop (with any later writes)."""
        if not self.held:
            self.loop.call_soon(self.flush)
        self.held.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        """Hold each of ``lines`` as ``write`` does."""
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Write what is held now, in one write (nothing once the transport is closing)."""
        held, self.held = self.held, []
        if held and not self.transport.is_closing():
            self.transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        """Write what is held, then close."""
        self.flush()
        self.transport.close()

    def write_eof(self) -> None:
        """Write what is held, then half-close."""
        self.flush()
        self.transport.write_eof()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Write what is held, then hand the connection over (an upgrade)."""
        self.flush()
        self.transport.set_protocol(protocol)

    def get_write_buffer_size(self) -> int:
        """Bytes written but not sent yet: the transport's buffer and what is held."""
        return self.transport.get_write_buffer_size() + sum(len(data) for data in self.held)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class DeferredLogger:
    """A logger whose ``info`` records are made and written at the loop's next step.

    uvicorn writes a request's access line when the app starts its response, before
    the response is written; through this the line follows the written response (a
    whole one leaves within the step that completed it), and a stream's line follows
    its head. The line itself is the same. Everything but ``info`` is the logger's own.
    """

    def __init__(self, logger: logging.Logger, loop: asyncio.AbstractEventLoop) -> None:
        self.logger = logger
        self.loop = loop

    def info(self, msg: object, *args: object, **kwargs: Any) -> None:
        """``logger.info(msg, *args, **kwargs)`` at the next step of the loop."""
        if kwargs:
            self.loop.call_soon(functools.partial(self.logger.info, msg, *args, **kwargs))
        else:
            self.loop.call_soon(self.logger.info, msg, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.logger, name)


class HttpToolsProtocol(UvicornHttpToolsProtocol):
    """uvicorn's httptools protocol on a ``CoalescingTransport``; a response is written
    the moment its last part is sent, before uvicorn's bookkeeping for it and before its
    access line (``DeferredLogger``)."""

    coalescing: CoalescingTransport | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.access_logger = DeferredLogger(self.access_logger, self.loop)  # type: ignore[assignment]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the connection, its writes coalesced per step of the loop."""
        self.coalescing = CoalescingTransport(transport, self.loop)
        super().connection_made(self.coalescing)  # type: ignore[arg-type]

    def on_response_complete(self) -> None:
        """Write the whole response now (the client can read it while the rest of the
        request's bookkeeping runs), then do that bookkeeping."""
        if self.coalescing is not None:
            self.coalescing.flush()
        super().on_response_complete()

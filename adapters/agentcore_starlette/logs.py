"""The access log of ``agentcore serve``, written after the answer it describes.

uvicorn writes a request's access line when the app starts its answer, before the
answer is written to the socket: formatting and writing the line (about 15-20 µs)
sits on every request's path to the client. ``DeferredStreamHandler`` is a plain
``logging`` handler (configured through uvicorn's ``log_config``, nothing of
uvicorn's is replaced) that, called on a running event loop, hands the record to the
loop's next step: the answer, sent in the same step, is on the wire first. The line
and its order among access lines are the same.
"""

from __future__ import annotations

import asyncio
import logging


class DeferredStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A ``StreamHandler`` that, on an event loop, writes each record one step later.

    Off a loop (a thread, start-up, shutdown) it writes at once, as its base does.
    """

    def handle(self, record: logging.LogRecord) -> bool:
        """Filter and write ``record`` now, or at the running loop's next step."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return bool(super().handle(record))
        loop.call_soon(super().handle, record)
        return True

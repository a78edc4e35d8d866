"""Cancellation: a signal that long work checks, set by a deadline, a caller or a shutdown."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from agentcore.errors import Cancelled, DeadlineExceeded

__all__ = ["Cancellation"]


class Cancellation:
    """A thread-safe "stop now" flag with an optional deadline.

    Long work (ingestion) calls ``check()`` at its checkpoints; once ``cancel()`` was
    called or the deadline passed, ``check()`` raises and the work unwinds before it
    commits anything. Whoever owns the work decides when to cancel: the HTTP adapter
    when the request deadline passes or the client disconnects, ``core.stop()`` for
    background jobs, or host code.

    :param timeout: seconds from now after which the work counts as cancelled
        (``None``: no deadline).
    """

    def __init__(self, timeout: float | None = None) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._reason = ""
        self._callbacks: list[Callable[[], None]] = []
        self.deadline = None if timeout is None else time.monotonic() + timeout

    def cancel(self, reason: str = "cancelled") -> None:
        """Ask the work to stop at its next checkpoint; the first reason is kept, and
        the callbacks (``on_cancel``) run once, on this thread."""
        with self._lock:
            if self._event.is_set():
                return
            self._reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when ``cancel()`` is called (now, if it was): for work that
        waits on something else and must wake at once (a chat turn waiting for its model).
        A deadline passing calls nothing; such work bounds its waits by ``remaining``."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        callback()

    @property
    def remaining(self) -> float | None:
        """Seconds until the deadline (0 once passed); ``None`` without a deadline."""
        if self.deadline is None:
            return None
        return max(self.deadline - time.monotonic(), 0.0)

    @property
    def cancelled(self) -> bool:
        """Whether the work should stop (cancelled, or past its deadline)."""
        return self._event.is_set() or (
            self.deadline is not None and time.monotonic() >= self.deadline
        )

    @property
    def reason(self) -> str:
        """Why it was cancelled: the reason given, ``"deadline"``, or ``""``."""
        if self._event.is_set():
            return self._reason
        return "deadline" if self.cancelled else ""

    def check(self) -> None:
        """Raise if the work should stop.

        :raises DeadlineExceeded: the deadline passed (or ``cancel("deadline")``).
        :raises Cancelled: ``cancel()`` was called for another reason.
        """
        if not self.cancelled:
            return
        if self.reason == "deadline":
            raise DeadlineExceeded("The work ran past its deadline and was stopped.")
        raise Cancelled(f"The work was cancelled ({self.reason}).", code="cancelled")

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking early when cancelled; whether it was cancelled."""
        return self._event.wait(seconds)

"""CPU budgets: stop a thread's work once it has used the CPU seconds it was given.

Parsing an untrusted file can cost CPU without producing anything the other limits
count (a PDF page of a quarter million drawing operators extracts to no text at all).
``CpuBudget`` bounds that work by the thread's own CPU time, so a busy or slow machine
does not make it fail sooner, and an idle one does not let it run longer::

    with CpuBudget(30.0) as budget:          # the whole document
        for page in pages:
            with budget.part(5.0, "page"):   # each page, within the document's budget
                read(page)
            # BudgetSpent("page") or BudgetSpent("document") once either runs out

A watcher thread reads the working thread's CPU clock a few times a second and, once a
budget is spent, raises ``BudgetSpent`` in it (between two Python bytecodes: pure-Python
parsers such as pypdf stop within a poll, though a long call into C finishes first),
again at each poll until the thread has left the part or the block. A thread stuck in
C past its budget (an HTML page nested 200,000 deep costs lexbor a minute of CPU in one
call) cannot be stopped so: once it has burned ``STUCK_SECONDS`` more of CPU without
leaving, the handler set with ``on_stuck`` runs, if any (an ingestion worker process
exits with ``STUCK_EXIT_CODE``, which fails its job ``too_complex``).
``BudgetSpent`` is a ``BaseException``, so parser code that catches ``Exception`` to
recover from a bad object cannot swallow it. ``check()`` raises it too, at the caller's
own checkpoints: that is all there is where a thread's CPU clock cannot be read
(``time.pthread_getcpuclockid`` is missing, as on Windows).
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType

__all__ = ["STUCK_EXIT_CODE", "BudgetSpent", "CpuBudget", "on_stuck"]

POLL_SECONDS = 0.05
"""How often the watcher reads the working thread's CPU clock."""
STUCK_SECONDS = 2.0
"""CPU seconds a thread may go on using past its budget before it counts as stuck."""
STUCK_EXIT_CODE = 86
"""The status an ingestion worker exits with when its reading thread is stuck."""

_stuck_handler: Callable[[str], None] | None = None


def on_stuck(handler: Callable[[str], None] | None) -> None:
    """Run ``handler(budget name)`` (on the watcher's thread) when a working thread goes
    on using CPU ``STUCK_SECONDS`` past a spent budget without leaving it: it is in C,
    where ``BudgetSpent`` cannot reach it. Process-wide; ``None`` removes it. Only a
    process that can end for it (an ingestion worker) sets one."""
    global _stuck_handler
    _stuck_handler = handler


class BudgetSpent(BaseException):  # noqa: N818 - a signal to unwind, like KeyboardInterrupt
    """The working thread used up a CPU budget; ``args[0]`` names which (``"document"``,
    ``"page"``, ...): the innermost part whose budget ran out, else the whole."""


def _thread_clock() -> int | None:
    """The calling thread's CPU clock id, or ``None`` where it cannot be read."""
    clock = getattr(time, "pthread_getcpuclockid", None)
    if clock is None:
        return None
    try:
        clock_id: int = clock(threading.get_ident())
        time.clock_gettime(clock_id)
    except (OSError, AttributeError):
        return None
    return clock_id


class CpuBudget:
    """At most ``seconds`` of the calling thread's CPU time for the work in the block,
    and at most a part's own budget for each ``part``; raises ``BudgetSpent`` in the
    thread when either runs out.

    Enter it on the thread that does the work; one budget watches one block at a time.

    :param seconds: CPU seconds the whole block may use.
    :param name: what ``BudgetSpent`` says ran out when the whole budget did.
    """

    def __init__(self, seconds: float, name: str = "document") -> None:
        self.seconds = seconds
        self.name = name
        self._lock = threading.Lock()
        self._clock: int | None = None
        self._thread = 0
        self._start = 0.0
        # (absolute CPU time, name) of the whole budget, then of each open part
        self._limits: list[tuple[float, str]] = []
        self._spent: str | None = None  # which budget the watcher stopped the thread for
        self._spent_at = 0.0  # the thread's CPU time when it was first stopped
        self._seen = False  # the thread has left a part, or the block, on a stop
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def __enter__(self) -> CpuBudget:
        self._thread = threading.get_ident()
        self._clock = _thread_clock()
        self._start = self._now()
        self._limits = [(self._start + self.seconds, self.name)]
        self._spent = None
        self._seen = False
        self._stop.clear()
        if self._clock is not None:
            self._watcher = threading.Thread(
                target=self._watch, name="agentcore-cpu-budget", daemon=True
            )
            self._watcher.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        with self._lock:
            self._limits = []  # the watcher raises nothing from now on
            self._seen = True
            raised = self._spent is not None
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()
            self._watcher = None
        if raised:
            # one the watcher raised that this thread has not seen yet is cancelled, so
            # it cannot surface later in code that has nothing to do with this budget
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread), None)

    @property
    def used(self) -> float:
        """CPU seconds the thread has used since the block began."""
        return self._now() - self._start

    @contextlib.contextmanager
    def part(self, seconds: float, name: str) -> Iterator[None]:
        """At most ``seconds`` of CPU for the work inside (and never more than what is
        left of the whole); ``BudgetSpent(name)`` when they run out."""
        with self._lock:
            self._limits.append((self._now() + seconds, name))
        try:
            yield
        except BudgetSpent:
            with self._lock:
                self._seen = True  # the stop reached this thread: not raised again
            raise
        finally:
            with self._lock:
                if self._limits:
                    self._limits.pop()

    def check(self) -> None:
        """Raise ``BudgetSpent`` if a budget has run out (a checkpoint of the caller's own)."""
        spent = self._over(self._now())
        if spent is not None:
            raise BudgetSpent(spent)

    def _now(self) -> float:
        if self._clock is not None:
            return time.clock_gettime(self._clock)
        return time.thread_time()

    def _over(self, now: float) -> str | None:
        """The innermost budget that ``now`` is past, if any."""
        with self._lock:
            return self._past(now)

    def _past(self, now: float) -> str | None:
        """``_over``, with the lock held by the caller."""
        return next((name for limit, name in reversed(self._limits) if now >= limit), None)

    def _watch(self) -> None:
        assert self._clock is not None
        while not self._stop.wait(POLL_SECONDS):
            try:
                now = time.clock_gettime(self._clock)
            except OSError:  # the thread ended
                return
            with self._lock:
                spent = self._past(now)
                if spent is None or self._seen:
                    continue
                if self._spent is None:
                    self._spent, self._spent_at = spent, now
                elif now - self._spent_at >= STUCK_SECONDS and _stuck_handler is not None:
                    _stuck_handler(self._spent)  # still running, in C: it will not stop
                    return
                # raised in the working thread at its next bytecode; an exception class,
                # so the name travels in ``_spent``. Raised again each poll until the
                # thread leaves the part or the block: one raised while the thread runs
                # a callback whose errors Python ignores (a weakref callback, a
                # ``__del__``) is lost, and the work would go on
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self._thread), ctypes.py_object(_Spent)
                )

    def reason(self, error: BudgetSpent) -> str:
        """Which budget ``error`` says ran out (the watcher's raises carry no argument)."""
        if error.args:
            return str(error.args[0])
        return self._spent or self.name


class _Spent(BudgetSpent):
    """What the watcher raises (``PyThreadState_SetAsyncExc`` takes a class, not an
    instance): ``CpuBudget.reason`` tells which budget it was."""

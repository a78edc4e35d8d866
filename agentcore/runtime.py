"""Runtime: owns every background thread, pool and child process one core starts.

``AgentCore.start()`` starts the runtime and ``AgentCore.stop()`` stops it; nothing in
the library starts a thread any other way, so after ``stop()`` no thread or process it
started is left, and two cores in one process share nothing.

Background work comes in three shapes:

- a **loop** (``Runtime.loop``): a function run again and again on its own thread,
  *supervised*: an exception is logged and the loop resumes after a backoff that
  grows with consecutive failures (0.1 s doubling to 30 s); it never dies silently.
  ``Runtime.health()`` reports each loop's state for ``/v1/health``.
- an **executor** (``Runtime.executor``): a thread pool started lazily, shut down on
  ``stop()``.
- a **component** (``Runtime.own``): anything with ``start()`` and ``stop(timeout)``
  (the ingestion worker processes, a store's own connections), started and stopped
  with the runtime, in order, stopped in reverse.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from agentcore.redact import get_logger

log = get_logger("agentcore.runtime")

__all__ = ["Component", "Loop", "LoopHealth", "Runtime", "Step"]

BACKOFF_FIRST = 0.1
BACKOFF_MAX = 30.0

Step = Callable[[], "float | None"]
"""One pass of a loop; returns seconds to wait before the next (``None``: the loop's
``interval``). The wait ends early when the loop is woken or stopped."""


class Component(Protocol):
    """Something the runtime starts and stops with the core."""

    def start(self) -> None:
        """Start working (idempotent)."""

    def stop(self, timeout: float) -> None:
        """Stop within ``timeout`` seconds, whatever the work is doing."""


@dataclass(frozen=True)
class LoopHealth:
    """What ``Runtime.health()`` says of one loop."""

    name: str
    running: bool
    failures: int
    """Consecutive failed passes (0 when the last pass succeeded)."""
    last_error: str | None
    """The type and message of the last failure, if any pass ever failed."""
    last_error_at: float | None
    """Unix time of that failure."""


class Loop:
    """A supervised background loop; made by ``Runtime.loop``.

    :param name: the thread's name and the loop's name in ``health()``.
    :param step: one pass; see ``Step``.
    :param interval: seconds between passes when ``step`` returns ``None``.
    """

    def __init__(self, name: str, step: Step, *, interval: float) -> None:
        self.name = name
        self._step = step
        self.interval = interval
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0
        self.last_error: str | None = None
        self.last_error_at: float | None = None

    def wake(self) -> None:
        """End the current wait: run the next pass now."""
        self._wake.set()

    @property
    def stopping(self) -> bool:
        """Whether ``stop()`` was called (a long pass may check it to end early)."""
        return self._stop.is_set()

    def start(self) -> None:
        """Start the loop's thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Ask the loop to end and wait up to ``timeout`` seconds for its thread."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning("background loop %s did not stop within %.1f s", self.name, timeout)

    def health(self) -> LoopHealth:
        """Whether the loop's thread is alive, and its failures."""
        thread = self._thread
        return LoopHealth(
            name=self.name,
            running=thread is not None and thread.is_alive() and not self._stop.is_set(),
            failures=self.failures,
            last_error=self.last_error,
            last_error_at=self.last_error_at,
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                wait = self._step()
            except BaseException as exc:  # supervised: log, back off, carry on
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                self.failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                self.last_error_at = time.time()
                wait = min(BACKOFF_FIRST * 2 ** (self.failures - 1), BACKOFF_MAX)
                log.exception(
                    "background loop %s failed (%d in a row); retrying in %.1f s",
                    self.name,
                    self.failures,
                    wait,
                )
            else:
                self.failures = 0
            if self._stop.is_set():
                break
            self._wake.wait(self.interval if wait is None else max(wait, 0.0))
            self._wake.clear()


class Runtime:
    """Every background thread, pool and component of one core.

    Loops, executors and components are declared when the core is built and run only
    between ``start()`` and ``stop()``; declaring one on a started runtime starts it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loops: list[Loop] = []
        self._executors: dict[str, tuple[int, ThreadPoolExecutor | None]] = {}
        self._components: list[Component] = []
        self._started = False

    @property
    def started(self) -> bool:
        """Whether ``start()`` ran and ``stop()`` has not since."""
        return self._started

    def loop(self, name: str, step: Step, *, interval: float = 1.0) -> Loop:
        """Declare a supervised loop running ``step`` (started with the runtime)."""
        loop = Loop(name, step, interval=interval)
        with self._lock:
            self._loops.append(loop)
            started = self._started
        if started:
            loop.start()
        return loop

    def executor(self, name: str, workers: int) -> Callable[[], ThreadPoolExecutor]:
        """Declare a thread pool; the returned function gives the pool, made on first use.

        Its threads start lazily (as ``ThreadPoolExecutor``'s do); ``stop()`` shuts it
        down, cancelling queued work, and the next use after a restart makes a new one.
        """
        with self._lock:
            self._executors[name] = (workers, None)

        def get() -> ThreadPoolExecutor:
            with self._lock:
                size, pool = self._executors[name]
                if pool is None:
                    pool = ThreadPoolExecutor(size, thread_name_prefix=name)
                    self._executors[name] = (size, pool)
                return pool

        return get

    def own(self, component: Component) -> None:
        """Start ``component`` with the runtime and stop it (in reverse order) with it."""
        with self._lock:
            self._components.append(component)
            started = self._started
        if started:
            component.start()

    def start(self) -> None:
        """Start every component, then every loop (idempotent)."""
        with self._lock:
            if self._started:
                return
            self._started = True
            components = list(self._components)
            loops = list(self._loops)
        for component in components:
            component.start()
        for loop in loops:
            loop.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop loops, then components (last first), then pools, within ``timeout`` s.

        Each piece gets what is left of the grace period, so the whole stop is bounded
        whatever the work is doing.
        """
        with self._lock:
            self._started = False
            loops = list(self._loops)
            components = list(reversed(self._components))
            pools = [pool for _, pool in self._executors.values() if pool is not None]
            self._executors = {name: (size, None) for name, (size, _) in self._executors.items()}
        deadline = time.monotonic() + timeout
        for loop in loops:
            loop._stop.set()
            loop.wake()
        for loop in loops:
            loop.stop(max(deadline - time.monotonic(), 0.0))
        for component in components:
            try:
                component.stop(max(deadline - time.monotonic(), 0.0))
            except Exception:
                log.exception("stopping %r failed", component)
        for pool in pools:
            # shut down on a helper thread, so waiting for running work stays bounded
            closer = threading.Thread(
                target=pool.shutdown, kwargs={"cancel_futures": True}, name="agentcore-stop"
            )
            closer.start()
            closer.join(max(deadline - time.monotonic(), 0.0))

    def health(self) -> list[LoopHealth]:
        """The state of every declared loop (a stopped runtime's loops are not running)."""
        with self._lock:
            loops = list(self._loops)
        return [loop.health() for loop in loops]

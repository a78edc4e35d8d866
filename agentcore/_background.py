"""Runtime: owns every background thread, pool and child process one core starts.

``AgentCore.start()`` starts the runtime and ``AgentCore.stop()`` stops it; nothing in
the library starts a thread any other way, so after ``stop()`` no thread or process it
started is left, and two cores in one process share nothing.

Background work comes in three shapes:

- a **loop** (``Runtime.loop``): a function run again and again on its own thread,
  *supervised*: an exception is logged and the loop resumes after a backoff that
  grows with consecutive failures (0.1 s doubling to 30 s); it never dies silently.
  ``Runtime.health()`` reports each loop's state for ``/v1/health``.
- an **executor** (``Runtime.executor``): a thread pool (``Pool``) whose threads start
  on first use (before ``start()`` too), shut down on ``stop()`` (queued work
  cancelled, or finished when the pool says so), last declared first: work still
  running on a later pool (the HTTP handlers) may use the earlier ones meanwhile. A
  use after ``stop()`` is refused (``PoolClosed``, a 503) until the next ``start()``,
  so work that outlived the grace period cannot start threads nobody will end.
- a **component** (``Runtime.own``): anything with ``start()`` and ``stop(timeout)``
  (the ingestion worker processes, a store's own connections), started and stopped
  with the runtime, in order, stopped in reverse.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import ParamSpec, Protocol, TypeVar

from agentcore._logs import get_logger
from agentcore.errors import ShuttingDown

log = get_logger("agentcore._background")

__all__ = ["Component", "Loop", "LoopHealth", "Pool", "Runtime", "Step"]

P = ParamSpec("P")
T = TypeVar("T")

BACKOFF_FIRST = 0.1
BACKOFF_MAX = 30.0

Step = Callable[[], "float | None"]
"""One pass of a loop; returns seconds to wait before the next (``None``: the loop's
``interval``). The wait ends early when the loop is woken or stopped."""


class PoolClosed(ShuttingDown, RuntimeError):
    """A closed pool refuses work: ``ShuttingDown`` (a 503 ``server_shutting_down``) to
    an HTTP client, and the ``RuntimeError`` an executor shutting down raises to callers
    that already fall back to their own thread for that (a search's scan, index
    maintenance)."""


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
    last_error_type: str | None = None
    """The exception type of that failure alone (what a public health check may show:
    a message can quote data)."""


class Loop:
    """A supervised background loop; made by ``Runtime.loop``.

    :param name: the thread's name and the loop's name in ``health()``.
    :param step: one pass; see ``Step``.
    :param interval: seconds between passes when ``step`` returns ``None``.
    :param backoff_max: the longest wait after consecutive failures.
    """

    def __init__(
        self, name: str, step: Step, *, interval: float, backoff_max: float = BACKOFF_MAX
    ) -> None:
        self.name = name
        self._step = step
        self.interval = interval
        self.backoff_max = backoff_max
        self._wake = threading.Event()
        # one stop event per run: a run that outlived its stop keeps its own (set)
        # event, so a restart cannot clear it and two runs never make passes at once
        self._stop = threading.Event()
        self._run_stop = threading.local()
        self._thread: threading.Thread | None = None
        self.failures = 0
        self.last_error: str | None = None
        self.last_error_type: str | None = None
        self.last_error_at: float | None = None

    def wake(self) -> None:
        """End the current wait: run the next pass now."""
        self._wake.set()

    @property
    def stopping(self) -> bool:
        """Whether ``stop()`` was called (a long pass may check it to end early); on the
        thread of a run that was stopped, it stays true after a restart."""
        stop: threading.Event = getattr(self._run_stop, "event", self._stop)
        return stop.is_set()

    def start(self) -> None:
        """Start the loop's thread (idempotent).

        A run that was stopped but whose pass is still under way (it outlived the
        grace period) finishes that pass and ends; the new run makes its first pass
        only once the old thread has ended, so one loop never runs two passes at once.
        """
        previous = self._thread
        if previous is not None and previous.is_alive() and not self._stop.is_set():
            return
        self._stop = stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(stop, previous), name=self.name, daemon=True
        )
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
            last_error_type=self.last_error_type,
        )

    def _record(self, exc: BaseException) -> None:
        self.failures += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        self.last_error_type = type(exc).__name__
        self.last_error_at = time.time()

    def _run(self, stop: threading.Event, previous: threading.Thread | None) -> None:
        self._run_stop.event = stop
        if previous is not None:
            previous.join()  # a stopped run ends after its pass: never two at once
        while not stop.is_set():
            # cleared before the pass, not after the wait: a wake-up that comes while
            # the pass runs (or just after the wait ended) is never lost
            self._wake.clear()
            try:
                wait = self._step()
            except (KeyboardInterrupt, SystemExit) as exc:
                # not supervised (the process is asked to end), but not silent either:
                # health shows the loop stopped and why
                self._record(exc)
                log.error(
                    "background loop %s ended by %s", self.name, type(exc).__name__, exc_info=exc
                )
                raise
            except BaseException as exc:  # supervised: log, back off, carry on
                self._record(exc)
                wait = min(BACKOFF_FIRST * 2 ** (self.failures - 1), self.backoff_max)
                log.exception(
                    "background loop %s failed (%d in a row); retrying in %.1f s",
                    self.name,
                    self.failures,
                    wait,
                )
            else:
                self.failures = 0
            if stop.is_set():
                break
            self._wake.wait(self.interval if wait is None else max(wait, 0.0))


class Pool(Executor):
    """A thread pool declared on a runtime (``Runtime.executor``).

    An ``Executor`` whose ``ThreadPoolExecutor`` is made on first use: the pool can be
    handed to its users when the core is built, and threads exist only once work
    comes. ``close()`` (the runtime's ``stop()``) shuts them down, and a later use
    raises ``PoolClosed`` until ``open()`` (the runtime's ``start()``).
    Calling the pool gives the current ``ThreadPoolExecutor``.

    :param name: the prefix of its threads' names.
    :param max_workers: how many threads it runs at most.
    :param initializer: run on each new thread first.
    :param finish_queued: on ``stop()``, run the work already queued (within the
        grace period) instead of cancelling it.
    """

    def __init__(
        self,
        name: str,
        max_workers: int,
        *,
        initializer: Callable[[], object] | None = None,
        finish_queued: bool = False,
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"pool {name!r} needs at least one worker, not {max_workers}")
        self.name = name
        self.max_workers = max_workers
        self.finish_queued = finish_queued
        self._initializer = initializer
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def __call__(self) -> ThreadPoolExecutor:
        """The current thread pool, made now if there is none.

        :raises PoolClosed: the pool was closed (the core is stopping or stopped) and
            not opened again.
        """
        pool = self._pool
        if pool is None:
            with self._lock:
                pool = self._pool
                if pool is None:
                    if self._closed:
                        raise PoolClosed(
                            f"The service is shutting down ({self.name} is stopped); retry"
                            " on another node or once it has restarted."
                        )
                    pool = ThreadPoolExecutor(
                        self.max_workers,
                        thread_name_prefix=self.name,
                        initializer=self._initializer,
                    )
                    self._pool = pool
        return pool

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` on one of the pool's threads."""
        return self().submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """End the current threads (as ``ThreadPoolExecutor.shutdown``); a later use
        makes new ones."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=wait, cancel_futures=cancel_futures)

    def open(self) -> None:
        """Accept work again after ``close()`` (threads start on the next use)."""
        with self._lock:
            self._closed = False

    def close(self, timeout: float) -> bool:
        """Shut down, waiting at most ``timeout`` seconds for the work under way (and
        the queued work, with ``finish_queued``); whether it all ended in time. Until
        ``open()``, a use raises ``PoolClosed``."""
        with self._lock:
            pool, self._pool = self._pool, None
            self._closed = True
        if pool is None:
            return True
        # shut down on a helper thread, so waiting for running work stays bounded
        closer = threading.Thread(
            target=pool.shutdown,
            kwargs={"cancel_futures": not self.finish_queued},
            name=f"{self.name}-stop",
        )
        closer.start()
        closer.join(max(timeout, 0.0))
        if closer.is_alive():
            log.warning("work on %s did not end within %.1f s", self.name, timeout)
            return False
        return True

    def __repr__(self) -> str:
        return f"Pool({self.name!r}, max_workers={self.max_workers})"


class Runtime:
    """Every background thread, pool and component of one core.

    Loops, executors and components are declared when the core is built and run only
    between ``start()`` and ``stop()``; declaring one on a started runtime starts it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loops: list[Loop] = []
        self._executors: dict[str, Pool] = {}
        self._components: list[Component] = []
        self._started = False

    @property
    def started(self) -> bool:
        """Whether ``start()`` ran and ``stop()`` has not since."""
        return self._started

    def loop(
        self, name: str, step: Step, *, interval: float = 1.0, backoff_max: float = BACKOFF_MAX
    ) -> Loop:
        """Declare a supervised loop running ``step`` (started with the runtime); see ``Loop``."""
        loop = Loop(name, step, interval=interval, backoff_max=backoff_max)
        with self._lock:
            self._loops.append(loop)
            started = self._started
        if started:
            loop.start()
        return loop

    def executor(
        self,
        name: str,
        workers: int,
        *,
        initializer: Callable[[], object] | None = None,
        finish_queued: bool = False,
    ) -> Pool:
        """Declare a thread pool (see ``Pool``); its threads start on first use.

        Declaring a name again gives the pool already declared (two apps over one core
        share its handler threads); with another size it is an error.
        """
        with self._lock:
            pool = self._executors.get(name)
            if pool is None:
                pool = Pool(name, workers, initializer=initializer, finish_queued=finish_queued)
                self._executors[name] = pool
        if pool.max_workers != workers:
            raise ValueError(f"pool {name!r} is declared with {pool.max_workers} workers")
        return pool

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
            pools = list(self._executors.values())
        for pool in pools:
            pool.open()
        for component in components:
            component.start()
        for loop in loops:
            loop.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop loops, then components, then pools (each last declared first), within
        ``timeout`` s.

        Each piece gets what is left of the grace period, so the whole stop is bounded
        whatever the work is doing. Pools are shut down even if the runtime was never
        started (their threads start on use), and refuse work until ``start()``. The
        last declared pool closes first: the HTTP handlers, declared after the core's
        pools, may still use those while they finish.
        """
        with self._lock:
            self._started = False
            loops = list(self._loops)
            components = list(reversed(self._components))
            pools = list(reversed(self._executors.values()))
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
            pool.close(deadline - time.monotonic())

    def health(self) -> list[LoopHealth]:
        """The state of every declared loop (a stopped runtime's loops are not running)."""
        with self._lock:
            loops = list(self._loops)
        return [loop.health() for loop in loops]

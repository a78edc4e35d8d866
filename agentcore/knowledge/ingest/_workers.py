"""Ingestion worker processes, seen from the parent: start, feed, watch, kill, reuse.

Untrusted parsing and embedding run where a kill stops them (what runs inside is
``_worker_main.py``). A worker is a clean interpreter (``python -c``, as
``multiprocessing``'s ``spawn`` makes one; never a ``fork`` of the threaded server) that
builds the ingest pipeline, and only that, from a picklable ``bootstrap``
(``agentcore._ingest_worker``: the store opened again, unmigrated; the same plugins and
settings, so the same embedder), then runs one job at a time: read the upload from the store,
parse, chunk, embed, count terms and complete the document in its own transaction.
Only a small ``Result`` comes back over a socket pair, so the server process never
holds a large document.

Why not ``multiprocessing``'s ``spawn`` or ``forkserver``: both run the host's
``__main__`` module again in every worker (a host script without an ``if __name__ ==
"__main__"`` guard would start over in it; code read from stdin cannot be run at all).
The worker gets the parent's ``sys.path`` first, so plugins importable by the host are
importable by it.

Each worker runs at a lower CPU priority (``os.nice``) with single-threaded BLAS, and
under an address-space limit (``RLIMIT_AS``, Linux) relative to its size once started:
a job that needs more memory gets ``MemoryError``, reported as ``too_large``, and the
worker exits. The parent (``IngestionJobs``) kills a worker whose job passes its
deadline, whose document is deleted, or that is still busy when the core stops, and
replaces a worker whose resident memory grew, which returns that memory to the system.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Protocol

from agentcore._cancellation import Cancellation
from agentcore._logs import get_logger
from agentcore.config import worker_environment
from agentcore.events import Event
from agentcore.observer import Counts, unobserved
from agentcore.schema import Document, Problem

if TYPE_CHECKING:
    from agentcore.storage.records import IngestJob

__all__ = [
    "Completed",
    "JobRunner",
    "Ready",
    "Result",
    "WorkerDied",
    "WorkerPool",
    "WorkerProcess",
    "WorkerSpec",
    "WorkerStartFailed",
]

log = get_logger("agentcore.ingest")

MiB = 1024 * 1024
START_TIMEOUT = 120.0  # seconds a new worker may take to import, open the store and report


@dataclass(frozen=True)
class Completed:
    """A job's document, ``ready``, and the ``document.ready`` event recorded with it
    (``None`` on a core without an event bus)."""

    document: Document
    event: Event | None = None


class JobRunner(Protocol):
    """What a worker's ``bootstrap`` builds (the ingest pipeline): something that indexes
    one leased job."""

    def run_ingest_job(self, job: IngestJob, cancellation: Cancellation) -> Completed | None:
        """Index ``job``'s upload and complete its document (with its recorded
        ``document.ready`` event); ``None`` if it is gone."""


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process needs; pickled to it when it starts.

    :param bootstrap: builds the worker's ``JobRunner`` (the ingest pipeline, on the same
        store opened again).
    :param memory_mb: address space the worker may add over its size once started.
    :param nice: added to the worker's nice value.
    """

    bootstrap: Callable[[], JobRunner]
    memory_mb: int
    nice: int


@dataclass(frozen=True)
class Result:
    """What a worker reports after a job: the ready document, or why there is none.

    ``problem`` is the job's error as problem details (an ``AgentCoreError``);
    ``out_of_memory``: the job passed the memory limit (the worker then exits).
    ``rss`` is the worker's resident memory after the job, its heap trimmed.
    ``event`` is the ``document.ready`` event the worker recorded with the document
    (the parent announces it to its in-process listeners).
    """

    document: Document | None = None
    event: Event | None = None
    problem: Problem | None = None
    out_of_memory: bool = False
    rss: int = 0


@dataclass(frozen=True)
class Ready:
    """A worker's first message: started (its resident memory then), or why not."""

    rss: int = 0
    error: str | None = None


class WorkerStartFailed(RuntimeError):
    """A worker process could not start (its bootstrap failed, or it never reported)."""


class WorkerDied(RuntimeError):
    """A worker process ended without reporting its job's result.

    :param exitcode: the process's exit code; ``-N`` when signal ``N`` ended it.
    """

    def __init__(self, exitcode: int | None) -> None:
        super().__init__(f"the ingestion worker process ended (exit code {exitcode})")
        self.exitcode = exitcode


# What the worker interpreter runs: the parent's sys.path first (plain strings), so the
# pickled spec that follows can name any module the parent can import.
_BOOT = (
    "import sys; from multiprocessing.connection import Connection;"
    " conn = Connection(int(sys.argv[1])); sys.path[:] = conn.recv();"
    " from agentcore.knowledge.ingest._worker_main import worker_main; worker_main(conn)"
)


class WorkerProcess:
    """The parent's handle on one worker process; made by ``WorkerPool.acquire``.

    :raises WorkerStartFailed: when the process does not come up.
    """

    def __init__(self, spec: WorkerSpec) -> None:
        ours, theirs = socket.socketpair()
        self._conn = Connection(ours.detach())
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                env=worker_environment(),  # one malloc arena (see there)
            )
        except OSError as exc:  # out of processes or memory
            self._conn.close()
            raise WorkerStartFailed(f"an ingestion worker process did not start: {exc}") from exc
        finally:
            theirs.close()
        try:
            self._conn.send(list(sys.path))
            self._conn.send(spec)
            ready = self._receive(START_TIMEOUT)
        except (OSError, WorkerDied) as exc:
            ready = Ready(error=str(exc))
        if not isinstance(ready, Ready) or ready.error is not None:
            self.kill()
            reason = ready.error if isinstance(ready, Ready) else "it never reported"
            raise WorkerStartFailed(f"an ingestion worker process did not start: {reason}")
        self.baseline_rss = ready.rss
        self.last_rss = ready.rss

    @property
    def pid(self) -> int | None:
        """The worker's process id."""
        pid: int | None = self.process.pid
        return pid

    def send(self, job: IngestJob, timeout: float) -> None:
        """Start ``job`` (its own deadline: ``timeout`` seconds)."""
        self._conn.send((job, timeout))

    def result(self, seconds: float) -> Result | None:
        """The job's result once reported (``None`` after ``seconds`` without one).

        :raises WorkerDied: the process ended (killed, crashed) without a result.
        """
        message = self._receive(seconds)
        if message is None:
            return None
        if not isinstance(message, Result):
            raise WorkerDied(self.process.returncode)
        self.last_rss = message.rss
        return message

    def _receive(self, seconds: float) -> object | None:
        if not wait([self._conn], max(seconds, 0.0)):
            return None
        try:
            message: object = self._conn.recv()
            return message
        except (EOFError, OSError):  # the socket closed: the process ended
            pass
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5.0)
        raise WorkerDied(self.process.returncode)

    @property
    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.process.poll() is None

    def signal_kill(self) -> None:
        """Send SIGKILL, without waiting (any thread may; the supervisor sees the end)."""
        with contextlib.suppress(OSError):
            self.process.kill()

    def kill(self) -> None:
        """End the process now (SIGKILL): its uncommitted transaction is rolled back."""
        self.signal_kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5.0)
        self._conn.close()

    def close(self) -> None:
        """Let an idle worker exit by itself (killed if it does not within a second)."""
        with contextlib.suppress(OSError, ValueError):
            self._conn.send(None)
        try:
            self.process.wait(1.0)
        except subprocess.TimeoutExpired:
            self.kill()
        else:
            self._conn.close()


class WorkerPool:
    """Idle worker processes kept for the next job; new ones start on demand.

    How many jobs run at once is the caller's business (``IngestionJobs`` counts them);
    the pool only reuses processes. It starts none until asked: ``start_ahead`` boots
    one in the background (a started core's, so its first upload does not wait for a
    process to boot), ``acquire`` one when none is idle.

    :param spec: what each worker is built from.
    :param recycle_bytes: a worker whose resident memory grew by more than this since
        it started is closed instead of reused.
    :param observer: told of each process started (``observer.Observer``).
    """

    def __init__(
        self, spec: WorkerSpec, *, recycle_bytes: int, observer: Counts = unobserved
    ) -> None:
        self._spec = spec
        self._recycle = recycle_bytes
        self._idle: list[WorkerProcess] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a worker started ahead is done
        self._starting = 0  # workers booting ahead of a job
        self._closed = False
        self._observe = observer

    def start_ahead(self) -> None:
        """Boot a worker on a thread of its own and keep it idle for the next job (one
        that fails to start is logged at INFO: the next job starts its own, and
        ``IngestionJobs`` warns when those fail)."""
        with self._lock:
            if self._closed:
                return
            self._starting += 1
        threading.Thread(target=self._start_idle, name="agentcore-ingest-boot", daemon=True).start()

    def _start_idle(self) -> None:
        worker: WorkerProcess | None = None
        try:
            worker = self._start()
        except WorkerStartFailed as exc:  # the jobs start their own, and warn if they fail
            log.info("an ingestion worker did not start ahead of the jobs: %s", exc)
        with self._lock:
            if worker is not None and not self._closed:
                self._idle.append(worker)
                self._changed.notify_all()
                worker = None  # the pool's now
        if worker is not None:
            worker.close()  # the pool closed while it booted
        with self._lock:
            self._starting -= 1
            self._changed.notify_all()

    def acquire(self) -> WorkerProcess:
        """An idle worker, or a new one (which takes a moment to start); one booting
        ahead is waited for rather than a second one started."""
        while True:
            with self._lock:
                self._changed.wait_for(lambda: self._idle or not self._starting or self._closed)
                if self._closed:
                    raise WorkerStartFailed("the worker pool is closed")
                if not self._idle:
                    break
                idle = self._idle.pop()
            if idle.alive:
                return idle
            idle.kill()  # it ended while idle (the OOM killer, say): start another
        return self._start()

    def _start(self) -> WorkerProcess:
        worker = WorkerProcess(self._spec)
        self._observe("ingest.worker_start", 1)
        return worker

    def release(self, worker: WorkerProcess) -> None:
        """Take a worker back after a job: kept idle, or closed if its memory grew."""
        grown = worker.last_rss - worker.baseline_rss > self._recycle
        with self._lock:
            keep = not self._closed and not grown and worker.alive
            if keep:
                self._idle.append(worker)
        if not keep:
            if grown:
                log.info(
                    "ingestion worker %s grew by %d MiB: replaced",
                    worker.pid,
                    (worker.last_rss - worker.baseline_rss) // MiB,
                )
            worker.close()

    def idle_pids(self) -> list[int]:
        """Process ids of the idle workers."""
        with self._lock:
            return [pid for worker in self._idle if (pid := worker.pid) is not None]

    def close(self, timeout: float = START_TIMEOUT) -> None:
        """Close every idle worker, and one booting ahead once it is up (waited for at
        most ``timeout`` seconds; after that its own thread closes it); workers handed
        out are the caller's to kill."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._changed.notify_all()
        for worker in idle:
            worker.close()
        with self._lock:
            self._changed.wait_for(lambda: not self._starting, max(timeout, 0.0))

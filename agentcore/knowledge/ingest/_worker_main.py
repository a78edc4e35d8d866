"""What runs inside an ingestion worker process (``_workers.py`` starts and watches it).

Started as ``python -c`` (``workers._BOOT``): it takes the parent's ``sys.path``, then
its ``WorkerSpec``; lowers its priority and its BLAS threads, builds its ingest pipeline, reports
``Ready``, caps its address space, and runs one job at a time until told to stop, the
socket closes, or its parent dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentcore._cancellation import Cancellation
from agentcore._logs import get_logger
from agentcore.errors import AgentCoreError, as_problem
from agentcore.knowledge.ingest._cpu_budget import STUCK_EXIT_CODE, on_stuck
from agentcore.knowledge.ingest._parsing import preload
from agentcore.knowledge.ingest._workers import JobRunner, Ready, Result, WorkerSpec

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from agentcore.storage.records import IngestJob

__all__ = ["trim_heap", "worker_main"]

log = get_logger("agentcore.ingest")

MiB = 1024 * 1024
# freed before a MemoryError is reported, so the report itself has memory to work with
_RESERVE_BYTES = 8 * MiB
_PARENT_CHECK_SECONDS = 1.0


def trim_heap() -> None:
    """Hand freed heap memory back to the OS (glibc keeps it otherwise); no-op elsewhere."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _resident_bytes() -> int:
    """This process's resident memory (Linux ``/proc``; else its peak, from ``getrusage``)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)


def _limit_memory(extra_mb: int) -> None:
    """Cap the address space at its current size plus ``extra_mb`` (Linux only)."""
    try:
        import resource

        with open("/proc/self/statm") as statm:
            size = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = size + extra_mb * MiB
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, ValueError):  # no /proc or no RLIMIT_AS: no limit
        log.debug("ingestion worker: no address-space limit on this platform")


def _exit_with_parent() -> None:
    """End this process once its parent has (a daemon thread watching ``getppid``).

    The parent is the fork server (or, with ``spawn``, the server itself), which ends
    with the server: a worker busy with a job would otherwise run on as an orphan.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_CHECK_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="agentcore-parent-watch", daemon=True).start()


def _quiet_blas() -> None:
    """One BLAS thread: the worker is one job's worth of CPU, never more."""
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except Exception:  # threadpoolctl missing or confused: BLAS keeps its threads
        log.debug("ingestion worker: could not limit BLAS threads")


def worker_main(conn: Connection) -> None:
    """The worker process: start up, report ready, then run jobs until told to stop.

    Receives its ``WorkerSpec``, then ``(job, timeout)`` tuples, and sends a ``Result``
    for each; ``None`` (or the socket closing) ends it.
    """
    # Ctrl-C in a terminal reaches the whole process group: the parent decides
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent()
    try:
        spec: WorkerSpec = conn.recv()
        with contextlib.suppress(OSError):
            os.nice(spec.nice)
        _quiet_blas()
        runner = spec.bootstrap()
        preload()  # the most common upload's reader, before the first one waits for it
    except BaseException as exc:
        conn.send(Ready(error=f"{type(exc).__name__}: {exc}"))
        return
    conn.send(Ready(rss=_resident_bytes()))
    _limit_memory(spec.memory_mb)
    on_stuck(_end_stuck)
    _serve(conn, runner)


def _end_stuck(budget: str) -> None:
    """End the worker: its reading thread is past its CPU budget inside a native parser,
    which no exception reaches (the parent fails the job ``too_complex``)."""
    log.warning(
        "ingestion worker %d: reading is past its %s CPU budget inside a native parser;"
        " the worker ends",
        os.getpid(),
        budget,
    )
    os._exit(STUCK_EXIT_CODE)


def _serve(conn: Connection, runner: JobRunner) -> None:
    reserve: bytearray | None = bytearray(_RESERVE_BYTES)
    while True:
        try:
            message: Any = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        job, timeout = message
        try:
            result = _run(runner, job, timeout)
        except MemoryError:  # it ran out again while reporting that it ran out
            reserve = None  # noqa: F841 - freed first: the result needs a little memory
            result = Result(out_of_memory=True)
        if result.out_of_memory:
            reserve = None  # noqa: F841 - freed: the report below needs a little memory
        gc.collect()  # the document's strings and arrays go back to the allocator now
        trim_heap()
        conn.send(replace(result, rss=_resident_bytes()))
        if result.out_of_memory:
            return  # a heap that ran out is not trusted with the next job


def _run(runner: JobRunner, job: IngestJob, timeout: float) -> Result:
    try:
        completed = runner.run_ingest_job(job, Cancellation(timeout=timeout))
        if completed is None:
            return Result()
        return Result(document=completed.document, event=completed.event)
    except MemoryError:
        return Result(out_of_memory=True)
    except AgentCoreError as error:
        return Result(problem=as_problem(error))
    except Exception:
        log.exception("ingestion of document %s failed unexpectedly", job.document_id)
        unexpected = AgentCoreError("Indexing hit an unexpected error.", code="ingestion_failed")
        return Result(problem=as_problem(unexpected))

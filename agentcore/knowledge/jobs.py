"""Background ingestion: a worker that turns queued uploads into ready (or failed) documents."""

from __future__ import annotations

import ctypes
import gc
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from agentcore.cancellation import Cancellation
from agentcore.errors import AgentCoreError, Cancelled, as_problem
from agentcore.redact import get_logger
from agentcore.storage.records import IngestJob

if TYPE_CHECKING:
    from agentcore.config import Settings
    from agentcore.storage.base import KnowledgeStore

log = get_logger("agentcore.ingest")

POLL_SECONDS = 1.0  # how often an idle worker looks for jobs queued by other processes


def _trim_heap() -> None:
    """Hand freed heap memory back to the OS (glibc keeps it otherwise); no-op elsewhere."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


class IngestRuntime:
    """Runs the store's queue of ingestion jobs on one background thread per core.

    A job is leased (``ingest_job_lease`` seconds, renewed while it runs), so a job
    whose process died is claimed again once the lease runs out: resumed, up to
    ``ingest_job_attempts`` tries, then marked ``failed``. ``stop()`` cancels the
    running job at its next checkpoint and gives it back, so the next ``start()``
    (here or in another process) resumes it. Nothing is ever lost silently: every
    job ends as a ``ready`` or a ``failed`` document, or is still queued.

    :param store: the queue of jobs and the documents they fill.
    :param settings: lease, attempts and time limit of a job.
    :param run: indexes one job's upload (``KnowledgeService.run_job`` in its
        workspace); its ``AgentCoreError`` becomes the document's ``last_error``.
    """

    def __init__(
        self,
        store: KnowledgeStore,
        settings: Settings,
        *,
        run: Callable[[IngestJob, Cancellation], object],
    ) -> None:
        self._store = store
        self._settings = settings
        self._run_job = run
        self._wake = threading.Event()
        self._stopping: threading.Event | None = None  # one per started thread
        self._thread: threading.Thread | None = None
        self._running: set[Cancellation] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the worker thread (idempotent)."""
        with self._lock:
            if self._thread is not None:
                return
            self._stopping = threading.Event()
            self._thread = threading.Thread(
                target=self._loop, args=(self._stopping,), name="agentcore-ingest", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel the running job (it goes back to the queue) and stop the thread.

        Waits up to ``timeout`` seconds for the job to reach its next checkpoint.
        """
        with self._lock:
            thread, self._thread = self._thread, None
            if self._stopping is not None:
                self._stopping.set()
            self._wake.set()
            for running in self._running:
                running.cancel("shutdown")
        if thread is not None:
            thread.join(timeout)

    def wake(self) -> None:
        """Look for work now (a job was just queued)."""
        self._wake.set()

    def run_pending(self) -> int:
        """Run queued jobs in the calling thread until none is claimable; how many ran."""
        ran = 0
        while self._run_one(None):
            ran += 1
        return ran

    def _loop(self, stopping: threading.Event) -> None:
        while not stopping.is_set():
            try:
                if self._run_one(stopping):
                    continue
            except Exception:  # the store failed: keep the worker alive, try again later
                log.exception("ingestion worker: could not claim a job")
            self._wake.wait(POLL_SECONDS)
            self._wake.clear()

    def _run_one(self, stopping: threading.Event | None) -> bool:
        settings = self._settings
        job = self._store.claim_ingest_job(now=time.time(), lease_seconds=settings.ingest_job_lease)
        if job is None:
            return False
        cancellation = Cancellation(timeout=settings.ingest_job_timeout)
        with self._lock:
            self._running.add(cancellation)
            if stopping is not None and stopping.is_set():
                cancellation.cancel("shutdown")
        heartbeat = threading.Thread(
            target=self._renew, args=(job, cancellation), name="agentcore-ingest-lease", daemon=True
        )
        heartbeat.start()
        try:
            self._run(job, cancellation)
        finally:
            with self._lock:
                self._running.discard(cancellation)
            cancellation.cancel("finished")  # ends the heartbeat
            heartbeat.join()
            gc.collect()  # a large document's chunk strings go back to the allocator now
            _trim_heap()
        return True

    def _renew(self, job: IngestJob, cancellation: Cancellation) -> None:
        lease = self._settings.ingest_job_lease
        while not cancellation.wait(lease / 3):
            try:
                alive = self._store.renew_ingest_job(job.document_id, until=time.time() + lease)
            except Exception:
                log.exception("ingestion worker: could not renew the lease of a job")
                continue
            if not alive:  # the document was deleted: stop working on it
                cancellation.cancel("deleted")

    def _run(self, job: IngestJob, cancellation: Cancellation) -> None:
        store = self._store
        settings = self._settings
        org, env = job.organization_id, job.environment
        if job.attempts > settings.ingest_job_attempts:
            interrupted = AgentCoreError(
                f"Indexing stopped {settings.ingest_job_attempts} times before it finished"
                " (the server was restarted or ran out of memory); upload it again or in parts.",
                code="ingestion_interrupted",
            )
            store.fail_document(org, env, job.document_id, as_problem(interrupted))
            return
        try:
            self._run_job(job, cancellation)
        except Cancelled:
            if cancellation.reason == "shutdown":
                store.release_ingest_job(job.document_id)
            # "deleted": the document and its job are gone already
        except AgentCoreError as error:
            store.fail_document(org, env, job.document_id, as_problem(error))
        except Exception:
            log.exception("ingestion of document %s failed unexpectedly", job.document_id)
            unexpected = AgentCoreError("Indexing hit an unexpected error.")
            store.fail_document(org, env, job.document_id, as_problem(unexpected))

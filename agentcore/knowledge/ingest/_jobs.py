"""Ingestion jobs: the store's queue, claimed fairly and run in killable worker processes.

Uploads that are not small plain text become jobs in the store (a ``processing``
document and its raw bytes, durable) before any work starts. ``IngestionJobs`` claims
them (fairly across workspaces: see ``claim_ingest_job``) and runs each in a worker
process (``workers.py``) under a wall-clock limit, renewing its lease while it runs.
A caller that waits for its upload (``ws.knowledge.ingest_file``, the HTTP upload) is
told the outcome the moment it is known.

Where worker processes cannot be used (``ingest_workers = 0``; a core not made by
``AgentCore.open``; a ``:memory:`` database; a plugin that cannot be pickled), jobs
run on one thread of this process instead, as cancellable work, and one warning in
the log says why.
"""

from __future__ import annotations

import gc
import pickle
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from agentcore._cancellation import Cancellation
from agentcore._logs import get_logger
from agentcore.errors import AgentCoreError, Cancelled, as_problem
from agentcore.keys import check_environment
from agentcore.knowledge.ingest._outcomes import (
    Outcome,
    Waiter,
    document_event,
    outcome_of_end,
    outcome_of_result,
)
from agentcore.knowledge.ingest._worker_main import trim_heap
from agentcore.knowledge.ingest._workers import (
    Completed,
    WorkerDied,
    WorkerPool,
    WorkerProcess,
    WorkerSpec,
    WorkerStartFailed,
)
from agentcore.observer import Counts, unobserved
from agentcore.storage.records import IngestJob

if TYPE_CHECKING:
    from agentcore._background import Runtime
    from agentcore.config import Settings
    from agentcore.events import EventBus
    from agentcore.knowledge.ingest._pipeline import IngestingStore

__all__ = ["IngestionJobs", "WorkersUnavailable"]

log = get_logger("agentcore.ingest")

POLL_SECONDS = 1.0  # how often an idle scheduler looks for jobs queued by other processes
WAIT_STEP = 0.1  # how often a waiting caller checks its deadline and whether the pool is busy
STORE_LOOK = 0.5  # how often it reads its document, for a job another process runs
MiB = 1024 * 1024
START_FAILURES = 3  # workers that fail to start in a row before jobs move to a thread


class WorkersUnavailable(Exception):
    """Why this core's jobs cannot run in worker processes (they run on a thread)."""


class _Running:
    """A job being run: its deadline, its worker (or cancellation), and why it was stopped."""

    def __init__(
        self, job: IngestJob, settings: Settings, worker: WorkerProcess | None = None
    ) -> None:
        self.job = job
        self.timeout = settings.ingest_job_timeout
        self.deadline = time.monotonic() + self.timeout
        self.renew_interval = settings.ingest_job_lease / 3
        self.next_renewal = time.monotonic() + self.renew_interval
        self.cancellation = Cancellation(timeout=self.timeout)
        self.worker = worker  # None: the job runs on a thread, under ``cancellation``
        self.reason: str | None = None
        self._lock = threading.Lock()

    def stop(self, reason: str) -> None:
        """Stop the job now: kill its worker (or cancel it, on a thread); first reason wins."""
        with self._lock:
            if self.reason is None:
                self.reason = reason
            worker = self.worker
        self.cancellation.cancel(reason)
        if worker is not None:
            worker.signal_kill()  # its supervisor sees the process end and says why

    def detach(self) -> None:
        """The worker reported: from now on it is not this job's to kill (it is reused)."""
        with self._lock:
            self.worker = None


class IngestionJobs:
    """Runs the store's queue of ingestion jobs for one core; a component of its runtime.

    A job is leased (``ingest_job_lease`` seconds, renewed while it runs), so a job
    whose process died is claimed again once the lease runs out: resumed, up to
    ``ingest_job_attempts`` tries, then marked ``failed``. Each try may take
    ``ingest_job_timeout`` seconds; then its worker is killed and the document
    ``failed`` with ``deadline_exceeded``. Deleting the document kills its worker at
    once (in this process; other processes notice at their next lease renewal).
    ``stop()`` gives running jobs ``ingest_stop_grace`` seconds, then kills their workers
    and gives the jobs back, so the next ``start()`` (here or in another process)
    resumes them. Nothing is lost silently: every job ends as a ``ready`` or a
    ``failed`` document, or is still queued.

    :param store: the queue of jobs and the documents they fill.
    :param settings: the ``ingest_*`` settings.
    :param run: indexes one job's upload in this process (the thread mode, and
        ``run_pending``): ``IngestPipeline.run_ingest_job``.
    :param runtime: the core's runtime: it owns the scheduling loop, the threads that
        watch running jobs, and this component.
    :param workers: gives what worker processes are built from, or raises
        ``WorkersUnavailable`` saying why there can be none (asked once, at start).
    :param events: the core's event bus. Every job's document ends with one event:
        ``document.ready`` (recorded by the process that completed it, in the same
        transaction) or ``document.failed`` (recorded here with the failure), announced
        here to the in-process listeners either way; none for a job whose document was
        deleted, or whose waiting caller took its error (nothing is stored then).
    :param observer: told of each worker process started (``observer.Observer``).
    """

    def __init__(
        self,
        store: IngestingStore,
        settings: Settings,
        *,
        run: Callable[[IngestJob, Cancellation], Completed | None],
        runtime: Runtime,
        workers: Callable[[], WorkerSpec] | None = None,
        events: EventBus | None = None,
        observer: Counts = unobserved,
    ) -> None:
        self._events = events
        self._store = store
        self._observe = observer
        self._settings = settings
        self._run_job = run
        self._workers = workers
        self._spec: WorkerSpec | None = None
        self._decided = False
        self._pool: WorkerPool | None = None
        self._slots = 1
        self._start_failures = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a job ended
        self._running: dict[str, _Running] = {}
        # jobs holding a worker slot: one leaves it as soon as its worker is done, before
        # its outcome is recorded (its caller may send the next upload on seeing it)
        self._busy = 0
        self._held: Counter[str] = Counter()  # of them, by organization
        self._share = 1  # slots one organization may hold (``ingest_organization_share``)
        self._waiters: dict[str, Waiter] = {}
        self._active = False
        self._threads = runtime.executor("agentcore-ingest-job", max(1, settings.ingest_pool_size))
        self._loop = runtime.loop("agentcore-ingest", self._schedule, interval=POLL_SECONDS)
        runtime.own(self)

    # lifecycle -------------------------------------------------------------------------

    @property
    def isolated(self) -> bool:
        """Whether jobs run in worker processes now (started, with workers available)."""
        return self._active and self._pool is not None

    @property
    def pool(self) -> WorkerPool | None:
        """The worker processes, while started with them."""
        return self._pool

    def start(self) -> None:
        """Start taking jobs (idempotent), and boot a worker process for the first one
        (``ingest_prestart``)."""
        if not self._decided:
            self._decided = True
            self._spec = self._worker_spec()
        with self._lock:
            if self._active:
                return
            if self._spec is not None:
                self._pool = WorkerPool(
                    self._spec,
                    recycle_bytes=self._settings.ingest_worker_recycle_mb * MiB,
                    observer=self._observe,
                )
                if self._settings.ingest_prestart:
                    self._pool.start_ahead()
            self._slots = max(1, self._settings.ingest_pool_size) if self._spec else 1
            self._share = min(self._slots, self._settings.ingest_organization_share)
            self._active = True
        self._loop.wake()

    def _worker_spec(self) -> WorkerSpec | None:
        if self._workers is None:
            reason = "no worker processes were configured for this core"
        else:
            try:
                spec = self._workers()
                pickle.dumps(spec)  # what starting a worker does: fail here, not per job
                return spec
            except WorkersUnavailable as why:
                reason = str(why)
            except Exception as exc:
                reason = f"a plugin or setting cannot be sent to a worker process ({exc!r})"
        log.warning(
            "ingestion runs on a thread of this process, not in worker processes: %s", reason
        )
        return None

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking jobs; give running ones ``ingest_stop_grace`` s, then kill their
        workers and give the jobs back to the queue. Returns within ``timeout`` s."""
        end = time.monotonic() + timeout
        grace = time.monotonic() + min(self._settings.ingest_stop_grace, timeout)
        with self._lock:
            self._active = False
            self._changed.wait_for(lambda: not self._running, max(grace - time.monotonic(), 0))
            running = list(self._running.values())
        for job in running:
            job.stop("shutdown")
        with self._lock:
            self._changed.wait_for(lambda: not self._running, max(end - time.monotonic(), 0))
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close(end - time.monotonic())

    def wake(self) -> None:
        """Look for work now (a job was just queued, or a worker became free)."""
        self._loop.wake()

    def forget(self, document_id: str) -> None:
        """A document was deleted: stop its job at once if this process runs it."""
        with self._lock:
            running = self._running.get(document_id)
        if running is not None:
            running.stop("deleted")

    # scheduling ----------------------------------------------------------------------------

    def _free(self, organization_id: str | None = None) -> bool:
        """Whether a worker slot is free (for a job of ``organization_id``: one it may
        take, within its share); locked by the caller."""
        if organization_id is not None and self._held[organization_id] >= self._share:
            return False
        return self._active and self._busy < self._slots

    def _schedule(self) -> float | None:
        """One pass of the scheduling loop: renew leases, then fill the free workers
        (an organization holding its share of them is passed over: its jobs wait, and
        the rest stay free for the others')."""
        wait = self._renew_leases()
        while True:
            with self._lock:
                if not self._free():
                    return wait
                full = [org for org, held in self._held.items() if held >= self._share]
            job = self._store.claim_ingest_job(
                now=time.time(), lease_seconds=self._settings.ingest_job_lease, excluding=full
            )
            if job is None:
                return wait
            if not self._begin(job):
                return wait

    def _begin(self, job: IngestJob) -> bool:
        """Hand a claimed job to a worker and a watching thread; ``False``: given back."""
        pool = self._pool
        worker = None
        waiter = None
        try:
            if pool is not None and job.attempts <= self._settings.ingest_job_attempts:
                worker = self._acquire(pool)  # may take a moment: a new process
            running = _Running(job, self._settings, worker)  # its time starts now
            with self._lock:
                if not self._active:
                    raise RuntimeError("stopping")
                self._running[job.document_id] = running
                self._hold(job, 1)
                waiter = self._waiters.get(job.document_id)
                if waiter is not None:
                    waiter.started = True
            self._threads.submit(self._supervise, running)
        except BaseException:
            with self._lock:
                if self._running.pop(job.document_id, None) is not None:
                    self._hold(job, -1)
                if waiter is not None:
                    waiter.started = False  # back in the queue: any process may run it
            if worker is not None:
                worker.kill()
            self._store.release_ingest_job(job.document_id)
            if self._active:
                raise  # the loop logs it and backs off (a worker that cannot start)
            return False
        return True

    def _hold(self, job: IngestJob, change: int) -> None:
        """``job`` takes (1) or leaves (-1) its worker slot (locked by the caller)."""
        self._busy += change
        self._held[job.organization_id] += change
        if self._held[job.organization_id] <= 0:
            del self._held[job.organization_id]

    def _acquire(self, pool: WorkerPool) -> WorkerProcess:
        """A worker for the next job; after ``START_FAILURES`` failed starts in a row,
        jobs move to a thread of this process (one warning says why)."""
        try:
            worker = pool.acquire()
        except WorkerStartFailed as failed:
            self._start_failures += 1
            if self._start_failures < START_FAILURES:
                raise
            log.warning(
                "ingestion runs on a thread of this process, not in worker processes:"
                " %d worker processes in a row failed to start (%s)",
                self._start_failures,
                failed,
            )
            with self._lock:
                self._spec, self._pool, self._slots = None, None, 1
            pool.close()
            raise
        self._start_failures = 0
        return worker

    def _renew_leases(self) -> float:
        """Renew the leases that are due; seconds until the next one is."""
        now = time.monotonic()
        with self._lock:
            running = list(self._running.values())
        wait = POLL_SECONDS
        for job in running:
            if job.next_renewal <= now:
                job.next_renewal = now + job.renew_interval
                try:
                    alive = self._store.renew_ingest_job(
                        job.job.document_id, until=time.time() + self._settings.ingest_job_lease
                    ) or not self._gone(job.job)
                except Exception:
                    log.exception("ingestion: could not renew the lease of a job")
                    alive = True
                if not alive:  # the document was deleted (here or by another process)
                    job.stop("deleted")
            wait = min(wait, max(job.next_renewal - now, 0.0))
        return wait

    def _gone(self, job: IngestJob) -> bool:
        """Whether ``job``'s document was deleted. Its job row also goes when its worker
        completes it, before the worker reports: that job must not be stopped (its
        worker killed and its waiting caller told the document was deleted)."""
        document = self._store.get_document(job.organization_id, job.environment, job.document_id)
        return document is None

    def _supervise(self, running: _Running) -> None:
        """Run one job to its end on this thread, then record how it ended."""
        try:
            outcome = self._execute(running)
        except Exception:
            log.exception("ingestion of document %s failed unexpectedly", running.job.document_id)
            outcome = Outcome(error=AgentCoreError("Indexing hit an unexpected error."))
        with self._lock:
            self._hold(running.job, -1)
        self._loop.wake()
        try:
            self._settle(running.job, outcome)
        except Exception:  # the lease runs out: the job is claimed again
            log.exception("ingestion: could not record the end of a job")
        finally:
            with self._lock:
                self._running.pop(running.job.document_id, None)
                self._changed.notify_all()
            self._loop.wake()

    def _execute(self, running: _Running) -> Outcome:
        attempts = self._settings.ingest_job_attempts
        if running.job.attempts > attempts:
            return Outcome(
                error=AgentCoreError(
                    f"Indexing stopped {attempts} times before it finished (the server was"
                    " restarted or ran out of memory); upload it again or in parts.",
                    code="ingestion_interrupted",
                )
            )
        if running.worker is None:
            return self._execute_here(running)
        return self._execute_in_worker(running, running.worker)

    def _execute_here(self, running: _Running) -> Outcome:
        """The thread mode: the job runs on this thread, checking its cancellation."""
        try:
            completed = self._run_job(running.job, running.cancellation)
            if completed is None:
                return Outcome(gone=True)
            return Outcome(document=completed.document, event=completed.event)
        except Cancelled:
            return Outcome(released=running.reason == "shutdown", gone=running.reason != "shutdown")
        except AgentCoreError as error:
            return Outcome(error=error)
        finally:
            gc.collect()  # a large document's strings go back to the allocator now
            trim_heap()

    def _execute_in_worker(self, running: _Running, worker: WorkerProcess) -> Outcome:
        """The job runs in ``worker``; this thread waits for its result or its end."""
        try:
            worker.send(running.job, running.timeout)
        except OSError:  # the idle worker had ended: nothing was done, try again
            worker.kill()
            if running.reason is None:
                return Outcome(released=True)
            return outcome_of_end(running.reason, None, running.timeout)
        try:
            while (result := worker.result(max(running.deadline - time.monotonic(), 0.05))) is None:
                running.stop("deadline")  # the result did not come in time: killed
        except (WorkerDied, OSError) as died:
            worker.kill()
            code = died.exitcode if isinstance(died, WorkerDied) else None
            return outcome_of_end(running.reason, code, running.timeout)
        running.detach()
        pool = self._pool
        if result.out_of_memory or pool is None:
            worker.close()
        else:
            pool.release(worker)
        return outcome_of_result(result, self._settings.ingest_worker_memory_mb)

    def _settle(self, job: IngestJob, outcome: Outcome) -> None:
        """Record how a job ended: hand it to a waiting caller, else write it down, and
        tell the in-process listeners (``document.ready``/``document.failed``)."""
        if outcome.released:
            self._store.release_ingest_job(job.document_id)
        with self._lock:
            waiter = self._waiters.get(job.document_id)
        taken = waiter is not None and waiter.deliver(outcome)
        events = self._events
        if outcome.event is not None and events is not None:
            events.announce(outcome.event)
        if outcome.error is not None and not taken:
            problem = as_problem(outcome.error)
            failed = None
            document = (
                None
                if events is None
                else self._store.get_document(job.organization_id, job.environment, job.document_id)
            )
            if events is not None and document is not None:
                failed = events.prepare(
                    "document.failed",
                    document_event(document, problem),
                    organization_id=job.organization_id,
                    environment=check_environment(job.environment),
                )
            if (
                self._store.fail_document(
                    job.organization_id, job.environment, job.document_id, problem, failed
                )
                and failed is not None
                and events is not None
            ):
                events.announce(failed)

    # callers that wait ------------------------------------------------------------------

    def run_and_wait(
        self,
        document_id: str,
        enqueue: Callable[[], None],
        settled: Callable[[], Outcome | None],
        *,
        organization_id: str,
        block: bool,
        until: float | None = None,
        cancellation: Cancellation | None = None,
    ) -> Outcome | None:
        """Queue a job (``enqueue`` stores it and calls ``wake``) and wait for its outcome.

        ``None`` when the wait ended first: ``cancellation`` fired, ``until`` (a
        ``time.monotonic()`` value) passed, the runtime is stopping, or, unless
        ``block``, no worker of this process was free to take it (none free, or
        ``organization_id`` holds its share of them). The job then goes on
        (the caller decides what becomes of it). An outcome returned must be acted on:
        nobody else records an error handed to a waiting caller.

        :param settled: reads the document: its outcome once another process ended
            the job (``None`` while it is processing).
        """
        waiter = Waiter()
        with self._lock:
            self._waiters[document_id] = waiter
        try:
            enqueue()
            look = time.monotonic() + STORE_LOOK
            while (outcome := waiter.wait(WAIT_STEP)) is None:
                now = time.monotonic()
                with self._lock:
                    busy = not waiter.started and not self._free(organization_id)
                if (
                    (cancellation is not None and cancellation.cancelled)
                    or (until is not None and now >= until)
                    or not self._active
                    or (busy and not block)
                ):
                    break
                # a job a worker of this process runs is delivered by its supervisor,
                # after it frees the slot: reading the store could see the worker's
                # write first and let the caller's next upload find the slot still taken
                if now >= look and not waiter.started:
                    look = now + STORE_LOOK
                    if (outcome := settled()) is not None:
                        break
        finally:
            with self._lock:
                self._waiters.pop(document_id, None)
            late = waiter.leave()
        return outcome if outcome is not None else late

    def run_pending(self) -> int:
        """Run queued jobs on the calling thread until none is claimable; how many ran.

        For tests and maintenance scripts: no worker process, no scheduling loop; each
        job is leased for its whole time limit (nothing renews it).
        """
        ran = 0
        settings = self._settings
        lease = max(settings.ingest_job_lease, settings.ingest_job_timeout)
        while job := self._store.claim_ingest_job(now=time.time(), lease_seconds=lease):
            running = _Running(job, settings)
            outcome = self._execute(running)
            self._settle(job, outcome)
            ran += 1
        return ran

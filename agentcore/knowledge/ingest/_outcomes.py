"""How an ingestion job ended, and the callers waiting to hear it."""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentcore.errors import AgentCoreError, DeadlineExceeded, PayloadTooLarge, error_from_problem
from agentcore.knowledge.ingest._cpu_budget import STUCK_EXIT_CODE

if TYPE_CHECKING:
    from agentcore.events import Event
    from agentcore.knowledge.ingest._workers import Result
    from agentcore.schema import Document, Problem

__all__ = [
    "Outcome",
    "Waiter",
    "document_event",
    "outcome_of",
    "outcome_of_end",
    "outcome_of_result",
]


def document_event(document: Document, error: Problem | None = None) -> dict[str, Any]:
    """The ``data`` of a ``document.ready`` event (with the document's ``warnings``) or
    of a ``document.failed`` one (with its ``error``)."""
    data: dict[str, Any] = {
        "document_id": document.id,
        "source": document.source,
        "status": "failed" if error is not None else "ready",
        "metadata": document.metadata,
    }
    if error is not None:
        data["error"] = error.model_dump(mode="json", exclude_none=True)
    else:
        data["warnings"] = [warning.model_dump(mode="json") for warning in document.warnings]
    return data


@dataclass(frozen=True)
class Outcome:
    """How a job ended: ``document`` ready (and its recorded ``event``), ``error``,
    ``released`` (back to the queue at shutdown) or ``gone`` (its document was deleted
    meanwhile)."""

    document: Document | None = None
    error: AgentCoreError | None = None
    released: bool = False
    gone: bool = False
    event: Event | None = None


class Waiter:
    """A caller waiting for one job: the runner hands it the outcome, unless it left."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._outcome: Outcome | None = None
        self._left = False
        self.started = False  # a worker of this process took the job

    def deliver(self, outcome: Outcome) -> bool:
        """Hand over ``outcome``; ``False`` when the waiter has left (it is not seen)."""
        with self._lock:
            if self._left:
                return False
            self._outcome = outcome
        self._done.set()
        return True

    def wait(self, seconds: float) -> Outcome | None:
        """The outcome, once delivered (``None`` after ``seconds`` without one)."""
        self._done.wait(seconds)
        return self._outcome

    def leave(self) -> Outcome | None:
        """Stop waiting; an outcome delivered just before is returned (it must be handled)."""
        with self._lock:
            self._left = True
            return self._outcome


def outcome_of_result(result: Result, memory_mb: int) -> Outcome:
    """The outcome a worker reported (``memory_mb``: its limit, ``ingest_worker_memory_mb``)."""
    if result.out_of_memory:
        return Outcome(
            error=PayloadTooLarge(
                f"Indexing the document needed more than {memory_mb} MiB of memory"
                " (ingest_worker_memory_mb).",
                code="too_large",
                param="file",
            )
        )
    if result.problem is not None:
        return Outcome(error=error_from_problem(result.problem))
    return Outcome(document=result.document, gone=result.document is None, event=result.event)


def outcome_of_end(reason: str | None, exitcode: int | None, timeout: float) -> Outcome:
    """Why a worker ended without a result: stopped by us for ``reason`` (``deadline``
    after ``timeout`` s, ``deleted``, ``shutdown``), or not (``exitcode``: ``-N`` for
    signal ``N``; ``None`` when unknown)."""
    if reason == "deadline":
        return Outcome(
            error=DeadlineExceeded(
                f"Indexing took longer than {timeout:g} s (ingest_job_timeout) and was stopped."
            )
        )
    if reason == "deleted":
        return Outcome(gone=True)
    if reason == "shutdown" or exitcode in (-signal.SIGTERM, -signal.SIGINT):
        return Outcome(released=True)  # stopping (here, or the machine): again later
    if exitcode == -signal.SIGKILL:  # not by us: most likely the kernel, out of memory
        return Outcome(
            error=PayloadTooLarge(
                "The worker indexing the document was killed, most likely for running"
                " out of memory.",
                code="too_large",
                param="file",
            )
        )
    if exitcode == STUCK_EXIT_CODE:  # its reading was past its CPU budget, inside C
        return Outcome(
            error=PayloadTooLarge(
                "Reading the file used up its CPU time (ingest_cpu_seconds,"
                " ingest_cpu_seconds_per_mib) inside a parser that cannot stop midway, so"
                " its worker was ended. It is too complex to read.",
                code="too_complex",
                param="file",
            )
        )
    if exitcode == -signal.SIGABRT:  # a native parser whose allocation was refused: Rust
        # aborts the process when the address-space limit refuses it memory
        return Outcome(
            error=PayloadTooLarge(
                "The worker indexing the document stopped (SIGABRT), most likely because"
                " a parser asked for more memory than a worker may use"
                " (ingest_worker_memory_mb).",
                code="too_large",
                param="file",
            )
        )
    return Outcome(
        error=AgentCoreError(
            f"The worker process indexing the document ended unexpectedly (exit code {exitcode}).",
            code="ingestion_failed",
        )
    )


def outcome_of(document: Document | None) -> Outcome | None:
    """The outcome a stored document shows: ``None`` while it is still ``processing``."""
    if document is None:
        return Outcome(gone=True)
    if document.status == "ready":
        return Outcome(document=document)
    if document.status == "failed":
        problem = document.last_error
        error = (
            error_from_problem(problem)
            if problem is not None
            else AgentCoreError("Indexing failed.", code="ingestion_failed")
        )
        return Outcome(error=error)
    return None

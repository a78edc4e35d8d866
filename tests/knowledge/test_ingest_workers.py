"""Ingestion in worker processes: the same vectors, killed at their limits, fair, stoppable.

Every test here starts real worker processes (a started core on a SQLite file) and
uses the embedder plugins of ``tests/ingest_plugins.py``, which a worker imports
through the ``sys.path`` it gets from its parent.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from helpers import alive, open_seen, seen, wait_for
from ingest_plugins import MisbehavingEmbedder
from pdfs import TEXT_BOMB_REFUSALS, filler, make_pdf, make_pdf_bomb, make_stream_pdf

import agentcore
from agentcore import AgentCore, Cancellation, DeadlineExceeded, PayloadTooLarge
from agentcore.knowledge.ingest._cpu_budget import STUCK_EXIT_CODE
from agentcore.knowledge.ingest._outcomes import outcome_of_end
from agentcore.knowledge.ingest._workers import WorkerStartFailed
from agentcore.plugins.hashing_embedder import HashingEmbedder
from agentcore.schema import Document
from agentcore.workspace import Workspace

# a worker runs at a lower priority than everything else: on a busy machine its jobs
# (a PDF bomb) take minutes, so the waits below only guard hangs
pytestmark = pytest.mark.timeout(600)
SETTLES = 300.0  # seconds a job may take to end before a wait gives up

BIG_TEXT = filler(1_500, 3)  # ~90 KB: above ingest_inline_max_bytes, so a worker's job


def settled(core: AgentCore, document_id: str, organization: str = "acme") -> Document:
    ws = core.workspace(organization)
    return wait_for(
        lambda: (d := ws.knowledge.get(document_id)).status != "processing" and d, limit=SETTLES
    )


def open_core(
    path: Path, embedder: MisbehavingEmbedder | None = None, **settings: Any
) -> AgentCore:
    plugins = [] if embedder is None else [embedder]
    if embedder is not None:
        settings.setdefault("embedder", embedder.name)
    return open_seen(path, plugins=plugins, **settings)


@contextmanager
def started(
    url: Path | str, embedder: MisbehavingEmbedder | None = None, **settings: Any
) -> Iterator[tuple[AgentCore, Workspace]]:
    """A started core on ``url`` (with ``embedder`` as its embedder) and acme's workspace."""
    with open_core(url, embedder, **settings) as core:
        core.start()
        yield core, core.workspace("acme")


@pytest.fixture
def pid_file(tmp_path: Path) -> Path:
    return tmp_path / "worker.pid"


@pytest.fixture
def slow(pid_file: Path) -> MisbehavingEmbedder:
    """Sleeps two minutes on a passage with TRIGGER, writing its process id to pid_file."""
    return MisbehavingEmbedder(sleep=120, pid_file=str(pid_file))


def worker_pid(pid_file: Path) -> int:
    return int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), limit=SETTLES))


# the same result as in the calling thread ----------------------------------------------


def stored(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        documents = conn.execute(
            "SELECT source, content_type, pages, chunks, bytes, status FROM documents"
        ).fetchall()
        chunks = conn.execute(
            "SELECT text, pages, page_offsets FROM chunks ORDER BY ordinal"
        ).fetchall()
        vectors = conn.execute("SELECT dimension, ids, vectors FROM vector_segments").fetchall()
    blobs = [np.frombuffer(row[2], dtype="<f4").tobytes() for row in vectors]
    return [*documents, *chunks, *[row[0] for row in vectors], *blobs]


def test_a_worker_stores_exactly_what_the_calling_thread_stores(tmp_path: Path) -> None:
    pdf = make_pdf([filler(60, 1), filler(60, 2), "", filler(30, 3)])
    with open_core(tmp_path / "thread.db") as core:  # not started: the calling thread
        here = core.workspace("acme").knowledge.ingest_file(pdf, filename="a.pdf")
    with open_core(tmp_path / "worker.db") as core:
        core.start()
        there = core.workspace("acme").knowledge.ingest_file(pdf, filename="a.pdf")
        assert seen(core)["ingest.worker_start"] == 1
        hits = core.workspace("acme").knowledge.search("night porter staircase").results
        assert hits and hits[0].document_id == there.id  # this process sees the write
    assert (here.status, here.pages, here.chunks) == (there.status, there.pages, there.chunks)
    assert stored(tmp_path / "thread.db") == stored(tmp_path / "worker.db")


def test_a_worker_builds_the_pipeline_and_no_core(tmp_path: Path, pid_file: Path) -> None:
    objects = tmp_path / "objects.txt"
    probe = MisbehavingEmbedder(pid_file=str(pid_file), objects_file=str(objects))
    with started(tmp_path / "a.db", probe) as (_, ws):
        pdf = make_pdf([filler(20, 4) + " TRIGGER."])
        assert ws.knowledge.ingest_file(pdf, filename="a.pdf", wait=True).status == "ready"
    assert worker_pid(pid_file) != os.getpid()  # a worker process embedded it
    held = set(objects.read_text().split())
    assert "agentcore.knowledge.ingest._pipeline.IngestPipeline" in held
    # no core, nor what only a core runs: its indexes, metrics, webhook delivery, jobs
    core_parts = {
        "agentcore.core.AgentCore",
        "agentcore.knowledge.vectors._workspace_indexes.WorkspaceIndexes",
        "agentcore._metrics.Metrics",
        "agentcore.webhooks._delivery.WebhookRuntime",
        "agentcore.knowledge.ingest._jobs.IngestionJobs",
        "agentcore._background.Runtime",
    }
    assert not held & core_parts, sorted(held & core_parts)


def test_small_plain_text_stays_in_the_calling_thread(tmp_path: Path, pid_file: Path) -> None:
    probe = MisbehavingEmbedder(pid_file=str(pid_file))
    with started(tmp_path / "a.db", probe, ingest_inline_max_bytes=1_000) as (_, ws):
        note = "TRIGGER. A short note. " + "Words. " * 50
        assert ws.knowledge.ingest_text("a.txt", note).status == "ready"
        assert worker_pid(pid_file) == os.getpid()
        pid_file.unlink()
        assert ws.knowledge.ingest_file(b"# TRIGGER\n\nSome words.", filename="b.md").status == (
            "ready"
        )
        assert worker_pid(pid_file) == os.getpid()
        pid_file.unlink()
        # one byte over the limit goes to a worker, as every PDF does
        over = "TRIGGER " + "x" * (1_001 - len("TRIGGER "))
        assert ws.knowledge.ingest_text("c.txt", over).status == "ready"
        assert worker_pid(pid_file) != os.getpid()


def test_a_started_core_boots_a_worker_before_the_first_upload(tmp_path: Path) -> None:
    with started(tmp_path / "a.db", ingest_workers=1, ingest_prestart=True) as (core, ws):
        pool = core.ingestion_jobs.pool
        assert pool is not None
        wait_for(lambda: len(pool.idle_pids()) == 1)  # no upload yet: booted ahead
        [ready] = pool.idle_pids()
        assert seen(core)["ingest.worker_start"] == 1
        pdf = make_pdf([filler(20, 1)])
        assert ws.knowledge.ingest_file(pdf, filename="a.pdf", wait=True).status == "ready"
        assert pool.idle_pids() == [ready]  # the first upload ran there, and it is kept
        assert seen(core)["ingest.worker_start"] == 1
    assert not alive(ready)  # stopping the core ended it


def test_an_upload_right_after_start_waits_for_the_worker_booting_ahead(
    tmp_path: Path,
) -> None:
    with started(tmp_path / "a.db", ingest_workers=1, ingest_prestart=True) as (core, ws):
        pdf = make_pdf([filler(20, 1)])  # at once: the worker is still booting
        assert ws.knowledge.ingest_file(pdf, filename="a.pdf", wait=True).status == "ready"
        assert seen(core)["ingest.worker_start"] == 1  # that one, not a second


def test_without_prestart_the_first_job_starts_the_worker(tmp_path: Path) -> None:
    with started(tmp_path / "a.db", ingest_workers=1, ingest_prestart=False) as (core, ws):
        pool = core.ingestion_jobs.pool
        assert pool is not None
        time.sleep(0.5)  # a worker booting ahead would be under way by now
        assert seen(core)["ingest.worker_start"] == 0 and pool.idle_pids() == []
        pdf = make_pdf([filler(20, 1)])
        assert ws.knowledge.ingest_file(pdf, filename="a.pdf", wait=True).status == "ready"
        assert seen(core)["ingest.worker_start"] == 1


def test_a_core_stopped_while_its_worker_boots_leaves_no_process(tmp_path: Path) -> None:
    with open_core(tmp_path / "a.db", None, ingest_workers=1, ingest_prestart=True) as core:
        core.start()
        pool = core.ingestion_jobs.pool
        assert pool is not None
        core.stop()  # at once, while the worker boots
        assert pool.idle_pids() == []
        with pytest.raises(WorkerStartFailed):
            pool.acquire()
    assert not [pid for pid in child_pids() if alive(pid)]


def child_pids() -> list[int]:
    """The processes this one started that have not been waited for (Linux ``/proc``)."""
    found = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            found += [int(pid) for pid in (task / "children").read_text().split()]
    return found


# limits -----------------------------------------------------------------------------------


def test_a_job_past_its_wall_clock_limit_is_killed_and_failed(
    tmp_path: Path, pid_file: Path, slow: MisbehavingEmbedder
) -> None:
    # ten seconds: the next job's time too, on a busy machine (at the default priority)
    with started(
        tmp_path / "a.db", slow, ingest_job_timeout=10, ingest_workers=1, ingest_worker_nice=0
    ) as (core, ws):
        queued = ws.knowledge.ingest_text("slow.txt", "TRIGGER " + BIG_TEXT, wait=False)
        pid = worker_pid(pid_file)
        failed = settled(core, queued.id)  # killed at ten seconds: the sleep would end ready
        assert failed.status == "failed" and failed.last_error is not None
        assert failed.last_error.code == "deadline_exceeded" and failed.last_error.status == 504
        assert not alive(pid)
        # the next job gets a new worker and finishes
        assert ws.knowledge.ingest_text("next.txt", BIG_TEXT, wait=True).status == "ready"


def test_a_job_past_its_memory_limit_fails_too_large_and_the_worker_is_replaced(
    tmp_path: Path, pid_file: Path
) -> None:
    hungry = MisbehavingEmbedder(allocate_mb=1_024, pid_file=str(pid_file))
    with started(tmp_path / "a.db", hungry, ingest_worker_memory_mb=256) as (core, ws):
        queued = ws.knowledge.ingest_text("big.txt", "TRIGGER " + BIG_TEXT, wait=False)
        pid = worker_pid(pid_file)
        failed = settled(core, queued.id)
        assert failed.status == "failed" and failed.last_error is not None
        assert (failed.last_error.code, failed.last_error.status) == ("too_large", 413)
        assert "256 MiB" in failed.last_error.detail
        wait_for(lambda: not alive(pid))
        # waited for, the same job is refused and nothing stays stored
        with pytest.raises(PayloadTooLarge) as caught:
            ws.knowledge.ingest_text("big2.txt", "TRIGGER " + BIG_TEXT, wait=True)
        assert caught.value.code == "too_large"
        assert [d.source for d in ws.knowledge.list().documents] == ["big.txt"]
        fine = ws.knowledge.ingest_text("fine.txt", BIG_TEXT, wait=True)
        assert fine.status == "ready"
        assert seen(core)["ingest.worker_start"] == 3


def test_a_worker_whose_memory_grew_is_replaced(tmp_path: Path) -> None:
    with started(tmp_path / "a.db", ingest_worker_recycle_mb=1, ingest_workers=1) as (core, ws):
        for n in range(2):
            data = filler(8_000, n).encode()  # ~500 KB: tens of MB while it is indexed
            ws.knowledge.ingest_file(data, filename=f"{n}.txt", wait=True)
        pool = core.ingestion_jobs.pool
        assert pool is not None and seen(core)["ingest.worker_start"] == 2  # the first grew
        assert len(pool.idle_pids()) == 0


@pytest.mark.parametrize(
    ("misbehaving", "code", "status", "details"),
    [
        ({"exit_code": 3}, "ingestion_failed", 500, ["exit code 3"]),
        # Rust aborts when an allocation is refused (the worker's address-space limit):
        # the document needed more memory than a worker may have, not a server error
        ({"abort": True}, "too_large", 413, ["SIGABRT", "ingest_worker_memory_mb"]),
    ],
    ids=["exit", "abort"],
)
def test_a_worker_that_crashes_fails_its_job_and_is_replaced(
    tmp_path: Path, misbehaving: dict[str, Any], code: str, status: int, details: list[str]
) -> None:
    crashing = MisbehavingEmbedder(**misbehaving)
    with started(tmp_path / "a.db", crashing, ingest_workers=1) as (core, ws):
        queued = ws.knowledge.ingest_text("crash.txt", "TRIGGER " + BIG_TEXT, wait=False)
        failed = settled(core, queued.id)
        assert failed.last_error is not None
        assert (failed.last_error.code, failed.last_error.status) == (code, status)
        assert all(detail in failed.last_error.detail for detail in details)
        assert ws.knowledge.ingest_text("fine.txt", BIG_TEXT, wait=True).status == "ready"
        assert seen(core)["ingest.worker_start"] == 2


def test_a_parser_stuck_in_c_past_its_cpu_budget_ends_its_worker(tmp_path: Path) -> None:
    # lexbor takes time quadratic in the nesting: 150,000 elements deep is most of a
    # minute in one call into C, which BudgetSpent cannot interrupt (such a page is
    # read without lexbor, so the worker is told to use it whatever the depth)
    deep = 150_000
    page = ("<html><body>" + "<div>" * deep + "deep" + "</div>" * deep + "</body></html>").encode()
    lexbor = MisbehavingEmbedder(
        worker_patches={"agentcore.knowledge.ingest._markup:_LEXBOR_DEPTH": 10**9}
    )
    budget = {"ingest_cpu_seconds": 0.5, "ingest_cpu_seconds_per_mib": 0.0}
    with started(tmp_path / "a.db", lexbor, ingest_workers=1, **budget) as (core, ws):
        queued = ws.knowledge.ingest_file(page, filename="deep.html", wait=False)
        failed = settled(core, queued.id)
        assert failed.last_error is not None
        assert (failed.last_error.code, failed.last_error.status) == ("too_complex", 413)
        assert "cannot stop midway" in failed.last_error.detail
        fine = ws.knowledge.ingest_file(b"<p>A page.</p>" + BIG_TEXT.encode(), filename="a.html")
        assert settled(core, fine.id).status == "ready"  # a new worker took the next job
        assert seen(core)["ingest.worker_start"] == 2


@pytest.mark.parametrize(
    ("reason", "exitcode", "expected"),
    [
        ("deadline", -9, "deadline_exceeded"),  # killed by us at the deadline
        ("deleted", -9, "gone"),
        ("shutdown", -9, "released"),
        (None, -15, "released"),  # SIGTERM from outside: the machine is stopping
        (None, -2, "released"),
        (None, -9, "too_large"),  # SIGKILL from outside: the OOM killer
        (None, -6, "too_large"),  # SIGABRT: a native allocation refused
        (None, STUCK_EXIT_CODE, "too_complex"),  # past its CPU budget inside C
        (None, -11, "ingestion_failed"),
        (None, 1, "ingestion_failed"),
    ],
)
def test_why_a_worker_ended_decides_its_jobs_outcome(
    reason: str | None, exitcode: int, expected: str
) -> None:
    outcome = outcome_of_end(reason, exitcode, timeout=60)
    if expected in ("gone", "released"):
        assert getattr(outcome, expected) and outcome.error is None
    else:
        assert outcome.error is not None and outcome.error.code == expected


def test_a_pdf_bomb_fails_quickly_in_a_worker(tmp_path: Path) -> None:
    # a smaller bomb under a smaller page limit: its text passes the limit long before
    # its parsing costs the page's CPU budget, so it fails at the text limit on any machine
    bomb = make_pdf_bomb(text_bytes=400_000)  # ~350,000 characters a page
    with started(tmp_path / "a.db", max_pdf_page_chars=100_000) as (core, ws):
        queued = ws.knowledge.ingest_file(bomb, filename="bomb.pdf", wait=False)
        failed = settled(core, queued.id)
        assert failed.last_error is not None and failed.last_error.code == "too_large"
        with pytest.raises(PayloadTooLarge) as caught:
            ws.knowledge.ingest_file(bomb, filename="bomb.pdf", wait=True)
        assert caught.value.code == "too_large"
        assert [d.id for d in ws.knowledge.list().documents] == [queued.id]


@pytest.mark.parametrize(
    ("content", "memory_mb"),
    [
        # one 70 MB string: past a 64 MiB worker's memory (once a 422 "corrupt content":
        # the parser's MemoryError was taken for a bad file, and the worker was reused)
        (b"BT /F1 9 Tf 20 780 Td (" + b"A" * 70_000_000 + b") Tj ET\n", 64),
        # one TJ array of 100,001 numbers: past pypdf's own limit on an array's elements
        # (a parser limit, not corruption), cheaply, within our own operator and CPU limits
        (b"BT /F1 9 Tf 20 780 Td (hi) Tj [" + b"0 " * 100_001 + b"] TJ ET\n", 2048),
    ],
    ids=["memory", "parser-limit"],
)
def test_a_pdf_past_a_limit_fails_too_large_not_invalid(
    tmp_path: Path, content: bytes, memory_mb: int
) -> None:
    with started(
        tmp_path / "a.db",
        ingest_workers=1,
        ingest_worker_memory_mb=memory_mb,
    ) as (core, ws):
        data = make_stream_pdf(content)
        queued = ws.knowledge.ingest_file(data, filename="big.pdf", wait=False)
        failed = settled(core, queued.id)
        assert failed.last_error is not None
        assert (failed.last_error.code, failed.last_error.status) == ("too_large", 413)
        if memory_mb == 64:  # the worker whose heap ran out is not reused
            pool = core.ingestion_jobs.pool
            assert pool is not None
            wait_for(lambda: seen(core)["ingest.worker_start"] >= 1)
            assert len(pool.idle_pids()) == 0


def test_a_pdf_bomb_fails_too_large_at_the_smallest_memory_limit(tmp_path: Path) -> None:
    # at 64 MiB the bomb once crawled at full CPU until the job's time-out (glibc tried
    # to make a 64 MiB malloc arena under the limit): one arena, and it fails at once
    with started(
        tmp_path / "a.db", ingest_workers=1, ingest_worker_memory_mb=64, ingest_job_timeout=3600
    ) as (core, ws):
        queued = ws.knowledge.ingest_file(make_pdf_bomb(), filename="bomb.pdf", wait=False)
        failed = settled(core, queued.id)
        assert failed.last_error is not None
        assert failed.last_error.code in TEXT_BOMB_REFUSALS  # not deadline_exceeded


# waiting, deleting, stopping --------------------------------------------------------------


def test_wait_true_raises_the_error_and_stores_nothing(tmp_path: Path) -> None:
    with started(tmp_path / "a.db") as (core, ws):
        with pytest.raises(agentcore.ValidationFailed) as caught:
            ws.knowledge.ingest_file(b"%PDF-1.4 not really", filename="a.pdf", wait=True)
        assert caught.value.code == "invalid_pdf"
        assert ws.knowledge.list().documents == []


def test_wait_none_returns_processing_when_every_worker_is_busy(
    tmp_path: Path, pid_file: Path, slow: MisbehavingEmbedder
) -> None:
    with started(tmp_path / "a.db", slow, ingest_workers=1) as (core, ws):
        slow_job = ws.knowledge.ingest_text("slow.txt", "TRIGGER " + BIG_TEXT, wait=False)
        busy = worker_pid(pid_file)  # the only worker is busy, for two minutes
        document = ws.knowledge.ingest_file(make_pdf([filler(20, 1)]), filename="a.pdf")
        assert document.status == "processing"
        # at once, not when the worker is free: it is still inside the slow job
        assert alive(busy) and ws.knowledge.get(slow_job.id).status == "processing"
        assert ws.knowledge.get(document.id).status == "processing"


def test_wait_none_stops_waiting_before_the_deadline(
    tmp_path: Path, pid_file: Path, slow: MisbehavingEmbedder
) -> None:
    with started(tmp_path / "a.db", slow, ingest_workers=1) as (core, ws):
        # a deadline of 10 s: the caller stops waiting a second before it (a tenth of the
        # time left, at most a second), the time an HTTP request has left to answer 202
        cancellation = Cancellation(timeout=10)
        document = ws.knowledge.ingest_text(
            "slow.txt", "TRIGGER " + BIG_TEXT, cancellation=cancellation
        )
        # it waited for the worker until then (a busy machine only makes that later),
        # and stopped before its deadline passed
        assert not cancellation.cancelled
        assert cancellation.remaining is not None and cancellation.remaining <= 1.0
        assert alive(worker_pid(pid_file))  # the worker has the job
        assert document.status == "processing"  # the job goes on
        assert ws.knowledge.get(document.id).status == "processing"


def test_wait_true_with_a_cancellation_stops_the_job_and_stores_nothing(
    tmp_path: Path, pid_file: Path, slow: MisbehavingEmbedder
) -> None:
    cancellation = Cancellation()
    # the deadline passes once a worker holds the job, however long the worker took to
    # start on a busy machine (a fixed timeout could pass before it had the job)
    passes = threading.Thread(
        target=lambda: (worker_pid(pid_file), cancellation.cancel("deadline"))
    )
    with started(tmp_path / "a.db", slow, ingest_workers=1) as (core, ws):
        passes.start()
        with pytest.raises(DeadlineExceeded):
            ws.knowledge.ingest_text(
                "slow.txt", "TRIGGER " + BIG_TEXT, wait=True, cancellation=cancellation
            )
        passes.join()
        wait_for(lambda: not alive(worker_pid(pid_file)))  # killed: it would sleep 2 minutes
        assert ws.knowledge.list().documents == []


def test_deleting_a_processing_document_kills_its_worker_at_once(
    tmp_path: Path, pid_file: Path, slow: MisbehavingEmbedder
) -> None:
    with started(tmp_path / "a.db", slow, ingest_workers=1) as (core, ws):
        queued = ws.knowledge.ingest_text("slow.txt", "TRIGGER " + BIG_TEXT, wait=False)
        pid = worker_pid(pid_file)
        ws.knowledge.delete(queued.id)
        wait_for(lambda: not alive(pid))  # killed: it would sleep two minutes
        # the one worker slot is free again: the next upload is indexed
        assert ws.knowledge.ingest_text("next.txt", BIG_TEXT, wait=True).status == "ready"
        assert [d.source for d in ws.knowledge.list().documents] == ["next.txt"]


def test_a_job_whose_row_went_before_its_worker_reported_is_not_taken_for_deleted(
    tmp_path: Path, pid_file: Path
) -> None:
    """A worker completes its document, and with it deletes the job's row, before it
    reports. A lease renewal in between found no row, took the document for deleted,
    killed the worker and told the waiting caller so (seen on a busy machine). Here the
    row goes while the worker still embeds: renewals (every 0.2 s) must look at the
    document, which is still there."""
    db = tmp_path / "a.db"
    slow = MisbehavingEmbedder(sleep=10, pid_file=str(pid_file))

    def drop_the_row() -> None:
        worker_pid(pid_file)  # the worker is inside the job
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM ingest_jobs")

    with started(db, slow, ingest_workers=1, ingest_job_lease=0.6) as (core, ws):
        dropping = threading.Thread(target=drop_the_row)
        dropping.start()
        document = ws.knowledge.ingest_text("slow.txt", "TRIGGER " + BIG_TEXT, wait=True)
        dropping.join()
        assert document.status == "ready"
        assert ws.knowledge.get(document.id).status == "ready"


def job_row(path: Path) -> tuple[int, float | None] | None:
    with sqlite3.connect(path) as conn:
        row = conn.execute("SELECT attempts, leased_until FROM ingest_jobs").fetchone()
    return None if row is None else (row[0], row[1])


def test_stop_is_bounded_and_gives_the_running_job_back(
    tmp_path: Path, pid_file: Path, slow: MisbehavingEmbedder
) -> None:
    db = tmp_path / "a.db"
    with started(db, slow, ingest_workers=1, ingest_stop_grace=0.5) as (core, ws):
        queued = ws.knowledge.ingest_text("slow.txt", "TRIGGER " + BIG_TEXT, wait=False)
        pid = worker_pid(pid_file)
        core.stop()  # the grace, then a kill: not the two minutes (the job would be ready)
        assert not alive(pid)
        assert job_row(db) == (0, None)  # queued again; the interrupted try does not count
        assert core.workspace("acme").knowledge.get(queued.id).status == "processing"
    # the next start resumes it (here with an embedder that does not sleep)
    with started(db, MisbehavingEmbedder()) as (core, _):
        assert settled(core, queued.id).status == "ready"


# fairness -----------------------------------------------------------------------------------


def test_one_workspaces_queue_does_not_starve_another(tmp_path: Path) -> None:
    # acme's jobs take two minutes each: none ends while the test looks, however slowly
    # this machine runs it, and globex's would not end in time behind one of them
    slow = MisbehavingEmbedder(sleep=120)
    with open_core(tmp_path / "a.db", slow, ingest_workers=1) as core:
        acme, globex = core.workspace("acme"), core.workspace("globex")
        floods = [
            acme.knowledge.ingest_text(f"{n}.txt", "TRIGGER " + BIG_TEXT, wait=False)
            for n in range(4)
        ]
        other = globex.knowledge.ingest_text("other.txt", BIG_TEXT, wait=False)
        core.start()
        done = settled(core, other.id, "globex")
        assert done.status == "ready"
        # globex's one job went first, ahead of acme's four older ones
        finished = [acme.knowledge.get(d.id).status for d in floods]
        assert finished.count("ready") == 0, finished


# where worker processes cannot be used ------------------------------------------------------


class Unpicklable:
    """An embedder plugin holding a lock: it cannot be sent to another process."""

    name = "unpicklable"
    dimension = 1024

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inner = HashingEmbedder()
        self.calls = 0

    def embed(self, texts: Sequence[str], kind: str = "passage") -> npt.NDArray[np.float32]:
        self.calls += 1
        return self.inner.embed(texts, kind="passage")

    @agentcore.hookimpl
    def agentcore_register_embedders(self, register: Any, settings: Any) -> None:
        register(self)


@pytest.fixture
def warnings_logged(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], list[str]]]:
    caplog.set_level(logging.WARNING, logger="agentcore.ingest")
    yield lambda: [r.getMessage() for r in caplog.records if r.name == "agentcore.ingest"]


@pytest.mark.parametrize("case", ["memory", "unpicklable", "zero", "constructed"])
def test_without_worker_processes_jobs_run_on_a_thread_with_one_warning(
    tmp_path: Path, case: str, warnings_logged: Callable[[], list[str]]
) -> None:
    embedder = Unpicklable()
    if case == "memory":
        core = AgentCore.open(":memory:")
    elif case == "unpicklable":
        core = AgentCore.open(tmp_path / "a.db", plugins=[embedder], embedder=embedder.name)
    elif case == "zero":
        core = AgentCore.open(tmp_path / "a.db", ingest_workers=0)
    else:
        opened = AgentCore.open(tmp_path / "a.db")
        core = AgentCore(opened.store, opened.settings, opened.pm)
    with core:
        core.start()
        core.stop()
        core.start()  # decided once: one warning however often it starts
        ws = core.workspace("acme")
        document = ws.knowledge.ingest_file(make_pdf([filler(20, 1)]), filename="a.pdf")
        assert document.status == "ready"
        queued = ws.knowledge.ingest_text("b.txt", BIG_TEXT, wait=False)
        assert settled(core, queued.id).status == "ready"
        assert core.ingestion_jobs.pool is None
    if case == "unpicklable":
        assert embedder.calls > 0  # this very object embedded: no copy in another process
    reasons = {
        "memory": "another process cannot open this core's database",
        "unpicklable": "cannot be sent to a worker process",
        "zero": "ingest_workers is 0",
        "constructed": "not made by AgentCore.open",
    }
    (message,) = warnings_logged()
    assert "ingestion runs on a thread of this process" in message
    assert reasons[case] in message


def test_a_worker_ends_when_its_server_process_is_killed(tmp_path: Path) -> None:
    """An orphaned worker does not run on: it watches its parent."""
    from helpers import run_python

    script = f"""
import os, sys, time
sys.path[:0] = {[str(Path(__file__).parents[1])]!r}
from ingest_plugins import MisbehavingEmbedder
from agentcore import AgentCore
slow = MisbehavingEmbedder(sleep=120, pid_file={str(tmp_path / "worker.pid")!r})
core = AgentCore.open({str(tmp_path / "a.db")!r}, plugins=[slow], embedder=slow.name)
core.start()
core.workspace("acme").knowledge.ingest_text("a.txt", "TRIGGER " + "word " * 20000, wait=False)
while not os.path.exists({str(tmp_path / "worker.pid")!r}):
    time.sleep(0.05)
os._exit(0)  # as a SIGKILL would: no stop(), nothing closed
"""
    result = run_python(script)
    assert result.returncode == 0, result.stderr
    pid = int((tmp_path / "worker.pid").read_text())
    wait_for(lambda: not alive(pid))  # not when its two minutes' sleep ends
    assert os.path.exists(tmp_path / "a.db")


# PostgreSQL: workers open the same database, and a killed worker's transaction is undone --


def test_workers_on_postgres(postgres_url: str, pid_file: Path, slow: MisbehavingEmbedder) -> None:
    with started(postgres_url, slow, ingest_workers=1) as (core, ws):
        ready = ws.knowledge.ingest_file(make_pdf([filler(40, 1)]), filename="a.pdf", wait=True)
        assert ready.status == "ready" and ready.chunks > 0
        hits = ws.knowledge.search("night porter").results
        assert hits and hits[0].document_id == ready.id
    # a short time limit only for the job that sleeps (the first could pass it when busy)
    with started(postgres_url, slow, ingest_workers=1, ingest_job_timeout=3) as (core, ws):
        queued = ws.knowledge.ingest_text("slow.txt", "TRIGGER " + BIG_TEXT, wait=False)
        pid = worker_pid(pid_file)
        failed = settled(core, queued.id)
        assert failed.last_error is not None and failed.last_error.code == "deadline_exceeded"
        assert not alive(pid)
        assert [d.id for d in ws.knowledge.list().documents] == [queued.id, ready.id]
        assert ws.knowledge.search("night porter").results[0].document_id == ready.id


class BreaksInWorkers(MisbehavingEmbedder):
    """Pickles fine, but cannot be unpickled in another process: no worker starts."""

    def __init__(self) -> None:
        super().__init__("breaks-in-workers")
        self.home = os.getpid()

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state["home"] != os.getpid():
            raise RuntimeError("this plugin cannot load here")
        self.__dict__.update(state)


def test_workers_that_fail_to_start_move_jobs_to_a_thread(
    tmp_path: Path, warnings_logged: Callable[[], list[str]]
) -> None:
    embedder = BreaksInWorkers()
    with started(tmp_path / "a.db", embedder) as (core, ws):
        document = ws.knowledge.ingest_file(make_pdf([filler(20, 1)]), filename="a.pdf", wait=True)
        assert document.status == "ready"
        assert core.ingestion_jobs.pool is None and not core.ingestion_jobs.isolated
    (message,) = warnings_logged()
    assert "3 worker processes in a row failed to start" in message
    assert "this plugin cannot load here" in message


def test_the_pool_size_defaults_to_half_the_cpus_and_one_kept_for_others() -> None:
    half = max(1, min(4, (os.cpu_count() or 2) // 2))
    defaults = agentcore.Settings(_env_file=None)
    assert defaults.ingest_pool_size == half + 1
    assert defaults.ingest_organization_share == half
    assert agentcore.Settings(_env_file=None, ingest_workers=1).ingest_organization_share == 1
    shared = agentcore.Settings(_env_file=None, ingest_workers=4, ingest_workers_per_organization=4)
    assert shared.ingest_organization_share == 4
    assert agentcore.Settings(_env_file=None, ingest_workers=3).ingest_pool_size == 3
    assert agentcore.Settings(_env_file=None, ingest_workers=0).ingest_pool_size == 0

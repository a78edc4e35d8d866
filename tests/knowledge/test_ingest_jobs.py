"""Background ingestion jobs: 202 + processing → ready | failed, durable across a kill -9."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
from conftest import ServerThread
from helpers import cli_env, cli_json, start_serve
from processes import reap

import agentcore
from agentcore import AgentCore
from agentcore.errors import PROBLEM_TYPE
from agentcore.plugins.hashing_embedder import HashingEmbedder
from agentcore_starlette import create_app

pytestmark = pytest.mark.timeout(240)

TEXT = "The vacation policy grants employees thirty days of paid leave each year. " * 40


def wait_until_settled(client: httpx.Client, document_id: str, limit: float = 120) -> Any:
    """Poll a document until it leaves ``processing`` (``limit`` only guards a hang)."""
    give_up = time.monotonic() + limit
    while time.monotonic() < give_up:
        body = client.get(f"/v1/knowledge/documents/{document_id}").json()
        if body["status"] != "processing":
            return body
        time.sleep(0.1)
    raise AssertionError(f"document {document_id} still processing after {limit} s")


# the Python API -------------------------------------------------------------------------


def test_wait_false_queues_the_document_until_a_worker_runs_it(tmp_path: Path) -> None:
    with AgentCore.open(tmp_path / "a.db") as core:
        ws = core.workspace("acme")
        queued = ws.knowledge.ingest_text("policy.txt", TEXT, wait=False)
        assert (queued.status, queued.chunks, queued.pages) == ("processing", 0, 0)
        assert ws.knowledge.get(queued.id).status == "processing"
        assert [d.id for d in ws.knowledge.list().documents] == [queued.id]
        assert ws.knowledge.search("vacation leave").results == []  # not searchable yet

        assert core.ingestion_jobs.run_pending() == 1
        ready = ws.knowledge.get(queued.id)
        assert ready.status == "ready" and ready.chunks > 0 and ready.pages == 1
        assert ready.last_error is None
        hits = ws.knowledge.search("vacation leave").results
        assert hits and hits[0].document_id == queued.id
        assert core.ingestion_jobs.run_pending() == 0  # the job is gone


def test_the_size_threshold_picks_the_mode(tmp_path: Path) -> None:
    with AgentCore.open(tmp_path / "a.db", ingest_sync_max_bytes=100) as core:
        ws = core.workspace("acme")
        small = ws.knowledge.ingest_file(b"Tiny file.", filename="a.txt")
        large = ws.knowledge.ingest_file(TEXT.encode(), filename="b.txt")
        forced = ws.knowledge.ingest_file(TEXT.encode(), filename="c.txt", wait=True)
        assert (small.status, large.status, forced.status) == ("ready", "processing", "ready")
        # exactly at the threshold still waits
        edge = ws.knowledge.ingest_file(b"x" * 99 + b".", filename="d.txt")
        assert edge.status == "ready"


def test_a_job_that_fails_records_a_problem(tmp_path: Path) -> None:
    with AgentCore.open(tmp_path / "a.db") as core:
        ws = core.workspace("acme")
        queued = ws.knowledge.ingest_file(b"caf\xe9 latin-1 text", filename="a.txt", wait=False)
        core.ingestion_jobs.run_pending()
        failed = ws.knowledge.get(queued.id)
    assert failed.status == "failed" and failed.chunks == 0
    assert failed.last_error is not None
    problem = failed.last_error.model_dump()
    assert problem["code"] == "invalid_encoding" and problem["status"] == 422
    assert problem["type"] == PROBLEM_TYPE + "invalid_encoding"
    assert problem["title"] and problem["detail"]


def test_cheap_checks_still_answer_at_once(tmp_path: Path) -> None:
    with AgentCore.open(tmp_path / "a.db") as core:
        ws = core.workspace("acme")
        with pytest.raises(Exception) as caught:
            ws.knowledge.ingest_file(b"", filename="a.txt", wait=False)
        assert getattr(caught.value, "code", None) == "empty_file"
        with pytest.raises(Exception) as caught:
            ws.knowledge.ingest_file(b"\x89PNG....", filename="a.png", wait=False)
        assert getattr(caught.value, "code", None) == "unsupported_file_type"
        assert ws.knowledge.list().documents == []


def test_deleting_a_processing_document_drops_its_job(tmp_path: Path) -> None:
    with AgentCore.open(tmp_path / "a.db") as core:
        ws = core.workspace("acme")
        queued = ws.knowledge.ingest_text("policy.txt", TEXT, wait=False)
        ws.knowledge.delete(queued.id)
        assert core.ingestion_jobs.run_pending() == 0
        assert ws.knowledge.list().documents == []


def test_a_queued_job_waits_for_the_next_start(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    with AgentCore.open(db) as core:
        ws = core.workspace("acme")
        queued = ws.knowledge.ingest_text("policy.txt", TEXT, wait=False)
    # the core closed before any worker ran: the job waits in the store
    with AgentCore.open(db) as core:
        core.start()
        ws = core.workspace("acme")
        give_up = time.monotonic() + 60
        while ws.knowledge.get(queued.id).status == "processing" and time.monotonic() < give_up:
            time.sleep(0.05)
        assert ws.knowledge.get(queued.id).status == "ready"


class BlockingEmbedder:
    """The default embedder, whose first call waits until the test lets it go."""

    name = "blocking"
    dimension = 1024

    def __init__(self) -> None:
        self.inner = HashingEmbedder()
        self.started = threading.Event()
        self.proceed = threading.Event()

    def embed(self, texts: Sequence[str], kind: str = "passage") -> npt.NDArray[np.float32]:
        self.started.set()
        self.proceed.wait(30)
        return self.inner.embed(texts, kind="passage")

    @agentcore.hookimpl
    def agentcore_register_embedders(self, register: Any, settings: Any) -> None:
        register(self)


def job_row(db: Path) -> tuple[int, float | None] | None:
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT attempts, leased_until FROM ingest_jobs").fetchone()
    return None if row is None else (row[0], row[1])


def test_stop_gives_the_running_job_back(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    embedder = BlockingEmbedder()
    with AgentCore.open(db, embedder=embedder.name, plugins=[embedder]) as core:
        ws = core.workspace("acme")
        queued = ws.knowledge.ingest_text("policy.txt", TEXT, wait=False)
        core.start()
        assert embedder.started.wait(60)  # the worker is inside the job
        core.ingestion_jobs.stop(timeout=0)  # cancels the running job, does not wait for it
        embedder.proceed.set()
        give_up = time.monotonic() + 30
        while (row := job_row(db)) is not None and row[1] is not None:  # until given back
            assert time.monotonic() < give_up
            time.sleep(0.02)
        assert row == (0, None)  # queued again, and the interrupted try does not count
        assert ws.knowledge.get(queued.id).status == "processing"
        assert core.ingestion_jobs.run_pending() == 1
        assert ws.knowledge.get(queued.id).status == "ready"


# HTTP -------------------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[httpx.Client]:
    with AgentCore.open(tmp_path / "a.db", ingest_sync_max_bytes=1000, rate_limit_test=1e6) as core:
        core.create_organization("acme")
        key = core.keys.create("acme", "test", ["read", "write"]).secret
        with (
            ServerThread(create_app(core)) as running,
            httpx.Client(
                base_url=running.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
            ) as client,
        ):
            yield client


def test_a_large_upload_is_202_processing_then_ready(server: httpx.Client) -> None:
    response = server.post(
        "/v1/knowledge/documents", files={"file": ("policy.txt", TEXT.encode(), "text/plain")}
    )
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "processing" and body["last_error"] is None
    settled = wait_until_settled(server, body["id"])
    assert settled["status"] == "ready" and settled["chunks"] > 0
    hits = server.post("/v1/knowledge/search", json={"query": "vacation leave"}).json()
    assert hits["results"][0]["document_id"] == body["id"]


def test_a_small_upload_stays_201_ready(server: httpx.Client) -> None:
    response = server.post(
        "/v1/knowledge/documents", files={"file": ("a.txt", b"Small file.", "text/plain")}
    )
    assert response.status_code == 201
    assert response.json()["status"] == "ready"
    text = server.post("/v1/knowledge/documents", json={"source": "b.txt", "text": "Small."})
    assert text.status_code == 201 and text.json()["status"] == "ready"


def test_a_failed_job_shows_last_error_over_http(server: httpx.Client) -> None:
    response = server.post(
        "/v1/knowledge/documents",
        files={"file": ("bad.txt", b"\xff\xfe" + b"x" * 2000, "text/plain")},
    )
    assert response.status_code == 202
    settled = wait_until_settled(server, response.json()["id"])
    assert settled["status"] == "failed"
    assert settled["last_error"]["code"] == "invalid_encoding"
    assert set(settled["last_error"]) >= {"type", "title", "status", "detail", "code"}


def test_the_openapi_document_declares_the_202(server: httpx.Client) -> None:
    spec = server.get("/v1/openapi.json").json()
    responses = spec["paths"]["/v1/knowledge/documents"]["post"]["responses"]
    assert {"201", "202"} <= set(responses)
    document = spec["components"]["schemas"]["Document"]["properties"]
    assert {"status", "last_error"} <= set(document)


# a real `agentcore serve`, killed with SIGKILL mid-job ---------------------------------


def _serve(db: Path, key: str, **settings: str) -> tuple[subprocess.Popen[str], httpx.Client]:
    """A real ``agentcore serve`` with ``settings`` and a client with ``key`` (unopened)."""
    env = cli_env()
    env.update({f"AGENTCORE_{name.upper()}": value for name, value in settings.items()})
    process, url = start_serve(db, key, env=env)
    headers = {"Authorization": f"Bearer {key}"}
    return process, httpx.Client(base_url=url, headers=headers, timeout=30)


def _leased(db: Path, document_id: str) -> bool:
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT leased_until FROM ingest_jobs WHERE document_id = ?", [document_id]
        ).fetchone()
    return row is not None and row[0] is not None


def _kill_mid_job(db: Path, key: str, **settings: str) -> str:
    process, client = _serve(db, key, **settings)
    try:
        with client:
            # about 3 MB of prose: several seconds of work, so the kill lands mid-job
            data = ("Employees may carry over five unused days. " * 70_000).encode()
            response = client.post(
                "/v1/knowledge/documents", files={"file": ("big.txt", data, "text/plain")}
            )
            assert response.status_code == 202, response.text
            document_id: str = response.json()["id"]
            give_up = time.monotonic() + 30
            while not _leased(db, document_id):  # the worker has claimed it
                assert time.monotonic() < give_up, "the worker never claimed the job"
                time.sleep(0.02)
            assert client.get(f"/v1/knowledge/documents/{document_id}").json()["status"] == (
                "processing"
            )
    finally:
        process.send_signal(signal.SIGKILL)  # a crash: no shutdown, the job stays leased
        reap(process)  # and its orphaned worker, which would finish the job on its own
    return document_id


@pytest.mark.slow
@pytest.mark.parametrize(("attempts", "outcome"), [("3", "ready"), ("1", "failed")])
def test_a_job_survives_kill_9_of_the_server(tmp_path: Path, attempts: str, outcome: str) -> None:
    db = tmp_path / "a.db"
    keys = cli_json("init", "--org", "acme", "--json", db=db)["keys"]
    key = next(k["secret"] for k in keys if k["environment"] == "test")
    settings = {"ingest_job_lease": "2", "ingest_job_attempts": attempts}
    document_id = _kill_mid_job(db, key, **settings)

    process, client = _serve(db, key, **settings)
    try:
        with client:
            settled = wait_until_settled(client, document_id, limit=180)
            assert settled["status"] == outcome
            if outcome == "ready":
                hits = client.post("/v1/knowledge/search", json={"query": "unused days"}).json()
                assert hits["results"][0]["document_id"] == document_id
            else:
                assert settled["last_error"]["code"] == "ingestion_interrupted"
    finally:
        reap(process)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM ingest_jobs").fetchone()[0] == 0

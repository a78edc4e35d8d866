"""``document.ready`` and ``document.failed``: one event per background ingestion.

Real worker processes (and the thread a core falls back to), a real webhook receiver
on 127.0.0.1: each job's document ends with exactly one event, recorded in the
transaction that made it ready or failed (so never lost, never doubled) and delivered
like every other kind (signed, Standard Webhooks), and the serving process's
in-process listeners hear it too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import wait_for
from pdfs import filler
from standardwebhooks.webhooks import Webhook
from webhook_receiver import Receiver

from agentcore import AgentCore
from agentcore.events import Event
from agentcore.schema import Problem
from agentcore.workspace import Workspace

pytestmark = pytest.mark.timeout(180)

BIG_TEXT = filler(1_500, 3)  # ~90 KB: a worker's job
KINDS = ["document.ready", "document.failed"]


@contextmanager
def started(path: Path, **settings: Any) -> Iterator[tuple[AgentCore, Workspace, list[Event]]]:
    """A started core on ``path``, acme's workspace, and the document events its
    in-process listeners heard."""
    with AgentCore.open(path, webhook_allowed_networks="127.0.0.0/8", **settings) as core:
        heard: list[Event] = []
        for kind in KINDS:
            core.events.subscribe(kind, heard.append)
        core.start()
        yield core, core.workspace("acme"), heard


def recorded(core: AgentCore, document_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The document's events in the store's outbox: ``(type, data)`` each."""
    with core.store.db.read() as conn:  # type: ignore[attr-defined]
        rows = conn.execute("SELECT type, data FROM events ORDER BY seq").fetchall()
    found = [(row["type"], json.loads(row["data"])) for row in rows]
    return [(kind, data) for kind, data in found if data.get("document_id") == document_id]


@pytest.mark.parametrize("workers", [2, 0], ids=["worker processes", "a thread"])
def test_each_background_document_ends_with_one_event(
    tmp_path: Path, receiver: Receiver, workers: int
) -> None:
    with started(tmp_path / "events.db", ingest_workers=workers) as (core, ws, heard):
        secret = ws.webhooks.subscribe(receiver.url("/docs"), KINDS).secret
        ready = ws.knowledge.ingest_text("big.txt", BIG_TEXT, metadata={"team": "hr"}, wait=False)
        broken = ws.knowledge.ingest_file(
            b"%PDF-1.4 not really a PDF", filename="broken.pdf", wait=False
        )
        assert ready.status == broken.status == "processing"
        assert receiver.wait_for(2, path="/docs", timeout=60), "not delivered"
        wait_for(lambda: len(heard) == 2)
        time.sleep(1.5)  # a second delivery (there must be none) would come by now

        delivered = {}
        for request in receiver.requests("/docs"):
            payload = Webhook(secret).verify(request.body, request.headers)
            delivered[payload["data"]["document_id"]] = payload
        assert len(receiver.requests("/docs")) == 2 and set(delivered) == {ready.id, broken.id}
        ok = delivered[ready.id]
        assert ok["type"] == "document.ready"
        assert ok["data"] == {
            "document_id": ready.id,
            "source": "big.txt",
            "status": "ready",
            "metadata": {"team": "hr"},
            "warnings": [],
        }
        failed = delivered[broken.id]
        assert failed["type"] == "document.failed"
        assert (failed["data"]["source"], failed["data"]["status"]) == ("broken.pdf", "failed")
        problem = failed["data"]["error"]
        stored = ws.knowledge.get(broken.id).last_error
        assert stored is not None and problem["code"] == stored.code and problem["status"] >= 400
        assert set(problem) >= {"type", "title", "status", "detail", "code"}
        # the same events, once each, in the outbox and for the in-process listeners
        assert [kind for kind, _ in recorded(core, ready.id)] == ["document.ready"]
        assert [kind for kind, _ in recorded(core, broken.id)] == ["document.failed"]
        assert sorted(e.id for e in heard) == sorted(r.webhook_id for r in receiver.requests())
        assert ws.knowledge.get(ready.id).status == "ready"


def test_documents_stored_by_their_caller_publish_nothing(tmp_path: Path) -> None:
    with started(tmp_path / "quiet.db", ingest_workers=1) as (core, ws, heard):
        small = ws.knowledge.ingest_text("small.txt", "A small text, indexed at once.")
        assert small.status == "ready"
        # waited for and refused: the caller gets the error, nothing is stored or announced
        with pytest.raises(Exception):  # noqa: B017, PT011 - whichever 4xx the parser says
            ws.knowledge.ingest_file(b"%PDF-1.4 not a PDF", filename="bad.pdf", wait=True)
        # deleted while it waits for a worker: no outcome to announce
        gone = ws.knowledge.ingest_text("gone.txt", BIG_TEXT, wait=False)
        ws.knowledge.delete(gone.id)
        waited = ws.knowledge.ingest_text("waited.txt", BIG_TEXT + " waited", wait=True)
        assert waited.status == "ready"
        wait_for(lambda: heard)  # announced once the worker's outcome is recorded
        time.sleep(0.5)  # an announcement of the others, were there one, comes by now
        assert recorded(core, small.id) == [] and recorded(core, gone.id) == []
        assert [kind for kind, _ in recorded(core, waited.id)] == ["document.ready"]
        assert [e.data["document_id"] for e in heard] == [waited.id]


def test_a_job_completed_twice_is_announced_once(tmp_path: Path) -> None:
    """``run_pending`` (no worker) runs a job; completing or failing the same document
    again (as a second worker that lost a race would) writes nothing and records no
    second event."""
    with AgentCore.open(tmp_path / "twice.db") as core:
        ws = core.workspace("acme")
        document = ws.knowledge.ingest_text("a.txt", BIG_TEXT, wait=False)
        assert core.ingestion_jobs.run_pending() == 1
        ready = ws.knowledge.get(document.id)
        assert ready.status == "ready"
        scope = (ws.organization_id, ws.environment)
        again = core.events.prepare(
            "document.ready",
            {"document_id": document.id},
            organization_id=scope[0],
            environment=ws.environment,
        )
        nothing = np.empty((0, 1024), np.float32)
        assert (
            core.store.complete_document(
                *scope, ready, [], "hashing-v1", nothing, np.empty(0, bool), event=lambda _: again
            )
            is None
        )
        problem = Problem(type="about:blank", title="t", status=500, detail="d", code="c")
        assert not core.store.fail_document(*scope, document.id, problem, again)
        assert [kind for kind, _ in recorded(core, document.id)] == ["document.ready"]


def test_subscriptions_accept_the_document_kinds(core: AgentCore, receiver: Receiver) -> None:
    ws = core.workspace("acme")
    subscription = ws.webhooks.subscribe(receiver.url("/x"), KINDS)
    assert sorted(subscription.events) == sorted(KINDS)
    assert set(KINDS) <= set(core.events.kinds)

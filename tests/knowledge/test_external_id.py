"""A document's ``external_id``: an upload under one replaces the workspace's ready
document of that id in the transaction that makes the new one ready, so a file
ingested again is not a second document and search never returns both versions (nor
neither). On both stores; in Python, over HTTP (JSON and multipart) and through the
background-job path."""

from __future__ import annotations

import json
import threading

import helpers
import pytest
from helpers import FastApi, assert_problem

from agentcore import AgentCore, ValidationFailed

pytestmark = pytest.mark.both_stores

api = helpers.api  # the faster `api` fixture (uvicorn and ASGI, acme/test read+write key)

OLD = "Employees get 25 vacation days per year."
NEW = "Employees get 30 vacation days per year."


def chunks_found(core: AgentCore, query: str = "vacation days per year") -> list[str]:
    return [hit.chunk for hit in core.workspace("acme").knowledge.search(query).results]


def test_an_upload_under_an_external_id_replaces_the_earlier_version(core: AgentCore) -> None:
    ws = core.workspace("acme")
    first = ws.knowledge.ingest_text("handbook.md", OLD, external_id="hr/handbook")
    other = ws.knowledge.ingest_text("other.md", "Employees get a bike.", external_id="hr/bike")
    second = ws.knowledge.ingest_text("handbook.md", NEW, external_id="hr/handbook")
    assert second.id != first.id and second.external_id == "hr/handbook"
    assert chunks_found(core) == [NEW, "Employees get a bike."]
    listed = ws.knowledge.list().documents
    assert [(d.id, d.external_id) for d in listed] == [
        (second.id, "hr/handbook"),
        (other.id, "hr/bike"),
    ]
    assert ws.knowledge.get(second.id).external_id == "hr/handbook"
    with pytest.raises(Exception, match="No document"):
        ws.knowledge.get(first.id)
    # without an external_id nothing is replaced, as before
    plain = ws.knowledge.ingest_text("handbook.md", OLD)
    assert plain.external_id is None
    assert sorted(chunks_found(core)) == sorted([NEW, OLD, "Employees get a bike."])
    # another workspace's document under the same id is its own
    live = core.workspace("acme", "live").knowledge.ingest_text(
        "h.md", OLD, external_id="hr/handbook"
    )
    assert ws.knowledge.get(second.id).external_id == live.external_id


def test_a_cached_index_in_another_core_sees_the_replacement(
    pair: tuple[AgentCore, AgentCore],
) -> None:
    """Each process's index follows the change log: the old rows leave it as the new
    ones arrive, also where the write happened elsewhere."""
    writer, reader = pair
    writer.workspace("acme").knowledge.ingest_text("h.md", OLD, external_id="h")
    assert chunks_found(reader) == [OLD]  # loaded and cached
    writer.workspace("acme").knowledge.ingest_text("h.md", NEW, external_id="h")
    assert chunks_found(reader) == [NEW]
    assert chunks_found(writer) == [NEW]


def test_a_queued_upload_replaces_when_its_job_makes_it_ready(core: AgentCore) -> None:
    ws = core.workspace("acme")
    first = ws.knowledge.ingest_text("handbook.md", OLD, external_id="h")
    queued = ws.knowledge.ingest_text("handbook.md", NEW, external_id="h", wait=False)
    assert queued.status == "processing" and ws.knowledge.get(queued.id).external_id == "h"
    assert chunks_found(core) == [OLD]  # the old version answers until the new is ready
    assert core.ingestion_jobs.run_pending() == 1
    assert chunks_found(core) == [NEW]
    assert [d.id for d in ws.knowledge.list().documents] == [queued.id]
    assert ws.knowledge.get(queued.id).status == "ready"
    assert first.id not in {d.id for d in ws.knowledge.list().documents}


def test_a_failed_or_deleted_upload_leaves_the_earlier_version(core: AgentCore) -> None:
    ws = core.workspace("acme")
    first = ws.knowledge.ingest_text("handbook.md", OLD, external_id="h")
    broken = ws.knowledge.ingest_file(
        b"caf\xe9 latin-1", filename="h.txt", external_id="h", wait=False
    )
    core.ingestion_jobs.run_pending()
    assert ws.knowledge.get(broken.id).status == "failed"
    gone = ws.knowledge.ingest_text("handbook.md", NEW, external_id="h", wait=False)
    ws.knowledge.delete(gone.id)
    assert core.ingestion_jobs.run_pending() == 0
    with pytest.raises(ValidationFailed):  # refused before anything is stored
        ws.knowledge.ingest_text("handbook.md", "   ", external_id="h")
    assert chunks_found(core) == [OLD]
    assert ws.knowledge.get(first.id).status == "ready"


def test_concurrent_replacements_leave_one_version(core: AgentCore) -> None:
    ws = core.workspace("acme")
    ws.knowledge.ingest_text("handbook.md", OLD, external_id="h")
    errors: list[BaseException] = []

    def upload(n: int) -> None:
        try:
            ws.knowledge.ingest_text(
                "h.md", f"Employees get {n} vacation days per year.", external_id="h"
            )
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=upload, args=(n,)) for n in range(40, 46)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(ws.knowledge.list().documents) == 1
    assert len(chunks_found(core)) == 1


@pytest.mark.parametrize("bad", ["", "x" * 257, "a\x00b", 42])
def test_a_bad_external_id_is_refused(core: AgentCore, bad: object) -> None:
    with pytest.raises(ValidationFailed) as refused:
        core.workspace("acme").knowledge.ingest_text("h.md", OLD, external_id=bad)  # type: ignore[arg-type]
    assert refused.value.param == "external_id"
    assert core.workspace("acme").knowledge.list().documents == []


def test_http_json_and_multipart_uploads_take_an_external_id(api: FastApi) -> None:
    body = {"source": "handbook.md", "text": OLD, "external_id": "hr/handbook.md"}
    first = api.post("/v1/knowledge/documents", json=body)
    assert first.status_code == 201, first.text
    assert first.json()["external_id"] == "hr/handbook.md"
    files = {"file": ("handbook.md", NEW.encode(), "text/markdown")}
    fields = {"external_id": "hr/handbook.md", "metadata": json.dumps({"team": "hr"})}
    second = api.post("/v1/knowledge/documents", files=files, data=fields)
    assert second.status_code == 201, second.text
    assert second.json()["external_id"] == "hr/handbook.md"
    assert second.json()["metadata"] == {"team": "hr"}
    listed = api.get("/v1/knowledge/documents").json()["documents"]
    assert [(d["id"], d["external_id"]) for d in listed] == [
        (second.json()["id"], "hr/handbook.md")
    ]
    assert api.get(f"/v1/knowledge/documents/{first.json()['id']}").status_code == 404
    found = api.post("/v1/knowledge/search", json={"query": "vacation days per year"}).json()
    assert [r["chunk"] for r in found["results"]] == [NEW]
    plain = api.post("/v1/knowledge/documents", json={"source": "a.md", "text": OLD})
    assert plain.json()["external_id"] is None

    too_long = api.post("/v1/knowledge/documents", json={**body, "external_id": "x" * 257})
    assert_problem(too_long, 422, "validation_error", param="external_id")
    empty = api.post("/v1/knowledge/documents", files=files, data={"external_id": ""})
    assert_problem(empty, 422, "validation_error", param="external_id")

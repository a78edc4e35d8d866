"""The Store's background-ingestion methods, on SQLite and on PostgreSQL alike."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from test_store_conformance import make_document, open_store, org, unit

from agentcore.models import Problem

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

UPLOAD = b"\x00\xffraw upload bytes" * 1000  # arbitrary bytes survive the round trip


# the PostgreSQL variant is slow, as everywhere: `-m "not slow"` starts no database server
@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    instance = open_store(str(request.param), request)
    yield instance
    instance.close()


def queue(store: Any, org_id: str, now: float = 100.0) -> str:
    document = make_document(0).model_copy(update={"status": "processing", "pages": 0})
    store.insert_processing_document(
        org_id,
        "test",
        document,
        kind="file",
        filename="a.txt",
        content_type="text/plain",
        data=UPLOAD,
        now=now,
    )
    return str(document.id)


def test_a_job_is_claimed_once_per_lease_and_completed(store: Any) -> None:
    org_id = org(store)
    doc_id = queue(store, org_id)
    assert store.get_document(org_id, "test", doc_id).status == "processing"

    job = store.claim_ingest_job(now=200.0, lease_seconds=30)
    assert (job.document_id, job.kind, job.filename, job.attempts) == (doc_id, "file", "a.txt", 1)
    assert job.content_type == "text/plain"
    assert store.ingest_job_data(doc_id) == UPLOAD
    assert store.claim_ingest_job(now=229.0, lease_seconds=30) is None  # leased
    assert store.renew_ingest_job(doc_id, until=300.0)
    assert store.claim_ingest_job(now=299.0, lease_seconds=30) is None

    ready = store.get_document(org_id, "test", doc_id).model_copy(
        update={"status": "ready", "pages": 1, "chunks": 2}
    )
    chunks = [("one", [1], [0]), ("two", [1], [0])]
    ids = store.complete_document(
        org_id, "test", ready, chunks, "e1", unit(2), np.ones(2, dtype=bool)
    )
    assert ids is not None and len(ids) == 2
    stored = store.get_document(org_id, "test", doc_id)
    assert (stored.status, stored.pages, stored.chunks, stored.last_error) == ("ready", 1, 2, None)
    assert store.count_vectors(org_id, "test") == 2
    assert store.ingest_job_data(doc_id) is None  # the job is gone with the upload
    assert store.claim_ingest_job(now=10_000.0, lease_seconds=30) is None
    # completing twice writes nothing
    assert (
        store.complete_document(org_id, "test", ready, chunks, "e1", unit(2), np.ones(2, bool))
        is None
    )


def test_an_expired_lease_is_claimed_again_and_release_takes_back_the_attempt(
    store: Any,
) -> None:
    org_id = org(store)
    doc_id = queue(store, org_id)
    assert store.claim_ingest_job(now=200.0, lease_seconds=30).attempts == 1
    assert store.claim_ingest_job(now=230.0, lease_seconds=30).attempts == 2  # lease ran out
    store.release_ingest_job(doc_id)
    again = store.claim_ingest_job(now=231.0, lease_seconds=30)
    assert again is not None and again.attempts == 2


def test_fail_records_the_problem_and_drops_the_job(store: Any) -> None:
    org_id = org(store)
    doc_id = queue(store, org_id)
    problem = Problem(
        type="https://agentcore.dev/problems/invalid_encoding",
        title="Unprocessable Content",
        status=422,
        detail="The file is not valid UTF-8.",
        code="invalid_encoding",
        param="file",
    )
    assert store.fail_document(org_id, "test", doc_id, problem)
    failed = store.get_document(org_id, "test", doc_id)
    assert failed.status == "failed" and failed.last_error == problem
    listed = store.list_documents(org_id, "test", limit=10, starting_after=None)[0]
    assert listed[0].last_error == problem
    assert store.claim_ingest_job(now=10_000.0, lease_seconds=30) is None
    assert not store.fail_document(org_id, "test", doc_id, problem)  # only processing ones


def test_deleting_a_processing_document_drops_its_job(store: Any) -> None:
    org_id = org(store)
    doc_id = queue(store, org_id)
    job = store.claim_ingest_job(now=200.0, lease_seconds=30)
    assert store.delete_document(org_id, "test", doc_id)
    assert not store.renew_ingest_job(job.document_id, until=300.0)
    assert store.ingest_job_data(doc_id) is None
    assert store.claim_ingest_job(now=10_000.0, lease_seconds=30) is None


def test_jobs_are_claimed_oldest_first(store: Any) -> None:
    org_id = org(store)
    second = queue(store, org_id, now=50.0)
    first = queue(store, org_id, now=10.0)
    claimed = [store.claim_ingest_job(now=200.0, lease_seconds=30).document_id for _ in "ab"]
    assert claimed == [first, second]

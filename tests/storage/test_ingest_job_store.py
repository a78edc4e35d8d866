"""The Store's background-ingestion methods, on SQLite and on PostgreSQL alike."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from test_store_conformance import make_document, open_store, org, unit

from agentcore.schema import Problem

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")

UPLOAD = b"\x00\xffraw upload bytes" * 1000  # arbitrary bytes survive the round trip


# the PostgreSQL variant is slow, as everywhere: `-m "not slow"` starts no database server
@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    instance = open_store(str(request.param), request)
    yield instance
    instance.close()


def queue(store: Any, org_id: str, now: float = 100.0, env: str = "test") -> str:
    document = make_document(0).model_copy(update={"status": "processing", "pages": 0})
    store.insert_processing_document(
        org_id,
        env,
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
    assert ids is not None and len(ids.chunk_ids) == 2
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


def claim(store: Any, now: float = 100.0) -> str:
    return str(store.claim_ingest_job(now=now, lease_seconds=30).document_id)


def test_claims_prefer_the_workspace_with_the_fewest_leased_then_queued_jobs(
    store: Any,
) -> None:
    acme, globex = org(store), org(store, "globex")
    acme_jobs = [queue(store, acme, now=10.0 + n) for n in range(2)]
    globex_jobs = [queue(store, globex, now=1.0 + n) for n in range(3)]  # older, more
    assert claim(store) == acme_jobs[0]  # nobody holds a lease: the shorter queue
    assert claim(store) == globex_jobs[0]  # acme holds one, globex none
    assert claim(store) == acme_jobs[1]  # one each: the shorter queue again
    assert claim(store) == globex_jobs[1]  # acme holds two, globex one
    assert claim(store) == globex_jobs[2]
    assert store.claim_ingest_job(now=100.0, lease_seconds=30) is None


def test_one_workspaces_flood_does_not_delay_another_with_one_worker(store: Any) -> None:
    acme, globex = org(store), org(store, "globex")
    flood = [queue(store, acme, now=10.0 + n) for n in range(45)]
    assert claim(store) == flood[0]
    upload = queue(store, globex, now=60.0)  # the newest job of all
    assert store.delete_document(acme, "test", flood[0])  # the one worker is free again
    assert claim(store) == upload


def test_organizations_excluded_from_a_claim_keep_their_jobs_queued(store: Any) -> None:
    acme, globex, initech = org(store), org(store, "globex"), org(store, "initech")
    acme_test = queue(store, acme, now=1.0)
    acme_live = queue(store, acme, now=2.0, env="live")  # the whole organization is excluded
    globex_job = queue(store, globex, now=50.0)
    first = store.claim_ingest_job(now=100.0, lease_seconds=30, excluding=[acme])
    assert first.document_id == globex_job  # acme's jobs are older, and wait
    assert store.claim_ingest_job(now=100.0, lease_seconds=30, excluding={acme, initech}) is None
    then = store.claim_ingest_job(now=100.0, lease_seconds=30, excluding=[globex])
    assert {then.document_id, claim(store)} == {acme_test, acme_live}
    assert store.claim_ingest_job(now=100.0, lease_seconds=30, excluding=()) is None


def test_workspaces_are_per_environment_and_expired_leases_count_for_nothing(
    store: Any,
) -> None:
    acme, globex = org(store), org(store, "globex")
    tests = [queue(store, acme, now=10.0 + n) for n in range(2)]
    live = queue(store, acme, now=30.0, env="live")
    assert claim(store) == live  # acme/live is a workspace of its own, with one job
    assert claim(store) == tests[0]
    lone = queue(store, globex, now=40.0)
    more = queue(store, globex, now=41.0)
    # at 140 every lease has run out: acme/live's job is claimable again, first, as it
    # would not be if its lapsed lease still counted (globex holds none)
    assert claim(store, now=140.0) == live
    assert claim(store, now=141.0) == tests[0]  # two jobs each, none leased: the oldest
    assert claim(store, now=142.0) == lone  # acme/test holds one now, globex none
    assert claim(store, now=143.0) == tests[1]
    assert claim(store, now=144.0) == more


def test_another_process_can_open_the_store_again(store: Any) -> None:
    """What an ingestion worker does: the same database, without migrating it."""
    org_id = org(store)
    doc_id = queue(store, org_id)
    reopen = store.reopener()
    assert reopen is not None
    again = pickle.loads(pickle.dumps(reopen))()  # as a worker process gets it
    try:
        assert again.get_document(org_id, "test", doc_id).status == "processing"
        assert again.ingest_job_data(doc_id) == UPLOAD
    finally:
        again.close()


def test_an_in_memory_store_cannot_be_opened_again() -> None:
    from agentcore.storage.sqlite import SQLiteStore

    memory = SQLiteStore.open(":memory:")
    try:
        assert memory.reopener() is None
    finally:
        memory.close()

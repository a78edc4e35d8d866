"""/v1/knowledge over real HTTP: upload, search, documents, deletes, tenancy, refusals.

End to end through the Workspace API and the HTTP adapter (uvicorn and ASGI); the
parsing, chunking, embedding and index units have their own tests.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import helpers
import pytest
from conftest import ServerThread
from helpers import FastApi, assert_problem
from pdfs import filler, make_drawing_pdf, make_encrypted_pdf, make_pdf

from agentcore import AgentCore
from agentcore.errors import NotFound, PermissionDenied
from agentcore_starlette import create_app

api = helpers.api  # the faster `api` fixture (uvicorn and ASGI, acme/test read+write key)

DOCS = "/v1/knowledge/documents"
SEARCH = "/v1/knowledge/search"

FACT_3 = (
    "The Zephyrine observatory records exactly four hundred and twelve meteor showers every decade."
)
QUERY_3 = "How many meteor showers does the Zephyrine observatory record?"
FACT_5 = "The Brackwater cheese festival is held every October in the village of Ostrava Minor."
QUERY_5 = "When is the Brackwater cheese festival held?"

HANDBOOK = [
    filler(14, 1),
    filler(14, 2),
    f"{filler(7, 3)} {FACT_3} {filler(7, 33)}",
    filler(14, 4),
    f"{filler(7, 5)} {FACT_5} {filler(7, 55)}",
]


def upload(api: Any, name: str, data: bytes, content_type: str = "application/pdf") -> Any:
    return api.post(DOCS, files={"file": (name, data, content_type)})


def upload_ok(api: Any, name: str, data: bytes, content_type: str = "application/pdf") -> dict:
    response = upload(api, name, data, content_type)
    assert response.status_code == 201, response.text
    return response.json()


def search(api: Any, query: str, **extra: Any) -> list[dict]:
    response = api.post(SEARCH, json={"query": query, **extra})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["query"] == query
    return body["results"]


def assert_well_formed(results: list[dict]) -> None:
    for result in results:
        assert set(result) >= {"chunk", "score", "source", "pages", "document_id"}
        assert isinstance(result["score"], float)
        assert -1.0 <= result["score"] <= 1.0, result["score"]
        assert result["pages"] == sorted(set(result["pages"])) and result["pages"]
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True), scores


@functools.cache
def handbook_pdf() -> bytes:
    return make_pdf(HANDBOOK)


@pytest.fixture
def handbook(api: Any) -> dict:
    return upload_ok(api, "handbook.pdf", handbook_pdf())


# upload and search ------------------------------------------------------------------


def test_upload_pdf_returns_document(api: Any, handbook: dict) -> None:
    assert set(handbook) >= {"id", "source", "pages", "chunks", "created_at"}
    assert handbook["id"].startswith("doc_")
    assert handbook["source"] == "handbook.pdf"
    assert handbook["pages"] == 5
    assert handbook["chunks"] > 5  # enough for the default top_k to be visible
    assert handbook["content_type"] == "application/pdf"


def test_search_finds_fact_on_its_page_first(api: Any, handbook: dict) -> None:
    for query, fact, page in [(QUERY_3, "Zephyrine observatory", 3), (QUERY_5, "Brackwater", 5)]:
        results = search(api, query)
        assert_well_formed(results)
        top = results[0]
        assert fact in top["chunk"], (query, top)
        assert page in top["pages"], top
        assert top["source"] == "handbook.pdf"
        assert top["document_id"] == handbook["id"]
        # the fact's page, not a neighbour: the best filler chunk scores clearly less
        others = [r for r in results if fact not in r["chunk"]]
        assert others and others[0]["score"] < top["score"] - 0.1


def test_default_top_k_is_5_and_top_k_honoured(api: Any, handbook: dict) -> None:
    assert len(search(api, QUERY_3)) == 5
    assert len(search(api, QUERY_3, top_k=2)) == 2
    everything = search(api, QUERY_3, top_k=100)
    assert len(everything) == handbook["chunks"]
    assert_well_formed(everything)
    assert [r["chunk"] for r in search(api, QUERY_3, top_k=3)] == [
        r["chunk"] for r in everything[:3]
    ]


def test_min_score_filters(api: Any, handbook: dict) -> None:
    everything = search(api, QUERY_3, top_k=100)
    first, second = everything[0]["score"], everything[1]["score"]
    assert first > second
    threshold = (first + second) / 2
    kept = search(api, QUERY_3, top_k=100, min_score=threshold)
    assert [r["chunk"] for r in kept] == [everything[0]["chunk"]]
    assert search(api, QUERY_3, min_score=1.0) == []
    assert len(search(api, QUERY_3, top_k=100, min_score=-1.0)) == len(everything)


def test_json_text_upload_and_exact_match_score(api: Any) -> None:
    text = "Pelican audits happen on the third Thursday of each quarter."
    response = api.post(DOCS, json={"source": "notes.md", "text": text})
    assert response.status_code == 201, response.text
    doc = response.json()
    assert doc["source"] == "notes.md" and doc["pages"] == 1 and doc["chunks"] == 1
    assert doc["content_type"] == "text/markdown"
    results = search(api, text)  # the query is the whole chunk: cosine ~ 1, never above
    assert_well_formed(results)
    assert results[0]["chunk"] == text
    assert results[0]["pages"] == [1]
    assert results[0]["source"] == "notes.md"
    assert results[0]["document_id"] == doc["id"]
    assert results[0]["score"] == pytest.approx(1.0, abs=1e-5)


def test_sentence_across_page_break_keeps_both_pages(api: Any) -> None:
    pages = [
        f"{filler(16, 7)} The emergency rendezvous point for the Quillon ferry crew is the",
        f"marmalade lighthouse on Gannet Point. {filler(16, 8)}",
    ]
    doc = upload_ok(api, "ferry.pdf", make_pdf(pages))
    assert doc["pages"] == 2 and doc["chunks"] >= 3
    everything = search(api, "emergency rendezvous point Quillon ferry crew", top_k=100)
    top = everything[0]
    assert "Quillon ferry crew is the marmalade lighthouse" in " ".join(top["chunk"].split())
    assert top["pages"] == [1, 2]
    # the other chunks keep to one page: the two pages come from the sentence itself
    assert {tuple(r["pages"]) for r in everything[1:]} <= {(1,), (2,), (1, 2)}
    assert any(r["pages"] == [1] for r in everything)
    assert any(r["pages"] == [2] for r in everything)


# documents ----------------------------------------------------------------------------


def test_list_paginates_newest_first_and_get(api: Any) -> None:
    made = []
    for n in range(3):
        response = api.post(DOCS, json={"source": f"n{n}.txt", "text": f"Memo {n} about kites."})
        assert response.status_code == 201, response.text
        made.append(response.json())
    page = api.get(DOCS, params={"limit": 2})
    assert page.status_code == 200, page.text
    body = page.json()
    assert body["has_more"] is True
    assert [d["id"] for d in body["documents"]] == [made[2]["id"], made[1]["id"]]
    rest = api.get(DOCS, params={"limit": 2, "starting_after": made[1]["id"]}).json()
    assert rest["has_more"] is False
    assert [d["id"] for d in rest["documents"]] == [made[0]["id"]]
    whole = api.get(DOCS).json()
    assert whole["has_more"] is False and len(whole["documents"]) == 3
    got = api.get(f"{DOCS}/{made[0]['id']}")
    assert got.status_code == 200
    assert got.json() == made[0]
    assert_problem(api.get(f"{DOCS}/doc_doesnotexist"), 404, "resource_missing")
    assert_problem(api.get(DOCS, params={"limit": 0}), 422, "limit_out_of_range")


def test_deleting_while_paging_lists_from_the_start_again(api: Any) -> None:
    # a cursor is an object that still exists (as Stripe's): a deleted one has no place
    # in the list any more, a 404 naming starting_after (docs/http-api.md#pagination)
    made = [
        api.post(DOCS, json={"source": f"n{n}.txt", "text": f"Memo {n}."}).json()["id"]
        for n in range(5)
    ]
    first = api.get(DOCS, params={"limit": 2}).json()["documents"]
    for document in first:
        assert api.delete(f"{DOCS}/{document['id']}").status_code == 200
    gone = api.get(DOCS, params={"limit": 2, "starting_after": first[-1]["id"]})
    assert_problem(gone, 404, "resource_missing", param="starting_after")
    # what the docs say to do instead: take the first page again until none is left
    deleted = [d["id"] for d in first]
    while page := api.get(DOCS, params={"limit": 2}).json()["documents"]:
        for document in page:
            assert api.delete(f"{DOCS}/{document['id']}").status_code == 200
            deleted.append(document["id"])
    assert sorted(deleted) == sorted(made)


def test_delete_removes_document_and_its_chunks_at_once(api: Any, handbook: dict) -> None:
    other = upload_ok(api, "ferry.pdf", make_pdf([f"Ferry notes. {filler(4, 9)}"]))
    assert search(api, QUERY_3)[0]["document_id"] == handbook["id"]  # index now cached
    response = api.delete(f"{DOCS}/{handbook['id']}")
    assert response.status_code == 200, response.text
    assert response.json()["id"] == handbook["id"]
    results = search(api, QUERY_3, top_k=100)
    assert len(results) == other["chunks"]  # the index lost the rows, not just the lookup
    assert all(r["document_id"] == other["id"] for r in results)
    assert [r["document_id"] for r in search(api, QUERY_3, top_k=1)] == [other["id"]]
    assert_problem(api.get(f"{DOCS}/{handbook['id']}"), 404, "resource_missing")
    assert_problem(api.delete(f"{DOCS}/{handbook['id']}"), 404, "resource_missing")
    assert [d["id"] for d in api.get(DOCS).json()["documents"]] == [other["id"]]
    assert [r["document_id"] for r in search(api, QUERY_3, top_k=1)] == [other["id"]]


def test_workspace_writes_update_the_cached_index_in_place(core: AgentCore) -> None:
    ws = core.workspace("acme", "test")
    cache = core.indexes
    keep = ws.knowledge.ingest_text("keep.txt", "Kestrel drills start at dawn on Fridays.")
    gone = ws.knowledge.ingest_text("gone.txt", FACT_3)
    index = cache.get(ws.organization_id, "test")
    assert len(index) == 2
    ws.knowledge.delete(gone.id)  # mirrored on the loaded index, not a reload
    assert cache.get(ws.organization_id, "test") is index and len(index) == 1
    with pytest.raises(NotFound):
        ws.knowledge.delete(gone.id)  # a no-op write keeps the index too
    assert cache.get(ws.organization_id, "test") is index
    added = ws.knowledge.ingest_text("owl.txt", "Owl census volunteers meet at the barn.")
    assert cache.get(ws.organization_id, "test") is index and len(index) == 2
    assert sorted(r.document_id for r in ws.knowledge.search(QUERY_3, top_k=10).results) == sorted(
        [keep.id, added.id]
    )


def test_workspace_scopes_are_checked_by_the_service(core: AgentCore) -> None:
    writer = core.workspace("acme", "test")
    doc = writer.knowledge.ingest_text("a.txt", FACT_3)
    reader = core.workspace("acme", "test", scopes=["read"])
    assert reader.knowledge.search(QUERY_3).results[0].document_id == doc.id
    assert reader.knowledge.get(doc.id).id == doc.id
    assert [d.id for d in reader.knowledge.list().documents] == [doc.id]
    for attempt in (
        lambda: reader.knowledge.ingest_text("b.txt", "More."),
        lambda: reader.knowledge.ingest_file(b"More.", filename="b.txt"),
        lambda: reader.knowledge.delete(doc.id),
    ):
        with pytest.raises(PermissionDenied):
            attempt()
    writer_only = core.workspace("acme", "test", scopes=["write"])
    with pytest.raises(PermissionDenied):
        writer_only.knowledge.search(QUERY_3)
    assert [d.id for d in writer.knowledge.list().documents] == [doc.id]


def test_writes_through_another_core_on_the_same_file_are_seen(
    api: Any, handbook: dict, db_path: Path
) -> None:
    assert search(api, QUERY_3)[0]["document_id"] == handbook["id"]  # first core cached it
    with AgentCore.open(db_path) as second:
        ws = second.workspace("acme", "test", create=False)
        assert ws.knowledge.search(QUERY_3).results[0].document_id == handbook["id"]
        ws.knowledge.delete(handbook["id"])
        added = ws.knowledge.ingest_text("kestrel.txt", "Kestrel drills start at dawn on Fridays.")
    results = search(api, QUERY_3, top_k=100)
    assert [r["document_id"] for r in results] == [added.id]  # stale rows would crowd it out
    assert [r["document_id"] for r in search(api, QUERY_3, top_k=1)] == [added.id]
    assert search(api, "When do kestrel drills start?")[0]["document_id"] == added.id
    assert_problem(api.get(f"{DOCS}/{handbook['id']}"), 404, "resource_missing")


# tenancy and scopes ------------------------------------------------------------------


def test_other_org_and_live_env_see_nothing(api: Any, keys: Any, handbook: dict) -> None:
    for key in (keys.make("globex").secret, keys.make("acme", "live").secret):
        other = api.with_key(key)
        assert search(other, QUERY_3) == []
        assert other.get(DOCS).json() == {"documents": [], "has_more": False}
        assert_problem(other.get(f"{DOCS}/{handbook['id']}"), 404, "resource_missing")
        assert_problem(other.delete(f"{DOCS}/{handbook['id']}"), 404, "resource_missing")
        own = upload_ok(other, "own.pdf", make_pdf([FACT_3]))  # same fact, other workspace
        hits = search(other, QUERY_3)
        assert [r["document_id"] for r in hits] == [own["id"]]
    # A's document survived the others' deletes, and A sees none of theirs
    assert api.get(f"{DOCS}/{handbook['id']}").status_code == 200
    assert {r["document_id"] for r in search(api, QUERY_3, top_k=100)} == {handbook["id"]}


def test_read_key_can_search_list_get_but_not_write(api: Any, keys: Any, handbook: dict) -> None:
    reader = api.with_key(keys.make("acme", "test", ("read",)).secret)
    assert search(reader, QUERY_3)[0]["document_id"] == handbook["id"]
    assert reader.get(DOCS).status_code == 200
    assert reader.get(f"{DOCS}/{handbook['id']}").status_code == 200
    assert_problem(upload(reader, "x.pdf", make_pdf(["Hello there."])), 403, "insufficient_scope")
    assert_problem(
        reader.post(DOCS, json={"source": "x.txt", "text": "Hello."}), 403, "insufficient_scope"
    )
    assert_problem(reader.delete(f"{DOCS}/{handbook['id']}"), 403, "insufficient_scope")
    assert api.get(f"{DOCS}/{handbook['id']}").status_code == 200


# refusals: nothing half-stored -------------------------------------------------------


def counts(db_path: Path) -> tuple[int, ...]:
    conn = sqlite3.connect(db_path)
    try:
        return tuple(
            conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]  # noqa: S608
            for table in ("documents", "chunks", "vector_segments")
        )
    finally:
        conn.close()


@contextmanager
def nothing_stored(db_path: Path) -> Iterator[None]:
    before = counts(db_path)
    yield
    assert counts(db_path) == before


PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02" + b"\x00" * 32


BAD_FILES = [  # (case, file name, bytes, declared type, status, code)
    (
        "text-as-pdf",
        "fake.pdf",
        b"Just text pretending to be a PDF.",
        "application/pdf",
        422,
        "invalid_pdf",
    ),
    ("text-named-pdf", "fake.pdf", b"plain words", "application/octet-stream", 422, "invalid_pdf"),
    (
        "truncated-pdf",
        "broken.pdf",
        make_pdf(["Cut short."])[:300],
        "application/pdf",
        422,
        "invalid_pdf",
    ),
    (
        "encrypted",
        "locked.pdf",
        make_encrypted_pdf(["Top secret numbers."]),
        "application/pdf",
        422,
        "encrypted_pdf",
    ),
    ("drawing-only", "box.pdf", make_drawing_pdf(2), "application/pdf", 422, "no_text"),
    ("png", "pic.png", PNG, "image/png", 415, "unsupported_file_type"),
    ("png-generic-type", "pic.png", PNG, "application/octet-stream", 415, "unsupported_file_type"),
    ("empty", "empty.txt", b"", "text/plain", 422, "empty_file"),
    ("blank", "blank.txt", b"  \n\n \t ", "text/plain", 422, "no_text"),
    (
        "not-utf8",
        "latin1.txt",
        "caf\u00e9 cr\u00e8me".encode("latin-1"),
        "text/plain",
        422,
        "invalid_encoding",
    ),
]


def test_bad_files_are_refused_and_nothing_stored(api: Any, handbook: dict, db_path: Path) -> None:
    for case, name, data, content_type, status, code in BAD_FILES:
        try:
            with nothing_stored(db_path):
                assert_problem(upload(api, name, data, content_type), status, code, param="file")
        except AssertionError as exc:
            raise AssertionError(f"case {case}: {exc}") from exc
    assert [d["id"] for d in api.get(DOCS).json()["documents"]] == [handbook["id"]]
    assert search(api, QUERY_3)[0]["document_id"] == handbook["id"]


def test_missing_file_field_and_bad_json_documents(api: Any, db_path: Path) -> None:
    with nothing_stored(db_path):
        response = api.post(
            DOCS, files={"document": ("a.pdf", make_pdf(["Hi."]), "application/pdf")}
        )
        assert_problem(response, 400, "invalid_request", param="file")
        assert_problem(api.post(DOCS, json={"source": "a.txt", "text": "   "}), 422, "no_text")
        assert_problem(
            api.post(DOCS, json={"source": "a.txt"}), 422, "validation_error", param="text"
        )
        assert_problem(api.post(DOCS, json={"source": "", "text": "x"}), 422, "validation_error")
    assert api.get(DOCS).json()["documents"] == []


@contextmanager
def api_on(app: Any, like: Any, key: str) -> Iterator[Any]:
    """``app`` over the same transport as the ``like`` fixture instance."""
    if like.base_url is None:
        yield FastApi(app, None, key)
        return
    with ServerThread(app) as server:
        yield FastApi(app, server.url, key)


@pytest.mark.slow
def test_too_large_upload_is_413(api: Any, tmp_path: Path) -> None:
    small = tmp_path / "small.db"
    limit = 2000
    with AgentCore.open(small, max_upload_bytes=limit, rate_limit_test=1e6) as core:
        core.create_organization("acme")
        key = core.keys.create("acme", "test", ["read", "write"]).secret
        with api_on(create_app(core), api, key) as little:
            with nothing_stored(small):
                big = make_pdf([filler(30, n) for n in range(6)])
                assert len(big) > limit
                assert_problem(upload(little, "big.pdf", big), 413, "file_too_large", param="file")
                over = b"a" * (limit + 1)
                assert_problem(
                    upload(little, "over.txt", over, "text/plain"), 413, "file_too_large"
                )
                assert_problem(
                    little.post(DOCS, json={"source": "big.txt", "text": over.decode()}),
                    413,
                    "file_too_large",
                )
            ok = upload_ok(little, "fits.txt", b"word " * (limit // 5), "text/plain")
            assert ok["bytes"] == limit and ok["pages"] == 1


# refusals: bad queries --------------------------------------------------------------


BAD_QUERIES = [  # (body, code, param)
    ({"query": ""}, "validation_error", "query"),
    ({"query": " \t\n "}, "empty_query", "query"),
    ({"query": "x" * 2001}, "query_too_long", "query"),
    ({"query": "kites", "top_k": 0}, "top_k_out_of_range", "top_k"),
    ({"query": "kites", "top_k": 101}, "top_k_out_of_range", "top_k"),
    ({"query": "kites", "min_score": 2}, "validation_error", "min_score"),
    ({"query": "kites", "min_score": -1.5}, "validation_error", "min_score"),
    ({"top_k": 3}, "validation_error", "query"),
    ({"query": "kites", "top_k": "many"}, "validation_error", "top_k"),
    ({"query": "kites", "k": 3}, "validation_error", "k"),
]


def test_bad_queries_are_422(api: Any) -> None:
    for body, code, param in BAD_QUERIES:
        try:
            assert_problem(api.post(SEARCH, json=body), 422, code, param=param)
        except AssertionError as exc:
            raise AssertionError(f"body {str(body)[:60]}: {exc}") from exc


def test_query_limits_are_inclusive(api: Any) -> None:
    api.post(DOCS, json={"source": "k.txt", "text": "Kites fly over the dunes."})
    response = api.post(SEARCH, json={"query": "kite " * 400})  # exactly 2000 characters
    assert response.status_code == 200, response.text
    assert response.json()["results"][0]["source"] == "k.txt"
    assert len(search(api, "kites dunes", top_k=100)) == 1

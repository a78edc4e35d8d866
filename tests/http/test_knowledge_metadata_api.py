"""Document metadata, filters and search modes over HTTP (uvicorn and ASGI, both stores).

``metadata`` in the JSON body and as a multipart field, ``PATCH`` of a document's
metadata, ``filter`` and ``mode`` on search, every refusal a 422 naming the field with
nothing stored, and the OpenAPI document declaring all of it with its limits.
"""

from __future__ import annotations

import json
from typing import Any

import helpers
import pytest
from helpers import assert_problem

from agentcore import AgentCore

api = helpers.api  # uvicorn and ASGI, acme/test read+write key, no 429s

DOCS = "/v1/knowledge/documents"
SEARCH = "/v1/knowledge/search"


def add(api: Any, source: str, text: str, metadata: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"source": source, "text": text}
    if metadata is not None:
        body["metadata"] = metadata
    response = api.post(DOCS, json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def search(api: Any, query: str, **extra: Any) -> dict[str, Any]:
    response = api.post(SEARCH, json={"query": query, **extra})
    assert response.status_code == 200, response.text
    return dict(response.json())


def stored_documents(api: Any) -> list[dict[str, Any]]:
    return list(api.get(DOCS, params={"limit": 100}).json()["documents"])


def test_metadata_in_the_json_body_and_in_a_multipart_upload(api: Any) -> None:
    hr = add(api, "leave.txt", "Employees get 25 vacation days.", {"team": "hr", "year": 2024})
    assert hr["metadata"] == {"team": "hr", "year": 2024}
    uploaded = api.post(
        DOCS,
        files={"file": ("laptops.txt", b"Laptops are replaced every three years.", "text/plain")},
        data={"metadata": json.dumps({"team": "it", "public": True})},
    )
    assert uploaded.status_code == 201, uploaded.text
    assert uploaded.json()["metadata"] == {"team": "it", "public": True}
    fetched = api.get(f"{DOCS}/{uploaded.json()['id']}").json()
    assert fetched["metadata"] == {"team": "it", "public": True}
    plain = api.post(DOCS, files={"file": ("plain.txt", b"Nothing to say.", "text/plain")})
    assert plain.status_code == 201 and plain.json()["metadata"] == {}


@pytest.mark.parametrize(
    ("metadata", "param"),
    [
        ({"owner": {"name": "ana"}}, "metadata.owner"),
        ({"owner": None}, "metadata.owner"),
        ({"owner": "x" * 513}, "metadata.owner"),
        # beyond what float64 holds exactly (the 310 digits once broke every filter)
        ({"n": 10**309}, "metadata.n"),
        ({"n": 2**53 + 1}, "metadata.n"),
        ({"k" * 65: "x"}, "metadata." + "k" * 65),
        ({f"k{i}": i for i in range(17)}, "metadata"),
        (["owner"], "metadata"),
    ],
)
def test_bad_metadata_is_a_422_and_stores_nothing(api: Any, metadata: Any, param: str) -> None:
    response = api.post(DOCS, json={"source": "a.txt", "text": "Text.", "metadata": metadata})
    assert_problem(response, 422, "validation_error", param=param)
    upload = api.post(
        DOCS,
        files={"file": ("a.txt", b"Text.", "text/plain")},
        data={"metadata": json.dumps(metadata)},
    )
    assert_problem(upload, 422, "validation_error", param=param)
    assert stored_documents(api) == []


# the last nests past the JSON decoder's stack (once a 500: a RecursionError)
DEEP = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"


@pytest.mark.parametrize("field", ["not json", "[1, 2]", '"team"', "{'team': 'hr'}", DEEP])
def test_a_multipart_metadata_field_must_be_a_json_object(api: Any, field: str) -> None:
    response = api.post(
        DOCS, files={"file": ("a.txt", b"Text.", "text/plain")}, data={"metadata": field}
    )
    assert_problem(response, 422, "validation_error", param="metadata")
    assert stored_documents(api) == []


def test_patch_replaces_metadata(api: Any, keys: Any) -> None:
    document = add(api, "leave.txt", "Employees get 25 vacation days.", {"team": "hr"})
    one = f"{DOCS}/{document['id']}"
    response = api.patch(one, json={"metadata": {"team": "it", "reviewed": False}})
    assert response.status_code == 200, response.text
    assert response.json()["metadata"] == {"team": "it", "reviewed": False}
    assert response.json()["status"] == "ready" and response.json()["id"] == document["id"]
    found = search(api, "vacation", filter={"type": "eq", "key": "team", "value": "it"})
    assert [r["document_id"] for r in found["results"]] == [document["id"]]
    assert found["results"][0]["metadata"] == {"team": "it", "reviewed": False}
    # refusals: bad metadata, no body, another workspace, a read-only key
    assert_problem(
        api.patch(one, json={"metadata": {"a": [1]}}), 422, "validation_error", param="metadata.a"
    )
    assert_problem(api.patch(one, json={}), 422, "validation_error", param="metadata")
    assert_problem(
        api.patch(one, json={"metadata": {"n": -(2**53) - 1}}),
        422,
        "validation_error",
        param="metadata.n",
    )
    assert_problem(
        api.patch(one, json={"metadata": {}, "x": 1}), 422, "validation_error", param="x"
    )
    other = api.with_key(keys.make("other").secret)
    assert_problem(other.patch(one, json={"metadata": {}}), 404, "resource_missing")
    reader = api.with_key(keys.make(scopes=("read",)).secret)
    assert_problem(reader.patch(one, json={"metadata": {}}), 403, "insufficient_scope")
    assert api.get(one).json()["metadata"] == {"team": "it", "reviewed": False}
    cleared = api.patch(one, json={"metadata": {}})
    assert cleared.status_code == 200 and cleared.json()["metadata"] == {}


def test_search_takes_a_filter_and_a_mode(api: Any) -> None:
    add(api, "leave.txt", "Employees get 25 vacation days per year.", {"team": "hr"})
    add(api, "portal.txt", "Reset a password on the XK-4471-Q portal.", {"team": "it"})
    vector = search(api, "vacation days")
    assert vector["mode"] == "vector"
    assert all(r["rank_score"] == r["score"] for r in vector["results"])
    keyword = search(api, "XK-4471-Q", mode="keyword")
    assert keyword["mode"] == "keyword"
    assert [r["source"] for r in keyword["results"]] == ["portal.txt"]
    assert keyword["results"][0]["rank_score"] > 0 and -1 <= keyword["results"][0]["score"] <= 1
    hybrid = search(api, "password portal", mode="hybrid", top_k=2)
    ranks = [r["rank_score"] for r in hybrid["results"]]
    assert hybrid["mode"] == "hybrid" and ranks == sorted(ranks, reverse=True)
    hr = {"type": "eq", "key": "team", "value": "hr"}
    for mode in ("vector", "keyword", "hybrid"):
        found = search(api, "vacation password portal", mode=mode, filter=hr)
        assert {r["source"] for r in found["results"]} == {"leave.txt"}, mode


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"filter": {"type": "like", "key": "a", "value": 1}}, "filter"),
        ({"filter": {"type": "eq", "key": "a"}}, "filter.value"),
        ({"filter": {"type": "gt", "key": "a", "value": False}}, "filter.value"),
        ({"filter": {"type": "in", "key": "a", "value": 1}}, "filter.value"),
        ({"filter": {"type": "eq", "key": "a", "value": 10**309}}, "filter.value"),
        ({"filter": {"type": "gte", "key": "a", "value": 2**53 + 1}}, "filter.value"),
        (
            {"filter": {"type": "or", "filters": [{"type": "eq", "key": "", "value": 1}]}},
            "filter.filters.0.key",
        ),
        ({"filter": "team = hr"}, "filter"),
        ({"mode": "semantic"}, "mode"),
        ({"mode": None, "filter": {"type": "and", "filters": []}}, "filter.filters"),
    ],
)
def test_a_malformed_filter_or_mode_is_a_422(api: Any, body: dict[str, Any], param: str) -> None:
    response = api.post(SEARCH, json={"query": "vacation", **body})
    assert_problem(response, 422, "validation_error", param=param)


def test_an_upload_replayed_with_other_metadata_is_refused(api: Any) -> None:
    def upload(metadata: dict[str, Any]) -> Any:
        return api.post(
            DOCS,
            files={"file": ("a.txt", b"Some text.", "text/plain")},
            data={"metadata": json.dumps(metadata)},
            headers={"Idempotency-Key": "upload-1"},
        )

    first = upload({"team": "hr"})
    assert first.status_code == 201
    assert upload({"team": "hr"}).json() == first.json()  # the replay
    assert_problem(upload({"team": "it"}), 409, "idempotency_key_reused")


def test_the_openapi_document_declares_the_fields_and_their_limits(
    core: AgentCore, api: Any
) -> None:
    document = api.get("/v1/openapi.json", key=False).json()
    schemas = document["components"]["schemas"]
    metadata = schemas["TextDocumentCreate"]["properties"]["metadata"]["anyOf"][0]
    assert metadata["maxProperties"] == 16
    assert metadata["propertyNames"]["maxLength"] == 64
    assert metadata["additionalProperties"]["anyOf"][0]["maxLength"] == 512
    assert schemas["DocumentUpdate"]["minProperties"] == 1  # metadata, access or both
    assert "metadata" in schemas["Document"]["properties"]
    search_request = schemas["SearchRequest"]["properties"]
    assert search_request["mode"]["anyOf"][0]["enum"] == ["vector", "keyword", "hybrid"]
    assert {"rank_score", "metadata"} <= set(schemas["SearchResult"]["properties"])
    assert schemas["ListFilter"]["properties"]["value"]["maxItems"] == 100
    assert schemas["CompoundFilter"]["properties"]["filters"]["maxItems"] == 32
    assert "knowledge" in schemas["AgentCreate"]["properties"]
    one = document["paths"]["/v1/knowledge/documents/{document_id}"]
    assert one["patch"]["x-scope"] == "write"
    upload = document["paths"]["/v1/knowledge/documents"]["post"]["requestBody"]["content"]
    assert "metadata" in upload["multipart/form-data"]["schema"]["properties"]
    events = schemas["WebhookSubscribeRequest"]["properties"]["events"]["items"]["enum"]
    assert {"document.ready", "document.failed"} <= set(events)

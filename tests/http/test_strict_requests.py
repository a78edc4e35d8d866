"""Strict request parsing over uvicorn and ASGI: no type coercion, no NUL characters,
a strictly parsed ``Authorization`` header, and no keys in the query string."""
# ruff: noqa: F811  (``api`` is the faster fixture imported from helpers)

from __future__ import annotations

import pytest
from helpers import api, assert_problem  # noqa: F401 (api: faster fixture)


def _agent(api) -> str:
    response = api.post("/v1/agents", json={"name": "strict", "role": "support"})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"query": "warranty", "top_k": True}, "top_k"),
        ({"query": "warranty", "top_k": "2"}, "top_k"),
        ({"query": "warranty", "top_k": 2.5}, "top_k"),
        ({"query": "warranty", "min_score": False}, "min_score"),
        ({"query": "warranty", "min_score": "0.5"}, "min_score"),
        ({"query": 7}, "query"),
        ({"query": ["warranty"]}, "query"),
    ],
)
def test_search_fields_are_not_coerced(api, body, param) -> None:
    assert_problem(
        api.post("/v1/knowledge/search", json=body), 422, "validation_error", param=param
    )


def test_search_accepts_exact_types(api) -> None:
    response = api.post(
        "/v1/knowledge/search", json={"query": "warranty", "top_k": 2, "min_score": 0}
    )
    assert response.status_code == 200, response.text
    # an integral number is an integer, as JSON Schema says
    response = api.post("/v1/knowledge/search", json={"query": "warranty", "top_k": 2.0})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"name": "a", "handoff_on_no_answer": 1}, "handoff_on_no_answer"),
        ({"name": "a", "handoff_on_no_answer": "true"}, "handoff_on_no_answer"),
        ({"name": 5}, "name"),
        ({"name": "a", "tools": [{"name": 3}]}, "tools.0.name"),
        ({"name": "a", "tools": [{"name": "t", "description": 1}]}, "tools.0.description"),
    ],
)
def test_agent_fields_are_not_coerced(api, body, param) -> None:
    assert_problem(api.post("/v1/agents", json=body), 422, "validation_error", param=param)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/agents", {"name": "a\u0000b"}, "name"),
        ("/v1/agents", {"name": "a", "system_prompt": "x\u0000"}, "system_prompt"),
        (
            "/v1/agents",
            {"name": "a", "tools": [{"name": "t", "description": "d\u0000"}]},
            "tools",
        ),
        (
            "/v1/agents",
            {
                "name": "a",
                "tools": [
                    {"name": "t", "parameters": {"type": "object", "properties": {"\u0000": {}}}}
                ],
            },
            "tools",
        ),
        ("/v1/knowledge/search", {"query": "war\u0000ranty"}, "query"),
        ("/v1/knowledge/documents", {"source": "a.txt", "text": "text\u0000"}, "text"),
        ("/v1/knowledge/documents", {"source": "a\u0000.txt", "text": "text"}, "source"),
        (
            "/v1/webhooks/subscribe",
            {"url": "http://127.0.0.1:9/h", "events": ["agent.action"], "description": "\u0000"},
            "description",
        ),
    ],
)
def test_nul_characters_are_refused(api, path, body, param) -> None:
    assert_problem(api.post(path, json=body), 422, "validation_error", param=param)
    assert api.get("/v1/agents").json()["agents"] == []
    assert api.get("/v1/knowledge/documents").json()["documents"] == []


def test_nul_in_chat_message_and_patch(api) -> None:
    agent = _agent(api)
    assert_problem(
        api.post("/v1/chat/message", json={"agentId": agent, "message": "hi\u0000"}),
        422,
        "validation_error",
        param="message",
    )
    assert_problem(
        api.patch(f"/v1/agents/{agent}", json={"name": "\u0000"}),
        422,
        "validation_error",
        param="name",
    )
    assert api.get(f"/v1/agents/{agent}").json()["name"] == "strict"


def _multipart(filename: bytes) -> tuple[bytes, dict[str, str]]:
    # by hand: httpx would percent-encode the NUL in the file name
    body = (
        b'--B\r\nContent-Disposition: form-data; name="file"; filename="'
        + filename
        + b'"\r\nContent-Type: text/plain\r\n\r\nSome text.\r\n--B--\r\n'
    )
    return body, {"Content-Type": "multipart/form-data; boundary=B"}


def test_nul_in_upload_file_name_is_refused(api) -> None:
    body, headers = _multipart(b"a\x00.txt")
    response = api.post("/v1/knowledge/documents", content=body, headers=headers)
    assert_problem(response, 422, "validation_error", param="file")
    assert api.get("/v1/knowledge/documents").json()["documents"] == []
    body, headers = _multipart(b"a.txt")
    ok = api.post("/v1/knowledge/documents", content=body, headers=headers)
    assert ok.status_code == 201, ok.text


@pytest.mark.parametrize(
    "header",
    [
        "Bearer  {key}",  # two spaces
        "Bearer\t{key}",
        "Bearer {key} extra",
        "Bearer{key}",
        "Bearer: {key}",
        "Basic {key}",
        "{key}",
        "Bearer",
    ],
)
def test_authorization_header_is_parsed_strictly(api, header) -> None:
    response = api.get(
        "/v1/auth/verify", key=None, headers={"Authorization": header.format(key=api.key)}
    )
    body = assert_problem(response, 401, "malformed_authorization")
    assert "Bearer <key>" in body["detail"]
    assert api.key not in response.text


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_bearer_scheme_is_case_insensitive(api, scheme) -> None:
    response = api.get(
        "/v1/auth/verify", key=None, headers={"Authorization": f"{scheme} {api.key}"}
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"api_key": "{key}"}, "api_key"),
        ({"key": "anything"}, "key"),
        ({"token": ""}, "token"),
        ({"Access_Token": "x"}, "Access_Token"),
        ({"limit": "2", "q": "{key}"}, "q"),
        ({"x": "whsec_c2VjcmV0"}, "x"),
        ({"x": "prefix-ak_live_abc"}, "x"),
    ],
)
def test_secrets_in_the_query_string_are_refused(api, params, param) -> None:
    params = {name: value.format(key=api.key) for name, value in params.items()}
    for path in ("/v1/auth/verify", "/v1/agents"):
        # with or without a valid header: the URL was logged either way
        for key in (None, True):
            response = api.get(path, params=params, key=key)
            body = assert_problem(response, 400, "secret_in_query", param=param)
            assert "Authorization" in body["detail"]
            assert api.key not in response.text


def test_ordinary_query_parameters_still_work(api) -> None:
    response = api.get("/v1/agents", params={"limit": "2", "status": "draft"})
    assert response.status_code == 200, response.text


def test_unknown_query_parameters_are_refused(api) -> None:
    body = assert_problem(
        api.get("/v1/agents", params={"limit": "2", "colour": "blue"}),
        422,
        "unknown_parameter",
        param="colour",
    )
    assert "limit" in body["detail"]
    assert_problem(
        api.get("/v1/auth/verify", params={"x": "1"}), 422, "unknown_parameter", param="x"
    )


def test_unknown_multipart_fields_are_refused(api) -> None:
    response = api.post(
        "/v1/knowledge/documents",
        files={"file": ("a.txt", b"Some text.", "text/plain")},
        data={"colour": "blue"},
    )
    assert_problem(response, 422, "unknown_parameter", param="colour")
    assert api.get("/v1/knowledge/documents").json()["documents"] == []


def test_empty_enum_and_integer_query_values_are_refused(api) -> None:
    assert_problem(api.get("/v1/agents?status="), 422, "validation_error", param="status")
    assert_problem(api.get("/v1/agents?limit="), 422, "validation_error", param="limit")
    assert api.get("/v1/agents?starting_after=").status_code == 200


def test_blank_means_what_str_strip_means(api) -> None:
    for blank in ("\x1e", "\u3000 ", "\x85\t"):
        response = api.post("/v1/knowledge/documents", json={"source": blank, "text": "x"})
        assert_problem(response, 422, "validation_error", param="source")


def test_nul_in_a_query_value_is_refused(api) -> None:
    response = api.get("/v1/agents?starting_after=%00%FF")
    assert_problem(response, 422, "validation_error", param="starting_after")

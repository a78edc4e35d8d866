"""A lone UTF-16 surrogate anywhere in a JSON body (``"\\ud800"``): a 422 naming the
field on every route, never a 500, on both stores, over uvicorn and ASGI (issue 36).

JSON may spell one, but no store, log or JSON answer can hold it: the body is refused
as it is decoded, so the REST routes, the OpenAI route and the MCP endpoint answer the
same way, in their own envelopes.
"""
# ruff: noqa: F811  (``api`` is the faster fixture imported from helpers)

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers import api, assert_problem  # noqa: F401 (api: faster fixture)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

JSON = {"Content-Type": "application/json"}
MCP = {**JSON, "Accept": "application/json, text/event-stream"}
ESCAPE = "\\ud800"  # how JSON spells the surrogate: the body itself is plain ASCII


def post(api, path: str, body: str, headers: dict[str, str] = JSON):
    """POST ``body`` (JSON text, ``@`` standing for the escaped lone surrogate)."""
    return api.post(path, content=body.replace("@", ESCAPE).encode(), headers=headers)


REST_CASES = [
    (
        "/v1/knowledge/documents",
        '{"source": "a.txt", "text": "hi", "metadata": {"k": "@"}}',
        "metadata.k",
    ),
    (
        "/v1/knowledge/documents",
        '{"source": "a.txt", "text": "hi", "metadata": {"k@": "v"}}',
        "metadata",
    ),
    ("/v1/knowledge/documents", '{"source": "a.txt", "text": "hi @"}', "text"),
    ("/v1/knowledge/documents", '{"source": "a@.txt", "text": "hi"}', "source"),
    ("/v1/agents", '{"name": "n@"}', "name"),
    ("/v1/agents", '{"name": "n", "system_prompt": "be @ kind"}', "system_prompt"),
    (
        "/v1/agents",
        '{"name": "n", "tools": [{"name": "t", "description": "d", "parameters":'
        ' {"type": "object", "properties": {"x": {"type": "string", "description": "@"}}}}]}',
        "tools.0.parameters.properties.x.description",
    ),
    ("/v1/knowledge/search", '{"query": "vacation @"}', "query"),
    (
        "/v1/knowledge/search",
        '{"query": "q", "filter": {"type": "eq", "key": "k", "value": "@"}}',
        "filter.value",
    ),
    ("/v1/chat/message", '{"agentId": "agt_x", "message": "hi @"}', "message"),
    (
        "/v1/webhooks/subscribe",
        '{"url": "http://127.0.0.1:9/@", "events": ["agent.action"]}',
        "url",
    ),
    ("/v1/agents", '{"name@": "n"}', None),  # a field name: no field to name
]


@pytest.mark.parametrize(("path", "body", "param"), REST_CASES)
def test_a_lone_surrogate_is_a_422_naming_the_field(api, path: str, body: str, param) -> None:
    problem = assert_problem(post(api, path, body), 422, "validation_error", param=param)
    assert "lone UTF-16 surrogate (U+D800)" in problem["detail"], problem
    assert problem["errors"] == [{"param": param, "message": problem["errors"][0]["message"]}]


def test_nothing_is_stored_and_the_workspace_still_lists(api) -> None:
    body = '{"source": "a.txt", "text": "hi", "metadata": {"nested": "x", "k": "@"}}'
    assert_problem(post(api, "/v1/knowledge/documents", body), 422, "validation_error")
    listed = api.get("/v1/knowledge/documents")
    assert listed.status_code == 200, listed.text
    assert listed.json()["documents"] == []


def test_a_surrogate_written_as_utf8_bytes_is_refused_the_same_way(api) -> None:
    # bytes ED A0 80: UTF-8's shape for U+D800, which a strict decoder refuses
    body = b'{"source": "a.txt", "text": "hi", "metadata": {"k": "\xed\xa0\x80"}}'
    response = api.post("/v1/knowledge/documents", content=body, headers=JSON)
    assert_problem(response, 422, "validation_error", param="metadata.k")


def test_a_utf16_body_with_a_lone_surrogate_is_refused(api) -> None:
    text = '{"source": "a.txt", "text": "hi", "metadata": {"k": "\udc00"}}'
    body = text.encode("utf-16-le", "surrogatepass")  # as json.loads, told by its first bytes
    response = api.post("/v1/knowledge/documents", content=body, headers=JSON)
    assert_problem(response, 422, "validation_error", param="metadata.k")


def test_a_surrogate_pair_is_one_character_and_is_kept(api) -> None:
    body = (
        '{"source": "a.txt", "text": "smile \\ud83d\\ude00", "metadata": {"k": "\\ud83d\\ude00"}}'
    )
    response = api.post("/v1/knowledge/documents", content=body.encode(), headers=JSON)
    assert response.status_code == 201, response.text
    assert response.json()["metadata"] == {"k": "\U0001f600"}
    # an escaped backslash before "ud800" is text, not an escape
    response = post(api, "/v1/knowledge/search", '{"query": "\\\\ud800 vacation"}')
    assert response.status_code == 200, response.text
    assert response.json()["query"] == "\\ud800 vacation"


def test_an_uploads_metadata_field_is_checked_the_same_way(api) -> None:
    response = api.post(
        "/v1/knowledge/documents",
        files={"file": ("a.txt", b"Some text.", "text/plain")},
        data={"metadata": '{"team": "hr", "k": "\\ud800"}'},  # the JSON text of the field
    )
    problem = assert_problem(response, 422, "validation_error", param="metadata.k")
    assert "lone UTF-16 surrogate" in problem["detail"]
    assert api.get("/v1/knowledge/documents").json()["documents"] == []


def test_the_openai_route_says_what_is_wrong_with_the_request(api) -> None:
    agent = api.post("/v1/agents", json={"name": "n"}).json()["id"]
    body = json.dumps({"model": agent, "messages": [{"role": "user", "content": "hi @"}]})
    response = post(api, "/v1/chat/completions", body)
    assert response.status_code == 400, response.text  # OpenAI's status for a bad value
    error = response.json()["error"]
    assert error["param"] == "messages.0.content", error
    assert error["code"] == "validation_error"
    assert "lone UTF-16 surrogate" in error["message"], error
    assert "Event data" not in error["message"]


def test_the_mcp_endpoint_answers_a_json_rpc_error_naming_the_argument(api) -> None:
    body = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call",'
        ' "params": {"name": "search_knowledge", "arguments": {"query": "q@"}}}'
    )
    response = post(api, "/v1/mcp", body, MCP)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["data"]["param"] == "params.arguments.query", error
    assert error["data"]["code"] == "validation_error"
    assert "lone UTF-16 surrogate" in error["message"]


# Property: whatever the route and wherever the surrogate, never a 500 ------------------

# each route with a body it would otherwise take (so that the surrogate, not another
# fault, is what a refusal is about), and the string fields to put one in
ROUTES: list[tuple[str, dict[str, Any], list[tuple[str | int, ...]]]] = [
    (
        "/v1/knowledge/documents",
        {"source": "a.txt", "text": "hello", "metadata": {"team": "hr"}},
        [("source",), ("text",), ("metadata", "team")],
    ),
    (
        "/v1/agents",
        {"name": "n", "system_prompt": "p", "tools": [{"name": "t", "description": "d"}]},
        [("name",), ("system_prompt",), ("tools", 0, "description")],
    ),
    ("/v1/knowledge/search", {"query": "vacation"}, [("query",)]),
    ("/v1/chat/message", {"agentId": "agt_x", "message": "hi"}, [("message",), ("agentId",)]),
    (
        "/v1/webhooks/subscribe",
        {"url": "http://127.0.0.1:9/hook", "events": ["agent.action"]},
        [("url",)],
    ),
    (
        "/v1/chat/completions",
        {"model": "agt_x", "messages": [{"role": "user", "content": "hi"}]},
        [("model",), ("messages", 0, "content")],
    ),
]


@st.composite
def texts_with_a_lone_surrogate(draw: st.DrawFn) -> str:
    before, after = draw(st.text(max_size=20)), draw(st.text(max_size=20))
    surrogate = chr(draw(st.integers(0xD800, 0xDFFF)))
    return before + surrogate + after


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    route=st.sampled_from(ROUTES),
    choice=st.integers(0, 2),
    text=texts_with_a_lone_surrogate(),
    as_key=st.booleans(),
)
def test_no_lone_surrogate_anywhere_is_a_500(
    api, route: tuple[str, dict[str, Any], list[Any]], choice: int, text: str, as_key: bool
) -> None:
    path, body, fields = route
    body = json.loads(json.dumps(body))  # a copy to change
    where = fields[choice % len(fields)]
    parent = body
    for part in where[:-1]:
        parent = parent[part]
    if as_key:  # the surrogate in a key of the object instead of a value
        parent[text] = parent.pop(where[-1])
    else:
        parent[where[-1]] = text
    # json.dumps escapes it (ensure_ascii): the body is valid ASCII JSON
    response = api.post(path, content=json.dumps(body).encode(), headers=JSON)
    assert response.status_code in (400, 422), (path, response.status_code, response.text)
    document = response.json()
    detail = document["error"]["message"] if "error" in document else document["detail"]
    assert "lone UTF-16 surrogate" in detail, document

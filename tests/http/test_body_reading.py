"""Reading JSON bodies on the request path's short cuts (``bodies.py``): one shared
decoder, the depth walk skipped only when it cannot matter, the ASGI messages read
directly; over a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import served_client
from helpers import assert_problem

from agentcore import AgentCore
from agentcore.errors import InvalidRequest
from agentcore_starlette import create_app
from agentcore_starlette.bodies import parse_json

DEPTH = 4
JSON = {"Content-Type": "application/json"}


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


# the parser by itself ---------------------------------------------------------------------


def test_depth_up_to_the_limit_passes_and_one_more_is_refused() -> None:
    assert parse_json(json.dumps(nested(DEPTH)).encode(), max_depth=DEPTH) == nested(DEPTH)
    with pytest.raises(InvalidRequest) as too_deep:
        parse_json(json.dumps(nested(DEPTH + 1)).encode(), max_depth=DEPTH)
    assert too_deep.value.code == "json_too_deep"
    lists = b'{"a": [[[1]]]}'  # four levels, counted through lists as well
    assert parse_json(lists, max_depth=DEPTH) == {"a": [[[1]]]}
    with pytest.raises(InvalidRequest):
        parse_json(b'{"a": [[[[1]]]]}', max_depth=DEPTH)


def test_brackets_inside_strings_are_not_nesting() -> None:
    # more brackets than the limit, all in strings: the depth walk runs and finds 1
    text = "{[" * 20
    assert parse_json(json.dumps({"q": text}).encode(), max_depth=DEPTH) == {"q": text}


def test_many_shallow_objects_pass() -> None:
    body = {"items": [{"a": 1}] * 50}  # 51 brackets, 3 levels
    assert parse_json(json.dumps(body).encode(), max_depth=DEPTH) == body


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-16-le", "utf-32"])
def test_every_json_encoding_reads_as_json_loads_reads_it(encoding: str) -> None:
    raw = json.dumps({"q": "café ☕"}, ensure_ascii=False).encode(encoding)
    assert parse_json(raw, max_depth=DEPTH) == json.loads(raw) == {"q": "café ☕"}


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b"[1, 2]", b'"text"', b'{"a": NaN}', b'{"a": -Infinity}', b"\xff\xfe\xfd{}"],
)
def test_bad_bodies_are_400(raw: bytes) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_json(raw, max_depth=DEPTH)
    assert refused.value.status == 400
    assert refused.value.code == "invalid_json"


# over HTTP --------------------------------------------------------------------------------


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    core = AgentCore.open(tmp_path / "b.db", rate_limit_test=1e6, start_workers=False)
    core.create_organization("acme")
    core.workspace("acme").knowledge.ingest_text("a.md", "Refunds are paid within 14 days.")
    secret = core.keys.create("acme", "test", ["read", "write"]).secret
    app = create_app(core, max_json_depth=DEPTH, max_body_bytes=2000)
    with served_client(app, secret) as http:
        yield http
    core.close()


def test_a_body_sent_in_pieces_is_read_whole(client: httpx.Client) -> None:
    body = json.dumps({"query": "when are refunds paid", "top_k": 1}).encode()

    def pieces() -> Iterator[bytes]:  # chunked: uvicorn hands the app several messages
        yield from (body[i : i + 7] for i in range(0, len(body), 7))

    response = client.post("/v1/knowledge/search", content=pieces(), headers=JSON)
    assert response.status_code == 200, response.text
    assert response.json()["results"][0]["source"] == "a.md"


def test_a_chunked_body_over_the_limit_is_413(client: httpx.Client) -> None:
    def pieces() -> Iterator[bytes]:
        yield b'{"query": "'
        for _ in range(30):
            yield b"x" * 100
        yield b'"}'

    response = client.post("/v1/knowledge/search", content=pieces(), headers=JSON)
    assert_problem(response, 413, "body_too_large")


def test_depth_limit_over_http(client: httpx.Client) -> None:
    ok = client.post("/v1/knowledge/search", json={"query": "refunds", "top_k": 1})
    assert ok.status_code == 200, ok.text
    deep = {"query": "refunds", "x": nested(DEPTH)}  # DEPTH + 1 levels in all
    assert_problem(client.post("/v1/knowledge/search", json=deep), 400, "json_too_deep")
    at_limit = {"query": "refunds", "x": nested(DEPTH - 1)}  # exactly DEPTH: an unknown field
    refused = client.post("/v1/knowledge/search", json=at_limit)
    assert_problem(refused, 422, "validation_error", param="x")  # read whole, then validated

"""The built-in ``/rerank`` client against a real fake rerank server on 127.0.0.1
(``openai_provider``'s scripted server): what it sends, how its answer reorders a
search, and that every failure (an error status, a time-out, malformed JSON, a bad
index, an answer too large, an address the SSRF guard refuses) leaves the first order,
is counted, and is never a 500."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import served_client
from openai_provider import FakeProvider, serve_provider

from agentcore import AgentCore
from agentcore.plugins.http_reranker import MAX_RESPONSE_BYTES
from agentcore_starlette import create_app

TOPICS = [f"Vacation policy note {n}: employees get {20 + n} vacation days." for n in range(8)]
QUERY = "vacation days"
KEY = "rk-secret-4f1c9e"


@pytest.fixture
def rerank_server() -> Iterator[FakeProvider]:
    with serve_provider() as server:
        yield server


def open_core(db: Path, server: FakeProvider, **settings: Any) -> AgentCore:
    options: dict[str, Any] = {
        "reranker_url": f"{server.url}/rerank",
        "outbound_allowed_networks": "127.0.0.0/8",
        **settings,
    }
    return AgentCore.open(db, entry_points=False, **options)


def fill(core: AgentCore) -> Any:
    ws = core.workspace("acme")
    for n, topic in enumerate(TOPICS):
        ws.knowledge.ingest_text(f"note-{n}.txt", topic)
    return ws


def failures(core: AgentCore, code: str) -> float:
    value = core.metrics.registry.get_sample_value(
        "agentcore_rerank_failures_total", {"reranker": "http", "code": code}
    )
    return value or 0.0


def test_the_request_follows_the_rerank_protocol(
    tmp_path: Path, rerank_server: FakeProvider
) -> None:
    rerank_server.reply({"results": [{"index": 2, "relevance_score": 0.9}]})
    rerank_server.reply({"results": [{"index": 0, "relevance_score": 0.5}]})
    with open_core(
        tmp_path / "db", rerank_server, reranker_api_key=KEY, reranker_model="rerank-v3.5"
    ) as core:
        ws = fill(core)
        plain = ws.knowledge.search(QUERY, top_k=8).results
        got = ws.knowledge.search(QUERY, top_k=2, rerank=True).results
    sent = rerank_server.requests[0]
    assert sent.path == "/v1/rerank"
    assert sent.json == {
        "query": QUERY,
        "documents": [r.chunk for r in plain],
        "top_n": 2,
        "model": "rerank-v3.5",
    }
    headers = {k.lower(): v for k, v in sent.headers.items()}
    assert headers["authorization"] == f"Bearer {KEY}"
    assert headers["content-type"] == "application/json"
    assert [(r.chunk, r.rerank_score) for r in got] == [(plain[2].chunk, 0.9)]


def test_without_key_or_model_neither_is_sent(tmp_path: Path, rerank_server: FakeProvider) -> None:
    rerank_server.reply({"results": []})
    with open_core(tmp_path / "db", rerank_server) as core:
        assert fill(core).knowledge.search(QUERY, rerank=True).results == []
    sent = rerank_server.requests[0]
    assert "model" not in sent.json
    assert "authorization" not in {k.lower() for k in sent.headers}


@pytest.mark.parametrize(
    "answer",
    [
        # Cohere, Jina, vLLM, Infinity: best first
        {"results": [{"index": 3, "relevance_score": 0.8}, {"index": 1, "relevance_score": 0.2}]},
        # Voyage's "data"; a server answering in the documents' order
        {"data": [{"index": 1, "relevance_score": 0.2}, {"index": 3, "relevance_score": 0.8}]},
        # TEI: a bare list with "score"
        [{"index": 1, "score": 0.2}, {"index": 3, "score": 0.8}],
    ],
)
def test_answers_are_read_best_first(
    tmp_path: Path, rerank_server: FakeProvider, answer: Any
) -> None:
    rerank_server.reply(answer)
    with open_core(tmp_path / "db", rerank_server) as core:
        ws = fill(core)
        plain = ws.knowledge.search(QUERY, top_k=8).results
        got = ws.knowledge.search(QUERY, top_k=2, rerank=True).results
    assert [(r.chunk, r.rerank_score) for r in got] == [
        (plain[3].chunk, 0.8),
        (plain[1].chunk, 0.2),
    ]


@pytest.mark.parametrize(
    ("status", "body", "code"),
    [
        (500, {"message": "internal"}, "provider_error"),
        (401, {"message": "invalid api token"}, "provider_error"),
        (200, b"<html>not json</html>", "provider_error"),
        (200, {"results": "none"}, "provider_error"),
        (200, {"results": [{"index": "0", "relevance_score": 1}]}, "provider_error"),
        (200, {"results": [{"index": 99, "relevance_score": 1.0}]}, "invalid_answer"),
        (200, {"results": [{"index": -1, "relevance_score": 1.0}]}, "invalid_answer"),
        (200, b" " * (MAX_RESPONSE_BYTES + 1) + b"[]", "provider_error"),
    ],
)
def test_a_failed_call_keeps_the_first_order(
    tmp_path: Path,
    rerank_server: FakeProvider,
    status: int,
    body: Any,
    code: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    rerank_server.reply(body, status=status)
    with open_core(tmp_path / "db", rerank_server, reranker_api_key=KEY) as core:
        ws = fill(core)
        plain = ws.knowledge.search(QUERY, top_k=3)
        with caplog.at_level(logging.WARNING, "agentcore.rerank"):
            assert ws.knowledge.search(QUERY, top_k=3, rerank=True) == plain
        assert failures(core, code) == 1
    assert "reranker 'http' failed" in caplog.text and KEY not in caplog.text


def test_a_slow_server_times_out(tmp_path: Path, rerank_server: FakeProvider) -> None:
    rerank_server.reply({"results": [{"index": 0, "relevance_score": 1.0}]}, delay=10)
    with open_core(tmp_path / "db", rerank_server, rerank_timeout=0.3) as core:
        ws = fill(core)
        plain = ws.knowledge.search(QUERY, top_k=3)
        assert ws.knowledge.search(QUERY, top_k=3, rerank=True) == plain
        assert failures(core, "provider_timeout") == 1


def test_the_ssrf_guard_refuses_a_loopback_server(
    tmp_path: Path, rerank_server: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    rerank_server.reply({"results": [{"index": 0, "relevance_score": 1.0}]})
    with caplog.at_level(logging.WARNING, "agentcore.rerank"):
        core = AgentCore.open(
            tmp_path / "db", entry_points=False, reranker_url=f"{rerank_server.url}/rerank"
        )
    with core:
        assert "loopback" in caplog.text  # said when the core opens
        ws = fill(core)
        plain = ws.knowledge.search(QUERY, top_k=3)
        assert ws.knowledge.search(QUERY, top_k=3, rerank=True) == plain
        assert failures(core, "provider_error") == 1
    assert rerank_server.requests == []  # never connected


def test_a_malformed_url_stops_the_core_opening(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="reranker_url"):
        AgentCore.open(tmp_path / "db", entry_points=False, reranker_url="ftp://example.com/x")


def test_over_http_a_failure_is_a_200_and_no_reranker_a_400(
    tmp_path: Path, rerank_server: FakeProvider
) -> None:
    rerank_server.reply({"message": "overloaded"}, status=503)
    rerank_server.reply({"results": [{"index": 1, "relevance_score": 3.5}]})
    with open_core(tmp_path / "db", rerank_server) as core:
        fill(core)
        secret = core.keys.create("acme", "test", ["read"]).secret
        with served_client(create_app(core), secret) as http:
            plain = http.post("/v1/knowledge/search", json={"query": QUERY, "top_k": 3})
            failed = http.post(
                "/v1/knowledge/search", json={"query": QUERY, "top_k": 3, "rerank": True}
            )
            assert failed.status_code == 200 and failed.json() == plain.json()
            reranked = http.post(
                "/v1/knowledge/search", json={"query": QUERY, "top_k": 3, "rerank": True}
            )
            assert reranked.status_code == 200
            (result,) = reranked.json()["results"]
            assert result["rerank_score"] == 3.5
            assert result["chunk"] == plain.json()["results"][1]["chunk"]
            assert all("rerank_score" not in r for r in plain.json()["results"])
            bad = http.post("/v1/knowledge/search", json={"query": QUERY, "rerank": "yes"})
            assert bad.status_code == 422
    with AgentCore.open(tmp_path / "db", entry_points=False) as bare:
        secret = bare.keys.create("acme", "test", ["read"]).secret
        with served_client(create_app(bare), secret) as http:
            refused = http.post("/v1/knowledge/search", json={"query": QUERY, "rerank": True})
    assert refused.status_code == 400
    problem = json.loads(refused.text)
    assert (problem["code"], problem["param"]) == ("reranker_unavailable", "rerank")

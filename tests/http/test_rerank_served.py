"""Reranked search over a real ``agentcore serve`` on both stores, its reranker a fake
``/rerank`` server on 127.0.0.1 named by ``AGENTCORE_RERANKER_URL``: results in the
reranker's order with ``rerank_score``, a failing reranker the first order (a 200,
counted in ``/metrics``), and an agent's ``knowledge.rerank`` reranking its retrieval."""

from __future__ import annotations

import httpx
import pytest
from helpers import cli_env, cli_json, start_serve
from openai_provider import serve_provider
from processes import reap

from agentcore import Client

pytestmark = [pytest.mark.both_stores, pytest.mark.slow]  # a server process per test

TOPICS = [f"Vacation policy note {n}: employees get {20 + n} vacation days." for n in range(6)]
QUERY = "vacation days"


def test_a_served_search_is_reranked_by_the_configured_server(store_url: str) -> None:
    keys = cli_json("init", "--org", "demo", "--json", db=store_url)["keys"]  # type: ignore[arg-type]
    key = next(k["secret"] for k in keys if k["environment"] == "test")
    with serve_provider() as reranker:
        reranker.reply({"results": [{"index": 4, "relevance_score": 0.75}]})
        reranker.reply({"message": "overloaded"}, status=503)
        reranker.reply({"results": [{"index": 0, "relevance_score": 0.5}]})
        reranker.reply({"results": [{"index": 1, "relevance_score": 0.9}]})
        env = {
            **cli_env(),
            "AGENTCORE_RERANKER_URL": f"{reranker.url}/rerank",
            "AGENTCORE_RERANKER_API_KEY": "rk-served-key",
            "AGENTCORE_OUTBOUND_ALLOWED_NETWORKS": "127.0.0.0/8",
        }
        process, url = start_serve(store_url, key, env=env)  # type: ignore[arg-type]
        try:
            with httpx.Client(
                base_url=f"{url}/v1", headers={"Authorization": f"Bearer {key}"}, timeout=30
            ) as http:
                for n, topic in enumerate(TOPICS):
                    made = http.post(
                        "/knowledge/documents", json={"source": f"n{n}.txt", "text": topic}
                    )
                    assert made.status_code in (200, 201), made.text
                plain = http.post("/knowledge/search", json={"query": QUERY, "top_k": 6}).json()
                body = {"query": QUERY, "top_k": 2, "rerank": True}
                reranked = http.post("/knowledge/search", json=body)
                assert reranked.status_code == 200, reranked.text
                (result,) = reranked.json()["results"]
                assert result["chunk"] == plain["results"][4]["chunk"]
                assert result["rerank_score"] == 0.75
                # the server fails: the first order, a 200 without rerank_score
                failed = http.post("/knowledge/search", json=body)
                assert failed.status_code == 200
                assert failed.json()["results"] == plain["results"][:2]
                metrics = httpx.get(f"{url}/metrics").text
                assert (
                    'agentcore_rerank_failures_total{code="provider_error",reranker="http"} 1.0'
                    in metrics
                )
                # an agent that reranks its retrieval
                agent = http.post(
                    "/agents", json={"name": "HR", "knowledge": {"rerank": True}}
                ).json()
                assert agent["knowledge"] == {"filter": None, "rerank": True}
                http.post(f"/agents/{agent['id']}/deploy")
                answer = http.post(
                    "/chat/message",
                    json={"agentId": agent["id"], "message": "How many vacation days?"},
                )
                assert answer.status_code == 200, answer.text
            # the Python client asks for it too
            with Client(url, key) as typed:
                [found] = typed.search(QUERY, top_k=1, rerank=True).results
                assert found.rerank_score == 0.9
                assert found.chunk == plain["results"][1]["chunk"]
        finally:
            reap(process)
    sent = [request.json for request in reranker.requests]
    assert [s["query"] for s in sent] == [QUERY, QUERY, "How many vacation days?", QUERY]
    assert sent[0]["documents"] == [r["chunk"] for r in plain["results"]]
    assert reranker.requests[0].headers["Authorization"] == "Bearer rk-served-key"

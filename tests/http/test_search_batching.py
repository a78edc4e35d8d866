"""Concurrent ``POST /v1/knowledge/search`` requests of one workspace, answered together.

Quick searches (the index current, recent runs within ``inline_budget``) that reach the
event loop in the same turn with the same options run as one ``search_many``: each
request still gets what it would get alone, its own error included.
"""

from __future__ import annotations

import asyncio
import http.client
import itertools
import json
import re
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from helpers import SEARCH_QUERIES, SEARCH_TOPICS, cli_env, start_serve
from processes import reap

import agentcore
from agentcore import AgentCore
from agentcore_starlette import create_app
from agentcore_starlette.batching import BATCH_MAX, BATCH_PROBE_EVERY, LONE_BATCHES

SEARCH = "/v1/knowledge/search"
QUERIES = SEARCH_QUERIES[:8]


def fill(core: AgentCore) -> str:
    """A read/write key of a workspace holding the topics."""
    core.create_organization("acme")
    secret = core.keys.create("acme", "test", ["read", "write"]).secret
    ws = core.authenticate(secret)
    for n, topic in enumerate(SEARCH_TOPICS[:8]):
        ws.knowledge.ingest_text(f"note-{n}.txt", topic, metadata={"n": n})
    return secret


@dataclass
class Batching:
    """The app of a core holding the topics, a key to it, and its batch count."""

    app: Any
    secret: str
    registry: Any

    def batched(self) -> float:
        """How many batches of several searches ran."""
        return self.registry.get_sample_value("agentcore_search_batch_size_count") or 0.0


@contextmanager
def batching(db_path: Path, **settings: Any) -> Iterator[Batching]:
    """A core (rate limits lifted) holding the topics, and its app."""
    with AgentCore.open(db_path, start_workers=False, rate_limit_test=1e6, **settings) as core:
        secret = fill(core)
        yield Batching(create_app(core), secret, core.metrics.registry)


def ranked(answer: dict[str, Any]) -> list[tuple[str, str]]:
    return [(r["document_id"], r["chunk"]) for r in answer["results"]]


def assert_as_alone(got: httpx.Response, alone: httpx.Response) -> None:
    assert got.status_code == alone.status_code == 200, got.text
    a, b = got.json(), alone.json()
    assert ranked(a) == ranked(b) and a["query"] == b["query"]
    for x, y in zip(a["results"], b["results"], strict=True):
        assert x["score"] == pytest.approx(y["score"], abs=1e-6)


async def asgi_post(app: Any, secret: str, body: dict[str, Any]) -> httpx.Response:
    """``POST SEARCH`` straight into the ASGI app: unlike a client, nothing on the way
    yields to the loop, so requests started together reach the app in the same turn."""
    data = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": SEARCH,
        "raw_path": SEARCH.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"asgi"),
            (b"authorization", f"Bearer {secret}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("asgi", 80),
    }
    sent: list[dict[str, Any]] = []
    read = False

    async def receive() -> dict[str, Any]:
        nonlocal read
        if read:  # the client stays connected: no more messages (none the app waits on)
            await asyncio.Event().wait()
        read = True
        return {"type": "http.request", "body": data, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = sent[0]
    content = b"".join(m.get("body", b"") for m in sent[1:])
    return httpx.Response(start["status"], headers=start["headers"], content=content)


async def started_together(app: Any, secret: str, bodies: list[dict[str, Any]]) -> list[Any]:
    return await asyncio.gather(*(asgi_post(app, secret, body) for body in bodies))


def test_concurrent_searches_are_answered_together_as_each_alone(db_path: Path) -> None:
    # a budget any batch fits in, so that the batches' sizes do not depend on how fast
    # this machine runs a search now (a batch holds what fits in inline_budget)
    with batching(db_path, inline_budget=10.0) as served:
        app, secret, batched = served.app, served.secret, served.batched

        async def go() -> None:
            # one at a time: the answers alone (the first runs on a thread, and its
            # time lets the next ones run on the loop); none is batched
            alone = [await asgi_post(app, secret, {"query": q}) for q in QUERIES]
            assert batched() == 0
            got = await started_together(app, secret, [{"query": q} for q in QUERIES])
            assert batched() == 1
            assert served.registry.get_sample_value("agentcore_search_batch_size_sum") == 8
            for g, a in zip(got, alone, strict=True):
                assert_as_alone(g, a)

            # options split the batches: the same top_k and min_score go together; a
            # filter or another mode runs alone
            mixed = [
                {"query": QUERIES[0], "top_k": 2},
                {"query": QUERIES[1], "top_k": 2},
                {"query": QUERIES[2], "top_k": 3},
                {"query": QUERIES[3], "filter": {"type": "eq", "key": "n", "value": 3}},
                {"query": QUERIES[4], "mode": "keyword"},
                {"query": QUERIES[5], "top_k": 2, "min_score": 0.1},
                {"query": QUERIES[6], "top_k": 3},
            ]
            alone = [await asgi_post(app, secret, body) for body in mixed]
            before = batched()
            got = await started_together(app, secret, mixed)
            assert batched() == before + 2  # top_k 2, and top_k 3
            for g, a in zip(got, alone, strict=True):
                assert_as_alone(g, a)
            assert [r["document_id"] for r in got[3].json()["results"]] == [
                alone[3].json()["results"][0]["document_id"]
            ]

        asyncio.run(go())


def test_a_bad_query_in_a_batch_gets_its_own_error(db_path: Path) -> None:
    # a budget any batch fits in: the four run as one batch however fast this machine is
    with batching(db_path, max_query_chars=40, inline_budget=10.0) as served:
        app, secret = served.app, served.secret

        async def go() -> None:
            alone = [await asgi_post(app, secret, {"query": q}) for q in QUERIES[:3]]
            bodies = [{"query": q} for q in QUERIES[:3]] + [{"query": "why " * 11}]
            *good, bad = await started_together(app, secret, bodies)
            for g, a in zip(good, alone, strict=True):
                assert_as_alone(g, a)
            assert bad.status_code == 422
            problem = bad.json()
            assert (problem["code"], problem["param"]) == ("query_too_long", "query")

        asyncio.run(go())


def batches(client: httpx.Client) -> float:
    """How many batches of several searches the server at ``client`` ran (``/metrics``)."""
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("agentcore_search_batch_size_count"):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.slow
def test_a_real_server_batches_concurrent_searches(tmp_path: Path) -> None:
    db = tmp_path / "batch.db"
    with AgentCore.open(db, start_workers=False) as core:
        secret = fill(core)
    # a budget any search fits in: searches run on the server's loop (where they can be
    # batched) however long this machine takes for one now
    env = {**cli_env(), "AGENTCORE_RATE_LIMIT_TEST": "100000", "AGENTCORE_INLINE_BUDGET": "10"}
    process, url = start_serve(db, secret, env=env)
    try:
        headers = {"Authorization": f"Bearer {secret}"}
        with httpx.Client(base_url=url, headers=headers) as client:
            warm = [client.post(SEARCH, json={"query": q}) for q in QUERIES]  # the first: a thread
            alone = [client.post(SEARCH, json={"query": q}) for q in QUERIES]
            assert ranked(warm[0].json()) == ranked(alone[0].json())
            assert batches(client) == 0

        # 8 keep-alive connections; each round sends all 8 requests before reading any
        # answer, as 8 busy clients do, so the server reads several in one turn: at least
        # 20 rounds, and more until it has (whether a round's requests reach the server
        # together depends on how this machine schedules the two processes)
        host, port = url.removeprefix("http://").split(":")
        connections = [http.client.HTTPConnection(host, int(port)) for _ in QUERIES]
        metrics = httpx.Client(base_url=url)
        give_up = time.monotonic() + 120  # only guards a server that never batches
        try:
            for rounds in itertools.count():
                if rounds >= 20 and batches(metrics) > 0:
                    break
                assert time.monotonic() < give_up, "concurrent searches were never batched"
                for connection, query in zip(connections, QUERIES, strict=True):
                    body = json.dumps({"query": query})
                    connection.request(
                        "POST", SEARCH, body, {**headers, "Content-Type": "application/json"}
                    )
                for connection, a in zip(connections, alone, strict=True):
                    answer = connection.getresponse()
                    got = httpx.Response(answer.status, content=answer.read())
                    assert_as_alone(got, a)
        finally:
            metrics.close()
            for connection in connections:
                connection.close()
    finally:
        reap(process)


def test_a_batch_holds_at_most_batch_max_calls(db_path: Path) -> None:
    # a budget that any number of these searches fits in: BATCH_MAX bounds the batch
    with batching(db_path, inline_budget=10.0) as served:
        app, secret, registry = served.app, served.secret, served.registry

        async def go() -> None:
            for query in QUERIES[:3]:  # the first runs on a thread, the next inline
                await asgi_post(app, secret, {"query": query})
            many = [{"query": QUERIES[n % len(QUERIES)]} for n in range(BATCH_MAX + 8)]
            got = await started_together(app, secret, many)
            assert {answer.status_code for answer in got} == {200}
            alone = {q: await asgi_post(app, secret, {"query": q}) for q in QUERIES}
            for body, answer in zip(many, got, strict=True):
                assert_as_alone(answer, alone[body["query"]])

        asyncio.run(go())
        assert registry.get_sample_value("agentcore_search_batch_size_count") == 2
        assert registry.get_sample_value("agentcore_search_batch_size_sum") == BATCH_MAX + 8


async def waits_a_turn(app: Any, secret: str, body: dict[str, Any]) -> bool:
    """Whether a search started alone waited a turn of the loop (for company) before it
    ran: one that runs at once is answered within the turn it starts in."""
    task = asyncio.ensure_future(asgi_post(app, secret, body))
    await asyncio.sleep(0)  # the loop's next turn: the task's first step runs in it
    waited = not task.done()
    assert (await task).status_code == 200
    return waited


def test_lone_calls_stop_waiting_and_company_is_noticed_again(db_path: Path) -> None:
    # a budget any batch fits in: every search after the first runs on the loop, and a
    # batch's size does not depend on how fast this machine runs a search now
    with batching(db_path, inline_budget=10.0) as served:
        app, secret, registry, batched = served.app, served.secret, served.registry, served.batched

        def batched_calls() -> float:
            return registry.get_sample_value("agentcore_search_batch_size_sum") or 0.0

        async def go() -> None:
            await asgi_post(app, secret, {"query": QUERIES[0]})  # the first runs on a thread
            # lone calls wait a turn for company until LONE_BATCHES in a row found none;
            # from then on only every BATCH_PROBE_EVERY-th waits
            waited = [
                await waits_a_turn(app, secret, {"query": QUERIES[n % len(QUERIES)]})
                for n in range(LONE_BATCHES + 3 * BATCH_PROBE_EVERY)
            ]
            probe = [False] * (BATCH_PROBE_EVERY - 1) + [True]
            assert waited == [True] * LONE_BATCHES + probe * 3
            assert batched() == 0
            # calls arriving together again: a burst longer than a probe's interval holds
            # a call that waits, and those after it in the burst join it
            burst = [{"query": QUERIES[n % len(QUERIES)]} for n in range(BATCH_PROBE_EVERY + 1)]
            got = await started_together(app, secret, burst)
            assert {answer.status_code for answer in got} == {200}
            assert batched() == 1 and 2 <= batched_calls() <= len(burst)
            # noticed: from then on calls wait again, and calls arriving together batch
            before = batched_calls()
            await started_together(app, secret, [{"query": q} for q in QUERIES])
            assert (batched(), batched_calls()) == (2, before + len(QUERIES))
            assert await waits_a_turn(app, secret, {"query": QUERIES[0]})

        asyncio.run(go())


class Clock:
    """The app's run clock in the next test: advanced by the embedder, never by time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class CostlyEmbedder:
    """Bag of words whose query embedding "takes" ``fixed + per_text * len(texts)``
    seconds of ``clock``; each embedding's thread, cost and size are recorded."""

    name = "costly-v1"
    dimension = 64

    def __init__(self, fixed: float, per_text: float) -> None:
        self.clock = Clock()
        self.fixed, self.per_text = fixed, per_text
        self.calls: list[tuple[str, float, int]] = []

    def embed(self, texts: Sequence[str], kind: str = "passage") -> Any:
        rows = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                rows[row, zlib.crc32(word.encode()) % self.dimension] += 1.0
        if kind == "query":
            cost = self.fixed + self.per_text * len(texts)
            self.clock.now += cost
            self.calls.append((threading.current_thread().name, cost, len(texts)))
        return rows

    @agentcore.hookimpl
    def agentcore_register_embedders(self, register: Any, settings: Any) -> None:
        register(self)


def test_batches_hold_the_loop_no_longer_than_inline_budget(db_path: Path) -> None:
    budget = 0.005
    embedder = CostlyEmbedder(fixed=0.001, per_text=0.0005)  # alone 1.5 ms, 8 at once 5 ms
    with AgentCore.open(
        db_path,
        plugins=[embedder],
        embedder=embedder.name,
        rate_limit_test=1e6,
        start_workers=False,
        inline_budget=budget,
    ) as core:
        core.create_organization("acme")
        secret = core.keys.create("acme", "test", ["read", "write"]).secret
        ws = core.authenticate(secret)
        for n in range(8):
            ws.knowledge.ingest_text(f"n{n}.txt", f"topic{n} refunds parcels note {n}")
        app = create_app(core, clock=embedder.clock)
        bodies = [{"query": f"topic{n % 8} refunds"} for n in range(32)]

        def on_loop() -> list[tuple[str, float, int]]:
            return [call for call in embedder.calls if call[0] == "MainThread"]

        async def go() -> None:
            for _ in range(3):  # the first on a thread, the next ones on the loop
                await asgi_post(app, secret, bodies[0])
            for _ in range(5):
                del embedder.calls[:]
                got = await started_together(app, secret, bodies)
                assert {answer.status_code for answer in got} == {200}
                assert sum(size for _, _, size in on_loop()) == 32  # all of them quick
                assert max(cost for _, cost, _ in on_loop()) <= budget
            assert max(size for _, _, size in on_loop()) > 1, "batched"

            # searches turn slower than the budget (alone 10.2 ms): after a few runs
            # they leave the loop for threads, batched or not
            embedder.fixed, embedder.per_text = 0.010, 0.0002
            for _ in range(5):
                await started_together(app, secret, bodies[:16])
            del embedder.calls[:]
            await asgi_post(app, secret, bodies[1])
            assert embedder.calls[-1][0] != "MainThread"

        asyncio.run(go())

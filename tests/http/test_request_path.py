"""The request path's shortcuts: quick searches on the event loop, and keys checked
against the store on every request, over a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import re
import threading
import zlib
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
from conftest import ServerThread, served_client
from helpers import assert_problem

import agentcore
from agentcore import AgentCore
from agentcore_starlette import HttpSettings, create_app
from agentcore_starlette.scheduling import RECENT_RUNS

WORKER_PREFIX = "agentcore-http"  # the names of the threads blocking handlers run on


class FakeClock:
    """The app's run-time clock; every query embedding advances it by ``step`` seconds,
    so a search "takes" exactly ``step`` (no timing in the assertions)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.step = 0.001

    def __call__(self) -> float:
        return self.now


class RecordingEmbedder:
    """A small deterministic bag-of-words embedder that records, for each query it
    embeds, the thread it ran on (and moves the fake clock on by one search)."""

    name = "recording-v1"
    dimension = 64

    def __init__(self) -> None:
        self.query_threads: list[str] = []
        self.clock = FakeClock()
        self.held = threading.Event()  # set when a query containing "hold" arrives
        self.release = threading.Event()  # which then waits for this

    def embed(self, texts: Sequence[str], kind: str = "passage") -> npt.NDArray[np.float32]:
        rows = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                rows[row, zlib.crc32(word.encode()) % self.dimension] += 1.0
        if kind == "query":
            self.query_threads.append(threading.current_thread().name)
            self.clock.now += self.clock.step
            if "hold" in texts[0]:
                self.held.set()
                assert self.release.wait(timeout=60)
        return rows

    def on_worker(self) -> bool:
        """Whether the last query was embedded on a worker thread (not the loop)."""
        return self.query_threads[-1].startswith(WORKER_PREFIX)


class Plugin:
    def __init__(self, embedder: RecordingEmbedder) -> None:
        self.embedder = embedder

    @agentcore.hookimpl
    def agentcore_register_embedders(self, register: Any, settings: Any) -> None:
        register(self.embedder)


@pytest.fixture
def embedder() -> RecordingEmbedder:
    return RecordingEmbedder()


@pytest.fixture
def served(tmp_path: Path, embedder: RecordingEmbedder) -> Iterator[dict[str, Any]]:
    """A core on a SQLite file with two documents, served by a real uvicorn server."""
    core = AgentCore.open(
        tmp_path / "path.db",
        plugins=[Plugin(embedder)],
        embedder=embedder.name,
        rate_limit_test=1e6,
        start_workers=False,
    )
    core.create_organization("acme")
    ws = core.workspace("acme", "test")
    ws.knowledge.ingest_text("refunds.md", "Refunds are paid within 14 days of the return.")
    ws.knowledge.ingest_text("shipping.md", "Parcels ship from Lisbon every weekday morning.")
    secret = core.keys.create("acme", "test", ["read", "write"]).secret
    app = create_app(core, clock=embedder.clock)
    with served_client(app, secret) as client:
        yield {"core": core, "client": client, "app": app, "db": tmp_path / "path.db"}
    core.close()


def search(client: httpx.Client, query: str = "when are refunds paid") -> httpx.Response:
    response = client.post("/v1/knowledge/search", json={"query": query, "top_k": 2})
    assert response.status_code == 200, response.text
    return response


def test_a_quick_search_runs_on_the_loop_after_its_first_run(served, embedder) -> None:
    first = search(served["client"])
    assert embedder.on_worker()  # no estimate yet: a worker thread
    second = search(served["client"])
    assert not embedder.on_worker()  # quick and current: on the event loop
    assert second.json() == first.json()
    assert first.json()["results"][0]["source"] == "refunds.md"
    for response in (first, second):  # the same headers either way
        assert response.headers["content-type"] == "application/json"
        assert response.headers["ratelimit-policy"] == '"per-key";q=1000000;w=1'
        assert response.headers["ratelimit"].startswith('"per-key";r=')
        assert response.headers["request-id"].startswith("req_")
    assert sorted(first.headers) == sorted(second.headers)


def test_an_inline_search_refuses_bad_input_as_a_thread_does(served, embedder) -> None:
    search(served["client"])
    search(served["client"])
    assert not embedder.on_worker()
    client = served["client"]
    response = client.post("/v1/knowledge/search", json={"query": "   "})
    assert_problem(response, 422, "empty_query", param="query")
    response = client.post("/v1/knowledge/search", json={"query": "refunds", "top_k": 0})
    assert_problem(response, 422, "top_k_out_of_range", param="top_k")
    search(served["client"])  # errors are not noted as run times: still inline
    assert not embedder.on_worker()


def test_inline_budget_zero_keeps_every_search_on_a_thread(tmp_path, embedder) -> None:
    core = AgentCore.open(
        tmp_path / "z.db", plugins=[Plugin(embedder)], embedder=embedder.name, rate_limit_test=1e6
    )
    core.create_organization("acme")
    core.workspace("acme", "test").knowledge.ingest_text("a.md", "Refunds take 14 days.")
    secret = core.keys.create("acme", "test", ["read"]).secret
    app = create_app(core, inline_budget=0)
    try:
        with ServerThread(app) as server, httpx.Client(base_url=server.url) as client:
            client.headers["Authorization"] = f"Bearer {secret}"
            for _ in range(3):
                search(client, "refunds")
                assert embedder.on_worker()
    finally:
        core.close()


def test_a_write_by_another_core_sends_the_next_search_to_a_thread(served, embedder) -> None:
    search(served["client"])
    search(served["client"])
    assert not embedder.on_worker()
    # another process on the same file (here: another core) adds a document
    with AgentCore.open(
        served["db"], plugins=[Plugin(embedder)], embedder=embedder.name, start_workers=False
    ) as other:
        other.workspace("acme", "test").knowledge.ingest_text(
            "returns.md", "Returns of opened software are refused at the warehouse."
        )
    found = search(served["client"], "opened software returns").json()["results"]
    assert embedder.on_worker()  # the index had to catch up: not on the loop
    assert found[0]["source"] == "returns.md"
    search(served["client"])
    assert not embedder.on_worker()  # current again


def test_searches_that_turn_slow_leave_the_loop(served, embedder) -> None:
    budget = HttpSettings().inline_budget
    for _ in range(RECENT_RUNS):
        search(served["client"])
    assert not embedder.on_worker()
    embedder.clock.step = budget * 10  # every search now takes ten budgets
    places = []
    for _ in range(RECENT_RUNS + 2):
        search(served["client"])
        places.append(embedder.on_worker())
    # inline until slow runs are most of the recent ones, then on threads
    slow_inline = RECENT_RUNS // 2 + 1
    assert places == [False] * slow_inline + [True] * (len(places) - slow_inline)
    embedder.clock.step = budget / 10  # quick again: back on the loop within a few runs
    for _ in range(RECENT_RUNS):
        search(served["client"])
    assert not embedder.on_worker()


def test_the_first_search_of_each_workspace_takes_a_thread(served, embedder) -> None:
    core = served["core"]
    core.create_organization("globex")
    core.workspace("globex", "test").knowledge.ingest_text("g.md", "Globex refunds in 3 days.")
    other = core.keys.create("globex", "test", ["read"]).secret
    search(served["client"])
    search(served["client"])
    assert not embedder.on_worker()
    response = served["client"].post(
        "/v1/knowledge/search",
        json={"query": "refunds"},
        headers={"Authorization": f"Bearer {other}"},
    )
    assert response.status_code == 200, response.text
    assert [r["source"] for r in response.json()["results"]] == ["g.md"]
    assert embedder.on_worker()


def test_a_quick_search_stays_on_the_loop_while_another_handler_runs(served, embedder) -> None:
    # whether another request's handler is running does not decide where a quick search
    # runs: deciding by it let a loaded server flip between two steady states by chance
    core = served["core"]
    core.create_organization("globex")
    core.workspace("globex", "test").knowledge.ingest_text("g.md", "Globex holds parcels.")
    other = core.keys.create("globex", "test", ["read"]).secret
    search(served["client"])
    search(served["client"])
    assert not embedder.on_worker()
    held: list[httpx.Response] = []

    def hold() -> None:
        with httpx.Client(base_url=str(served["client"].base_url), timeout=30) as client:
            held.append(
                client.post(
                    "/v1/knowledge/search",
                    json={"query": "hold parcels"},
                    headers={"Authorization": f"Bearer {other}"},
                )
            )

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert embedder.held.wait(timeout=60)  # globex's first search holds a worker thread
        assert embedder.on_worker()
        quick = search(served["client"])
        assert not embedder.on_worker()  # acme's quick search still runs on the loop
        assert quick.json()["results"][0]["source"] == "refunds.md"
        assert not held  # and was answered while globex's was still running
    finally:
        embedder.release.set()
        holder.join(timeout=30)
    assert held[0].status_code == 200, held[0].text
    assert [r["source"] for r in held[0].json()["results"]] == ["g.md"]


# keys: every request sees revocations made anywhere on the store ----------------------


@pytest.fixture
def key_server(tmp_path: Path) -> Iterator[dict[str, Any]]:
    core = AgentCore.open(tmp_path / "keys.db", rate_limit_test=1e6, start_workers=False)
    core.create_organization("acme")
    with ServerThread(create_app(core)) as server, httpx.Client(base_url=server.url) as client:
        yield {"core": core, "client": client, "db": tmp_path / "keys.db"}
    core.close()


def verify(client: httpx.Client, secret: str) -> httpx.Response:
    return client.get("/v1/auth/verify", headers={"Authorization": f"Bearer {secret}"})


def test_a_key_revoked_by_another_core_is_refused_on_the_next_request(key_server) -> None:
    client = key_server["client"]
    key = key_server["core"].keys.create("acme", "test", ["read"])
    for _ in range(3):  # the serving core has it cached by now
        assert verify(client, key.secret).status_code == 200
    with AgentCore.open(key_server["db"], start_workers=False) as other:
        other.keys.revoke(key.id)
    assert_problem(verify(client, key.secret), 401, "api_key_revoked")


def test_a_key_rotated_without_grace_by_another_core_is_refused_at_once(key_server) -> None:
    client = key_server["client"]
    key = key_server["core"].keys.create("acme", "test", ["read"])
    assert verify(client, key.secret).status_code == 200
    with AgentCore.open(key_server["db"], start_workers=False) as other:
        new = other.keys.rotate(key.id, grace=timedelta(0))
    assert_problem(verify(client, key.secret), 401, "api_key_expired")
    assert verify(client, new.secret).status_code == 200


def test_a_key_revoked_in_process_is_refused_on_the_next_request(key_server) -> None:
    client = key_server["client"]
    keep = key_server["core"].keys.create("acme", "test", ["read"])
    drop = key_server["core"].keys.create("acme", "test", ["read"])
    assert verify(client, drop.secret).status_code == 200
    assert verify(client, keep.secret).status_code == 200
    key_server["core"].keys.revoke(drop.id)
    assert_problem(verify(client, drop.secret), 401, "api_key_revoked")
    assert verify(client, keep.secret).status_code == 200  # the other key is untouched

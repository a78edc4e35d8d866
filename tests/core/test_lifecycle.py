"""One runtime per core: start() starts every background thread, stop() ends them all,
and two cores in one process share no pool, loop or thread.

Threads the library starts are named ``agentcore-…``; after ``stop()`` none is alive
(PostgreSQL's connection pool, ``agentcore-postgres-…``, belongs to the store and
ends with ``close()``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from conftest import ServerThread, served_client
from webhook_receiver import Receiver

import agentcore
from agentcore import AgentCore
from agentcore.knowledge.vectors import _kernels as kernels
from agentcore_starlette import create_app

TEXT = "The red pump needs oil every week in winter. Refunds take five days."


def ours(*, store_too: bool = True) -> list[str]:
    """Names of the library's live threads (with ``store_too=False``, not the store's)."""
    return sorted(
        t.name
        for t in threading.enumerate()
        if t.name.startswith("agentcore")
        and (store_too or not t.name.startswith("agentcore-postgres"))
    )


def wait_until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll ``condition`` until it holds (``timeout`` only guards a hang)."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.02)


def use_everything(core: AgentCore, receiver: Receiver) -> None:
    """Search (with scan helpers), ingest in the foreground and in the background, chat,
    and a webhook delivery: every pool and loop of the core gets work."""
    ws = core.workspace("acme", "test")
    ws.webhooks.subscribe(receiver.url("/hook"), ["agent.handoff"])
    ws.knowledge.ingest_text("pump.txt", TEXT)
    # thousands of chunks: a search scans more than one block, so helpers take some
    many = " ".join(
        f"Sentence {n} tells of valve {n % 97} and gasket {n % 89}." for n in range(3000)
    )
    ws.knowledge.ingest_text("many.txt", many)
    queued = ws.knowledge.ingest_text("later.txt", TEXT + " Later.", wait=False)
    wait_until(lambda: ws.knowledge.get(queued.id).status == "ready")
    assert ws.knowledge.search("pump oil").results
    agent = ws.agents.create(name="Support")
    ws.agents.deploy(agent.id)
    ws.chat.send(agent.id, "How long do refunds take?")
    ws.chat.send(agent.id, "I want to talk to a human, please.")  # an agent.handoff event
    assert receiver.wait_for(1)
    for n in range(30):  # deletes make compaction due: the maintenance loop gets work
        ws.knowledge.delete(ws.knowledge.ingest_text(f"gone{n}.txt", TEXT).id)


@pytest.mark.both_stores
def test_after_stop_no_thread_the_library_started_is_alive(
    store_url: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every search scans in blocks shared with the core's helper pool (if it has one)
    monkeypatch.setattr(kernels, "PARALLEL_MIN_ELEMENTS", 1)
    monkeypatch.setattr(kernels, "_BLOCK_BYTES", 1)
    assert ours(store_too=False) == []
    core = AgentCore.open(
        store_url,
        webhook_allowed_networks="127.0.0.0/8",
        rate_limit_test=1e6,
        key_touch_interval=0,
        chunk_target_chars=60,
        chunk_overlap_chars=0,
        max_text_chars=500_000,
    )
    try:
        core.create_organization("acme")
        secret = core.keys.create("acme", "test").secret
        with served_client(create_app(core), secret) as http:  # its lifespan starts the core
            assert core.runtime.started
            use_everything(core, receiver)
            assert http.get("/v1/agents").status_code == 200  # a handler thread, a key touch
            running = ours(store_too=False)
            for name in ("agentcore-index-maintenance", "agentcore-webhook-worker"):
                assert name in running
            assert any(name.startswith("agentcore-http") for name in running)
            assert any(name.startswith("agentcore-model") for name in running)
            assert any(name.startswith("agentcore-webhook_") for name in running)
            assert kernels.default_helpers() == 0 or any(
                name.startswith("agentcore-index_") for name in running
            )
        # the lifespan's shutdown stopped the core: nothing of it is left running
        assert not core.runtime.started
        assert ours(store_too=False) == []
        core.start()  # a stopped core starts again
        assert core.health().status == "ok"
        core.stop()
        assert ours(store_too=False) == []
    finally:
        core.close()
    assert ours() == []


def test_a_core_that_never_started_leaves_no_thread_either(tmp_path: Path) -> None:
    with AgentCore.open(tmp_path / "a.db") as core:
        ws = core.workspace("acme", "test")
        ws.knowledge.ingest_text("pump.txt", TEXT)
        agent = ws.agents.create(name="Support")
        ws.agents.deploy(agent.id)
        ws.chat.send(agent.id, "What does the pump need?")  # runs on the model pool
        assert [name for name in ours() if name.startswith("agentcore-model")]
        assert not core.runtime.started and core.health().status == "unhealthy"
    assert ours() == []


class FailingStartup:
    """A plugin whose ``agentcore_startup`` raises the first ``failures`` times."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.started = 0
        self.stopped = 0

    @agentcore.hookimpl
    def agentcore_startup(self, core: AgentCore) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("the model server is down")
        self.started += 1

    @agentcore.hookimpl
    def agentcore_shutdown(self, core: AgentCore) -> None:
        self.stopped += 1


def test_a_failing_startup_hook_stops_what_start_started(tmp_path: Path) -> None:
    """start() whose plugin start-up raises leaves no thread running and the node
    unhealthy; a later start() runs the hook again."""
    plugin = FailingStartup(failures=1)
    core = AgentCore.open(tmp_path / "a.db", plugins=[plugin], entry_points=False)
    try:
        with pytest.raises(RuntimeError, match="the model server is down"):
            core.start()
        assert ours(store_too=False) == []
        health = core.health()
        assert health.status == "unhealthy" and not health.started
        assert not any(loop.running for loop in health.loops)
        core.start()  # tried again, and this time it starts
        assert plugin.started == 1
        health = core.health()
        assert health.status == "ok" and health.started
        assert ours(store_too=False) != []
    finally:
        core.close()
    assert ours(store_too=False) == []


def test_a_failing_startup_hook_under_uvicorn_leaves_no_thread(tmp_path: Path) -> None:
    """The app's lifespan: uvicorn gives up on a start-up that raised (exit status 3),
    and the core's background threads are stopped all the same."""
    core = AgentCore.open(
        tmp_path / "a.db", plugins=[FailingStartup(failures=1)], entry_points=False
    )
    exits: list[object] = []

    def serve() -> None:
        served = ServerThread(create_app(core))
        try:
            served.server.run(sockets=[served.socket])
        except SystemExit as exc:  # uvicorn's way to say the start-up failed
            exits.append(exc.code)
        finally:
            served.socket.close()

    try:
        thread = threading.Thread(target=serve)
        thread.start()
        thread.join(60)
        assert not thread.is_alive() and exits == [3]
        assert ours(store_too=False) == []
        assert core.health().status == "unhealthy"
    finally:
        core.close()


def test_two_cores_in_one_process_share_nothing(tmp_path: Path, receiver: Receiver) -> None:
    a = AgentCore.open(tmp_path / "a.db", webhook_allowed_networks="127.0.0.0/8", webhook_workers=2)
    b = AgentCore.open(
        tmp_path / "b.db",
        webhook_allowed_networks="127.0.0.0/8",
        webhook_workers=3,
        embedder="hashing-v1",
        max_top_k=7,
    )
    try:
        assert a.runtime is not b.runtime
        assert a.model_pool is not b.model_pool and a.model_pool() is not b.model_pool()
        assert a.pm is not b.pm and a.indexes is not b.indexes
        a.start()
        b.start()
        for core, name in ((a, "a"), (b, "b")):
            ws = core.workspace("acme", "test")
            ws.webhooks.subscribe(receiver.url(f"/{name}"), ["agent.action"])
            ws.knowledge.ingest_text(f"{name}.txt", TEXT)
        workers = [t for t in threading.enumerate() if t.name == "agentcore-webhook-worker"]
        assert len(workers) == 2  # one loop per core
        a.stop()
        assert [h.name for h in a.runtime.health() if h.running] == []
        assert all(h.running for h in b.runtime.health())
        assert b.health().status == "ok"
        # b still delivers, searches and keeps its own settings
        ws = b.workspace("acme", "test")
        event = ws.publish("agent.action", {"n": 1})
        assert receiver.wait_for(1, path="/b")
        assert receiver.requests("/b")[0].webhook_id == event.id
        assert ws.knowledge.search("pump", top_k=7).results
        with pytest.raises(Exception, match="top_k"):
            ws.knowledge.search("pump", top_k=8)
        a.workspace("acme", "test").publish("agent.action", {"n": 2})  # a is stopped
        time.sleep(0.5)
        assert receiver.count("/a") == 0
        assert len([t for t in threading.enumerate() if t.name == "agentcore-webhook-worker"]) == 1
    finally:
        a.close()
        b.close()
    assert ours() == []


def test_health_over_http_needs_no_key_and_shows_no_tenant_data(tmp_path: Path) -> None:
    core = AgentCore.open(tmp_path / "h.db", rate_limit_test=1e6)
    try:
        core.create_organization("acme-secret-org")
        secret = core.keys.create("acme-secret-org", "test").secret
        with served_client(create_app(core), secret) as http:
            url = str(http.base_url).rstrip("/") + "/v1/health"
            health = httpx.get(url)  # no Authorization header
            assert health.status_code == 200, health.text
            body = health.json()
            assert body["status"] == "ok" and body["store"] == "ok" and body["started"]
            names = {loop["name"] for loop in body["loops"]}
            assert {"agentcore-webhook-worker", "agentcore-index-maintenance"} <= names
            assert "agentcore-checkpoint" in names
            assert all(loop["running"] for loop in body["loops"])
            assert health.headers["cache-control"] == "no-store"
            for private in ("acme-secret-org", secret, secret[:12], "org_"):
                assert private not in health.text

            # a loop that is not running takes the node out (as a load balancer sees it)
            worker = next(
                loop for loop in core.runtime._loops if loop.name == "agentcore-webhook-worker"
            )
            worker.stop(5.0)
            down = httpx.get(url)
            assert down.status_code == 503
            assert down.headers["content-type"].startswith("application/problem+json")
            problem = down.json()
            assert problem["code"] == "unhealthy" and problem["status"] == 503
            assert "agentcore-webhook-worker" in problem["detail"]
            assert problem["store"] == "ok" and problem["request_id"]
            worker.start()
            assert httpx.get(url).status_code == 200
    finally:
        core.close()


@pytest.mark.parametrize("index_dir", ["auto", "off"])
def test_without_a_running_loop_wait_for_maintenance_runs_it_here(
    tmp_path: Path, index_dir: str
) -> None:
    with AgentCore.open(tmp_path / "m.db", index_dir=index_dir) as core:
        ws = core.workspace("acme", "test")
        for rounds in range(2):  # never started, then started and stopped again
            documents = [ws.knowledge.ingest_text(f"d{rounds}-{n}.txt", TEXT) for n in range(12)]
            assert ws.knowledge.search("pump").results  # the index is loaded
            for document in documents[:10]:
                ws.knowledge.delete(document.id)
            index = core.indexes.get(ws.organization_id, "test")
            assert index.maintenance_due()  # nobody ran it: no loop runs
            assert core.indexes.wait_for_maintenance(30)
            assert not index.maintenance_due()
            assert all(part.dead.size == 0 for part in index.parts())
            core.start()
            core.stop()
        assert ours() == []

"""Soak test: 8 writer and 32 reader threads on ONE SQLite file store.

Writers create and update agents, ingest small documents and publish events; readers
list and get agents, search and verify keys. For ``AGENTCORE_SOAK_SECONDS`` (default
30) no exception may reach a caller (in particular no ``database is locked``), and no
write may be lost: every agent exists with its last update, every document is listed,
every event has its delivery, and the counts match.
"""

from __future__ import annotations

import os
import random
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentcore import AgentCore, Workspace
from agentcore.schema import Agent, Document

WRITERS = 8
READERS = 32
SOAK_SECONDS = float(os.environ.get("AGENTCORE_SOAK_SECONDS", "30"))
WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
]


@dataclass
class WriterLog:
    """What one writer got back from the core: the truth the end state must match."""

    agents: dict[str, str] = field(default_factory=dict)  # id -> last system_prompt
    documents: list[str] = field(default_factory=list)
    events: int = 0
    operations: int = 0


@dataclass
class Shared:
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    agent_ids: list[str] = field(default_factory=list)  # appended by writers, read by readers
    reads: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, who: str) -> None:
        with self.lock:
            self.errors.append(f"{who}: {traceback.format_exc()}")
        self.stop.set()


@pytest.fixture
def soak_core(tmp_path: Path) -> Iterator[AgentCore]:
    core = AgentCore.open(
        tmp_path / "soak.db",
        webhook_allowed_networks="127.0.0.0/8",
        start_workers=False,  # deliveries stay pending: they are counted, not sent
    )
    yield core
    core.close()


def writer(ws: Workspace, number: int, log: WriterLog, shared: Shared, deadline: float) -> None:
    rng = random.Random(number)
    step = 0
    try:
        while time.monotonic() < deadline and not shared.stop.is_set():
            step += 1
            kind = step % 4
            if kind == 0 or not log.agents:
                agent = ws.agents.create(name=f"w{number}-{step}", system_prompt=f"v{step}")
                assert agent.system_prompt == f"v{step}"
                log.agents[agent.id] = agent.system_prompt
                shared.agent_ids.append(agent.id)
            elif kind == 1:
                agent_id = rng.choice(list(log.agents))
                updated = ws.agents.update(agent_id, system_prompt=f"v{step}")
                assert updated.system_prompt == f"v{step}"
                log.agents[agent_id] = updated.system_prompt
            elif kind == 2:
                words = " ".join(rng.choice(WORDS) for _ in range(40))
                document = ws.knowledge.ingest_text(f"w{number}-{step}.txt", f"soak {words}.")
                log.documents.append(document.id)
            else:
                ws.publish("agent.action", {"writer": number, "step": step})
                log.events += 1
            log.operations += 1
    except Exception:
        shared.fail(f"writer {number}")


def reader(core: AgentCore, secret: str, number: int, shared: Shared, deadline: float) -> None:
    rng = random.Random(1000 + number)
    reads = 0
    try:
        while time.monotonic() < deadline and not shared.stop.is_set():
            ws = core.authenticate(secret)  # the key check every request does
            assert ws.verify().organization == "soak"
            choice = reads % 3
            if choice == 0:
                page = ws.agents.list(limit=100)
                assert len(page.agents) <= 100
            elif choice == 1 and shared.agent_ids:
                agent_id = rng.choice(shared.agent_ids)
                assert ws.agents.get(agent_id).id == agent_id
            else:
                found = ws.knowledge.search(rng.choice(WORDS), top_k=5)
                assert all(-1.0001 <= r.score <= 1.0001 for r in found.results)
            reads += 1
    except Exception:
        shared.fail(f"reader {number}")
    with shared.lock:
        shared.reads += reads


def _all(fetch: Callable[[str | None], tuple[list[str], bool]]) -> list[str]:
    """Every id of a paginated listing, bounded."""
    ids: list[str] = []
    cursor = None
    for _ in range(10_000):
        page, more = fetch(cursor)
        ids.extend(page)
        if not more:
            return ids
        cursor = page[-1]
    raise AssertionError("pagination did not end")


@pytest.mark.slow
def test_soak_writers_and_readers_on_one_sqlite_file(soak_core: AgentCore) -> None:
    core = soak_core
    core.create_organization("soak")
    secret = core.keys.create("soak", "test", ["read", "write"]).secret
    ws = core.workspace("soak", "test")
    webhook = ws.webhooks.subscribe("http://127.0.0.1:9/soak", ["agent.action"], None)

    shared = Shared()
    logs = [WriterLog() for _ in range(WRITERS)]
    deadline = time.monotonic() + SOAK_SECONDS
    threads = [
        threading.Thread(
            target=writer, args=(core.authenticate(secret), n, logs[n], shared, deadline)
        )
        for n in range(WRITERS)
    ] + [
        threading.Thread(target=reader, args=(core, secret, n, shared, deadline))
        for n in range(READERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=SOAK_SECONDS + 60)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    assert not shared.errors, "\n".join(shared.errors[:3])

    # enough happened for the test to mean something
    writes = sum(log.operations for log in logs)
    assert writes >= WRITERS * 4, writes
    assert shared.reads >= READERS * 3, shared.reads
    print(f"soak {SOAK_SECONDS:g}s: {writes} writes, {shared.reads} reads")

    # no write lost: agents with their last update, documents, events
    expected_agents = {aid: prompt for log in logs for aid, prompt in log.agents.items()}
    for agent_id, prompt in expected_agents.items():
        assert ws.agents.get(agent_id).system_prompt == prompt, agent_id

    def agent_page(cursor: str | None) -> tuple[list[str], bool]:
        page = ws.agents.list(limit=100, starting_after=cursor)
        return [a.id for a in page.agents], page.has_more

    def document_page(cursor: str | None) -> tuple[list[str], bool]:
        page = ws.knowledge.list(limit=100, starting_after=cursor)
        return [d.id for d in page.documents], page.has_more

    def delivery_page(cursor: str | None) -> tuple[list[str], bool]:
        page = ws.webhooks.deliveries(webhook.id, limit=100, starting_after=cursor)
        return [d.id for d in page.deliveries], page.has_more

    listed_agents = _all(agent_page)
    assert len(listed_agents) == len(set(listed_agents)) == len(expected_agents)
    assert set(listed_agents) == set(expected_agents)
    expected_documents = [d for log in logs for d in log.documents]
    listed_documents = _all(document_page)
    assert sorted(listed_documents) == sorted(expected_documents)
    assert len(_all(delivery_page)) == sum(log.events for log in logs)
    # every document is searchable: its chunks made it into the index
    found = ws.knowledge.search("soak", top_k=100).results
    assert found and {r.document_id for r in found} <= set(expected_documents)


def test_results_survive_reopening_the_file(tmp_path: Path) -> None:
    """What threads wrote through one core is there for the next process (file, not cache)."""
    path = tmp_path / "reopen.db"
    agents: list[Agent] = []
    documents: list[Document] = []
    with AgentCore.open(path, start_workers=False) as core:
        ws = core.workspace("soak", "test")
        lock = threading.Lock()

        def work(n: int) -> None:
            for step in range(5):
                agent = ws.agents.create(name=f"{n}-{step}")
                document = ws.knowledge.ingest_text(f"{n}-{step}.txt", f"reopen text {n} {step}")
                with lock:
                    agents.append(agent)
                    documents.append(document)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    with AgentCore.open(path, start_workers=False) as core:
        ws = core.workspace("soak", "test", create=False)
        assert {a.id for a in ws.agents.list(limit=100).agents} == {a.id for a in agents}
        assert {d.id for d in ws.knowledge.list(limit=100).documents} == {d.id for d in documents}
        assert len(ws.knowledge.search("reopen", top_k=100).results) == 40

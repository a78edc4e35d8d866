"""Several nodes on one store: real ``agentcore serve`` processes sharing a database.

Each test starts two nodes (or one node with ``--workers 2``) on the same store URL and
drives them over real HTTP: a write on one node is seen by a search on the other at
once; one Idempotency-Key on both nodes makes one resource; events triggered on both
nodes reach a real receiver once each; a node killed with SIGKILL mid-delivery has its
deliveries sent by the other node once their lease lapses; token buckets are shared.
Parametrised by store, so every other store runs the same tests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from nodes import Node
from webhook_receiver import Receiver, Reply

from agentcore import AgentCore

pytestmark = [pytest.mark.slow, pytest.mark.both_stores]

HUMAN = "I want to talk to a human, please."  # each such message is one agent.handoff event


@pytest.fixture
def secret(store_url: str) -> str:
    with AgentCore.open(store_url, start_workers=False) as core:
        core.create_organization("acme")
        return core.keys.create("acme", "test", ["read", "write"]).secret


@pytest.fixture
def nodes(store_url: str, secret: str, tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    a = Node(store_url, tmp_path / "a.log")
    try:
        b = Node(store_url, tmp_path / "b.log")
    except BaseException:
        a.stop()
        raise
    yield a, b
    for node in (a, b):
        node.stop()


def _search(node: Node, key: str, query: str) -> list[str]:
    response = node.request("POST", "/v1/knowledge/search", key, json={"query": query})
    assert response.status_code == 200, response.text
    return [r["source"] for r in response.json()["results"]]


TOPICS = [
    "The red pump needs oil every week in winter.",
    "Quantum flux capacitors hum when charged by zebras.",
    "Vintage typewriters jam on humid mornings in Lisbon.",
    "Saffron risotto wants patience and warm stock.",
]


def test_a_write_on_one_node_is_seen_by_a_search_on_the_other(
    nodes: tuple[Node, Node], secret: str
) -> None:
    a, b = nodes
    assert _search(b, secret, "pump") == []  # B has loaded the (empty) index
    for n, topic in enumerate(TOPICS):
        writer, reader = (a, b) if n % 2 == 0 else (b, a)
        made = writer.request(
            "POST", "/v1/knowledge/documents", secret, json={"source": f"t{n}.txt", "text": topic}
        )
        assert made.status_code in (200, 201), made.text
        assert _search(reader, secret, topic)[0] == f"t{n}.txt"
    gone = a.request("DELETE", f"/v1/knowledge/documents/{made.json()['id']}", secret)
    assert gone.status_code == 200, gone.text
    assert f"t{len(TOPICS) - 1}.txt" not in _search(b, secret, TOPICS[-1])


def test_one_idempotency_key_on_both_nodes_makes_one_agent(
    nodes: tuple[Node, Node], secret: str
) -> None:
    a, b = nodes
    body = {"name": "once", "role": "support"}
    first = a.request("POST", "/v1/agents", secret, json=body, headers={"Idempotency-Key": "k-1"})
    again = b.request("POST", "/v1/agents", secret, json=body, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == again.status_code and first.status_code in (200, 201)
    assert again.json()["id"] == first.json()["id"]

    # the same key sent to both nodes at the same instant: still one agent
    barrier = threading.Barrier(2)
    results: list[httpx.Response] = []

    def send(node: Node) -> None:
        barrier.wait()
        results.append(
            node.request(
                "POST",
                "/v1/agents",
                secret,
                json={"name": "race", "role": "support"},
                headers={"Idempotency-Key": "k-2"},
            )
        )

    threads = [threading.Thread(target=send, args=(node,)) for node in (a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    statuses = sorted(r.status_code for r in results)
    assert statuses in ([200, 200], [201, 201], [200, 409], [201, 409]), statuses
    ids = {r.json()["id"] for r in results if r.status_code < 300}
    assert len(ids) == 1
    listed = a.request("GET", "/v1/agents", secret, params={"limit": 100}).json()
    assert sorted(agent["name"] for agent in listed["agents"]) == ["once", "race"]


def _deployed_agent(node: Node, secret: str) -> str:
    agent = node.request("POST", "/v1/agents", secret, json={"name": "bot", "role": "support"})
    assert agent.status_code in (200, 201), agent.text
    agent_id: str = agent.json()["id"]
    assert node.request("POST", f"/v1/agents/{agent_id}/deploy", secret).status_code == 200
    return agent_id


def _subscribe(node: Node, secret: str, url: str) -> None:
    made = node.request(
        "POST", "/v1/webhooks/subscribe", secret, json={"url": url, "events": ["agent.handoff"]}
    )
    assert made.status_code in (200, 201), made.text


def _handoff(node: Node, secret: str, agent_id: str) -> None:
    sent = node.request(
        "POST", "/v1/chat/message", secret, json={"agentId": agent_id, "message": HUMAN}
    )
    assert sent.status_code == 200, sent.text


def test_events_triggered_on_both_nodes_arrive_once_each(
    nodes: tuple[Node, Node], secret: str
) -> None:
    a, b = nodes
    with Receiver() as receiver:
        _subscribe(a, secret, receiver.url("/hook"))
        agent_id = _deployed_agent(b, secret)
        for n in range(10):
            _handoff(a if n % 2 == 0 else b, secret, agent_id)
        assert receiver.wait_for_ids(10), receiver.count()
        # both nodes poll the outbox every second: give a duplicate time to show up
        assert not receiver.wait_for(11, timeout=3)
        assert receiver.count() == 10 and len(receiver.distinct_ids()) == 10


def test_a_node_killed_mid_delivery_has_its_deliveries_sent_by_the_other(
    nodes: tuple[Node, Node], secret: str
) -> None:
    a, b = nodes
    with Receiver() as receiver:
        # the first three attempts hang past the time-out: node A is killed meanwhile
        receiver.script("/hook", [Reply(hang=60)] * 3, then=Reply(200))
        _subscribe(a, secret, receiver.url("/hook"))
        agent_id = _deployed_agent(a, secret)
        for _ in range(3):
            _handoff(a, secret, agent_id)
        assert receiver.wait_for(3), receiver.count()
        a.process.kill()  # SIGKILL: its leases stay held in the store
        a.process.wait(timeout=10)
        killed_at = time.time()
        first_ids = receiver.distinct_ids()
        assert len(first_ids) == 3
        # B takes them over once the lease (time-out + 10 s) lapses, or retries its own
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            after = {r.webhook_id for r in receiver.requests() if r.wall > killed_at}
            if after >= first_ids:
                break
            time.sleep(0.2)
        after = {r.webhook_id for r in receiver.requests() if r.wall > killed_at}
        assert after == first_ids, (after, first_ids, b.log.read_text()[-2000:])


def test_nodes_share_one_rate_limit(store_url: str, secret: str, tmp_path: Path) -> None:
    # one request per 5 s: however slowly a loaded machine sends them, one bucket for
    # both nodes allows 1 + elapsed // 5 of them, and a bucket per node at least 2
    env = {"AGENTCORE_RATE_LIMIT_BACKEND": "store", "AGENTCORE_RATE_LIMIT_TEST": "0.2"}
    a = Node(store_url, tmp_path / "a.log", **env)
    try:
        b = Node(store_url, tmp_path / "b.log", **env)
        try:
            with httpx.Client(base_url=a.base) as to_a, httpx.Client(base_url=b.base) as to_b:
                headers = {"Authorization": f"Bearer {secret}"}
                began = time.monotonic()
                statuses = [
                    (to_a if n % 2 == 0 else to_b).get("/v1/auth/verify", headers=headers)
                    for n in range(6)
                ]
                elapsed = time.monotonic() - began
        finally:
            b.stop()
    finally:
        a.stop()
    codes = [r.status_code for r in statuses]
    assert set(codes) <= {200, 429} and codes[0] == 200, codes
    assert codes.count(200) <= 1 + int(elapsed // 5), (codes, elapsed)
    refused = next(r for r in statuses if r.status_code == 429) if 429 in codes else None
    if elapsed < 5:
        assert refused is not None and int(refused.headers["Retry-After"]) <= 5


def test_serve_workers_share_the_store_and_exit_cleanly(
    store_url: str, secret: str, tmp_path: Path
) -> None:
    node = Node(store_url, tmp_path / "w.log", workers=2)
    try:
        with Receiver() as receiver:
            _subscribe(node, secret, receiver.url("/hook"))
            agent_id = _deployed_agent(node, secret)
            for n, topic in enumerate(TOPICS):
                made = node.request(
                    "POST",
                    "/v1/knowledge/documents",
                    secret,
                    json={"source": f"t{n}.txt", "text": topic},
                )
                assert made.status_code in (200, 201), made.text
                # a fresh connection each time, so the workers take turns answering
                assert _search(node, secret, topic)[0] == f"t{n}.txt"
            for _ in range(10):
                _handoff(node, secret, agent_id)
            assert receiver.wait_for_ids(10), receiver.count()
            assert not receiver.wait_for(11, timeout=3)
    finally:
        status = node.stop()
    assert status == 0, node.log.read_text()[-3000:]
    assert "Traceback" not in node.log.read_text()


def test_serve_workers_share_one_rate_limit(
    store_url: str, store_kind: str, secret: str, tmp_path: Path
) -> None:
    # one request per 5 s; a fresh connection each time, so both workers answer: one
    # bucket allows 1 + elapsed // 5 of them, a bucket per worker would allow 2 at once
    node = Node(store_url, tmp_path / "w.log", workers=2, AGENTCORE_RATE_LIMIT_TEST="0.2")
    try:
        headers = {"Authorization": f"Bearer {secret}"}
        began = time.monotonic()
        codes = [
            httpx.get(f"{node.base}/v1/auth/verify", headers=headers, timeout=30).status_code
            for _ in range(8)
        ]
        elapsed, wall = time.monotonic() - began, time.time()
    finally:
        status = node.stop()
    assert status == 0, node.log.read_text()[-3000:]
    assert set(codes) <= {200, 429} and codes[0] == 200, codes
    assert codes.count(200) <= 1 + int(elapsed // 5), (codes, elapsed)
    with AgentCore.open(store_url, start_workers=False) as core:
        key_id = core.authenticate(secret).rate_limit_id
        # the store's own bucket for the key: untouched on SQLite (the workers shared a
        # file beside it, no write per request), spent on PostgreSQL (the store keeps it)
        take = core.store.take_token(key_id, rate=0.2, burst=1, now=wall)
    if store_kind == "sqlite":
        assert take.allowed
        assert Path(f"{store_url}.rate-limits").exists()
    else:
        assert not take.allowed


def _scraped(node: Node, name: str) -> list[float]:
    """The values of metric ``name`` in a ``GET /metrics`` of ``node``."""
    text = httpx.get(node.base + "/metrics", timeout=30).text
    return [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]


def test_serve_workers_share_the_nodes_connection_budget(
    store_url: str, store_kind: str, tmp_path: Path
) -> None:
    # each of 3 workers gets a third of the default pool (10 // 3), at least 2; a pool
    # size the operator set holds for each process. The gauge is summed over the workers
    # that have set it (each at its own requests and scrapes): 1 to 3 times a share.
    for env, share in (({}, 3), ({"AGENTCORE_POSTGRES_POOL_SIZE": "7"}, 7)):
        node = Node(store_url, tmp_path / "w.log", workers=3, **env)
        try:
            values = _scraped(node, "agentcore_store_connections_max")
        finally:
            assert node.stop() == 0, node.log.read_text()[-3000:]
        if store_kind == "sqlite":
            assert values == []  # SQLite has no connection pool to report
            return
        [total] = values
        assert total % share == 0 and share <= total <= 3 * share, (total, share)

"""PostgreSQL restarts under traffic, two nodes on it: every acknowledged event is delivered.

Two real ``agentcore serve`` processes share a PostgreSQL server of this test's own
(``own_postgres.py``). A client keeps queueing test events on both nodes (``POST
/v1/webhooks/{id}/test``; a 202 means the event and its delivery were committed) while
the server is stopped for several seconds and started again. Every acknowledged event
must reach the receiver on 127.0.0.1: the delivery loops log the outage, back off and
resume (before, the worker thread died on the first failed idle wait, and acknowledged
events stayed pending forever while the API looked healthy). ``/v1/health`` says 503
while the database is down and 200 once both nodes work again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import wait_for
from nodes import Node
from own_postgres import dedicated_postgres, start_postmaster, stop_postmaster
from webhook_receiver import Receiver

from agentcore import AgentCore

pytestmark = pytest.mark.slow

OUTAGE_SECONDS = 8.0


@pytest.fixture
def server() -> Iterator[Any]:
    with dedicated_postgres("agentcore-test-pg-restart-") as server:
        yield server


class Traffic:
    """Queues test events on the nodes in turn, from a thread; keeps the acknowledged ids."""

    def __init__(self, nodes: list[Node], secret: str, subscription: str) -> None:
        self.nodes = nodes
        self.secret = secret
        self.path = f"/v1/webhooks/{subscription}/test"
        self.acknowledged: set[str] = set()
        self.refused = 0  # 503s and broken connections during the outage
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="traffic")

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            node = self.nodes[n % len(self.nodes)]
            n += 1
            try:
                sent = node.request("POST", self.path, self.secret)
            except httpx.HTTPError:
                self.refused += 1
                continue
            if sent.status_code == 202:
                self.acknowledged.add(sent.json()["event_id"])
            else:
                assert sent.status_code == 503, sent.text  # the database is down: retry later
                self.refused += 1
                time.sleep(0.05)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def health(node: Node) -> int:
    try:
        return httpx.get(node.base + "/v1/health", timeout=10).status_code
    except httpx.HTTPError:
        return 0


def test_every_acknowledged_event_is_delivered_across_a_restart(
    server: Any, tmp_path: Path
) -> None:
    url = server.get_uri()
    with AgentCore.open(url, start_workers=False) as core:
        core.create_organization("acme")
        secret = core.keys.create("acme", "test", ["read", "write"]).secret
    env = {"AGENTCORE_POSTGRES_TIMEOUT": "2"}
    with Receiver() as receiver:
        nodes = [Node(url, tmp_path / "a.log", **env)]
        try:
            nodes.append(Node(url, tmp_path / "b.log", **env))
            made = nodes[0].request(
                "POST",
                "/v1/webhooks/subscribe",
                secret,
                json={"url": receiver.url("/hook"), "events": ["agent.action"]},
            )
            assert made.status_code == 201, made.text
            with Traffic(nodes, secret, made.json()["id"]) as traffic:
                # events acknowledged before the outage (a busy machine takes its time)
                wait_for(lambda: len(traffic.acknowledged) >= 20)
                stop_postmaster(server)
                down_at = time.monotonic()
                health_during = set()
                while time.monotonic() - down_at < OUTAGE_SECONDS:
                    health_during |= {health(node) for node in nodes}
                    time.sleep(0.5)
                start_postmaster(server)
                restarted = len(traffic.acknowledged)
                # the nodes recover by themselves: events are acknowledged again, on both
                give_up = time.monotonic() + 60
                while len(traffic.acknowledged) < restarted + 40:
                    assert time.monotonic() < give_up, "the nodes did not recover"
                    time.sleep(0.1)
            acknowledged = traffic.acknowledged
            assert traffic.refused > 0  # the outage was felt
            deadline = time.monotonic() + 90
            while not acknowledged <= receiver.distinct_ids() and time.monotonic() < deadline:
                time.sleep(0.2)
            missing = acknowledged - receiver.distinct_ids()
            logs = "\n".join(node.log.read_text()[-3000:] for node in nodes)
            assert not missing, f"{len(missing)} of {len(acknowledged)} never delivered\n{logs}"
            assert 503 in health_during  # a load balancer would have taken the nodes out
            give_up = time.monotonic() + 30
            while {health(node) for node in nodes} != {200} and time.monotonic() < give_up:
                time.sleep(0.2)
            assert {health(node) for node in nodes} == {200}
        finally:
            statuses = [node.stop() for node in nodes]
    assert statuses == [0] * len(nodes)
    for node in nodes:
        text = node.log.read_text()
        assert "Exception in thread" not in text, text[-3000:]

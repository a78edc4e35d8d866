"""``GET /metrics`` over real HTTP on SQLite and PostgreSQL: off unless asked for in a
mounted app, the values after known traffic, no tenant anywhere in it, a store that
does not answer, and ``agentcore serve`` (on by default, off by setting, summed over
``--workers``)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import Keys, ServerThread
from helpers import CLI, cli_env, start_serve, wait_for
from processes import reap
from prometheus_client.parser import text_string_to_metric_families
from webhook_receiver import Receiver

import agentcore
from agentcore import AgentCore
from agentcore.chat_models import ChatRequest, ChatResult
from agentcore.knowledge.vectors import scan_path
from agentcore.schema import Usage
from agentcore_starlette import create_app

pytestmark = pytest.mark.both_stores


class Counting:
    """A chat model that reports token usage."""

    name = "counting"

    def complete(self, request: ChatRequest) -> ChatResult:
        usage = Usage(input_tokens=30, output_tokens=4)
        if not request.passages:
            return ChatResult("Nothing in the knowledge base says.", [], usage=usage)
        passage = request.passages[0]
        return ChatResult(passage.text, [passage.id], usage=usage)

    @agentcore.hookimpl
    def agentcore_register_chat_models(self, register: Any, settings: Any) -> None:
        register(self)


@pytest.fixture
def core(store_url: str) -> Iterator[AgentCore]:
    instance = AgentCore.open(
        store_url,
        plugins=[Counting()],
        rate_limit_test=1e6,
        rate_limit_live=1e6,
        webhook_allowed_networks="127.0.0.0/8",
        start_workers=False,  # deliveries stay pending: the gauge counts them
    )
    yield instance
    instance.close()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, parsed by prometheus-client's own parser."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(scraped: dict[Any, float], name: str, **labels: str) -> float:
    return scraped[(name, tuple(sorted(labels.items())))]


def test_a_mounted_app_has_no_metrics_unless_asked(core: AgentCore) -> None:
    with ServerThread(create_app(core)) as server:
        assert httpx.get(f"{server.url}/metrics").status_code == 404
    with ServerThread(create_app(core, metrics=False)) as server:
        assert httpx.get(f"{server.url}/metrics").status_code == 404


def test_metrics_after_known_traffic_name_no_tenant(core: AgentCore, keys: Keys) -> None:
    key = keys.make()
    other = keys.make(org="globex", env="live")
    ws = core.workspace("acme", "test")
    agent = ws.agents.create(name="Secret agent name", model="counting")
    with Receiver() as rx, ServerThread(create_app(core, metrics=True)) as server:
        auth = {"Authorization": f"Bearer {key.secret}"}
        with httpx.Client(base_url=server.url, headers=auth, timeout=30) as http:
            document = http.post(
                "/v1/knowledge/documents",
                json={"source": "tenant-handbook.txt", "text": "Vacation is 25 days a year."},
            ).json()
            for _ in range(3):
                assert http.post("/v1/knowledge/search", json={"query": "vacation"}).is_success
            answer = http.post(
                "/v1/chat/message", json={"agentId": agent.id, "message": "Vacation days?"}
            ).json()
            hook = http.post(
                "/v1/webhooks/subscribe", json={"url": rx.url("/hook"), "events": ["agent.action"]}
            ).json()
            again = http.post("/v1/chat/message", json={"agentId": agent.id, "message": "Again?"})
            assert again.status_code == 200, again.text
            assert http.get(f"/v1/agents/{agent.id}").status_code == 200
            assert http.get("/v1/agents/agt_doesnotexist").status_code == 404
            assert http.get(f"/v1/conversations/{answer['conversationId']}").status_code == 200
            assert http.get(f"/nowhere/{key.id}/{document['id']}").status_code == 404
            http.get("/v1/agents", headers={"Authorization": f"Bearer {other.secret}x"})
            assert http.get("/v1/agents", params={"api_key": key.secret}).status_code == 400
            scrape = httpx.get(f"{server.url}/metrics")
    assert scrape.status_code == 200
    assert scrape.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = scrape.text
    # no label or value names an organization, key, agent, document or conversation
    tenants = [
        "acme", "globex", key.secret, key.id, key.prefix, other.secret, other.id, agent.id,
        "Secret agent name", document["id"], "tenant-handbook", answer["conversationId"],
        hook["id"], hook["secret"], rx.url("/hook"), "agt_doesnotexist", "nowhere", "25 days",
    ]  # fmt: skip
    leaked = [marker for marker in tenants if marker in text]
    assert not leaked, leaked
    assert not re.search(r"\b(agt|doc|conv|key|whk|msg|org)_[0-9A-Za-z]{8,}", text)

    got = samples(text)
    duration = "agentcore_http_request_duration_seconds_count"
    assert value(got, duration, method="POST", route="/v1/knowledge/search", status="200") == 3
    assert value(got, duration, method="POST", route="/v1/chat/message", status="200") == 2
    assert value(got, duration, method="GET", route="/v1/agents/{agent_id}", status="200") == 1
    assert value(got, duration, method="GET", route="/v1/agents/{agent_id}", status="404") == 1
    assert value(got, duration, method="GET", route="unmatched", status="404") == 1
    assert value(got, duration, method="GET", route="/v1/agents", status="401") == 1
    assert value(got, duration, method="GET", route="/v1/agents", status="400") == 1
    route = "/v1/conversations/{conversation_id}"
    assert value(got, duration, method="GET", route=route, status="200") == 1
    assert value(got, "agentcore_search_seconds_count") == 3
    assert value(got, "agentcore_chat_seconds_count", model="counting") == 2
    assert value(got, "agentcore_chat_tokens_total", model="counting", kind="input") == 60
    assert value(got, "agentcore_chat_tokens_total", model="counting", kind="output") == 8
    assert value(got, "agentcore_store_up") == 1
    # one reply_sent event after the subscription: one pending delivery (workers are off)
    assert value(got, "agentcore_webhook_deliveries", status="pending") >= 1
    assert value(got, "agentcore_webhook_deliveries", status="failed") == 0
    assert value(got, "agentcore_ingest_jobs", state="queued") == 0
    assert value(got, "agentcore_ingest_jobs", state="running") == 0
    assert value(got, "agentcore_store_connections") >= 1
    assert value(got, "agentcore_index_workspaces") == 1
    assert value(got, "agentcore_index_rows") == 1 and value(got, "agentcore_index_bytes") > 0
    # the index budget (index_cache_bytes): what it is, holds and did
    assert value(got, "agentcore_index_budget_bytes") == core.settings.index_cache_budget
    assert (
        0
        < value(got, "agentcore_index_charged_bytes")
        <= value(got, "agentcore_index_bytes") + 8192
    )
    assert value(got, "agentcore_index_loads") >= 1
    assert value(got, "agentcore_index_evictions") == 0
    assert value(got, "agentcore_index_segment_fallbacks") == 0
    # which code scores vectors here, as the start-up log says too
    assert value(got, "agentcore_vector_scan_info", **scan_path()) == 1
    pooled = ("agentcore_store_connections_max", ()) in got
    assert pooled == (core.store.url.startswith("postgresql"))  # only a pool has a maximum


def test_a_store_that_does_not_answer_leaves_the_scrape_working(core: AgentCore) -> None:
    with ServerThread(create_app(core, metrics=True)) as server:
        assert value(samples(httpx.get(f"{server.url}/metrics").text), "agentcore_store_up") == 1
        core.store.close()
        scrape = httpx.get(f"{server.url}/metrics")
    assert scrape.status_code == 200
    got = samples(scrape.text)
    assert value(got, "agentcore_store_up") == 0
    assert not any(name == "agentcore_ingest_jobs" for name, _ in got)


def test_metrics_false_records_nothing(store_url: str) -> None:
    with AgentCore.open(store_url, metrics=False, plugins=[Counting()]) as core:
        ws = core.workspace("acme", "test")
        ws.knowledge.ingest_text("a.txt", "Vacation is 25 days a year.")
        ws.knowledge.search("vacation")
        agent = ws.agents.create(name="A", model="counting")
        ws.chat.send(agent.id, "Vacation days?")
        recorded = {
            sample.name: sample.value
            for family in core.metrics.registry.collect()
            for sample in family.samples
            if not sample.name.endswith("_created")  # when the metric was made
        }
        assert recorded  # the metrics exist, declared ...
        assert not any(recorded.values()), recorded  # ... and nothing was counted in them


# agentcore serve ------------------------------------------------------------------------


def _serve(db: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[Any, str]:
    """``agentcore serve`` on ``db`` once it answers (``helpers.start_serve``), its URL."""
    return start_serve(
        db, env=env, extra=("--log-level", "warning", *extra), stderr=db.parent / "serve.err"
    )


def _openapi_requests(got: Any) -> float:
    """The ``GET /v1/openapi.json`` requests answered 200 that a scrape counts."""
    return value(
        got,
        "agentcore_http_request_duration_seconds_count",
        method="GET",
        route="/v1/openapi.json",
        status="200",
    )


def _serve_workers(db: Path, directory: Path) -> tuple[Any, str]:
    """``serve --workers 2`` on ``db`` with ``directory`` as its multiprocess directory,
    and its URL."""
    env = {
        **cli_env(),
        "PROMETHEUS_MULTIPROC_DIR": str(directory),
        "AGENTCORE_INDEX_CACHE_BYTES": str(WORKER_BUDGET),
    }
    return _serve(db, "--workers", "2", env=env)


WORKER_BUDGET = 50_000_000
"""Each worker's index budget in ``_serve_workers`` (set: unset, it depends on the machine)."""


def _stop(process: Any) -> None:
    try:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0
    finally:
        reap(process)  # and its worker processes, however it ended


@pytest.mark.slow
def test_serve_has_metrics_unless_turned_off(tmp_path: Path) -> None:
    db = tmp_path / "serve.db"
    for env, expected in ((cli_env(), 200), ({**cli_env(), "AGENTCORE_METRICS": "false"}, 404)):
        process, url = _serve(db, env=env)
        try:
            assert httpx.get(f"{url}/metrics").status_code == expected
        finally:
            _stop(process)


@pytest.mark.slow
def test_serve_workers_sum_every_workers_requests(tmp_path: Path) -> None:
    """Requests land on both workers; any worker's scrape counts all of them."""
    db = tmp_path / "workers.db"
    directory = tmp_path / "prometheus"
    process, url = _serve_workers(db, directory)
    try:
        sent = 0
        # new connections until both workers have answered some: each worker writes its
        # own file, which names the route once that worker has timed a request to it
        while (
            sum(b"/v1/openapi.json" in path.read_bytes() for path in directory.glob("histogram_*"))
            < 2
        ):
            assert sent < 2000, "one worker took every connection"
            with httpx.Client(base_url=url) as fresh:
                assert fresh.get("/v1/openapi.json").status_code == 200
            sent += 1
        counts = []
        for _ in range(4):  # several scrapes: whichever worker answers, the same sum
            with httpx.Client(base_url=url) as fresh:
                got = samples(fresh.get("/metrics").text)
            counts.append(
                value(
                    got,
                    "agentcore_http_request_duration_seconds_count",
                    method="GET",
                    route="/v1/openapi.json",
                    status="200",
                )
            )
        assert counts == [sent] * 4
    finally:
        _stop(process)
    # a worker that stopped cleanly drops its live gauges
    assert not list(directory.glob("gauge_livesum_*.db"))


def _pids(directory: Path, pattern: str) -> set[int]:
    return {int(path.stem.rpartition("_")[2]) for path in directory.glob(pattern)}


@pytest.mark.slow
def test_serve_workers_drop_the_live_gauges_of_a_killed_worker(tmp_path: Path) -> None:
    """A worker killed (no graceful stop) no longer counts in the live gauges once it
    is gone; what it counted (requests) still does."""
    db = tmp_path / "killed.db"
    directory = tmp_path / "prometheus"
    process, url = _serve_workers(db, directory)

    def served() -> set[int]:
        """The processes that timed a request (and then set their gauges)."""
        return {
            int(path.stem.rpartition("_")[2])
            for path in directory.glob("histogram_*.db")
            if b"/v1/openapi.json" in path.read_bytes()
        }

    def until_served_by(count: int) -> int:
        """Requests on new connections until ``count`` processes answered some."""
        sent = 0
        while len(served()) < count:
            assert sent < 2000, "one worker took every connection"
            with httpx.Client(base_url=url) as fresh:
                assert fresh.get("/v1/openapi.json").status_code == 200
            sent += 1
            time.sleep(0.01)
        return sent

    def scrape() -> dict[Any, float]:
        with httpx.Client(base_url=url) as fresh:
            return samples(fresh.get("/metrics").text)

    def budgets() -> float:
        # each worker sets its gauges after its answer: wait until both have
        both = 2 * WORKER_BUDGET
        wait_for(lambda: value(scrape(), "agentcore_index_budget_bytes") == both)
        return both

    try:
        sent = until_served_by(2)
        both = budgets()  # two workers' budgets
        victim = max(served())
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 120  # only guards a hang
        while Path(f"/proc/{victim}").exists():  # until the supervisor reaped it
            assert time.monotonic() < deadline
            time.sleep(0.1)
        sent += until_served_by(3)  # the replacement's files beside the dead one's
        assert budgets() == both  # not three workers'
        got = scrape()
        assert value(got, "agentcore_index_budget_bytes") == both
        assert victim not in _pids(directory, "gauge_live*_*.db")
        assert _openapi_requests(got) == sent  # the killed worker's requests too
    finally:
        _stop(process)


@pytest.mark.slow
def test_serve_in_one_process_starts_its_multiprocess_directory_empty(tmp_path: Path) -> None:
    """One process with ``PROMETHEUS_MULTIPROC_DIR`` set: each run counts its own
    requests, not the last run's, and a CLI command's live gauges are not counted."""
    db = tmp_path / "single.db"
    directory = tmp_path / "prometheus"
    directory.mkdir()
    env = {**cli_env(), "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    subprocess.run(
        [*CLI, "--db", str(db), "init", "--org", "acme"], env=env, check=True, capture_output=True
    )
    for _ in range(2):
        process, url = _serve(db, env=env)
        try:
            for _ in range(3):
                assert httpx.get(f"{url}/v1/openapi.json").status_code == 200
            # a command run meanwhile writes live gauges and exits without dropping them
            subprocess.run(
                [*CLI, "--db", str(db), "keys", "list", "--org", "acme"],
                env=env,
                check=True,
                capture_output=True,
            )
            got = samples(httpx.get(f"{url}/metrics").text)
            assert _openapi_requests(got) == 3
            assert _pids(directory, "gauge_live*_*.db") == {process.pid}
        finally:
            _stop(process)

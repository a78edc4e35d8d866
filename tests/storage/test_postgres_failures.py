"""PostgreSQL failure behaviour: unreachable at start, down mid-request, back again.

The mid-request test runs its own PostgreSQL (pgserver) so that stopping the
postmaster cannot disturb the other tests' server; the postmaster is stopped with
``pg_ctl`` and restarted on the same data directory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Api, free_port
from helpers import assert_problem, make_document, run_cli
from own_postgres import dedicated_postgres, start_postmaster, stop_postmaster

from agentcore import AgentCore
from agentcore_starlette import create_app

pgserver = pytest.importorskip("pgserver")


@pytest.mark.slow
def test_cli_names_host_and_database_when_postgres_is_unreachable() -> None:
    url = f"postgresql://bob:hunter2@127.0.0.1:{free_port()}/shop"
    result = run_cli("keys", "list", "--org", "acme", db=url)  # type: ignore[arg-type]
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "host 127.0.0.1" in lines[0] and "database shop" in lines[0]
    assert "hunter2" not in result.stderr and "Traceback" not in result.stderr


def test_open_raises_service_unavailable_naming_the_server() -> None:
    from agentcore.errors import ServiceUnavailable

    with pytest.raises(ServiceUnavailable, match="database nope") as caught:
        AgentCore.open(f"postgresql://x@127.0.0.1:{free_port()}/nope")
    assert caught.value.retry_after is not None and caught.value.retry_after >= 1
    assert not hasattr(caught.value, "headers")  # a fact, not a header: the adapter writes it


@pytest.fixture
def own_server() -> Iterator[Any]:
    with dedicated_postgres("agentcore-test-pg-down-") as server:
        yield server


def until_ok(api: Api, path: str, attempts: int = 100) -> Any:
    """The first non-503 answer; the node must recover by itself (bounded polling)."""
    for _ in range(attempts):
        response = api.get(path)
        if response.status_code != 503:
            return response
        time.sleep(0.1)
    raise AssertionError("the node never recovered")


@pytest.mark.slow
def test_postgres_down_mid_request_is_a_503_and_the_node_recovers(own_server: Any) -> None:
    core = AgentCore.open(
        own_server.get_uri(), rate_limit_test=1e6, postgres_timeout=2.0, start_workers=False
    )
    try:
        core.create_organization("acme")
        key = core.keys.create("acme", "test", ("read", "write")).secret
        api = Api(create_app(core), None, key)
        created = api.post("/v1/agents", json={"name": "Before"})
        assert created.status_code == 201
        ingested = api.post(
            "/v1/knowledge/documents", json={"source": "a.txt", "text": "Refunds take 5 days."}
        )
        assert ingested.status_code == 201, ingested.text

        stop_postmaster(own_server)
        down = api.get("/v1/agents")
        body = assert_problem(down, 503, "database_unavailable")
        assert int(down.headers["Retry-After"]) >= 1 and "Traceback" not in body["detail"]
        write = api.post("/v1/agents", json={"name": "During"})
        assert_problem(write, 503, "database_unavailable")

        start_postmaster(own_server)
        listing = until_ok(api, "/v1/agents")
        assert listing.status_code == 200
        # the write refused during the outage left nothing behind; the earlier one survived
        assert [a["name"] for a in listing.json()["agents"]] == ["Before"]
        search = api.post("/v1/knowledge/search", json={"query": "refunds"})
        assert search.status_code == 200 and search.json()["results"]
        assert api.post("/v1/agents", json={"name": "After"}).status_code == 201
    finally:
        core.close()


def test_connections_dropped_by_the_server_are_retried_transparently(postgres_url: str) -> None:
    import psycopg

    from agentcore.storage.postgres import PostgresStore

    store = PostgresStore.open(postgres_url, pool_size=3)
    try:
        org = store.ensure_organization("acme")
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        assert killed is not None and killed[0] >= 1
        # the pooled connection is dead: the read retries on a fresh one, no 503
        assert store.get_organization_by_name("acme") == org
        assert store.ensure_organization("globex").name == "globex"
    finally:
        store.close()


def _kill_backends(url: str) -> int:
    """Terminate every other connection to the database (as a restart or an admin does)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


def _burst(calls: int, call: Any) -> list[str]:
    """Run ``call()`` on ``calls`` threads released at once; the failures, as text."""
    barrier = threading.Barrier(calls)
    failures: list[str] = []

    def run() -> None:
        barrier.wait()
        try:
            call()
        except Exception as exc:
            failures.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=run) for _ in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return failures


def test_killed_idle_connections_fail_no_call_even_when_many_run_at_once(
    postgres_url: str,
) -> None:
    from agentcore.storage.postgres import PostgresStore

    store = PostgresStore.open(postgres_url, pool_size=8)
    try:
        store.ensure_organization("acme")

        def hold_a_connection() -> None:
            with store.db.read() as conn:
                conn.execute("SELECT pg_sleep(0.02)")

        failures: list[str] = []
        for _ in range(8):
            # eight connections in the pool, then all of them killed while idle
            _burst(8, hold_a_connection)
            assert _kill_backends(postgres_url) >= 1
            # one broken connection found by one thread must not fail the others'
            # calls as "unreachable a moment ago": the server is up
            failures += _burst(8, lambda: store.get_organization_by_name("acme"))
        assert failures == []
        # the reads chat makes after the search (chunks, term counts) retry as well
        _kill_backends(postgres_url)
        assert store.get_chunks([1]) == {}
        _kill_backends(postgres_url)
        assert store.term_counts("org", "test", ["pump"]) == (0, {})
    finally:
        store.close()


@pytest.mark.slow
def test_chat_after_the_pools_connections_are_killed_answers_every_time(
    postgres_url: str,
) -> None:
    core = AgentCore.open(postgres_url, start_workers=False, postgres_pool_size=6)
    try:
        ws = core.workspace("acme", "test")
        ws.knowledge.ingest_text("refunds.txt", "Refunds take five days after we get the item.")
        agent = ws.agents.create(name="Support")
        ws.agents.deploy(agent.id)
        answers: list[str] = []

        def chat() -> None:
            answers.append(ws.chat.send(agent.id, "How long do refunds take?").response)

        failures: list[str] = []
        for _ in range(10):
            _burst(6, chat)  # every pooled connection in use once
            assert _kill_backends(postgres_url) >= 1
            failures += _burst(6, chat)
        assert failures == []
        assert len(answers) == 120 and all("five days" in answer for answer in answers)
    finally:
        core.close()


def test_postgres_urls_and_the_cli(postgres_url: str) -> None:
    """``postgres://`` works like ``postgresql://``; the CLI takes the URL from AGENTCORE_DB."""
    alias = "postgres://" + postgres_url.split("://", 1)[1]
    with AgentCore.open(alias) as core:
        assert type(core.store).__name__ == "PostgresStore"
    made = run_cli("init", "--org", "demo", env_db=postgres_url)  # type: ignore[arg-type]
    assert made.returncode == 0, made.stderr
    listed = run_cli("keys", "list", "--org", "demo", env_db=postgres_url)  # type: ignore[arg-type]
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("ak_test_") + listed.stdout.count("ak_live_") >= 2


def test_cli_refuses_a_schema_newer_than_the_code(postgres_server: str) -> None:
    import psycopg
    from conftest import create_database

    url = create_database(postgres_server, "agentcore_cli_too_new")
    with AgentCore.open(url):
        pass
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO agentcore_migrations (version, name) VALUES (999, 'future')")
    secret_url = url.replace("postgresql://postgres:@", "postgresql://postgres:sekrit@")
    result = run_cli("keys", "list", "--org", "acme", db=secret_url)  # type: ignore[arg-type]
    assert result.returncode == 2
    assert "version 999" in result.stderr and "upgrade agentcore" in result.stderr
    assert "sekrit" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("call", ["get_chunks", "term_counts", "iter_chunk_texts"])
def test_chat_reads_on_a_killed_connection_are_retried(postgres_url: str, call: str) -> None:
    """What a chat turn reads after retrieval ran once on a dead pooled connection and
    failed (a 500); each is now retried on a fresh connection like every store method."""
    import numpy as np

    from agentcore.storage.postgres import PostgresStore

    store = PostgresStore.open(postgres_url, pool_size=1)
    try:
        org = store.ensure_organization("acme").id
        document = make_document(id="doc_1")
        vector = np.ones((1, 4), dtype=np.float32) / 2
        (chunk,) = store.insert_document(
            org,
            "test",
            document,
            [("Blades.", [1], [0])],
            "e",
            vector,
            np.ones(1, bool),
            (1, {"blade": 1}),
        ).chunk_ids
        with store.db.read() as conn:
            before = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]
        assert _kill_backends(postgres_url) >= 1
        if call == "get_chunks":
            assert store.get_chunks([chunk])[chunk].text == "Blades."
        elif call == "term_counts":
            assert store.term_counts(org, "test", ["blade"]) == (1, {"blade": 1})
        else:
            assert list(store.iter_chunk_texts(org, "test")) == [("doc_1", [chunk], ["Blades."])]
        with store.db.read() as conn:  # the call ran again, on a new connection
            assert conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"] != before
    finally:
        store.close()


def test_every_public_postgres_store_method_is_retried() -> None:
    from agentcore.storage.base import Store, VectorSearchStore
    from agentcore.storage.postgres import PostgresStore

    names = {
        name
        for protocol in (Store, VectorSearchStore)
        for name, member in vars_of(protocol).items()
        if callable(member) and not name.startswith("_")
    }
    assert {"get_chunks", "term_counts", "search_vectors", "take_token"} <= names
    for name in names - {"close", "iter_chunk_texts"}:
        assert hasattr(getattr(PostgresStore, name), "__wrapped__"), name
    # a generator's steps are public methods, retried each
    assert hasattr(PostgresStore.document_ids, "__wrapped__")
    assert hasattr(PostgresStore.chunk_texts, "__wrapped__")


def vars_of(protocol: type) -> dict[str, Any]:
    members: dict[str, Any] = {}
    for cls in reversed(protocol.__mro__):
        members.update(vars(cls))
    return members

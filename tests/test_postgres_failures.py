"""PostgreSQL failure behaviour: unreachable at start, down mid-request, back again.

The mid-request test runs its own PostgreSQL (pgserver) so that stopping the
postmaster cannot disturb the other tests' server; the postmaster is stopped with
``pg_ctl`` and restarted on the same data directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Api, free_port
from helpers import assert_problem, run_cli

from agentcore import AgentCore
from agentcore_starlette import create_app

pgserver = pytest.importorskip("pgserver")


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
    assert caught.value.headers["Retry-After"]


@pytest.fixture
def own_server() -> Iterator[Any]:
    if os.environ.get("AGENTCORE_TEST_POSTGRES_URL"):
        pytest.skip("stops and restarts its own pgserver; not run against an external server")
    data = Path(tempfile.mkdtemp(prefix="agentcore-test-pg-down-"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pgserver.get_server(data, cleanup_mode=None)
    yield server
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server.cleanup()
    shutil.rmtree(data, ignore_errors=True)


def stop_postmaster(server: Any) -> None:
    from pgserver._commands import pg_ctl

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user, timeout=30)


def start_postmaster(server: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server.ensure_postgres_running()


def until_ok(api: Api, path: str, attempts: int = 100) -> Any:
    """The first non-503 answer; the node must recover by itself (bounded polling)."""
    for _ in range(attempts):
        response = api.get(path)
        if response.status_code != 503:
            return response
        time.sleep(0.1)
    raise AssertionError("the node never recovered")


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

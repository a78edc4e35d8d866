"""No database password in anything the CLI prints or logs: a PostgreSQL role with a
password on the test server, and ``init``, ``keys``, ``serve`` (its banner and a debug
log of real traffic, one process and several), ``--help``, and connection errors with a
wrong host, a refused port, a malformed URL and an unknown scheme."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from conftest import free_port
from helpers import CLI, cli_env, start_serve
from processes import reap

PASSWORD = "S3cretPassw0rd"
ROLE = "agentcore_pw_role"
DATABASE = "agentcore_pw_test"

pytestmark = pytest.mark.slow  # a PostgreSQL server and real processes


@pytest.fixture(scope="module")
def password_url(postgres_server: str) -> Iterator[str]:
    """A database owned by a role with a password, and the URL that carries it."""
    import psycopg

    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        conn.execute(f"DROP ROLE IF EXISTS {ROLE}")
        conn.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'")
        conn.execute(f'CREATE DATABASE "{DATABASE}" OWNER {ROLE}')
    parts = urlsplit(postgres_server)
    host = parts.netloc.rpartition("@")[2]
    yield urlunsplit(parts._replace(netloc=f"{ROLE}:{PASSWORD}@{host}", path=f"/{DATABASE}"))
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        conn.execute(f"DROP ROLE IF EXISTS {ROLE}")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        env=env or cli_env(),
        timeout=120,
        check=False,
    )


def assert_no_password(*outputs: str) -> None:
    for output in outputs:
        assert PASSWORD not in output, output
        assert PASSWORD.lower() not in output.lower(), output


def test_init_keys_and_help_never_print_the_password(password_url: str) -> None:
    init = cli("--db", password_url, "init", "--org", "acme")
    assert init.returncode == 0, init.stderr
    assert f"{ROLE}:***@" in init.stdout  # where it is ready, without the password
    again = cli("--db", password_url, "init", "--org", "acme", "--json")
    listed = cli("--db", password_url, "keys", "list", "--org", "acme")
    helped = cli("--help", env={**cli_env(), "AGENTCORE_DB": password_url})
    assert again.returncode == listed.returncode == helped.returncode == 0
    assert_no_password(
        init.stdout, init.stderr, again.stdout, again.stderr, listed.stdout, listed.stderr
    )
    assert_no_password(helped.stdout, helped.stderr)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_prints_and_logs_no_password(password_url: str, tmp_path: Path, workers: str) -> None:
    made = cli("--db", password_url, "init", "--org", "acme", "--new-keys", "--json")
    assert made.returncode == 0, made.stderr
    log = tmp_path / "serve.log"
    process, url = start_serve(
        password_url,
        extra=["--log-level", "debug", "--workers", workers],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        for path in ("/v1/health", "/metrics", "/v1/agents", "/v1/nowhere"):
            httpx.get(url + path, timeout=30)
        httpx.get(f"{url}/v1/agents", headers={"Authorization": "Bearer nope"}, timeout=30)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    finally:
        reap(process)
    text = log.read_text()
    assert f"agentcore serving postgresql://{ROLE}:***@" in text.splitlines()[0]
    assert "Application startup complete" in text  # the debug log was written
    assert_no_password(text)


@pytest.mark.parametrize(
    "template",
    [
        "postgresql://{role}:{password}@nonexistent.invalid/agentcore",  # no such host
        "postgresql://{role}:{password}@127.0.0.1:1/agentcore",  # nothing listens there
        "postgresql://{role}:{password}@127.0.0.1:notaport/agentcore",  # not a port
        "postgres://{role}:{password}@[::1/agentcore",  # malformed: psycopg quotes it back
        "mysql://{role}:{password}@db.internal/agentcore",  # no store for the scheme
        "postgresql://db.internal/agentcore?password={password}&connect_timeout=1",
    ],
)
def test_connection_errors_name_the_host_never_the_password(template: str) -> None:
    url = template.format(role=ROLE, password=PASSWORD)
    for args in (("init", "--org", "acme"), ("serve", "--port", str(free_port()))):
        result = cli("--db", url, *args)
        assert result.returncode == 2, result
        assert result.stderr.startswith("agentcore: ") and result.stderr.count("\n") == 1
        assert "Traceback" not in result.stderr
        assert_no_password(result.stdout, result.stderr)

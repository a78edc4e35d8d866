"""PostgreSQL behind a pooler in transaction mode (``postgres_prepared_statements``).

psycopg prepares a statement a connection has sent five times. A pooler in transaction
mode (PgBouncer before 1.21) hands each transaction whichever server connection is
free, where that name is unknown or taken. With the setting off no statement is ever
prepared. Checked on the server itself, and through a real PgBouncer when this machine
has one (``apt-get install pgbouncer``).
"""

from __future__ import annotations

import collections
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from conftest import free_port, reset_database

from agentcore import AgentCore

pytestmark = pytest.mark.slow
psycopg = pytest.importorskip("psycopg")
PGBOUNCER = shutil.which("pgbouncer") or next(
    (path for path in ("/usr/sbin/pgbouncer",) if Path(path).exists()), None
)


def _prepared_on_server(core: AgentCore) -> int:
    """Statements prepared on the one connection of ``core``'s pool (pool size 1)."""
    with core.store.db.pool.connection() as conn:  # type: ignore[attr-defined]
        row = conn.execute("SELECT count(*) AS n FROM pg_prepared_statements").fetchone()
        return int(row["n"])


@pytest.mark.parametrize("prepared", [True, False])
def test_statements_are_prepared_only_when_the_setting_allows(
    postgres_url: str, prepared: bool
) -> None:
    with AgentCore.open(
        postgres_url,
        start_workers=False,
        postgres_pool_size=1,
        postgres_prepared_statements=prepared,
    ) as core:
        core.create_organization("acme")
        ws = core.workspace("acme", "test")
        for number in range(8):  # every statement of these calls is sent 8 times
            ws.knowledge.ingest_text(f"d{number}.txt", f"The warranty lasts {number} years.")
            ws.knowledge.search("warranty", top_k=3)
        assert (_prepared_on_server(core) > 0) is prepared
        # a worker process's store (reopener) keeps the setting
        reopened = core.store.reopener()()  # type: ignore[attr-defined]
        try:
            assert reopened.db.prepared_statements is prepared
        finally:
            reopened.close()


@pytest.fixture
def bouncer_url(postgres_url: str) -> Iterator[str]:
    """A PgBouncer in transaction mode in front of the test database; its URL."""
    if PGBOUNCER is None:
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    if os.environ.get("AGENTCORE_TEST_POSTGRES_URL"):
        pytest.skip("the PgBouncer test runs on the session's own pgserver")
    parts = urlsplit(postgres_url)
    socket_dir = Path(parse_qs(parts.query)["host"][0])  # pgserver listens on a socket
    database = parts.path.lstrip("/")
    port = free_port()
    # not under pytest's basetemp, which is out of reach of the user pgbouncer runs as
    tmp_path = Path(tempfile.mkdtemp(prefix="agentcore-test-pgbouncer-"))
    (tmp_path / "users.txt").write_text(f'"{parts.username}" ""\n')
    config = tmp_path / "pgbouncer.ini"
    config.write_text(
        f"[databases]\n{database} = host={socket_dir} port={parts.port or 5432}"
        f" user={parts.username} dbname={database}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nauth_type = trust\n"
        f"auth_file = {tmp_path}/users.txt\npool_mode = transaction\ndefault_pool_size = 4\n"
        f"max_client_conn = 100\nunix_socket_dir =\nlogfile = {tmp_path}/pgbouncer.log\n"
    )
    command = [PGBOUNCER, str(config)]
    socket_mode = socket_dir.stat().st_mode & 0o777
    if os.geteuid() == 0:  # pgbouncer refuses to run as root: as nobody, who must reach
        command[1:1] = ["-u", "nobody"]  # its config and the server's socket
        tmp_path.chmod(0o777)  # its log is written there
        socket_dir.chmod(socket_mode | 0o711)
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(100):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        else:
            server.kill()
            logged = tmp_path / "pgbouncer.log"
            said = server.stderr.read().decode() if server.stderr else ""
            pytest.fail(
                f"pgbouncer did not listen: {said} {logged.read_text() if logged.exists() else ''}"
            )
        yield f"postgresql://{parts.username}@127.0.0.1:{port}/{database}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        finally:
            socket_dir.chmod(socket_mode)
            shutil.rmtree(tmp_path, ignore_errors=True)


def _hammer(url: str, prepared: bool) -> collections.Counter[str]:
    """Eight threads ingesting, searching and creating agents through ``url`` at once;
    the errors they met, by type."""
    errors: collections.Counter[str] = collections.Counter()
    with AgentCore.open(
        url, start_workers=False, postgres_prepared_statements=prepared, postgres_pool_size=8
    ) as core:
        core.create_organization("acme")
        ws = core.workspace("acme", "test")
        lock = threading.Lock()

        def client(number: int) -> None:
            for turn in range(12):
                try:
                    ws.knowledge.ingest_text(f"{number}-{turn}.txt", f"Returns take {turn} days.")
                    ws.knowledge.search("returns", top_k=3)
                    ws.agents.create(name=f"agent {number}-{turn}", role="support")
                except Exception as exc:  # counted: the test says which
                    with lock:
                        errors[type(exc).__name__] += 1

        threads = [threading.Thread(target=client, args=(number,)) for number in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return errors


def test_through_pgbouncer_in_transaction_mode_only_unprepared_statements_work(
    bouncer_url: str, postgres_url: str
) -> None:
    assert _hammer(bouncer_url, prepared=False) == collections.Counter()
    reset_database(postgres_url)
    # the same load with psycopg's prepared statements meets names the server lacks, or
    # has for another statement (ProtocolViolation: a 503, as the server then seems down)
    met = _hammer(bouncer_url, prepared=True)
    assert met["InvalidSqlStatementName"] + met["DuplicatePreparedStatement"] > 0, met

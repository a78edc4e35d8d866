"""A PostgreSQL server of a test's own (pgserver), which it may stop and restart.

The session's shared server (``conftest.postgres_server``) is used by other tests at the
same time; a test that takes the database down runs its own, on a data directory of its
own, stopped with ``pg_ctl`` and restarted on the same directory (and socket).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


@contextmanager
def dedicated_postgres(prefix: str = "agentcore-test-pg-own-") -> Iterator[Any]:
    """A running pgserver ``PostgresServer`` of this test alone; removed afterwards."""
    if os.environ.get("AGENTCORE_TEST_POSTGRES_URL"):
        pytest.skip("stops and restarts its own pgserver; not run against an external server")
    pgserver = pytest.importorskip("pgserver")
    data = Path(tempfile.mkdtemp(prefix=prefix))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pgserver.get_server(data, cleanup_mode=None)
    try:
        yield server
    finally:
        # cleanup_mode=None: cleanup() forgets the handle but leaves the server running
        # (it would notice its data directory gone only a minute later): stop it first
        with contextlib.suppress(subprocess.CalledProcessError):  # a test left it stopped
            stop_postmaster(server)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()
        shutil.rmtree(data, ignore_errors=True)


def stop_postmaster(server: Any) -> None:
    """Stop the server (``pg_ctl stop -m fast``: sessions are cut, as in a restart)."""
    from pgserver._commands import pg_ctl

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user, timeout=30)


def start_postmaster(server: Any) -> None:
    """Start it again on the same data directory."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server.ensure_postgres_running()

"""PostgreSQL's ledger of the shared migrations: ``agentcore_migrations``, by number.

``migrate`` runs inside one transaction holding a transaction-level advisory lock, so
two nodes starting at once queue instead of racing, and a database migrated by newer
code is refused. Versions count the steps PostgreSQL applies (``migrations_for``), as
the databases made by earlier versions recorded them.
"""

from __future__ import annotations

from agentcore.storage.postgres.connection import Conn
from agentcore.storage.sql.dialect import POSTGRES
from agentcore.storage.sql.migrations import migrations_for, run_script

# pg_advisory_xact_lock key of schema changes: "agentcore" as a stable 64-bit number
MIGRATION_LOCK = 0x6167656E74636F72


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer agentcore than this one."""


def migrate(conn: Conn) -> int:
    """Apply pending migrations in one transaction under the advisory lock; the version."""
    steps = migrations_for(POSTGRES)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(?)", [MIGRATION_LOCK])
        conn.execute(
            "CREATE TABLE IF NOT EXISTS agentcore_migrations ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
            " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        found = conn.execute(
            "SELECT COALESCE(MAX(version), 0) AS v FROM agentcore_migrations"
        ).fetchone()
        current = int(found["v"]) if found else 0
        if current > len(steps):
            raise SchemaTooNew(
                f"The database schema is at version {current}, newer than this agentcore"
                f" (which knows versions up to {len(steps)}); upgrade agentcore."
            )
        for version, step in enumerate(steps[current:], start=current + 1):
            run_script(conn, step.script(POSTGRES))
            # named without the step's number, as the first versions recorded them
            conn.execute(
                "INSERT INTO agentcore_migrations (version, name) VALUES (?, ?)",
                [version, step.name.partition("_")[2]],
            )
    return len(steps)

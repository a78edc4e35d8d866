"""SQLite's ledger of the shared migrations: sqlite-utils' ``Migrations`` set ``agentcore``.

Files record each applied step by name in ``_sqlite_migrations``, as they always have.
"""

from __future__ import annotations

from sqlite_utils import Database as UtilsDatabase
from sqlite_utils import Migrations

from agentcore.storage.sql.dialect import SQLITE
from agentcore.storage.sql.migrations import migrations_for, statements

migrations = Migrations("agentcore")


def run_script(db: UtilsDatabase, script: str) -> None:
    """Run a migration script statement by statement, inside the caller's transaction.

    ``sqlite3``'s ``executescript()`` would COMMIT it first, and migrations run inside
    one ``BEGIN IMMEDIATE`` so that concurrent openers queue and a failing migration
    leaves nothing behind.
    """
    for statement in statements(script):
        db.execute(statement)


for _step in migrations_for(SQLITE):
    migrations(name=_step.name)(lambda db, step=_step: run_script(db, step.script(SQLITE)))

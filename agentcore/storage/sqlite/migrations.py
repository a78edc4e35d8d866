"""SQLite's ledger of the shared migrations: sqlite-utils' ``Migrations`` set ``agentcore``.

Files record each applied step by name in ``_sqlite_migrations``, as they always have.
"""

from __future__ import annotations

from sqlite_utils import Migrations

from agentcore.storage.sql.dialect import SQLITE
from agentcore.storage.sql.migrations import migrations_for, run_script

migrations = Migrations("agentcore")

# each step inside the one ``BEGIN IMMEDIATE`` that ``SQLiteStore.migrate`` opens, so that
# concurrent openers queue and a failing migration leaves nothing behind
for _step in migrations_for(SQLITE):
    migrations(name=_step.name)(lambda db, step=_step: run_script(db, step.script(SQLITE)))

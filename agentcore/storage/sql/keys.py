"""Organizations and API keys, in SQL; the key secret itself is never stored, only its digest."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from agentcore._ids import isoformat, new_id, now_iso
from agentcore.schema import ApiKey, Organization
from agentcore.storage.base import KeyStore
from agentcore.storage.sql.database import CACHE_LIMIT, Tables
from agentcore.storage.sql.queries import insert_row, read_row, read_rows, update_row

# Every request authenticates: a key comes with its organization's name in one
# indexed join.
_KEY_SELECT = (
    "SELECT api_keys.*, organizations.name AS org_name FROM api_keys "
    "JOIN organizations ON organizations.id = api_keys.organization_id"
)
_KEY_COLUMNS = {"revoked_at", "expires_at", "last_used_at", "name"}


# a key's columns that hold its fields as they are, and those that hold its times
_TEXTS = ("id", "environment", "prefix", "last4", "name", "rotated_from")
_TIMES = ("created_at", "expires_at", "revoked_at", "last_used_at")


def _key(row: Any) -> ApiKey:
    # model_construct: every request authenticates, and these values were validated
    # on their way in; only the scopes and the timestamps need parsing back.
    times: dict[str, Any] = {column: _time(row[column]) for column in _TIMES}
    return ApiKey.model_construct(
        organization=row["org_name"],
        scopes=json.loads(row["scopes"]),
        **{column: row[column] for column in _TEXTS},
        **times,
    )


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else isoformat(value)


class KeyTables(Tables, KeyStore):
    """Organizations and keys, in the tables ``organizations`` and ``api_keys``."""

    def ensure_organization(self, name: str) -> Organization:
        with self.db.write() as conn:
            # names are unique: an organization of that name may exist already
            conn.execute(
                "INSERT INTO organizations (id, name, created_at) VALUES (?, ?, ?)"
                " ON CONFLICT (name) DO NOTHING",
                [new_id("org"), name, now_iso()],
            )
            row = conn.execute("SELECT * FROM organizations WHERE name = ?", [name]).fetchone()
        return Organization(**row)

    def get_organization_by_name(self, name: str) -> Organization | None:
        row = read_row(self.db, "SELECT * FROM organizations WHERE name = ?", [name])
        return Organization(**row) if row else None

    def insert_key(self, key: ApiKey, organization_id: str, digest: str) -> None:
        self.insert_keys(organization_id, [(key, digest)])

    def insert_keys(
        self,
        organization_id: str,
        keys: Sequence[tuple[ApiKey, str]],
        *,
        unless_usable_at: datetime | None = None,
    ) -> bool:
        with self.db.write() as conn:
            if unless_usable_at is not None:
                # the organization's row first: PostgreSQL holds its lock to the commit
                # (SQLite writes one transaction at a time), so of two first `init`s at
                # once the second sees the first's keys
                conn.execute("UPDATE organizations SET name = name WHERE id = ?", [organization_id])
                usable = conn.execute(
                    "SELECT 1 FROM api_keys WHERE organization_id = ? AND revoked_at IS NULL"
                    " AND (expires_at IS NULL OR expires_at > ?) LIMIT 1",
                    [organization_id, _iso(unless_usable_at)],
                ).fetchone()
                if usable is not None:
                    return False
            for key, digest in keys:
                insert_row(
                    conn,
                    "api_keys",
                    {
                        **{column: getattr(key, column) for column in _TEXTS},
                        "organization_id": organization_id,
                        "scopes": json.dumps(key.scopes),
                        "digest": digest,
                        "created_at": _iso(key.created_at),
                        "expires_at": _iso(key.expires_at),
                    },
                )
        return True

    def find_key_by_digest(self, digest: str) -> tuple[ApiKey, str, str] | None:
        # Every request authenticates, so found keys are remembered per thread for as
        # long as nothing at all has been written to the database since (SQLite checks
        # ``PRAGMA data_version`` and this process's commit count on each call; a
        # PostgreSQL node reads each time): a key revoked by any process or node is
        # refused on the very next request.
        cache = self.db.current_cache("keys")
        if digest in cache:
            found: tuple[ApiKey, str, str] = cache[digest]
            return found
        row = read_row(self.db, f"{_KEY_SELECT} WHERE digest = ?", [digest])
        if row is None:
            return None
        found = (_key(row), row["organization_id"], row["digest"])
        if len(cache) < CACHE_LIMIT:
            cache[digest] = found
        return found

    def get_key(self, key_id: str) -> ApiKey | None:
        row = read_row(self.db, f"{_KEY_SELECT} WHERE api_keys.id = ?", [key_id])
        return _key(row) if row else None

    def list_keys(self, organization_id: str) -> list[ApiKey]:
        sql = f"{_KEY_SELECT} WHERE organization_id = ? ORDER BY api_keys.created_at DESC"
        return [_key(row) for row in read_rows(self.db, sql, [organization_id])]

    def update_key(self, key_id: str, **changes: Any) -> None:
        with self.db.write() as conn:
            update_row(conn, "api_keys", key_id, changes, _KEY_COLUMNS)

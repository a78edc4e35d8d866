"""PostgreSQL storage of organizations and API keys."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from psycopg.rows import DictRow

from agentcore.ids import isoformat, new_id, now_iso
from agentcore.schema import ApiKey, Organization
from agentcore.storage.postgres.connection import Database, retrying, update_row


def _key(row: DictRow) -> ApiKey:
    # model_construct: these values were validated on their way in (as in SQLite)
    return ApiKey.model_construct(
        id=row["id"],
        organization=row["org_name"],
        environment=row["environment"],
        scopes=json.loads(row["scopes"]),
        prefix=row["prefix"],
        last4=row["last4"],
        name=row["name"],
        created_at=_time(row["created_at"]),
        expires_at=_time(row["expires_at"]),
        revoked_at=_time(row["revoked_at"]),
        last_used_at=_time(row["last_used_at"]),
        rotated_from=row["rotated_from"],
    )


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else isoformat(value)


_KEY_SELECT = (
    "SELECT api_keys.*, organizations.name AS org_name FROM api_keys "
    "JOIN organizations ON organizations.id = api_keys.organization_id"
)
_KEY_COLUMNS = {"revoked_at", "expires_at", "last_used_at", "name"}


class TenancyStore:
    """Organizations and keys; the key secret itself is never stored, only its digest."""

    db: Database

    @retrying
    def ensure_organization(self, name: str) -> Organization:
        """The organization named ``name``, created if missing."""
        with self.db.write() as conn:
            conn.execute(
                "INSERT INTO organizations (id, name, created_at) VALUES (%s, %s, %s)"
                " ON CONFLICT (name) DO NOTHING",
                [new_id("org"), name, now_iso()],
            )
            row = conn.execute("SELECT * FROM organizations WHERE name = %s", [name]).fetchone()
        assert row is not None
        return Organization(**row)

    @retrying
    def get_organization_by_name(self, name: str) -> Organization | None:
        """The organization named ``name``, or ``None``."""
        with self.db.read() as conn:
            row = conn.execute("SELECT * FROM organizations WHERE name = %s", [name]).fetchone()
        return Organization(**row) if row else None

    @retrying
    def insert_key(self, key: ApiKey, organization_id: str, digest: str) -> None:
        """Store a new key's record and the digest of its secret."""
        with self.db.write() as conn:
            conn.execute(
                "INSERT INTO api_keys (id, organization_id, environment, scopes, digest, prefix,"
                " last4, name, created_at, expires_at, rotated_from)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    key.id,
                    organization_id,
                    key.environment,
                    json.dumps(key.scopes),
                    digest,
                    key.prefix,
                    key.last4,
                    key.name,
                    _iso(key.created_at),
                    _iso(key.expires_at),
                    key.rotated_from,
                ],
            )

    @retrying
    def find_key_by_digest(self, digest: str) -> tuple[ApiKey, str, str] | None:
        """``(key, organization_id, stored digest)`` for a digest, or ``None``.

        One indexed read per call (no cache): a key revoked on any node is refused on
        the very next request to every node.
        """
        with self.db.read() as conn:
            row = conn.execute(f"{_KEY_SELECT} WHERE digest = %s", [digest]).fetchone()
        if row is None:
            return None
        return _key(row), row["organization_id"], row["digest"]

    @retrying
    def get_key(self, key_id: str) -> ApiKey | None:
        """A key's record by id, or ``None``."""
        with self.db.read() as conn:
            row = conn.execute(f"{_KEY_SELECT} WHERE api_keys.id = %s", [key_id]).fetchone()
        return _key(row) if row else None

    @retrying
    def list_keys(self, organization_id: str) -> list[ApiKey]:
        """Every key of an organization, newest first."""
        with self.db.read() as conn:
            rows = conn.execute(
                f"{_KEY_SELECT} WHERE organization_id = %s ORDER BY api_keys.created_at DESC",
                [organization_id],
            ).fetchall()
        return [_key(row) for row in rows]

    @retrying
    def update_key(self, key_id: str, **changes: Any) -> None:
        """Set ``revoked_at``, ``expires_at``, ``last_used_at`` or ``name`` of a key."""
        with self.db.write() as conn:
            update_row(conn, "api_keys", key_id, changes, allowed=_KEY_COLUMNS)

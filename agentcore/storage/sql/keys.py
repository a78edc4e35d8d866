"""Organizations and API keys, in SQL; the key secret itself is never stored, only its digest."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from agentcore._ids import isoformat, new_id, now_iso
from agentcore.schema import ApiKey, Organization
from agentcore.storage.base import KeyStore
from agentcore.storage.records import StoredClientToken
from agentcore.storage.sql.database import CACHE_LIMIT, Tables
from agentcore.storage.sql.queries import insert_row, read_row, read_rows, update_row, write

# Every request authenticates: a key comes with its organization's name in one
# indexed join.
_KEY_SELECT = (
    "SELECT api_keys.*, organizations.name AS org_name FROM api_keys "
    "JOIN organizations ON organizations.id = api_keys.organization_id"
)
_KEY_COLUMNS = {"revoked_at", "expires_at", "last_used_at", "name"}
# a client token comes with its organization's name and its minting key's state
_TOKEN_SELECT = (
    "SELECT client_tokens.*, organizations.name AS org_name, api_keys.scopes AS key_scopes,"
    " api_keys.revoked_at AS key_revoked_at, api_keys.expires_at AS key_expires_at"
    " FROM client_tokens JOIN organizations ON organizations.id = client_tokens.organization_id"
    " JOIN api_keys ON api_keys.id = client_tokens.key_id"
)
# a token that has not ended yet at the given time
_LIVE_TOKEN = "revoked_at IS NULL AND expires_at > ?"


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


def _token(row: Any) -> StoredClientToken:
    agents = row["agents"]
    return StoredClientToken(
        id=row["id"],
        organization_id=row["organization_id"],
        organization=row["org_name"],
        environment=row["environment"],
        key_id=row["key_id"],
        key_scopes=json.loads(row["key_scopes"]),
        user=row["user_id"],
        groups=json.loads(row["groups"]),
        agents=None if agents is None else json.loads(agents),
        created_at=datetime.fromisoformat(row["created_at"]),
        expires_at=datetime.fromisoformat(row["expires_at"]),
        revoked_at=_time(row["revoked_at"]),
        key_revoked_at=_time(row["key_revoked_at"]),
        key_expires_at=_time(row["key_expires_at"]),
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

    def insert_client_token(self, token: StoredClientToken, digest: str) -> None:
        with self.db.write() as conn:
            insert_row(
                conn,
                "client_tokens",
                {
                    "id": token.id,
                    "organization_id": token.organization_id,
                    "environment": token.environment,
                    "key_id": token.key_id,
                    "digest": digest,
                    "user_id": token.user,
                    "groups": json.dumps(token.groups),
                    "agents": None if token.agents is None else json.dumps(token.agents),
                    "created_at": isoformat(token.created_at),
                    "expires_at": isoformat(token.expires_at),
                },
            )

    def find_client_token_by_digest(self, digest: str) -> tuple[StoredClientToken, str] | None:
        # remembered as keys are, until anything is written to the database
        cache = self.db.current_cache("client_tokens")
        if digest in cache:
            found: tuple[StoredClientToken, str] = cache[digest]
            return found
        row = read_row(self.db, f"{_TOKEN_SELECT} WHERE client_tokens.digest = ?", [digest])
        if row is None:
            return None
        found = (_token(row), row["digest"])
        if len(cache) < CACHE_LIMIT:
            cache[digest] = found
        return found

    def revoke_client_tokens(
        self, organization_id: str, environment: str, user: str, *, now: datetime
    ) -> int:
        at = isoformat(now)
        sql = (
            "UPDATE client_tokens SET revoked_at = ? WHERE organization_id = ?"
            f" AND environment = ? AND user_id = ? AND {_LIVE_TOKEN}"
        )
        return max(write(self.db, sql, [at, organization_id, environment, user, at]), 0)

    def revoke_key_client_tokens(self, key_id: str, *, now: datetime) -> int:
        at = isoformat(now)
        sql = f"UPDATE client_tokens SET revoked_at = ? WHERE key_id = ? AND {_LIVE_TOKEN}"
        return max(write(self.db, sql, [at, key_id, at]), 0)

    def sweep_client_tokens(self, *, before: datetime, limit: int) -> int:
        # bounded, so one pass is a short write however many tokens expired at once
        sql = (
            "DELETE FROM client_tokens WHERE id IN"
            " (SELECT id FROM client_tokens WHERE expires_at <= ? LIMIT ?)"
        )
        return max(write(self.db, sql, [isoformat(before), limit]), 0)

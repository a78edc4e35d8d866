"""API keys: the ``ak_test_``/``ak_live_`` format, checksums, digests, and key management."""

from __future__ import annotations

import hashlib
import hmac
import re
import threading
import zlib
from collections.abc import Iterable
from concurrent.futures import Executor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, cast

from agentcore._ids import BASE62, isoformat, new_id, random_base62, to_base62, utcnow
from agentcore._memory_budget import Sweeper
from agentcore.errors import AuthenticationError, InvalidRequest, NotFound, ValidationFailed
from agentcore.schema import ApiKey, Environment, IssuedKey, Scope

if TYPE_CHECKING:
    from agentcore.storage.base import KeyStore

RANDOM_CHARS = 32  # 32 base62 characters: 190 bits of randomness
CHECKSUM_CHARS = 6  # base62 CRC32, as GitHub tokens carry
#: How many keys' last touches are remembered before those older than the interval go.
SWEEP_TOUCHES = 10_000
ENVIRONMENTS: tuple[Environment, ...] = ("test", "live")
SCOPES: tuple[Scope, ...] = ("read", "write")
KEY_PREFIX = "ak"
"""What an API key starts with (``ak_test_``, ``ak_live_``)."""


def _secret_pattern(prefix: str) -> re.Pattern[str]:
    return re.compile(
        rf"^{prefix}_(test|live)_([0-9A-Za-z]{{{RANDOM_CHARS}}})([0-9A-Za-z]{{{CHECKSUM_CHARS}}})$"
    )


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _checksum(body: str) -> str:
    return to_base62(zlib.crc32(body.encode()), CHECKSUM_CHARS)


_DIGITS = {char: value for value, char in enumerate(BASE62)}


def _from_base62(text: str) -> int:
    number = 0
    for char in text:
        number = number * 62 + _DIGITS[char]
    return number


def generate_secret(environment: Environment, prefix: str = KEY_PREFIX) -> str:
    """A fresh secret: ``<prefix>_<env>_`` + 32 random base62 chars + a 6-char checksum
    (``ak``: an API key; ``ct``: a client token)."""
    body = f"{prefix}_{environment}_{random_base62(RANDOM_CHARS)}"
    return body + _checksum(body)


def parse_secret(secret: str, prefix: str = KEY_PREFIX) -> Environment | None:
    """The environment a well-formed secret of ``prefix`` claims, or ``None`` if it is
    malformed.

    Checks shape and checksum without touching the store, so typos and garbage are
    refused cheaply.
    """
    pattern = _PATTERNS.get(prefix)
    if pattern is None:
        pattern = _PATTERNS[prefix] = _secret_pattern(prefix)
    match = pattern.match(secret)
    if match is None:
        return None
    body = secret[:-CHECKSUM_CHARS]
    if zlib.crc32(body.encode()) != _from_base62(match.group(3)):
        return None
    env: Environment = "test" if match.group(1) == "test" else "live"
    return env


def digest(secret: str) -> str:
    """The SHA-256 hex digest stored in place of a secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


def check_environment(environment: str) -> Environment:
    """``environment`` if it is ``test`` or ``live``, else a 422 naming it."""
    if environment not in ENVIRONMENTS:
        raise ValidationFailed(
            f"Environment must be 'test' or 'live', not {environment!r}.", param="environment"
        )
    return "test" if environment == "test" else "live"


def check_scopes(scopes: Iterable[str]) -> list[Scope]:
    """The scopes sorted and unique, or a 422 for an unknown or empty set."""
    chosen = sorted(set(scopes))
    unknown = [s for s in chosen if s not in SCOPES]
    if unknown or not chosen:
        raise ValidationFailed(
            f"Scopes must be a non-empty subset of {list(SCOPES)}; got {chosen}.", param="scopes"
        )
    return cast(list[Scope], chosen)


class KeyManager:
    """Mints, lists, revokes and rotates keys; reached as ``core.keys``.

    :param store: organizations and keys.
    :param toucher: where deferred ``last_used_at`` writes run (the core's pool
        ``agentcore-key-touch``, which finishes queued ones when the core stops);
        without one they are written at once, in the calling thread.
    """

    def __init__(self, store: KeyStore, *, toucher: Executor | None = None) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._toucher = toucher
        self._pending_touches: dict[str, datetime] = {}
        self._sweep_touches = Sweeper(SWEEP_TOUCHES)

    def create(
        self,
        organization: str,
        environment: str,
        scopes: Iterable[str] = ("read", "write"),
        *,
        expires_in: timedelta | None = None,
        name: str | None = None,
        rotated_from: str | None = None,
    ) -> IssuedKey:
        """Mint a key for the organization named ``organization``; the secret is shown once."""
        if expires_in is not None and expires_in <= timedelta(0):
            raise ValidationFailed("expires_in must be positive.", param="expires_in")
        org_id, issued = self._issue(
            organization, environment, scopes, expires_in, name, rotated_from
        )
        self._store.insert_key(issued, org_id, digest(issued.secret))
        return issued

    def create_first(
        self, organization: str, scopes: Iterable[str] = ("read", "write")
    ) -> list[IssuedKey]:
        """A test and a live key for an organization that has no usable key yet (none
        revoked or expired); ``[]`` when it has one. Checked and minted in one
        transaction that holds the organization's row, so processes or nodes starting
        at once (``agentcore init`` in every container) mint one pair between them."""
        issued = [
            self._issue(organization, env, scopes, None, None, None) for env in ("test", "live")
        ]
        org_id = issued[0][0]
        pairs = [(key, digest(key.secret)) for _, key in issued]
        minted = self._store.insert_keys(org_id, pairs, unless_usable_at=utcnow())
        return [key for _, key in issued] if minted else []

    def _issue(
        self,
        organization: str,
        environment: str,
        scopes: Iterable[str],
        expires_in: timedelta | None,
        name: str | None,
        rotated_from: str | None,
    ) -> tuple[str, IssuedKey]:
        """A new key of the organization named ``organization`` (its id), not stored."""
        env = check_environment(environment)
        chosen = check_scopes(scopes)
        org = self._store.get_organization_by_name(organization)
        if org is None:
            raise NotFound(f"No organization named {organization!r}.", param="organization")
        secret = generate_secret(env)
        now = utcnow()
        record = ApiKey(
            id=new_id("key"),
            organization=org.name,
            environment=env,
            scopes=chosen,
            prefix=secret[: len(f"ak_{env}_") + 4],
            last4=secret[-4:],
            name=name,
            created_at=now,
            expires_at=_later(now, expires_in, "expires_in") if expires_in is not None else None,
            rotated_from=rotated_from,
        )
        return org.id, IssuedKey(**record.model_dump(), secret=secret)

    def list(self, organization: str) -> list[ApiKey]:
        """Every key of the organization, newest first (revoked ones included)."""
        org = self._store.get_organization_by_name(organization)
        if org is None:
            raise NotFound(f"No organization named {organization!r}.", param="organization")
        return self._store.list_keys(org.id)

    def get(self, key_id: str) -> ApiKey:
        """One key by id."""
        found = self._store.get_key(key_id)
        if found is None:
            raise NotFound(f"No API key with id {key_id!r}.", param="key_id")
        return found

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke at once; a running server refuses the key, and every client token it
        minted, from its next request."""
        key = self.get(key_id)
        if key.revoked_at is None:
            self._store.update_key(key_id, revoked_at=isoformat(utcnow()))
        return self.get(key_id)

    def rotate(self, key_id: str, *, grace: timedelta = timedelta(hours=24)) -> IssuedKey:
        """Mint a replacement with the same scopes; the old key keeps working for
        ``grace``, and the client tokens it minted end at once."""
        old = self.get(key_id)
        if old.revoked_at is not None:
            raise InvalidRequest("A revoked key cannot be rotated.", code="key_revoked")
        if grace < timedelta(0):
            raise ValidationFailed("The grace period cannot be negative.", param="grace")
        now = utcnow()
        if old.expires_at is not None and old.expires_at <= now:
            raise InvalidRequest(
                f"Key {key_id} expired at {isoformat(old.expires_at)}; an expired key cannot"
                " be rotated: create a new key instead.",
                code="key_expired",
            )
        ends = _later(now, grace, "grace")
        new = self.create(
            old.organization,
            old.environment,
            old.scopes,
            name=old.name,
            rotated_from=old.id,
            expires_in=(old.expires_at - now) if old.expires_at else None,
        )
        if old.expires_at is None or old.expires_at > ends:
            self._store.update_key(key_id, expires_at=isoformat(ends))
        # the old key serves on through its grace, but the client tokens it minted end
        # now: a rotation is often a suspected leak, and a token is cheap to mint again
        self._store.revoke_key_client_tokens(key_id, now=now)
        return new

    def resolve(
        self, secret: str | None, *, touch_interval: float, defer_touch: bool = False
    ) -> tuple[ApiKey, str]:
        """The key record and organization id behind ``secret``, or a 401 saying why.

        Reads the store every time (a revoked key is refused at once). ``last_used_at``
        is written at most once per ``touch_interval``; with ``defer_touch`` that write
        happens on a background thread, so the caller (an event loop) only reads.
        """
        if not secret:
            raise AuthenticationError(
                "No API key provided. Send 'Authorization: Bearer <key>'.",
                code="missing_api_key",
            )
        if parse_secret(secret) is None:
            raise AuthenticationError("The API key is malformed.", code="malformed_api_key")
        wanted = digest(secret)
        found = self._store.find_key_by_digest(wanted)
        if found is None or not hmac.compare_digest(found[2], wanted):
            raise AuthenticationError("The API key is not recognised.", code="invalid_api_key")
        key, organization_id, _ = found
        now = utcnow()
        if key.revoked_at is not None:
            raise AuthenticationError("The API key has been revoked.", code="api_key_revoked")
        if key.expires_at is not None and key.expires_at <= now:
            raise AuthenticationError("The API key has expired.", code="api_key_expired")
        if key.last_used_at is None or _older_than(key.last_used_at, now, touch_interval):
            if defer_touch:
                self._touch_later(key.id, now, touch_interval)
            else:
                self._store.update_key(key.id, last_used_at=isoformat(now))
        return key, organization_id

    def _touch_later(self, key_id: str, now: datetime, interval: float) -> None:
        with self._lock:
            last = self._pending_touches.get(key_id)
            if last is not None and not _older_than(last, now, interval):
                return  # a touch for this key is already queued or just written
            self._pending_touches[key_id] = now
            # one older than the interval is the same as none: keys used once by 100,000
            # tenants leave no 100,000 entries behind
            self._pending_touches = self._sweep_touches(
                self._pending_touches, lambda last: not _older_than(last, now, interval)
            )
        if self._toucher is None:
            self._store.update_key(key_id, last_used_at=isoformat(now))
        else:
            self._toucher.submit(self._store.update_key, key_id, last_used_at=isoformat(now))


def _later(now: datetime, delta: timedelta, param: str) -> datetime:
    """``now + delta``, or a 422 naming ``param`` when that is past the calendar's end."""
    try:
        return now + delta
    except OverflowError:
        raise ValidationFailed(f"{param} is too long.", param=param) from None


def _older_than(moment: datetime, now: datetime, seconds: float) -> bool:
    return (now - moment).total_seconds() >= seconds

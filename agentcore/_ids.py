"""Identifiers and timestamps: prefixed random ids, base62, UTC ISO-8601 times."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_TO_BASE62 = bytes(ord(BASE62[b % 62]) for b in range(256))
_REJECTED = bytes(range(248, 256))  # 248 = 4 * 62: dropping these keeps byte % 62 uniform


def random_base62(length: int) -> str:
    """``length`` characters drawn uniformly from the base62 alphabet (5.95 bits each).

    One ``token_bytes`` call per id (ids are minted on the event loop for every
    request); bytes >= 248 are dropped (rejection sampling) so ``byte % 62`` is
    uniform, and the mapping is one C-level ``bytes.translate``.
    """
    out = b""
    while len(out) < length:
        out += secrets.token_bytes(length + 8).translate(_TO_BASE62, _REJECTED)
    return out[:length].decode("ascii")


def to_base62(number: int, width: int) -> str:
    """``number`` in base62, left-padded with ``0`` to ``width`` characters."""
    digits = []
    while number:
        number, rest = divmod(number, 62)
        digits.append(BASE62[rest])
    return "".join(reversed(digits)).rjust(width, "0")


def new_id(prefix: str) -> str:
    """A new object id such as ``agt_4fK...``: the prefix says the type (as Stripe's do)."""
    return f"{prefix}_{random_base62(24)}"


def utcnow() -> datetime:
    """The current time, timezone-aware UTC, to the millisecond (as the store keeps it)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def isoformat(moment: datetime) -> str:
    """``moment`` as ISO 8601 UTC with milliseconds and a ``Z``: sortable as text."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now_iso() -> str:
    """The current time as ``isoformat`` renders it."""
    return isoformat(utcnow())

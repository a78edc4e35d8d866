"""Standard Webhooks signatures: secrets, payload bytes, headers, and verification."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets as _secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agentcore.errors import ValidationFailed
from agentcore.events import EVENT_JSON

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
USER_AGENT = "agentcore-webhooks/1"
DEFAULT_TOLERANCE = 300


def generate_secret() -> str:
    """A fresh signing secret: ``whsec_`` followed by base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(_secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def _secret_key(secret: str) -> bytes:
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded, validate=True)
    except binascii.Error as exc:
        raise ValueError("webhook secret is not valid base64") from exc
    if not key:
        raise ValueError("webhook secret is empty")
    return key


def _signature(key: bytes, msg_id: str, timestamp: int, body: bytes) -> bytes:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return hmac.new(key, signed, hashlib.sha256).digest()


def sign(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value: one ``v1,<base64>`` per secret.

    Several secrets are given during a rotation overlap; receivers accept any match.

    :param secrets: ``whsec_…`` secrets, current one first.
    :param msg_id: the ``webhook-id`` (stable across retries).
    :param timestamp: the ``webhook-timestamp`` in Unix seconds.
    :param body: the exact request body bytes.
    :raises ValueError: no secret given, or one is not valid base64.
    """
    if not secrets:
        raise ValueError("at least one webhook secret is needed to sign")
    return " ".join(
        "v1," + base64.b64encode(_signature(_secret_key(s), msg_id, timestamp, body)).decode()
        for s in secrets
    )


def build_headers(
    secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """All request headers of one delivery attempt, signature included."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secrets, msg_id, timestamp, body),
        "content-type": "application/json",
        "user-agent": USER_AGENT,
    }


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance: int = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> None:
    """Check a delivery as a receiver would; return silently when it is genuine.

    :param headers: the request headers (any letter case).
    :param tolerance: seconds the timestamp may differ from ``now``.
    :param now: the current Unix time; defaults to the clock.
    :raises ValidationFailed: code ``invalid_signature`` (missing or malformed headers,
        no matching signature) or ``timestamp_out_of_tolerance``.
    :raises ValueError: ``secret`` itself is not a ``whsec_`` base64 secret.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id = lowered.get("webhook-id")
    raw_timestamp = lowered.get("webhook-timestamp")
    signature_header = lowered.get("webhook-signature")
    if not (msg_id and raw_timestamp and signature_header):
        raise ValidationFailed(
            "Missing webhook-id, webhook-timestamp or webhook-signature header.",
            code="invalid_signature",
        )
    try:
        timestamp = int(raw_timestamp)
    except ValueError:
        raise ValidationFailed(
            "The webhook-timestamp header is not an integer.",
            code="invalid_signature",
            param="webhook-timestamp",
        ) from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise ValidationFailed(
            f"The webhook-timestamp is more than {tolerance} s away from now.",
            code="timestamp_out_of_tolerance",
            param="webhook-timestamp",
        )
    expected = _signature(_secret_key(secret), msg_id, timestamp, body)
    for candidate in signature_header.split():
        version, _, encoded = candidate.partition(",")
        if version != "v1":
            continue
        try:
            given = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            continue
        if hmac.compare_digest(expected, given):
            return
    raise ValidationFailed(
        "No matching signature.", code="invalid_signature", param="webhook-signature"
    )


def encode_payload(
    type: str, timestamp: str, data: Mapping[str, Any], *, event_id: str | None = None
) -> bytes:
    """The request body: compact JSON ``{"id", "type", "timestamp", "data"}``.

    ``event_id`` is the event's id, the same value as the ``webhook-id`` header (a
    receiver that only keeps the body can still deduplicate); deliveries always pass it.
    Keys inside ``data`` are sorted so the same event always gives the same bytes,
    whatever order the dict was built or reloaded in.

    :raises ValueError: ``data`` holds NaN or infinity (not JSON), or a string UTF-8
        cannot hold (a lone surrogate).
    """
    envelope: dict[str, Any] = {} if event_id is None else {"id": event_id}
    envelope.update(type=type, timestamp=timestamp, data=data)
    # sort_keys would move "data" first; dump each part so the envelope order stays readable.
    parts = (
        f"{json.dumps(key)}:{json.dumps(value, **EVENT_JSON)}" for key, value in envelope.items()
    )
    return ("{" + ",".join(parts) + "}").encode("utf-8")


__all__ = [
    "DEFAULT_TOLERANCE",
    "SECRET_PREFIX",
    "USER_AGENT",
    "build_headers",
    "encode_payload",
    "generate_secret",
    "sign",
    "verify",
]

"""Webhook signing secrets at rest: sealed with AES-256-GCM when a key is available.

A subscription's ``whsec_`` secret must be readable by the server (it signs every
delivery with it), so it cannot be hashed like an API key. With a key
(``Settings.webhook_secret_key``, else the key file beside a SQLite database:
``keyfile``), the store holds ``enc:v1:<key id>:<base64>`` instead: a random 96-bit
nonce, the AES-GCM ciphertext and its tag (the ``cryptography`` package's ``AESGCM``),
so a copy of the database (a backup, a stolen file) does not let anyone forge
deliveries. The key never reaches the store.

Rows written before a key was available keep working; a core that opens the store
with a key seals them in place (``WebhookRuntime.seal_stored_secrets``). Several keys
may be configured (comma-separated): the first seals, every one opens, so the key
itself can be replaced without a flag day (configure ``new,old``, rotate the secrets,
then drop ``old``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence
from typing import Any

from agentcore.config import parse_keys
from agentcore.errors import AgentCoreError

SEALED_PREFIX = "enc:v1:"
NONCE_BYTES = 12  # the size GCM is specified for
# Bound into every ciphertext: a sealed value means "an agentcore webhook secret" (the
# default purpose); other secrets name their own, so one cannot pass for another
_ASSOCIATED_DATA = b"agentcore webhook secret v1"
MCP_HEADERS = b"agentcore mcp server headers v1"
"""The purpose of an agent's sealed MCP server headers."""


class SealedSecretError(AgentCoreError):
    """A sealed secret that cannot be opened: its key is not configured, or it was
    altered (a 500: the server's configuration, not the request, is at fault)."""

    default_code = "webhook_secret_unreadable"


def _key_id(key: bytes) -> str:
    """A short public name of a key (not secret: a hash prefix), stored with each value."""
    return hashlib.sha256(b"agentcore key id\0" + key).hexdigest()[:8]


class SecretBox:
    """Seals webhook secrets for the store and opens them for signing.

    Without keys it is the identity (plaintext at rest, as before a key is set).

    :param keys: AES-256 keys, the one that seals first (see ``parse_keys``).
    """

    def __init__(self, keys: Sequence[bytes] = ()) -> None:
        self._ciphers: dict[str, Any] = {}
        self._sealing: tuple[str, Any] | None = None
        if keys:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            for key in keys:
                cipher = AESGCM(key)
                self._ciphers.setdefault(_key_id(key), cipher)
                if self._sealing is None:
                    self._sealing = (_key_id(key), cipher)

    @classmethod
    def from_setting(cls, value: Any) -> SecretBox:
        """The box for ``Settings.webhook_secret_key`` (a ``SecretStr`` or ``None``)."""
        if value is None:
            return cls()
        text = value.get_secret_value() if hasattr(value, "get_secret_value") else str(value)
        return cls(parse_keys(text))

    @property
    def sealing(self) -> bool:
        """Whether new secrets are stored sealed (a key is configured)."""
        return self._sealing is not None

    def seal(self, secret: str, purpose: bytes = _ASSOCIATED_DATA) -> str:
        """What the store keeps for ``secret``: sealed with the first key, or ``secret``
        itself without one. A value sealed already is returned as it is. ``purpose`` is
        bound into the seal (a webhook secret by default; ``MCP_HEADERS``): ``open``
        needs the same one."""
        if self._sealing is None or is_sealed(secret):
            return secret
        key_id, cipher = self._sealing
        nonce = os.urandom(NONCE_BYTES)
        sealed = cipher.encrypt(nonce, secret.encode("utf-8"), purpose)
        return f"{SEALED_PREFIX}{key_id}:{base64.b64encode(nonce + sealed).decode('ascii')}"

    def open(self, stored: str, purpose: bytes = _ASSOCIATED_DATA) -> str:
        """The secret a stored value holds (a plaintext row is returned as it is).

        :raises SealedSecretError: sealed with a key not configured here, or altered.
        """
        if not is_sealed(stored):
            return stored
        key_id, _, payload = stored[len(SEALED_PREFIX) :].partition(":")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise SealedSecretError(
                f"a secret (webhook secret, MCP server headers) is sealed with key {key_id}, which webhook_secret_key"
                " does not hold: configure that key (it may follow the current one)"
            )
        from cryptography.exceptions import InvalidTag

        try:
            raw = base64.b64decode(payload, validate=True)
            opened: bytes = cipher.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], purpose)
        except (binascii.Error, ValueError, InvalidTag):
            raise SealedSecretError(
                f"a secret sealed with key {key_id} does not open: it was altered"
            ) from None
        return opened.decode("utf-8")


def is_sealed(stored: str) -> bool:
    """Whether a stored secret is sealed (else it is a plaintext ``whsec_`` secret)."""
    return stored.startswith(SEALED_PREFIX)


__all__ = [
    "MCP_HEADERS",
    "SEALED_PREFIX",
    "SealedSecretError",
    "SecretBox",
    "is_sealed",
    "parse_keys",
]

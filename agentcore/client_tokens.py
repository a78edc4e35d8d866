"""Client tokens: short-lived credentials a browser or app holds for one end user.

A backend mints one with its write key (``ws.client_tokens.create(user=...)``, or
``POST /v1/client_tokens``) and hands it to the user's browser, which sends it as
``Authorization: Bearer ct_test_…``. The token acts only as that user: it may verify
itself, list the agents it may use, search, chat, and read, continue, rate and delete
its own conversations (``Workspace.require(..., end_users=True)``); anything else is a
403. It ends when it expires (at most a day), when its user's tokens are revoked, and
when the key that minted it is revoked or rotated. Only its SHA-256 digest is stored.
"""

from __future__ import annotations

import hmac
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from pydantic import ValidationError

from agentcore import keys
from agentcore._ids import new_id, utcnow
from agentcore.errors import AuthenticationError, NotFound, PermissionDenied, invalid_fields
from agentcore.keys import digest, parse_secret
from agentcore.schema import (
    ClientToken,
    ClientTokenCreate,
    ClientTokenRevocation,
    ClientTokenRevoke,
    EndUser,
)
from agentcore.storage.records import StoredClientToken
from agentcore.workspace import ClientGrant, Workspace

if TYPE_CHECKING:
    from agentcore.storage.base import AgentStore, KeyStore

TOKEN_PREFIX = "ct"
"""What a client token starts with (``ct_test_``, ``ct_live_``)."""
#: How many expired tokens one sweep deletes at most (a short write).
SWEEP_LIMIT = 1000


def is_client_token(secret: str) -> bool:
    """Whether ``secret`` claims to be a client token (by its prefix alone)."""
    return secret.startswith(f"{TOKEN_PREFIX}_")


def resolve(store: KeyStore, secret: str, *, now: datetime | None = None) -> StoredClientToken:
    """The live token behind ``secret``, or a 401 saying why it is refused.

    One indexed read (remembered until the database changes): a revocation, of the
    token or of its key, is seen by the very next request.
    """
    if parse_secret(secret, TOKEN_PREFIX) is None:
        raise AuthenticationError("The client token is malformed.", code="malformed_client_token")
    wanted = digest(secret)
    found = store.find_client_token_by_digest(wanted)
    if found is None or not hmac.compare_digest(found[1], wanted):
        raise AuthenticationError(
            "The client token is not recognised.", code="invalid_client_token"
        )
    token = found[0]
    now = now or utcnow()
    if token.revoked_at is not None or token.key_revoked_at is not None:
        raise AuthenticationError(
            "The client token has been revoked (its user's tokens were revoked, or the key"
            " that minted it was revoked or rotated).",
            code="token_revoked",
        )
    if token.expires_at <= now or (
        token.key_expires_at is not None and token.key_expires_at <= now
    ):
        raise AuthenticationError(
            "The client token has expired: ask your backend for a new one.", code="token_expired"
        )
    return token


def grant(token: StoredClientToken) -> ClientGrant:
    """What ``token`` lets its holder do, for its ``Workspace``."""
    return ClientGrant(
        token_id=token.id,
        user=EndUser.model_construct(id=token.user, groups=list(token.groups)),
        agents=None if token.agents is None else frozenset(token.agents),
        expires_at=token.expires_at,
    )


def sweep(store: KeyStore, *, now: datetime | None = None) -> int:
    """Delete up to ``SWEEP_LIMIT`` tokens that have expired; how many went."""
    return store.sweep_client_tokens(before=now or utcnow(), limit=SWEEP_LIMIT)


class ClientTokenService:
    """Mints and revokes a workspace's client tokens (``ws.client_tokens``). Write scope:
    a key that may change the workspace decides who may chat in it.

    :param workspace: the caller's workspace; its key mints the tokens.
    :param store: where tokens (and the workspace's agents, to check ``agents``) are.
    """

    def __init__(self, workspace: Workspace, *, store: KeyStore, agents: AgentStore) -> None:
        self._ws = workspace
        self._store = store
        self._agents = agents

    def create(self, spec: ClientTokenCreate | None = None, **fields: object) -> ClientToken:
        """Mint a token for ``user`` (with ``groups``, limited to ``agents`` if given),
        living ``ttl_seconds`` (1-86,400; default 3,600). The token is in the answer
        only: keep it in the user's browser or app, not in your logs.

        :raises PermissionDenied: a read-only key, or a client token (403).
        :raises NotFound: an agent of ``agents`` is not in this workspace (404).
        """
        ws = self._ws
        ws.require("write")
        if spec is None:
            try:
                spec = ClientTokenCreate.model_validate(fields)
            except ValidationError as exc:
                raise invalid_fields(exc) from None
        if ws.key_id is None:
            raise PermissionDenied(
                "A client token is minted by an API key (it ends with that key); host code"
                " without a key cannot mint one.",
                code="key_required",
            )
        agents = None if spec.agents is None else list(dict.fromkeys(spec.agents))
        for at, agent_id in enumerate(agents or ()):
            if self._agents.get_agent(ws.organization_id, ws.environment, agent_id) is None:
                raise NotFound(f"No agent with id {agent_id!r}.", param=f"agents.{at}")
        now = utcnow()
        token = StoredClientToken(
            id=new_id("ctk"),
            organization_id=ws.organization_id,
            organization=ws.organization,
            environment=ws.environment,
            key_id=ws.key_id,
            key_scopes=sorted(ws.scopes),
            user=spec.user,
            groups=list(dict.fromkeys(spec.groups)),
            agents=agents,
            created_at=now,
            expires_at=now + timedelta(seconds=spec.ttl_seconds),
        )
        # through the module: the test suite watches every secret minted there
        secret = keys.generate_secret(ws.environment, TOKEN_PREFIX)
        self._store.insert_client_token(token, digest(secret))
        return ClientToken(
            id=token.id,
            token=secret,
            user=token.user,
            groups=token.groups,
            agents=token.agents,
            expires_at=token.expires_at,
            created_at=token.created_at,
        )

    def revoke(self, user: str) -> ClientTokenRevocation:
        """End every live token of ``user`` in this workspace, whichever key minted it;
        their next request is a 401 ``token_revoked``."""
        ws = self._ws
        ws.require("write")
        try:
            spec = ClientTokenRevoke.model_validate({"user": user})
        except ValidationError as exc:
            raise invalid_fields(exc) from None
        revoked = self._store.revoke_client_tokens(
            ws.organization_id, ws.environment, spec.user, now=utcnow()
        )
        return ClientTokenRevocation(user=spec.user, revoked=revoked)

"""Webhook signing secrets at rest: sealed with AES-GCM when ``webhook_secret_key`` is set.

The database (file and WAL) then holds no ``whsec_`` secret, deliveries still verify with
the public ``standardwebhooks`` verifier, rows stored in plaintext before the key was
set are sealed in place when a core opens with it, and keep working. (Without the
setting, a key file beside a SQLite database seals: test_webhook_key_file.py.)
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from pydantic import ValidationError
from standardwebhooks.webhooks import Webhook
from webhook_receiver import Receiver

from agentcore import AgentCore
from agentcore.outbound._sealing import SEALED_PREFIX, SealedSecretError, SecretBox, parse_keys
from agentcore.storage.sqlite import SQLiteStore
from agentcore.webhooks.signing import generate_secret


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def stored_bytes(db: Path) -> bytes:
    """Everything SQLite keeps for ``db``: the file, its WAL and shared memory."""
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*") if p.is_file())


def open_core(db: Path, key: str | None) -> AgentCore:
    options = {} if key is None else {"webhook_secret_key": key}
    return AgentCore.open(db, webhook_allowed_networks="127.0.0.0/8", **options)


def verified(receiver: Receiver, secret: str, count: int) -> list[dict[str, object]]:
    """The last ``count`` requests, each checked with ``standardwebhooks``."""
    return [Webhook(secret).verify(r.body, r.headers) for r in receiver.requests()[-count:]]


def test_with_a_key_no_secret_is_stored_and_deliveries_verify(
    tmp_path: Path, receiver: Receiver
) -> None:
    db = tmp_path / "sealed.db"
    core = open_core(db, new_key())
    try:
        ws = core.workspace("acme", "test")
        sub = ws.webhooks.subscribe(receiver.url("/hook"), ["agent.action"])
        stored = core.store.get_subscription(None, None, sub.id)
        assert stored is not None and stored.secret.startswith(SEALED_PREFIX)
        core.start()
        event = ws.publish("agent.action", {"n": 1})
        assert receiver.wait_for(1)
        assert verified(receiver, sub.secret, 1)[0]["id"] == event.id

        rotated = ws.webhooks.rotate_secret(sub.id)
        ws.publish("agent.action", {"n": 2})
        assert receiver.wait_for(2)
        verified(receiver, rotated.secret, 1)  # the new secret signs
        verified(receiver, sub.secret, 1)  # and the old one beside it, during the overlap
    finally:
        core.close()
    at_rest = stored_bytes(db)
    assert b"whsec_" not in at_rest
    for secret in (sub.secret, rotated.secret):
        assert secret.removeprefix("whsec_").encode() not in at_rest


def test_plaintext_rows_are_sealed_in_place_and_keep_working(
    tmp_path: Path, receiver: Receiver
) -> None:
    db = tmp_path / "old.db"
    old = SQLiteStore.open(db)  # a row as a version that did not seal stored it
    secret = generate_secret()
    row = old.insert_subscription(
        old.ensure_organization("acme").id,
        "test",
        url=receiver.url("/hook"),
        events=["agent.action"],
        secret=secret,
        description=None,
    )
    old.close()
    assert secret.encode() in stored_bytes(db)

    with open_core(db, new_key()) as core:
        sealed = core.store.get_subscription(None, None, row.public.id)
        assert sealed is not None and sealed.secret.startswith(SEALED_PREFIX)  # as it opened
        ws = core.workspace("acme", "test")
        ws.publish("agent.action", {"n": 1})
        assert core.webhooks.deliver_due() == 1
        verified(receiver, secret, 1)  # the same secret signs: receivers change nothing
        rotated = ws.webhooks.rotate_secret(row.public.id)
        stored = core.store.get_subscription(None, None, row.public.id)
        assert stored is not None
        assert stored.secret.startswith(SEALED_PREFIX)
        assert stored.previous_secret is not None
        assert stored.previous_secret.startswith(SEALED_PREFIX)
        ws.publish("agent.action", {"n": 2})
        assert core.webhooks.deliver_due() == 1
        verified(receiver, rotated.secret, 1)
        verified(receiver, secret, 1)
    # the core's close was the last: it checkpointed the WAL into the file
    assert secret.encode() not in stored_bytes(db)
    assert rotated.secret.encode() not in stored_bytes(db)


def test_keys_rotate_with_a_list_and_an_unknown_key_is_a_clear_error() -> None:
    old, new = new_key(), new_key()
    sealed_old = SecretBox(parse_keys(old)).seal("whsec_c2VjcmV0")
    both = SecretBox(parse_keys(f"{new},{old}"))
    assert both.open(sealed_old) == "whsec_c2VjcmV0"  # the old key still opens
    resealed = both.seal(both.open(sealed_old))
    assert resealed != sealed_old and SecretBox(parse_keys(new)).open(resealed) == "whsec_c2VjcmV0"
    with pytest.raises(SealedSecretError) as unknown:
        SecretBox(parse_keys(new)).open(sealed_old)
    assert unknown.value.code == "webhook_secret_unreadable"
    assert "does not hold" in unknown.value.detail
    tampered = sealed_old[:-6] + ("A" if sealed_old[-6] != "A" else "B") + sealed_old[-5:]
    with pytest.raises(SealedSecretError, match="altered"):
        both.open(tampered)
    assert SecretBox().seal("whsec_x") == "whsec_x"  # no key: plaintext, as before
    assert both.seal(sealed_old) == sealed_old  # sealed values are not sealed twice


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not base64!", "is not base64"),
        (base64.b64encode(b"short").decode(), "AES-256 needs 32"),
        (" , ", "names no key"),
    ],
)
def test_a_bad_key_is_refused_without_echoing_it(value: str, message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        AgentCore.open(":memory:", webhook_secret_key=value)
    text = str(refused.value)
    assert "webhook_secret_key" in text and message in text
    assert value.strip(" ,") == "" or value not in text


@pytest.mark.both_stores
def test_both_stores_keep_only_sealed_secrets(store_url: str) -> None:
    with AgentCore.open(
        store_url,
        webhook_secret_key=new_key(),
        webhook_allowed_networks="127.0.0.0/8",
        start_workers=False,
    ) as core:
        ws = core.workspace("acme", "test")
        subs = [
            ws.webhooks.subscribe(f"http://127.0.0.1:9/hook{n}", ["agent.action"]) for n in range(3)
        ]
        ws.webhooks.rotate_secret(subs[0].id)
        stored = [core.store.get_subscription(None, None, s.id) for s in subs]
        values = [s.secret for s in stored if s] + [
            s.previous_secret for s in stored if s and s.previous_secret
        ]
        assert len(values) == 4 and all(v.startswith(SEALED_PREFIX) for v in values)
        assert all(core.webhooks.secrets.open(v).startswith("whsec_") for v in values)

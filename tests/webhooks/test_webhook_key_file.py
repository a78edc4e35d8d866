"""Webhook secrets sealed by default: the key file beside a SQLite database.

``agentcore init`` (or ``AgentCore.open``) creates ``<db>.webhook-key`` (mode 0600);
every later open reads it, so a plain ``init && serve`` stores only sealed secrets and
deliveries verify after a restart. Secrets stored in plaintext before are sealed in
place (the receivers' secrets do not change). Where no file can be kept, the start-up
log says secrets are stored in plaintext and how to set ``webhook_secret_key``.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import cli_env, cli_json, start_serve
from standardwebhooks.webhooks import Webhook
from webhook_receiver import Receiver

from agentcore import AgentCore
from agentcore.outbound._sealing import SEALED_PREFIX
from agentcore.storage.sqlite import SQLiteStore
from agentcore.webhooks._keyfile import KEY_FILE_SUFFIX, KeyFileError
from agentcore.webhooks.signing import generate_secret

PLAINTEXT = "stored in plaintext"


def key_file(db: Path) -> Path:
    return db.with_name(db.name + KEY_FILE_SUFFIX)


def stored_secrets(db: Path) -> list[str | None]:
    """The secret columns as the database holds them, read with sqlite3 itself."""
    # closed at once: a connection left open would keep the last close of the core from
    # checkpointing the WAL, and the superseded plaintext page in the file with it
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT secret, previous_secret FROM webhook_subscriptions")
        return [value for row in rows for value in row]


def on_disk(db: Path) -> bytes:
    """The database file and its WAL (not the key file)."""
    return b"".join(p.read_bytes() for p in (db, db.with_name(db.name + "-wal")) if p.exists())


def verified(receiver: Receiver, secret: str) -> dict[str, object]:
    (request,) = receiver.requests()[-1:]
    return Webhook(secret).verify(request.body, request.headers)  # type: ignore[no-any-return]


@pytest.fixture
def stop() -> Iterator[list[subprocess.Popen[str]]]:
    """Servers a test started, stopped (SIGTERM, then killed) and reaped at its end."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.mark.slow  # CLI subprocesses and two real servers
def test_init_and_serve_store_sealed_secrets_that_sign_after_a_restart(
    tmp_path: Path, receiver: Receiver, stop: list[subprocess.Popen[str]]
) -> None:
    db = tmp_path / "agentcore.db"
    made = cli_json("init", "--org", "demo", "--json", db=db)
    path = key_file(db)
    assert made["webhook_key_file"] == str(path)
    assert path.stat().st_mode & 0o777 == 0o600
    key = path.read_text()
    assert len(base64.b64decode(key)) == 32
    again = cli_json("init", "--org", "demo", "--json", db=db)
    assert again["webhook_key_file"] == str(path) and path.read_text() == key  # read, kept

    secret = made["keys"][0]["secret"]
    env = {**cli_env(), "AGENTCORE_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"}
    log = tmp_path / "serve.log"
    extra = ("--log-level", "debug")
    process, url = start_serve(db, secret, env=env, extra=extra, stderr=log)
    stop.append(process)
    auth = {"Authorization": f"Bearer {secret}"}
    subscribed = httpx.post(
        url + "/v1/webhooks/subscribe",
        json={"url": receiver.url("/hook"), "events": ["agent.action"]},
        headers=auth,
    )
    assert subscribed.status_code == 201, subscribed.text
    subscription = subscribed.json()
    (stored, _) = stored_secrets(db)
    assert stored is not None and stored.startswith(SEALED_PREFIX), stored
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    assert b"whsec_" not in on_disk(db)

    process, url = start_serve(db, secret, env=env, extra=extra, stderr=log)  # reads the file
    stop.append(process)
    pinged = httpx.post(url + f"/v1/webhooks/{subscription['id']}/test", headers=auth)
    assert pinged.status_code == 202, pinged.text
    assert receiver.wait_for(1, timeout=30)
    assert verified(receiver, subscription["secret"])["type"] == "webhook.ping"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    logged = log.read_text()
    assert key.strip() not in logged  # the key is never logged
    assert PLAINTEXT not in logged


def test_the_python_api_creates_the_key_file_and_seals(tmp_path: Path) -> None:
    db = tmp_path / "embedded.db"
    with AgentCore.open(db, webhook_allowed_networks="127.0.0.0/8") as core:
        assert core.webhook_keys.key_file == key_file(db)
        sub = core.workspace("acme", "test").webhooks.subscribe(
            "http://127.0.0.1:9/hook", ["agent.action"]
        )
    assert key_file(db).stat().st_mode & 0o777 == 0o600
    (stored, _) = stored_secrets(db)
    assert stored is not None and stored.startswith(SEALED_PREFIX)
    assert sub.secret.removeprefix("whsec_").encode() not in on_disk(db)
    with AgentCore.open(db) as reopened:  # the same key, read back
        assert reopened.webhooks.secrets.open(stored) == sub.secret


def test_plaintext_secrets_are_sealed_in_place_and_keep_delivering(
    tmp_path: Path, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "older.db"
    # rows as a version without the key file stored them: through the store, in plaintext
    old = SQLiteStore.open(db)
    organization = old.ensure_organization("acme")
    secret, previous = generate_secret(), generate_secret()
    row = old.insert_subscription(
        organization.id,
        "test",
        url=receiver.url("/hook"),
        events=["agent.action"],
        secret=secret,
        description=None,
    )
    old.update_subscription(row.public.id, previous_secret=previous)
    before = old.get_subscription(None, None, row.public.id)
    old.close()
    assert not key_file(db).exists()
    assert stored_secrets(db) == [secret, previous]

    caplog.set_level(logging.INFO, logger="agentcore")
    with AgentCore.open(db, webhook_allowed_networks="127.0.0.0/8") as core:
        assert "sealed 2 webhook signing secret(s)" in caplog.text
        sealed = stored_secrets(db)
        assert all(v is not None and v.startswith(SEALED_PREFIX) for v in sealed), sealed
        assert [core.webhooks.secrets.open(v) for v in sealed if v] == [secret, previous]
        unchanged = core.store.get_subscription(None, None, row.public.id)
        assert before is not None and unchanged is not None
        assert unchanged.public == before.public  # updated_at too: the secrets are the same
        core.workspace("acme", "test").publish("agent.action", {"n": 1})
        assert core.webhooks.deliver_due() == 1
    verified(receiver, secret)  # the receiver's secret has not changed
    assert secret.encode() not in on_disk(db) and previous.encode() not in on_disk(db)


def test_a_configured_key_seals_and_the_key_file_still_opens(tmp_path: Path) -> None:
    db = tmp_path / "moved.db"
    with AgentCore.open(db, webhook_allowed_networks="127.0.0.0/8") as core:
        sub = core.workspace("acme", "test").webhooks.subscribe(
            "http://127.0.0.1:9/hook", ["agent.action"]
        )
    (by_file, _) = stored_secrets(db)
    configured = base64.b64encode(os.urandom(32)).decode()
    with AgentCore.open(db, webhook_secret_key=configured) as core:
        assert core.webhook_keys.key_file is None  # the setting's key seals
        assert by_file is not None and core.webhooks.secrets.open(by_file) == sub.secret
        rotated = core.workspace("acme", "test").webhooks.rotate_secret(sub.id)
    with AgentCore.open(":memory:", webhook_secret_key=configured) as only_setting:
        (now, before) = stored_secrets(db)
        assert now is not None and only_setting.webhooks.secrets.open(now) == rotated.secret
        assert before is not None and only_setting.webhooks.secrets.open(before) == sub.secret


def test_a_key_file_that_cannot_be_read_stops_the_open(tmp_path: Path) -> None:
    db = tmp_path / "broken.db"
    key_file(db).write_text("not a key\n")
    with pytest.raises(KeyFileError) as refused:
        AgentCore.open(db)
    assert str(key_file(db)) in str(refused.value) and "not a key" not in str(refused.value)
    key_file(db).unlink()
    with AgentCore.open(db) as core:  # a new one is made
        assert core.webhook_keys.key_file == key_file(db)


def test_a_key_file_others_may_read_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "loose.db"
    AgentCore.open(db).close()
    key_file(db).chmod(0o644)
    with AgentCore.open(db) as core:
        core.start()
    assert "mode 0644" in caplog.text and f"chmod 600 {key_file(db)}" in caplog.text
    assert PLAINTEXT not in caplog.text


def plaintext_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and PLAINTEXT in r.getMessage()
    ]


def test_in_memory_the_start_warns_that_secrets_are_plaintext(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with AgentCore.open(":memory:") as core:
        assert plaintext_warnings(caplog) == []  # said when it starts, not on every open
        core.start()
    (warning,) = plaintext_warnings(caplog)
    assert "in memory" in warning and "AGENTCORE_WEBHOOK_SECRET_KEY" in warning


def test_where_no_key_file_can_be_made_the_start_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # one byte short of NAME_MAX for the database, too long with the key file's suffix
    db = tmp_path / ("d" * (255 - len("-journal")))
    with AgentCore.open(db, webhook_allowed_networks="127.0.0.0/8") as core:
        assert core.webhook_keys.key_file is None
        sub = core.workspace("acme", "test").webhooks.subscribe(
            "http://127.0.0.1:9/hook", ["agent.action"]
        )
        core.start()
    (warning,) = plaintext_warnings(caplog)
    assert "cannot be created" in warning and "webhook_secret_key" in warning
    assert stored_secrets(db) == [sub.secret, None]  # plaintext, as the warning said


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_in_a_folder_it_cannot_write_the_start_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "ro" / "agentcore.db"
    db.parent.mkdir()
    AgentCore.open(db).close()
    key_file(db).unlink()
    db.parent.chmod(0o500)
    try:
        with AgentCore.open(db) as core:
            core.start()
    finally:
        db.parent.chmod(0o700)
    (warning,) = plaintext_warnings(caplog)
    assert "cannot be created" in warning


@pytest.mark.slow  # a real server on PostgreSQL
def test_serve_on_postgresql_warns_at_start_up(
    postgres_url: str, tmp_path: Path, stop: list[subprocess.Popen[str]]
) -> None:
    with AgentCore.open(postgres_url) as core:
        core.create_organization("demo")
        secret = core.keys.create("demo", "test", ["read"]).secret
    log = tmp_path / "serve.log"
    process, _ = start_serve(postgres_url, secret, stderr=log)  # type: ignore[arg-type]
    stop.append(process)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    (warning,) = [line for line in log.read_text().splitlines() if PLAINTEXT in line]
    assert "WARNING" in warning and "not a file" in warning, warning
    assert "AGENTCORE_WEBHOOK_SECRET_KEY" in warning


@pytest.mark.both_stores
def test_a_configured_key_gives_no_warning(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    with AgentCore.open(store_url, webhook_secret_key=key, start_workers=False) as core:
        core.start()
    assert plaintext_warnings(caplog) == []

"""API keys through the Python API: format, checksum, digests at rest, revoke, expiry, rotation."""

from __future__ import annotations

import math
import re
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from helpers import wait_for

from agentcore import AgentCore, AuthenticationError, InvalidRequest, ValidationFailed
from agentcore._ids import BASE62
from agentcore.keys import digest, parse_secret

KEY_RE = re.compile(r"^ak_(test|live)_[0-9A-Za-z]{32}[0-9A-Za-z]{6}$")


def _auth_code(core: AgentCore, secret: str | None) -> str:
    with pytest.raises(AuthenticationError) as caught:
        core.authenticate(secret)
    assert caught.value.status == 401
    return caught.value.code


def _refusal(core: AgentCore, secret: str) -> str | None:
    """The code ``core.authenticate(secret)`` is refused with (``None``: it is accepted)."""
    try:
        core.authenticate(secret)
    except AuthenticationError as error:
        return error.code
    return None


def _flip(secret: str, index: int) -> str:
    char = secret[index]
    other = BASE62[(BASE62.index(char) + 1) % len(BASE62)]
    return secret[:index] + other + secret[index + 1 :]


@pytest.mark.parametrize("env", ["test", "live"])
def test_key_format_prefix_random_part_and_checksum(keys, env: str) -> None:
    issued = keys.make(env=env)
    assert KEY_RE.match(issued.secret), issued.secret
    assert issued.secret.startswith(f"ak_{env}_")
    assert len(issued.secret) == len(f"ak_{env}_") + 32 + 6
    assert issued.environment == env
    assert parse_secret(issued.secret) == env
    assert issued.prefix == issued.secret[: len(issued.prefix)]
    assert issued.prefix.startswith(f"ak_{env}_")
    assert issued.last4 == issued.secret[-4:]


def test_random_part_has_at_least_160_bits(keys) -> None:
    secret = keys.make().secret
    random_part = secret[len("ak_test_") : -6]
    assert len(random_part) == 32
    assert set(random_part) <= set(BASE62)
    assert len(random_part) * math.log2(62) >= 160


def test_secrets_are_unique(keys) -> None:
    secrets = {keys.make().secret for _ in range(20)}
    assert len(secrets) == 20
    # 20 keys of 32 random chars each: the random parts are not all the same letters
    assert len({s[8:40] for s in secrets}) == 20


def test_valid_key_authenticates_to_its_workspace(core, keys) -> None:
    issued = keys.make("acme", "live", ("read",))
    ws = core.authenticate(issued.secret)
    assert ws.organization == "acme"
    assert ws.environment == "live"
    assert ws.scopes == frozenset({"read"})
    assert ws.key_id == issued.id


@pytest.mark.parametrize("index", [3, 8, 20, 39, -1])
def test_one_character_change_is_malformed_without_store_lookup(core, keys, index) -> None:
    secret = keys.make().secret
    changed = _flip(secret, index)
    assert changed != secret
    calls: list[str] = []
    original = core.store.find_key_by_digest

    def spy(value: str):  # records store lookups; still the real store underneath
        calls.append(value)
        return original(value)

    core.store.find_key_by_digest = spy  # type: ignore[method-assign]
    try:
        assert _auth_code(core, changed) == "malformed_api_key"
        assert calls == []
        # and the real key still goes to the store
        core.authenticate(secret)
        assert calls == [digest(secret)]
    finally:
        del core.store.find_key_by_digest


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "garbage",
        "ak_test_",
        "ak_prod_" + "a" * 38,
        "sk_test_" + "a" * 38,
        "ak_test_" + "!" * 38,
    ],
)
def test_garbage_keys(core, bad: str) -> None:
    expected = "missing_api_key" if bad == "" else "malformed_api_key"
    assert _auth_code(core, bad) == expected


def test_missing_key(core) -> None:
    assert _auth_code(core, None) == "missing_api_key"


def test_well_formed_unknown_key_is_invalid(core, keys) -> None:
    from agentcore.keys import generate_secret

    keys.make()
    assert _auth_code(core, generate_secret("test")) == "invalid_api_key"


def test_row_stores_only_digest_prefix_and_last4(core, keys, db_path: Path) -> None:
    issued = keys.make()
    secret = issued.secret
    conn = sqlite3.connect(db_path)
    try:
        conn.row_factory = sqlite3.Row
        row = conn.execute("SELECT * FROM api_keys WHERE id = ?", [issued.id]).fetchone()
        everything = [str(v) for r in conn.execute("SELECT * FROM api_keys") for v in tuple(r)]
    finally:
        conn.close()
    assert row["digest"] == digest(secret)
    assert len(row["digest"]) == 64
    assert row["prefix"] == secret[: len(row["prefix"])]
    assert len(row["prefix"]) <= len("ak_test_") + 4
    assert row["last4"] == secret[-4:]
    random_part = secret[8:40]
    for value in everything:
        assert secret not in value
        assert random_part not in value
        assert random_part[4:-4] not in value  # not even most of it


def test_revoked_key_is_refused(core, keys) -> None:
    issued = keys.make()
    core.authenticate(issued.secret)
    revoked = core.keys.revoke(issued.id)
    assert revoked.revoked_at is not None
    assert _auth_code(core, issued.secret) == "api_key_revoked"
    # revoking twice keeps the first revocation time
    assert core.keys.revoke(issued.id).revoked_at == revoked.revoked_at


def test_expired_key_is_refused(core, keys) -> None:
    # two seconds: time enough to use it before it expires, on a busy machine too
    issued = keys.make(expires_in=timedelta(seconds=2))
    assert issued.expires_at is not None
    core.authenticate(issued.secret)  # works before expiry
    wait_for(lambda: _refusal(core, issued.secret) == "api_key_expired")
    assert datetime.now(UTC) >= issued.expires_at  # refused once expired, not before


@pytest.mark.parametrize("expires_in", [timedelta(0), timedelta(seconds=-1)])
def test_non_positive_expiry_refused(keys, expires_in) -> None:
    with pytest.raises(ValidationFailed) as caught:
        keys.make(expires_in=expires_in)
    assert caught.value.param == "expires_in"


def test_rotate_new_works_old_works_during_grace_then_fails(core, keys) -> None:
    old = keys.make("acme", "live", ("read",))
    new = core.keys.rotate(old.id, grace=timedelta(seconds=2))  # time to use it when busy
    assert new.secret != old.secret
    assert new.id != old.id
    assert new.rotated_from == old.id
    assert new.scopes == ["read"] and new.environment == "live" and new.organization == "acme"
    assert core.authenticate(new.secret).key_id == new.id
    assert core.authenticate(old.secret).key_id == old.id  # grace period
    wait_for(lambda: _refusal(core, old.secret) == "api_key_expired")
    assert core.authenticate(new.secret).key_id == new.id


def test_rotate_zero_grace_ends_old_key_at_once(core, keys) -> None:
    old = keys.make()
    new = core.keys.rotate(old.id, grace=timedelta(0))
    assert _auth_code(core, old.secret) == "api_key_expired"
    core.authenticate(new.secret)


def test_rotate_negative_grace_refused(core, keys) -> None:
    old = keys.make()
    with pytest.raises(ValidationFailed):
        core.keys.rotate(old.id, grace=timedelta(seconds=-1))
    core.authenticate(old.secret)  # untouched


def test_rotating_a_revoked_key_is_refused(core, keys) -> None:
    old = keys.make()
    core.keys.revoke(old.id)
    before = len(core.keys.list("acme"))
    with pytest.raises(InvalidRequest) as caught:
        core.keys.rotate(old.id)
    assert caught.value.code == "key_revoked"
    assert len(core.keys.list("acme")) == before  # nothing minted


def test_last_used_at_set_on_first_use(core, keys) -> None:
    issued = keys.make()
    assert core.keys.get(issued.id).last_used_at is None
    core.authenticate(issued.secret)
    stored = core.keys.get(issued.id)
    assert stored.last_used_at is not None
    assert stored.last_used_at >= stored.created_at


def test_failed_authentication_does_not_touch_last_used(core, keys) -> None:
    issued = keys.make()
    core.keys.revoke(issued.id)
    _auth_code(core, issued.secret)
    assert core.keys.get(issued.id).last_used_at is None


@pytest.mark.parametrize("scopes", [("admin",), (), ("read", "delete")])
def test_unknown_or_empty_scopes_refused(core, keys, scopes) -> None:
    core.create_organization("acme")
    with pytest.raises(ValidationFailed) as caught:
        core.keys.create("acme", "test", scopes)
    assert caught.value.param == "scopes"
    assert caught.value.status == 422


@pytest.mark.parametrize("env", ["prod", "TEST", ""])
def test_unknown_environment_refused(core, env: str) -> None:
    core.create_organization("acme")
    with pytest.raises(ValidationFailed) as caught:
        core.keys.create("acme", env, ["read"])
    assert caught.value.param == "environment"


def test_key_for_unknown_organization_refused(core) -> None:
    from agentcore import NotFound

    with pytest.raises(NotFound):
        core.keys.create("nobody", "test", ["read"])


def test_list_shows_no_secrets(core, keys) -> None:
    a = keys.make()
    b = keys.make(env="live")
    listed = core.keys.list("acme")
    assert {k.id for k in listed} == {a.id, b.id}
    for key in listed:
        assert not hasattr(key, "secret")
        dumped = key.model_dump_json()
        assert a.secret not in dumped and b.secret not in dumped


def test_test_and_live_keys_never_see_each_others_agents(core, keys) -> None:
    test_ws = core.authenticate(keys.make(env="test").secret)
    live_ws = core.authenticate(keys.make(env="live").secret)
    t = test_ws.agents.create(name="t")
    v = live_ws.agents.create(name="v")
    assert [a.id for a in test_ws.agents.list().agents] == [t.id]
    assert [a.id for a in live_ws.agents.list().agents] == [v.id]
    from agentcore import NotFound

    with pytest.raises(NotFound):
        test_ws.agents.get(v.id)
    with pytest.raises(NotFound):
        live_ws.agents.get(t.id)
    with pytest.raises(NotFound):
        live_ws.agents.deploy(t.id)
    assert test_ws.agents.get(t.id).status == "draft"


def test_a_remembered_key_is_refused_as_soon_as_it_is_revoked(tmp_path: Path) -> None:
    """The per-thread key cache lives only while nothing is written to the database."""
    first = AgentCore.open(tmp_path / "k.db")
    second = AgentCore.open(tmp_path / "k.db")  # another connection, as another process
    try:
        first.create_organization("acme")
        by_first = first.keys.create("acme", "test")
        by_second = first.keys.create("acme", "live")
        for _ in range(3):  # warm the cache
            first.authenticate(by_first.secret, defer_touch=True)
            first.authenticate(by_second.secret, defer_touch=True)
        first.keys.revoke(by_first.id)  # same core, same thread
        with pytest.raises(AuthenticationError) as same:
            first.authenticate(by_first.secret, defer_touch=True)
        assert same.value.code == "api_key_revoked"
        second.keys.revoke(by_second.id)  # another connection
        with pytest.raises(AuthenticationError) as other:
            first.authenticate(by_second.secret, defer_touch=True)
        assert other.value.code == "api_key_revoked"
    finally:
        first.close()
        second.close()


def test_deferred_touches_of_many_keys_are_not_all_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key's last deferred touch is remembered only while it still stops another write:
    past ``SWEEP_TOUCHES`` of them, those older than the touch interval are dropped."""
    from agentcore import keys as keys_module

    monkeypatch.setattr(keys_module, "SWEEP_TOUCHES", 4)
    core = AgentCore.open(tmp_path / "k.db", key_touch_interval=0.2)
    try:
        core.create_organization("acme")
        made = [core.keys.create("acme", "test") for _ in range(4)]
        remembered = core.keys._pending_touches  # the service's record of queued touches
        for key in made[:3]:
            core.authenticate(key.secret, defer_touch=True)
        assert len(core.keys._pending_touches) == 3
        time.sleep(0.3)  # the three are now older than the interval
        core.authenticate(made[3].secret, defer_touch=True)  # the 4th entry: a sweep
        assert set(core.keys._pending_touches) == {made[3].id}
        assert remembered is not core.keys._pending_touches
        core.authenticate(made[3].secret, defer_touch=True)  # still within its interval
    finally:
        core.close()
    with AgentCore.open(tmp_path / "k.db") as again:
        used = {key.id: key.last_used_at for key in again.keys.list("acme")}
        assert all(used[key.id] is not None for key in made)

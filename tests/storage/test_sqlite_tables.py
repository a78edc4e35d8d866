"""The SQLite store's plain CRUD, inside our transactions, on a file and in memory."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from agentcore._ids import new_id, utcnow
from agentcore.errors import NotFound
from agentcore.schema import Agent, ApiKey
from agentcore.storage.sqlite import SQLiteStore


@pytest.fixture(params=["file", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SQLiteStore:
    opened = SQLiteStore.open(tmp_path / "core.db" if request.param == "file" else ":memory:")
    request.addfinalizer(opened.close)
    return opened


def agent(name: str = "a") -> Agent:
    now = utcnow()
    return Agent(
        id=new_id("agt"),
        name=name,
        role="support",
        status="draft",
        system_prompt="",
        tools=[],
        created_at=now,
        updated_at=now,
    )


def api_key(key_id: str) -> ApiKey:
    return ApiKey(
        id=key_id,
        organization="acme",
        environment="test",
        scopes=["read"],
        prefix="ak_test_",
        last4="abcd",
        created_at=utcnow(),
    )


def test_insert_get_and_update_a_key(store: SQLiteStore) -> None:
    org = store.ensure_organization("acme")
    assert store.ensure_organization("acme") == org  # insert-if-missing
    store.insert_key(api_key("key_1"), org.id, "digest-1")
    store.update_key("key_1", name="ci", last_used_at="2026-01-02T03:04:05.000Z")
    found = store.get_key("key_1")
    assert found is not None and found.name == "ci" and found.last_used_at is not None
    assert store.find_key_by_digest("digest-1") is not None
    store.update_key("key_missing", name="x")  # like an UPDATE matching nothing
    with pytest.raises(ValueError, match=r"cannot update \['digest'\] of api_keys"):
        store.update_key("key_1", digest="steered")


def test_subscription_update_refuses_other_columns(store: SQLiteStore) -> None:
    org = store.ensure_organization("acme")
    sub = store.insert_subscription(
        org.id,
        "test",
        url="https://example.com/h",
        events=["agent.action"],
        secret="s",
        description="d",
    )
    store.update_subscription(sub.public.id, status="disabled", disabled_reason="410")
    found = store.get_subscription(org.id, "test", sub.public.id)
    assert found is not None and found.public.status == "disabled"
    assert found.public.disabled_reason == "410" and found.public.description == "d"
    assert store.get_subscription(org.id, "live", sub.public.id) is None  # other workspace
    assert store.get_subscription(None, None, sub.public.id) is not None  # any workspace
    with pytest.raises(ValueError, match="cannot update"):
        store.update_subscription(sub.public.id, url="https://evil.example")


def test_table_writes_join_the_surrounding_transaction(store: SQLiteStore) -> None:
    org = store.ensure_organization("acme")
    doomed = agent("doomed")
    with pytest.raises(RuntimeError), store.db.write():
        store.insert_agent(org.id, "test", doomed)  # an inner write joins the outer one
        assert store.get_agent(org.id, "test", doomed.id) is not None
        raise RuntimeError("roll back")
    assert store.get_agent(org.id, "test", doomed.id) is None


def test_keyset_pages(store: SQLiteStore) -> None:
    org = store.ensure_organization("acme")
    agents = [agent(f"a{i}") for i in range(5)]
    for each in agents:
        store.insert_agent(org.id, "test", each)
    store.insert_agent(org.id, "live", agent("other workspace"))
    page, more = store.list_agents(
        org.id, "test", limit=2, starting_after=None, statuses=("draft",)
    )
    assert [a.name for a in page] == ["a4", "a3"] and more
    page, more = store.list_agents(
        org.id, "test", limit=2, starting_after=page[-1].id, statuses=("draft",)
    )
    assert [a.name for a in page] == ["a2", "a1"] and more
    page, more = store.list_agents(
        org.id, "test", limit=2, starting_after=page[-1].id, statuses=("draft",)
    )
    assert [a.name for a in page] == ["a0"] and not more
    assert store.list_agents(org.id, "test", limit=2, starting_after=None, statuses=("live",)) == (
        [],
        False,
    )
    live = store.list_agents(org.id, "live", limit=5, starting_after=None, statuses=("draft",))
    with pytest.raises(NotFound, match="to start after"):  # a cursor of another workspace
        store.list_agents(
            org.id, "test", limit=2, starting_after=live[0][0].id, statuses=("draft",)
        )


def test_every_thread_gets_its_own_connection(tmp_path: Path) -> None:
    store = SQLiteStore.open(tmp_path / "core.db")
    org = store.ensure_organization("acme")
    errors: list[BaseException] = []

    def work(number: int) -> None:
        try:
            for i in range(20):
                store.insert_agent(org.id, "test", agent(f"t{number}-{i}"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    page, more = store.list_agents(
        org.id, "test", limit=100, starting_after=None, statuses=("draft",)
    )
    assert len(page) == 80 and not more
    store.close()

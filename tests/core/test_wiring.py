"""The composition root: services use the collaborators they are given, nothing else."""

from __future__ import annotations

import dataclasses
import pickle
import sqlite3
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from agentcore import (
    AgentCore,
    InvalidRequest,
    PermissionDenied,
    ValidationFailed,
    Workspace,
    WorkspaceServices,
)
from agentcore._idempotency import IdempotencyKeys
from agentcore.agents import AgentService
from agentcore.events import EventBus
from agentcore.knowledge.vectors import Embedding, WorkspaceIndexes
from agentcore.storage.sqlite import SQLiteStore
from agentcore.webhooks.service import WebhookService


class OnesEmbedder:
    name = "ones"
    dimension = 4

    def embed(self, texts: list[str], *, kind: str) -> npt.NDArray[np.float32]:
        return np.ones((len(texts), self.dimension), dtype=np.float32)


@pytest.fixture
def other_store(tmp_path: Path):
    store = SQLiteStore.open(tmp_path / "other.db")
    yield store
    store.close()


def test_the_core_holds_typed_collaborators_not_a_string_registry(core: AgentCore) -> None:
    assert not hasattr(core, "service")
    assert isinstance(core.indexes, WorkspaceIndexes)
    assert isinstance(core.idempotency, IdempotencyKeys)
    ws = core.workspace("acme", "test")
    assert ws.knowledge is ws.knowledge  # one service per workspace object
    assert ws.chat._context.knowledge is ws.knowledge  # chat retrieves through the same service


def test_a_workspace_is_a_plain_value(core: AgentCore) -> None:
    """The value names a tenant and its scopes; it holds no core, and services take it."""
    ws = core.workspace("acme", "test", scopes=["read"])
    value = Workspace(
        organization_id=ws.organization_id,
        organization="acme",
        environment="test",
        scopes=frozenset({"read"}),
    )
    assert not hasattr(value, "core") and not hasattr(value, "knowledge")
    assert value == pickle.loads(pickle.dumps(value))  # what an ingestion worker is sent
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.scopes = frozenset({"read", "write"})  # type: ignore[misc]
    # what authenticate() and workspace() return is that value with its services
    assert isinstance(ws, WorkspaceServices) and isinstance(ws, Workspace)
    assert WorkspaceServices.of(value, core) == ws and repr(ws) == repr(value)
    agents = core.agent_service(value)
    with pytest.raises(PermissionDenied):
        agents.create(name="A")  # the value's scopes are checked
    assert agents.list().agents == []


def test_agent_service_writes_to_the_store_it_is_given(
    core: AgentCore, db_path: Path, tmp_path: Path
) -> None:
    ws = core.workspace("acme", "test")
    copy = tmp_path / "copy.db"
    with sqlite3.connect(db_path) as conn:  # a second database holding the same organization
        conn.execute("VACUUM INTO ?", [str(copy)])
    other = SQLiteStore.open(copy)
    try:
        service = AgentService(
            ws, store=other, chat_models=core.chat_models, settings=core.settings
        )
        agent = service.create(name="Elsewhere")
        assert other.get_agent(ws.organization_id, "test", agent.id) == agent
        assert core.store.get_agent(ws.organization_id, "test", agent.id) is None
        assert ws.agents.list().agents == []
    finally:
        other.close()


def test_agent_service_checks_models_against_its_registry(core: AgentCore) -> None:
    ws = core.workspace("acme", "test")
    service = AgentService(ws, store=core.store, chat_models={}, settings=core.settings)
    with pytest.raises(ValidationFailed) as caught:
        service.create(name="A", model="extractive")  # registered in the core, not here
    assert caught.value.code == "unknown_model"
    assert "available: none" in str(caught.value)


def test_the_embedding_uses_its_embedder_registry() -> None:
    assert Embedding({"ones": OnesEmbedder()}, "ones").embedder().name == "ones"
    missing = Embedding({"ones": OnesEmbedder()}, "nope")
    with pytest.raises(InvalidRequest) as caught:
        missing.embedder()
    assert caught.value.code == "embedder_unavailable"
    assert "registered: ones" in caught.value.detail


def test_webhook_service_checks_kinds_against_what_it_is_given(core: AgentCore) -> None:
    ws = core.workspace("acme", "test")
    kinds = EventBus()
    kinds.register_kind("order.shipped", "An order left the warehouse.")
    service = WebhookService(
        ws, core.webhooks, store=core.store, kinds=kinds, settings=core.settings
    )
    made = service.subscribe("http://127.0.0.1:9/hook", ["order.shipped"])
    assert made.events == ["order.shipped"]
    with pytest.raises(ValidationFailed) as caught:  # the core's own bus does not know it
        ws.webhooks.subscribe("http://127.0.0.1:9/hook", ["order.shipped"])
    assert caught.value.code == "unknown_event_kind"

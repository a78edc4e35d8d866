"""``index_dtype``: the setting, its per-workspace persistence, and search end to end."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentcore import AgentCore
from agentcore.config import Settings
from agentcore.storage.records import KnowledgeState
from agentcore.workspace import Workspace

DOCS = {
    "pumps.txt": "The red pump needs oil every week. Pumps hum when the valve is open. " * 4,
    "flux.txt": "Quantum flux capacitors hum when charged by zebras in the lab. " * 4,
    "typewriters.txt": "Vintage typewriters jam on humid mornings in Lisbon cafes. " * 4,
    "bees.txt": "Honey bees dance to tell the hive where the clover fields are. " * 4,
    "trains.txt": "Night trains to Vienna leave the station at eleven sharp. " * 4,
}
QUERIES = {
    "red pump oil": "pumps.txt",
    "flux capacitor zebras": "flux.txt",
    "typewriter jam Lisbon": "typewriters.txt",
    "bees dance clover": "bees.txt",
    "night train Vienna": "trains.txt",
}


# both stores; PostgreSQL is marked slow: `-m "not slow"` starts no database server
both_stores = pytest.mark.parametrize(
    "store_kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)], indirect=True
)


def _ws(core: AgentCore, env: str = "test") -> Workspace:
    return core.workspace("acme", env)


def _state(core: AgentCore, ws: Workspace) -> KnowledgeState:
    return core.store.knowledge_state(ws.organization_id, ws.environment)


def _codec(core: AgentCore, ws: Workspace) -> str:
    return core.indexes.get(ws.organization_id, ws.environment).codec


def _fill(ws: Workspace) -> None:
    for source, text in DOCS.items():
        ws.knowledge.ingest_text(source, text)


def _answers(ws: Workspace) -> dict[str, list[tuple[str, float]]]:
    return {
        query: [(r.source, round(r.score, 5)) for r in ws.knowledge.search(query, top_k=3).results]
        for query in QUERIES
    }


def test_default_is_float32_and_bad_values_are_refused() -> None:
    assert Settings(_env_file=None).index_dtype == "float32"
    assert Settings(_env_file=None, index_dtype="int8").index_dtype == "int8"
    with pytest.raises(ValidationError) as error:
        Settings(_env_file=None, index_dtype="int4")
    assert "index_dtype" in str(error.value) and "'float16'" in str(error.value)
    assert "index_dtype" in Settings.model_fields
    assert Settings.model_fields["index_dtype"].description


def test_environment_sets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTCORE_INDEX_DTYPE", "float16")
    assert Settings(_env_file=None).index_dtype == "float16"
    monkeypatch.setenv("AGENTCORE_INDEX_DTYPE", "bfloat16")
    with pytest.raises(ValidationError, match="index_dtype"):
        Settings(_env_file=None)


@both_stores
def test_approximate_dtypes_answer_like_float32(store_url: str) -> None:
    """The same documents in three workspaces of three dtypes: the same ranked answers."""
    answers = {}
    for dtype in ("float32", "float16", "int8"):
        with AgentCore.open(store_url, start_workers=False, index_dtype=dtype) as core:
            ws = core.workspace(f"org-{dtype}", "test")
            _fill(ws)
            answers[dtype] = _answers(ws)
            assert _codec(core, ws) == dtype
            assert _state(core, ws).index_dtype == dtype
    for query, source in QUERIES.items():
        assert answers["float32"][query][0][0] == source
    assert answers["float16"] == answers["float32"]
    assert answers["int8"] == answers["float32"]


@both_stores
def test_a_workspace_keeps_its_dtype_when_the_setting_changes(store_url: str) -> None:
    with AgentCore.open(store_url, start_workers=False, index_dtype="int8") as core:
        assert _state(core, _ws(core, "test")).index_dtype is None  # not yet written
        _fill(_ws(core))
        before = _answers(_ws(core))
    # a restart with another setting: the workspace stays int8, a new one gets float16
    with AgentCore.open(store_url, start_workers=False, index_dtype="float16") as core:
        assert _state(core, _ws(core, "test")).index_dtype == "int8"
        assert _answers(_ws(core)) == before
        assert _codec(core, _ws(core, "test")) == "int8"
        _ws(core).knowledge.ingest_text("late.txt", "Late arrivals of parcels by drone. " * 4)
        assert _ws(core).knowledge.search("parcels drone", top_k=1).results[0].source == "late.txt"
        assert _state(core, _ws(core, "test")).index_dtype == "int8"
        _fill(_ws(core, "live"))
        assert _state(core, _ws(core, "live")).index_dtype == "float16"
        assert _codec(core, _ws(core, "live")) == "float16"


@both_stores
def test_two_processes_with_different_settings_agree_on_the_first_writer(store_url: str) -> None:
    """Each core claims its setting only for a workspace without one: the first write wins."""
    with (
        AgentCore.open(store_url, start_workers=False, index_dtype="float32") as a,
        AgentCore.open(store_url, start_workers=False, index_dtype="int8") as b,
    ):
        assert len(_ws(a).knowledge.search("red pump oil").results) == 0  # a loads it empty
        _ws(b).knowledge.ingest_text("pumps.txt", DOCS["pumps.txt"])
        assert _state(a, _ws(a)).index_dtype == "int8"
        # a's cached (float32) index is replaced by one with the stored codec
        assert _ws(a).knowledge.search("red pump oil").results[0].source == "pumps.txt"
        assert _codec(a, _ws(a)) == "int8"
        _ws(a).knowledge.ingest_text("flux.txt", DOCS["flux.txt"])
        assert _codec(b, _ws(b)) == "int8"
        assert _ws(b).knowledge.search("flux capacitor zebras").results[0].source == "flux.txt"


@both_stores
def test_claim_keeps_the_first_value(store_url: str) -> None:
    with AgentCore.open(store_url, start_workers=False) as core:
        store, ws = core.store, _ws(core)
        assert store.claim_index_dtype(ws.organization_id, "test", "float16") == "float16"
        assert store.claim_index_dtype(ws.organization_id, "test", "int8") == "float16"
        state = _state(core, ws)
        assert (state.index_dtype, state.version, state.embedder) == ("float16", 0, None)
        _fill(_ws(core))  # a claimed but empty workspace is written as usual
        assert _state(core, ws).version == len(DOCS)
        assert _ws(core).knowledge.search("bees dance clover").results[0].source == "bees.txt"


def test_workspaces_written_before_the_migration_are_float32(db_path: Path) -> None:
    with AgentCore.open(str(db_path), start_workers=False, index_dtype="int8") as core:
        _fill(_ws(core))
    # as a database from before the column: NULL, then the migration's UPDATE runs again
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE knowledge_state SET index_dtype = NULL")
        conn.execute("UPDATE knowledge_state SET index_dtype = 'float32'")  # what m010 does
    with AgentCore.open(str(db_path), start_workers=False, index_dtype="int8") as core:
        assert _codec(core, _ws(core, "test")) == "float32"
        assert _ws(core).knowledge.search("red pump oil").results[0].source == "pumps.txt"


@pytest.fixture
def int8_everywhere(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Cores opened by the shared fixtures (``core``, ``api``) use int8 rows."""
    monkeypatch.setenv("AGENTCORE_INDEX_DTYPE", "int8")
    yield


def test_http_search_over_an_int8_workspace(int8_everywhere: None, api, core: AgentCore) -> None:  # type: ignore[no-untyped-def]
    for source, text in DOCS.items():
        assert api.post(
            "/v1/knowledge/documents", json={"source": source, "text": text}
        ).status_code in (200, 201)
    for query, source in QUERIES.items():
        response = api.post("/v1/knowledge/search", json={"query": query, "top_k": 2})
        assert response.status_code == 200
        assert response.json()["results"][0]["source"] == source
    assert _state(core, _ws(core, "test")).index_dtype == "int8"

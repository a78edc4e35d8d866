"""DELETE over HTTP publishes tombstones and returns; compaction follows in the background."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Api

from agentcore import AgentCore
from agentcore.knowledge.vectors import _segments as segments
from agentcore.knowledge.vectors import _workspace_loading
from agentcore.knowledge.vectors._segments import SegmentDirectory, segment_root

WORDS = ["pump", "valve", "filter", "seal", "gasket", "boiler", "turbine", "piston", "rotor"]


def _text(i: int) -> str:
    word = WORDS[i % len(WORDS)]
    return f"Manual {i}: the {word} number {i} needs service {word}{i}. " * 30


def test_deletes_return_without_compacting_and_search_stays_right(
    api: Api, core: AgentCore, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a small workspace: give it segment files anyway
    monkeypatch.setattr(_workspace_loading, "SEGMENT_MIN_BYTES", 0)
    monkeypatch.setattr(segments, "MAP_MIN_BYTES", 0)
    ids = []
    for i in range(16):
        created = api.post(
            "/v1/knowledge/documents", json={"source": f"m{i}.txt", "text": _text(i)}
        )
        assert created.status_code == 201, created.text
        ids.append(created.json()["id"])
    assert api.post("/v1/knowledge/search", json={"query": "pump"}).status_code == 200
    cache = core.indexes
    assert cache.wait_for_maintenance()
    org = core.store.get_organization_by_name("acme")
    assert org is not None
    root, _ = segment_root(str(db_path), "auto")
    assert root is not None
    directory = SegmentDirectory(root / org.id / "test")
    before = directory.read_manifest()  # what the maintenance wrote so far
    assert before is not None
    # With the directory's lock held no compaction can run: each DELETE must return
    # on its own, and searches must already skip the deleted documents.
    with directory.lock():
        for doc_id in ids[:8]:
            deleted = api.delete(f"/v1/knowledge/documents/{doc_id}")
            assert deleted.status_code == 200 and deleted.json()["deleted"] is True
        index = cache.get(org.id, "test")
        assert sum(int(p.dead.size) for p in index.parts()) > 0 and index.maintenance_due()
        for i in range(16):
            found = api.post("/v1/knowledge/search", json={"query": f"service {WORDS[i % 9]}{i}"})
            sources = [r["source"] for r in found.json()["results"]]
            assert (f"m{i}.txt" in sources) is (i >= 8), (i, sources)
        assert directory.read_manifest() == before  # no compaction ran meanwhile
    assert cache.wait_for_maintenance()
    after = directory.read_manifest()  # the compaction published a new manifest
    assert after is not None and after.id != before.id
    index = cache.get(org.id, "test")
    assert sum(int(p.dead.size) for p in index.parts()) == 0
    for i in range(8, 16):
        found = api.post("/v1/knowledge/search", json={"query": f"service {WORDS[i % 9]}{i}"})
        assert found.json()["results"][0]["source"] == f"m{i}.txt"

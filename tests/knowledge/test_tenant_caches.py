"""Every per-workspace cache of a process is bounded, not only the vector indexes.

Keyword (BM25) indexes, the document tables filters read and the sentence-count sums
chat reads share the vector indexes' budget (``index_cache_bytes``): the least recently
used of all of them go first, and an evicted one is built again at its next use, with
the same answers. A store opened alone bounds its sums at ``TERM_SUMS_BYTES``.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from agentcore import AgentCore
from agentcore._memory_budget import Residency
from agentcore.storage.sql import terms

ENV = "test"
TEXT = (
    "Tenant {n} handbook. The red pump number {n} needs oil every {n} weeks. "
    "Word{n}alpha and word{n}beta are this tenant's own terms. "
)


# -- a budget several caches share ---------------------------------------------------


def test_a_shared_budget_evicts_the_least_recently_used_of_all_members() -> None:
    told: list[tuple[str, str]] = []
    first: Residency[str, str] = Residency(
        budget_bytes=30, on_evict=lambda k, v: told.append(("first", k))
    )
    second: Residency[str, str] = Residency(
        share=first, on_evict=lambda k, v: told.append(("second", k))
    )
    first.put("a", "A", 10)
    second.put("b", "B", 10)
    first.put("c", "C", 10)
    slot = first.acquire("a")  # a is now the most recently used
    assert slot is not None
    first.release(slot)
    second.put("d", "D", 10)  # over by 10: b, the oldest of all, goes, from the second
    assert told == [("second", "b")]
    assert first.keys() == ["c", "a"] and second.keys() == ["d"]
    assert first.stats().bytes == 20 and second.stats().bytes == 10
    assert second.stats().evictions == 1 and first.stats().evictions == 0
    assert second.budget_bytes == first.budget_bytes == 30
    assert second.stats().budget_bytes == 30


def test_a_held_value_is_never_evicted_by_another_member() -> None:
    first: Residency[str, str] = Residency(budget_bytes=20)
    second: Residency[str, str] = Residency(share=first)
    held = first.put("a", "A", 10, held=True)
    second.put("b", "B", 10)
    second.put("c", "C", 10)  # over: a is older but held, so b goes
    assert "a" in first and second.keys() == ["c"]
    first.release(held)
    first.charge("a", "A", 15)  # a grows: 25 > 20, and a is now the oldest
    assert "a" not in first and second.keys() == ["c"]


def test_clearing_one_member_frees_its_share_of_the_budget() -> None:
    first: Residency[str, str] = Residency(budget_bytes=20)
    second: Residency[str, str] = Residency(share=first)
    first.put("a", "A", 10)
    second.put("b", "B", 10)
    first.clear()
    second.put("c", "C", 10)  # 20: fits, nothing is evicted
    assert second.keys() == ["b", "c"] and second.stats().evictions == 0


# -- keyword indexes and document tables in a core -----------------------------------


def _tenants(db: Path, count: int) -> list[str]:
    with AgentCore.open(str(db), start_workers=False, index_dir="off") as core:
        orgs = []
        for n in range(count):
            ws = core.workspace(f"tenant-{n}", ENV)
            for part in range(3):
                ws.knowledge.ingest_text(
                    f"t{n}-{part}.txt", TEXT.format(n=n) * 4, metadata={"part": part}
                )
            orgs.append(ws.organization_id)
        return orgs


def _answers(core: AgentCore, count: int, mode: str, **filters: Any) -> list[list[str]]:
    out = []
    for n in range(count):
        found = core.workspace(f"tenant-{n}", ENV).knowledge.search(
            f"word{n}alpha red pump", mode=mode, top_k=3, **filters
        )
        out.append([f"{r.document_id}:{r.score:.6f}" for r in found.results])
    return out


def _charged(core: AgentCore) -> int:
    return (
        core.indexes.budget.stats().bytes
        + core.keywords.stats().bytes
        + (core.metadata.stats().bytes)
    )


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_keyword_indexes_share_the_index_budget_and_answer_the_same(
    tmp_path: Path, mode: str
) -> None:
    db = tmp_path / "tenants.db"
    count = 12
    _tenants(db, count)
    with AgentCore.open(str(db), start_workers=False, index_dir="off") as unbounded:
        expected = _answers(unbounded, count, mode)
        one = unbounded.keywords.stats().bytes // count
        whole = _charged(unbounded)
        assert unbounded.keywords.stats().evictions == 0 and one > 0
    budget = whole // 3
    with AgentCore.open(
        str(db), start_workers=False, index_dir="off", index_cache_bytes=budget
    ) as bounded:
        for _ in range(2):  # the second round rebuilds what the first evicted
            assert _answers(bounded, count, mode) == expected
            assert _charged(bounded) <= budget
        stats = bounded.keywords.stats()
        assert stats.evictions > 0 and 0 < stats.entries < count
        assert stats.loads > count  # evicted ones were built again
        assert stats.budget_bytes == budget == bounded.indexes.stats()["budget_bytes"]
        bounded.metrics.refresh()  # what /metrics shows
        sample = bounded.metrics.registry.get_sample_value
        labels = {"cache": "keyword"}
        assert sample("agentcore_workspace_cache_evictions", labels) == stats.evictions
        assert sample("agentcore_workspace_cache_loads", labels) == stats.loads
        assert sample("agentcore_workspace_cache_charged_bytes", labels) == stats.bytes


def test_document_tables_share_the_index_budget_and_filter_the_same(tmp_path: Path) -> None:
    db = tmp_path / "tenants.db"
    count = 12
    _tenants(db, count)
    spec = {"filter": {"type": "eq", "key": "part", "value": 1}}
    with AgentCore.open(str(db), start_workers=False, index_dir="off") as unbounded:
        expected = _answers(unbounded, count, "vector", **spec)
        assert all(len(found) == 1 for found in expected)
        tables = unbounded.metadata.stats()
        assert tables.entries == count and tables.bytes > 0
        whole = _charged(unbounded)
    budget = whole // 3
    with AgentCore.open(
        str(db), start_workers=False, index_dir="off", index_cache_bytes=budget
    ) as bounded:
        for _ in range(2):
            assert _answers(bounded, count, "vector", **spec) == expected
            assert _charged(bounded) <= budget
        assert bounded.metadata.stats().evictions > 0


def test_concurrent_keyword_searches_of_one_workspace_build_it_once(tmp_path: Path) -> None:
    db = tmp_path / "tenants.db"
    _tenants(db, 1)
    with AgentCore.open(str(db), start_workers=False, index_dir="off") as core:
        ws = core.workspace("tenant-0", ENV)
        start = threading.Barrier(6)
        results: list[list[str]] = []

        def search() -> None:
            start.wait()
            found = ws.knowledge.search("word0alpha", mode="keyword", top_k=3)
            results.append([r.document_id for r in found.results])

        threads = [threading.Thread(target=search) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert core.keywords.stats().loads == 1 and len(results) == 6
        assert all(found == results[0] for found in results) and results[0]


def test_a_keyword_index_follows_writes_and_its_charge_with_it(tmp_path: Path) -> None:
    db = tmp_path / "tenants.db"
    _tenants(db, 1)
    with AgentCore.open(str(db), start_workers=False, index_dir="off") as core:
        ws = core.workspace("tenant-0", ENV)
        ws.knowledge.search("red pump", mode="keyword")
        before = core.keywords.stats().bytes
        ws.knowledge.ingest_text("more.txt", "Entirely novel vocabulary: zyzzyva quokka " * 30)
        found = ws.knowledge.search("zyzzyva quokka", mode="keyword", top_k=1)
        assert found.results and "zyzzyva" in found.results[0].chunk
        assert core.keywords.stats().loads == 1  # caught up through the change log
        assert core.keywords.stats().bytes > before


# -- the sentence-count sums ---------------------------------------------------------


def _stats(core: AgentCore, count: int) -> list[Any]:
    return [
        core.workspace(f"tenant-{n}", ENV).knowledge.term_stats(f"word{n}alpha pump")
        for n in range(count)
    ]


def test_term_sums_share_the_index_budget_and_stay_right(tmp_path: Path) -> None:
    db = tmp_path / "tenants.db"
    count = 8
    _tenants(db, count)
    with AgentCore.open(str(db), start_workers=False) as unbounded:
        expected = _stats(unbounded, count)
        sums = unbounded.store._term_sums.stats()  # type: ignore[attr-defined]
        assert (
            sums.entries == count and sums.budget_bytes == unbounded.indexes.stats()["budget_bytes"]
        )
        one = sums.bytes // count
    with AgentCore.open(str(db), start_workers=False, index_cache_bytes=int(2.5 * one)) as bounded:
        for _ in range(2):
            assert _stats(bounded, count) == expected  # re-summed after each eviction
            kept = bounded.store._term_sums  # type: ignore[attr-defined]
            assert len(kept) == 2 and kept.stats().bytes <= 2.5 * one
        assert kept.keys() == [
            (bounded.workspace(f"tenant-{n}", ENV).organization_id, ENV)
            for n in (count - 2, count - 1)
        ]
        assert kept.stats().evictions == 2 * count - 2
        assert kept.stats().loads == 2 * count  # each workspace summed once a round
        bounded.metrics.refresh()
        terms_cache = {"cache": "terms"}
        sample = bounded.metrics.registry.get_sample_value
        assert sample("agentcore_workspace_cache_evictions", terms_cache) == 2 * count - 2
        assert sample("agentcore_workspace_cache_workspaces", terms_cache) == 2
        assert sample("agentcore_workspace_cache_loads", terms_cache) == 2 * count
    assert expected[0].sentences > 0 and expected[0].counts


def test_a_store_alone_bounds_its_term_sums(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentcore.storage.sqlite import SQLiteStore

    db = tmp_path / "tenants.db"
    orgs = _tenants(db, 4)
    monkeypatch.setattr(terms, "TERM_SUMS_BYTES", 1)  # less than any workspace's sums
    store = SQLiteStore.open(db)
    try:
        counts = [store.term_counts(org, ENV, ["pump"]) for org in orgs]
        assert all(sentences > 0 and found["pump"] > 0 for sentences, found in counts)
        # each workspace's sums pass the bound alone: none is kept, each call sums again
        assert len(store._term_sums) == 0 and store._term_sums.stats().evictions == len(orgs)
        assert [store.term_counts(org, ENV, ["pump"]) for org in orgs] == counts
    finally:
        store.close()


def test_sharing_the_budget_again_leaves_the_old_membership(tmp_path: Path) -> None:
    with AgentCore.open(str(tmp_path / "a.db"), start_workers=False) as core:
        budget = core.indexes.budget
        members = len(budget._group.members)  # vectors, keywords, tables, sums
        assert members == 4
        core.store.share_budget(budget)  # type: ignore[attr-defined]
        assert len(budget._group.members) == members


def test_a_document_table_is_charged_its_metadata_text(tmp_path: Path) -> None:
    with AgentCore.open(str(tmp_path / "a.db"), start_workers=False) as core:
        ws = core.workspace("acme", ENV)
        long = {f"key{n}": "x" * 400 for n in range(10)}
        ws.knowledge.ingest_text("short.txt", "Red pumps need oil.", metadata={"a": 1})
        short = core.metadata.table(ws.organization_id, ENV).nbytes
        ws.knowledge.ingest_text("long.txt", "Blue pumps need grease.", metadata=long)
        table = core.metadata.table(ws.organization_id, ENV)
        assert table.nbytes - short > 10 * 400
        ws.knowledge.search("pumps", filter={"type": "eq", "key": "a", "value": 1})
        assert core.metadata.stats().bytes == table.nbytes

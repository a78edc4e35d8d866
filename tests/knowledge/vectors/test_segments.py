"""Segment files: mapped, shared, crash-safe vector parts, maintained in the background.

Workspaces are filled through the store with synthetic unit vectors (documents of a
few rows each), so the tests control every row; the reference answer is always a
brute force over ``store.load_vectors``, the source of truth.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from helpers import cli_env, file_indexes, make_document, open_seen, seen

from agentcore import AgentCore
from agentcore.knowledge.vectors import (
    Part,
    VectorIndex,
    WorkspaceIndexes,
    _sync,
    _workspace_loading,
    from_parts,
)
from agentcore.knowledge.vectors import _kernels as kernels
from agentcore.knowledge.vectors import _segments as segments
from agentcore.knowledge.vectors._segments import (
    MANIFEST,
    SegmentDirectory,
    SegmentError,
    segment_root,
)
from agentcore.plugins.hashing_embedder import HashingEmbedder
from agentcore.storage.base import Store

ORG = "acme"
ENV = "test"


def unit_rows(n: int, d: int, seed: int) -> npt.NDArray[np.float32]:
    rows = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def write_document(
    cache: WorkspaceIndexes,
    store: Store,
    org: str,
    name: str,
    n: int,
    seed: int,
    dimension: int,
    embedder: str = HashingEmbedder.name,
) -> str:
    """Store a document ``doc_<name>`` of ``n`` chunks with synthetic unit vectors, through
    ``cache`` as the knowledge service writes (the cached index catches up); its id."""
    document = make_document(id=f"doc_{name}", source=f"{name}.txt", chunks=n, bytes=1)
    chunks = [(f"chunk {i}", [1], [0]) for i in range(n)]
    keep = np.ones(n, dtype=bool)
    vectors = unit_rows(n, dimension, seed)
    cache.write(
        org,
        ENV,
        lambda: store.insert_document(org, ENV, document, chunks, embedder, vectors, keep),
    )
    return document.id


class Workspace:
    """A started core on a SQLite file (its maintenance loop runs) and helpers to write
    documents of synthetic vectors."""

    def __init__(self, db: Path, **settings: object) -> None:
        self.db = db
        self.core = open_seen(str(db), start_workers=False, **settings)
        self.core.start()
        self.ws = self.core.workspace(ORG, ENV)
        self.org = self.ws.organization_id
        embedder = self.core.embedders[self.core.settings.embedder]
        self.embedder, self.d = embedder.name, embedder.dimension
        self.cache = self.core.indexes

    def add_document(self, name: str, n: int, seed: int) -> str:
        store = self.core.store
        return write_document(self.cache, store, self.org, name, n, seed, self.d, self.embedder)

    def segment_loads(self) -> int:
        """Loads of a workspace's index that mapped its segment files."""
        return seen(self.core)["index.segment_load"]

    def merges(self) -> int:
        """Segment files the background maintenance wrote."""
        return seen(self.core)["index.merge"]

    def delete(self, document_id: str) -> None:
        self.ws.knowledge.delete(document_id)

    def index(self) -> VectorIndex:
        return self.cache.get(self.org, ENV)

    def directory(self) -> SegmentDirectory:
        root, _ = segment_root(str(self.db), "auto")
        assert root is not None
        return SegmentDirectory(root / self.org / ENV)

    def check(self, queries: int = 4, k: int = 10) -> None:
        """Searches (single and batch) equal a brute force over the store's vectors."""
        index = self.index()
        ids, vectors = self.core.store.load_vectors(self.org, ENV, self.d)
        assert len(index) == ids.shape[0]
        assert sorted(index.ids().tolist()) == sorted(ids.tolist())
        qs = unit_rows(queries, self.d, seed=int(ids.sum() % 1000) + 7)
        batch_ids, batch_scores = index.search_batch(qs, k)
        for row, q in enumerate(qs):
            scores = vectors @ q
            order = np.lexsort((ids, -scores))[:k]
            found, found_scores = index.search(q, k)
            assert found.tolist() == ids[order].tolist()
            np.testing.assert_allclose(found_scores, scores[order], atol=1e-5)
            np.testing.assert_allclose(batch_scores[row], scores[order], atol=1e-5)

    def close(self) -> None:
        self.core.close()


@pytest.fixture(autouse=True)
def files_for_small_workspaces(monkeypatch: pytest.MonkeyPatch) -> None:
    """These workspaces hold a few rows: give them segment files anyway, mapped."""
    monkeypatch.setattr(_workspace_loading, "SEGMENT_MIN_BYTES", 0)
    monkeypatch.setattr(segments, "MAP_MIN_BYTES", 0)


@pytest.fixture
def small_merges(monkeypatch: pytest.MonkeyPatch) -> None:
    """Merge the tail into a segment after a few dozen rows, so tests see many merges."""
    monkeypatch.setattr(_workspace_loading, "SEGMENT_MERGE_ROWS", 40)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "kb.db"


@pytest.fixture
def space(db: Path) -> Iterator[Workspace]:
    space = Workspace(db)
    yield space
    space.close()


# -- equivalence with the store through merges, compactions and reloads ------------------


def test_results_equal_the_store_through_appends_deletes_merges_and_reloads(
    db: Path, small_merges: None
) -> None:
    rng = np.random.default_rng(11)
    space = Workspace(db)
    live: list[str] = []
    merges = 0
    try:
        for step in range(60):
            if live and rng.random() < 0.35:
                space.delete(live.pop(int(rng.integers(len(live)))))
            else:
                live.append(space.add_document(f"d{step}", int(rng.integers(1, 25)), seed=step))
            if step % 7 == 0:
                space.check()  # while maintenance may be running
            if step % 10 == 9:
                assert space.cache.wait_for_maintenance()
                space.check()
                index = space.index()
                assert index.tail_rows < 40 and all(p.name for p in index.parts())
            if step % 20 == 19:  # a new process: maps the files, applies the change log
                merges += space.merges()
                space.close()
                space = Workspace(db)
                space.check()
                assert space.segment_loads() == 1
        assert space.cache.wait_for_maintenance()
        assert merges > 6  # tails merged and segments compacted along the way
        space.check()
    finally:
        space.close()
    # what the directory holds now: only the files the manifest names, and a fresh load
    directory = SegmentDirectory(next((db.parent / (db.name + ".index")).glob("*/*")))
    manifest = directory.read_manifest()
    assert manifest is not None
    on_disk = {p.name for p in directory.path.iterdir() if p.name.startswith(("seg-", "tomb-"))}
    assert on_disk == manifest.files()
    again = Workspace(db)
    try:
        again.check()
        assert again.segment_loads() == 1
    finally:
        again.close()


def test_a_plain_index_matches_a_model_through_background_maintenance() -> None:
    rng = np.random.default_rng(3)
    index = VectorIndex(16)
    model: dict[int, npt.NDArray[np.float32]] = {}
    next_id = 0
    for step in range(80):
        if model and rng.random() < 0.4:
            gone = rng.choice(sorted(model), size=min(len(model), int(rng.integers(1, 60))))
            assert index.remove(gone) == len(set(gone.tolist()))
            for i in gone.tolist():
                model.pop(i, None)
        else:
            m = int(rng.integers(1, 200))
            rows = unit_rows(m, 16, seed=step)
            index.add(np.arange(next_id, next_id + m), rows)
            model.update(zip(range(next_id, next_id + m), rows, strict=True))
            next_id += m
        if step % 5 == 0:
            while index.maintain():
                pass
        ids = np.array(sorted(model), dtype=np.int64)
        q = unit_rows(1, 16, seed=1000 + step)[0]
        if ids.size:
            scores = np.array([model[i] for i in ids.tolist()]) @ q
            order = np.lexsort((ids, -scores))[:15]
            found, _ = index.search(q, 15)
            assert found.tolist() == ids[order].tolist()
        assert len(index) == len(model)


def test_a_delete_only_marks_rows_and_compaction_comes_later() -> None:
    index = VectorIndex(8)
    index.set_maintenance(None)  # nobody compacts: the delete must not either
    index.add(np.arange(1000), unit_rows(1000, 8, seed=1))
    assert not index.maintenance_due() and not index.maintain()
    assert index.remove(np.arange(0, 1000, 2)) == 500
    assert index.tail_rows == 1000 and index.parts() == ()  # tombstones only
    assert index.maintenance_due()
    assert index.maintain()
    (part,) = index.parts()
    assert part.dead.size == 0 and part.rows == 500 and index.tail_rows == 0
    assert sorted(index.ids().tolist()) == list(range(1, 1000, 2))
    assert not index.maintain()


# -- the service: DELETE publishes tombstones, compaction follows in the background ------


def test_a_delete_returns_before_compaction_and_searches_stay_right_meanwhile(
    space: Workspace,
) -> None:
    docs = [space.add_document(f"d{i}", 20, seed=i) for i in range(30)]
    space.check()
    assert space.cache.wait_for_maintenance()
    (segment,) = space.index().parts()
    directory = space.directory()
    merges = space.merges()
    # Hold the directory's lock: background maintenance cannot write a segment, so
    # every delete below must return without compacting.
    with directory.lock():
        for doc in docs[:12]:  # 240 of 600 rows: far past the compaction threshold
            space.delete(doc)
        index = space.index()
        (part,) = index.parts()
        assert part.same_rows(segment) and part.dead.size == 240
        assert index.maintenance_due()
        space.check()  # searches skip the tombstoned rows
        assert space.merges() == merges
        # a search thread runs on while the compaction starts
        errors: list[BaseException] = []
        stop = threading.Event()

        def search() -> None:
            try:
                while not stop.is_set():
                    space.check(queries=1)
            except BaseException as exc:
                errors.append(exc)

        reader = threading.Thread(target=search)
        reader.start()
    assert space.cache.wait_for_maintenance()
    stop.set()
    reader.join()
    assert not errors, errors[:1]
    assert space.merges() == merges + 1
    (part,) = space.index().parts()
    assert part.rows == 360 and part.dead.size == 0
    space.check()


# -- crash safety ----------------------------------------------------------------------


class PauseAt:
    """A ``segments.WriteStages`` that stops a write at ``stage`` for good, after
    creating ``marker`` (so a test can kill the process there)."""

    def __init__(self, stage: str, marker: Path) -> None:
        self.stage, self.marker = stage, marker

    def __call__(self, stage: str) -> None:
        if stage == self.stage:
            self.marker.touch()
            time.sleep(3600)


def paused_maintenance(db: Path, step: str, stage: str, marker: Path) -> None:
    """Open ``db``'s store and an index cache over it as the core builds one, whose
    segment writes pause at ``stage``; run a merge or a compaction (``step``)."""
    store, cache = file_indexes(db, segment_write_stages=PauseAt(stage, marker))
    dimension = HashingEmbedder().dimension
    organization = store.get_organization_by_name(ORG)
    assert organization is not None
    org = organization.id
    cache.get(org, ENV)
    if step == "merge":  # the tail passes the merge threshold
        write_document(cache, store, org, "late", 30, seed=99, dimension=dimension)
    else:  # tombstones pass the compaction threshold
        for name in ("d0", "d1", "d2", "d3"):
            cache.write(org, ENV, functools.partial(store.delete_document, org, ENV, f"doc_{name}"))
    cache.wait_for_maintenance(timeout=3600)


CRASH_SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from agentcore.knowledge.vectors import _workspace_loading
from test_segments import paused_maintenance
_workspace_loading.SEGMENT_MERGE_ROWS = 10
paused_maintenance(Path(sys.argv[2]), sys.argv[3], sys.argv[4], Path(sys.argv[5]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("step", ["merge", "compaction"])
@pytest.mark.parametrize("stage", ["segment", "manifest"])
def test_kill_9_during_maintenance_leaves_the_old_segments_valid(
    db: Path, step: str, stage: str
) -> None:
    space = Workspace(db)
    for i in range(8):
        space.add_document(f"d{i}", 12, seed=i)
    space.index()
    assert space.cache.wait_for_maintenance()
    directory = space.directory()
    before = directory.read_manifest()
    assert before is not None
    space.close()

    env = cli_env()
    tests_dir = str(Path(__file__).parent)
    env["PYTHONPATH"] = os.pathsep.join([tests_dir, str(Path(__file__).parents[2])])  # tests/
    marker = db.with_name(f"paused-{stage}")
    child = subprocess.Popen(
        [sys.executable, "-c", CRASH_SCRIPT, tests_dir, str(db), step, stage, str(marker)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        if child.poll() is not None:
            _, err = child.communicate()
            pytest.fail(f"the writer exited before pausing: {err.decode()[-2000:]}")
        if time.monotonic() > deadline:
            child.kill()
            pytest.fail("the writer never reached the pause point")
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    marker.unlink()

    # the manifest is the one from before the crash, and every file it names is whole
    assert directory.read_manifest() == before
    after = Workspace(db)
    try:
        after.check()
        assert after.segment_loads() == 1  # the old segments were used, not the store
        assert after.cache.wait_for_maintenance()
        after.check()
    finally:
        after.close()


# -- damaged files fall back to the store --------------------------------------------------


def _damage_first_segment(directory: SegmentDirectory, how: str) -> None:
    manifest = directory.read_manifest()
    assert manifest is not None
    segment = directory.path / manifest.segments[0]
    data = bytearray(segment.read_bytes())
    if how == "truncated":
        segment.write_bytes(bytes(data[: len(data) // 2]))
    elif how == "header":
        data[20] ^= 0xFF
        segment.write_bytes(bytes(data))
    elif how == "ids":
        offset = json.loads(data[12 : 12 + int.from_bytes(data[8:12], "little")])["sections"]
        data[offset["ids"][0] + 3] ^= 0x40
        segment.write_bytes(bytes(data))
    elif how == "missing":
        segment.unlink()


@pytest.mark.parametrize(
    "damage",
    ["truncated", "header", "ids", "missing", "manifest-garbage", "manifest-missing", "store"],
)
def test_damaged_segments_or_manifest_fall_back_to_the_store(db: Path, damage: str) -> None:
    space = Workspace(db)
    for i in range(6):
        space.add_document(f"d{i}", 10, seed=i)
    space.index()
    assert space.cache.wait_for_maintenance()
    directory = space.directory()
    space.close()
    if damage == "manifest-garbage":
        (directory.path / MANIFEST).write_bytes(b'{"crc32": 1, "manifest": {"format": 1}}')
    elif damage == "manifest-missing":
        (directory.path / MANIFEST).unlink()
    elif damage == "store":  # another database at the same path: never use its files
        db.unlink()
        for suffix in ("-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        fresh = Workspace(db)
        fresh.add_document("other", 5, seed=50)
        fresh.close()
    else:
        _damage_first_segment(directory, damage)

    after = Workspace(db)
    try:
        after.check()  # never an error, never a row lost: the store answers
        assert after.segment_loads() == 0
        assert after.cache.wait_for_maintenance()  # and fresh files are written
    finally:
        after.close()
    healed = Workspace(db)
    try:
        healed.check()
        assert healed.segment_loads() == 1
    finally:
        healed.close()


def _copy_database(source: Path, target: Path) -> None:
    """Copy a SQLite database into ``target`` in place (the backup API: same file, same
    inode, as restoring a backup over the live file does)."""
    import sqlite3

    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    src.close()
    dst.close()


@pytest.mark.parametrize("history", ["ids-reused", "rows-unseen"])
def test_a_database_restored_in_place_is_not_searched_through_newer_files(
    db: Path, tmp_path: Path, history: str
) -> None:
    # segment files written after the backup point, then the backup restored into the
    # same file and written to until its version passes the files' manifest: the files
    # seem current, but their newest ids now name other rows (ids-reused), or the store
    # holds rows written up to the manifest's version that neither the files nor the
    # change log after it has (rows-unseen). The store must answer, and say so.
    backup = tmp_path / "backup.db"
    space = Workspace(db)
    space.add_document("d0", 5, seed=0)
    _copy_database(db, backup)
    later = [space.add_document(f"d{i}", 5, seed=i) for i in (1, 2)]
    if history == "rows-unseen":
        for document_id in later:
            space.delete(document_id)
    space.index()
    assert space.cache.wait_for_maintenance()
    space.close()
    inode = db.stat().st_ino
    _copy_database(backup, db)
    assert db.stat().st_ino == inode
    after = Workspace(db)
    try:
        for i in range(5):  # past the manifest's version, the ids of d1 and d2 reused
            after.add_document(f"e{i}", 5, seed=10 + i)
        after.check()
        assert after.segment_loads() == 0
        # logged and counted (once by the load, and again when the maintenance loop,
        # before it replaces them, checks whether the files are another process's)
        assert seen(after.core)["index.segment_fallback"] >= 1
    finally:
        after.close()


def test_segment_files_refuse_what_they_cannot_vouch_for(tmp_path: Path) -> None:
    directory = SegmentDirectory(tmp_path / "ws")
    codec = kernels.CODECS["float32"]
    part = directory.write_segment(np.array([3, 5, 9]), unit_rows(3, 4, seed=1), codec)
    assert part.rows == 3 and part.name is not None
    np.testing.assert_array_equal(part.vectors, unit_rows(3, 4, seed=1))
    assert not part.vectors.flags.writeable  # a read-only mapping, not a copy
    with pytest.raises(ValueError):
        directory.write_segment(np.array([5, 3]), unit_rows(2, 4, seed=1), codec)
    (directory.path / "junk.vec").write_bytes(b"not a segment" * 400)
    with pytest.raises(SegmentError):
        directory.open_segment("junk.vec")
    assert directory.read_manifest() is None
    assert directory.load() is None


# -- several processes share one copy --------------------------------------------------------

SHARE_SCRIPT = """
import sys, time
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from test_segments import Workspace, mapped_segment_memory
space = Workspace(Path(sys.argv[1]))
space.check(queries=2)
print(space.segment_loads(), flush=True)
sys.stdin.readline()  # both processes now hold their mapping
print(mapped_segment_memory(), flush=True)
sys.stdin.readline()
"""


def mapped_segment_memory() -> str:
    """This process's mappings of segment files, from /proc/self/smaps, as JSON."""
    found: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5:
            path = fields[5] if len(fields) > 5 else ""
            current = found.setdefault(path, {}) if path.endswith(".vec") else None
        elif current is not None and fields[0].endswith(":") and len(fields) >= 2:
            key = fields[0][:-1]
            if fields[1].isdigit():
                current[key] = current.get(key, 0) + int(fields[1])
    status = Path("/proc/self/status").read_text()
    anon = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("RssAnon"))
    return json.dumps({"maps": found, "anon_kb": anon})


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_two_processes_share_one_file_backed_mapping(db: Path) -> None:
    space = Workspace(db)
    rows = 0
    for i in range(40):
        space.add_document(f"d{i}", 500, seed=i)
        rows += 500
    space.index()
    assert space.cache.wait_for_maintenance()
    space.close()
    vector_kb = rows * space.d * 4 // 1024

    tests_dir = str(Path(__file__).parent)
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join([tests_dir, str(Path(__file__).parents[2])])  # tests/
    children = [
        subprocess.Popen(
            [sys.executable, "-c", SHARE_SCRIPT, str(db), tests_dir],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "1"
        reports = []
        for child in children:
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write("\n")
            child.stdin.flush()
            reports.append(json.loads(child.stdout.readline()))
        for report in reports:
            (maps,) = report["maps"].values()  # one segment file, mapped
            # the searched pages are resident and shared with the other process
            assert maps["Rss"] >= vector_kb * 0.9
            assert maps["Shared_Clean"] >= vector_kb * 0.9
            assert maps.get("Anonymous", 0) == 0
            # and no private copy of the vectors: far less anonymous memory than them
            assert report["anon_kb"] < vector_kb + 200_000
        assert set(reports[0]["maps"]) == set(reports[1]["maps"])
    finally:
        for child in children:
            if child.stdin is not None:
                child.stdin.write("\n")
                child.stdin.close()
            child.wait(timeout=60)


def test_index_dir_setting(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    db.write_bytes(b"")
    root, identity = segment_root(str(db), "auto")
    assert root == tmp_path / "a.db.index" and identity.startswith("sqlite:")
    assert segment_root(":memory:", "auto") == (None, "")
    assert segment_root("postgresql://h/db", "auto") == (None, "")  # no cache directory
    cached, identity = segment_root("postgresql://u:pw@h/db", "auto", tmp_path / "cache")
    assert cached is not None and cached.parent == tmp_path / "cache" / "index"
    assert identity == "postgresql://u:***@h/db"  # never a password on disk
    assert segment_root(":memory:", "auto", tmp_path / "cache") == (None, "")
    assert segment_root("plugin://store", "auto", tmp_path / "cache") == (None, "")
    assert segment_root(str(db), "off") == (None, "")
    explicit, _ = segment_root("postgresql://h/db", str(tmp_path / "idx"))
    assert explicit is not None and explicit.parent == tmp_path / "idx"
    with AgentCore.open(str(db), start_workers=False, index_dir="off") as core:
        ws = core.workspace(ORG, ENV)
        ws.knowledge.ingest_text("a.txt", "red pump oil " * 30)
        assert ws.knowledge.search("red pump", top_k=1).results[0].source == "a.txt"
        assert core.indexes.wait_for_maintenance()
    assert not (tmp_path / "a.db.index").exists()


def test_parts_round_trip_through_a_segment_file(tmp_path: Path) -> None:
    ids = np.arange(0, 3000, 3, dtype=np.int64)
    rows = unit_rows(ids.size, 12, seed=4)
    ram = Part.build(ids, rows, kernels.CODECS["float32"])
    mapped = SegmentDirectory(tmp_path).write_segment(ids, rows, kernels.CODECS["float32"])
    a = from_parts(12, [ram])
    b = from_parts(12, [mapped])
    for q in unit_rows(5, 12, seed=9):
        assert a.search(q, 7)[0].tolist() == b.search(q, 7)[0].tolist()
    assert b.contains(2997) and not b.contains(2998)
    b.add([2998], unit_rows(1, 12, seed=1))  # into the tail: the mapping is never written
    assert b.contains(2998) and b.tail_rows == 1


def test_a_manifest_follows_small_writes_so_a_load_bridges_a_short_log(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sync, "MANIFEST_LAG_VERSIONS", 3)
    space = Workspace(db)
    try:
        docs = [space.add_document(f"d{i}", 30, seed=i) for i in range(4)]
        space.index()
        assert space.cache.wait_for_maintenance()
        directory = space.directory()
        first = directory.read_manifest()
        assert first is not None
        space.delete(docs[0])  # 30 of 120 rows: compaction anyway; then small writes
        assert space.cache.wait_for_maintenance()
        for i in range(3):  # a few rows each: no merge is due, but the lag is
            space.add_document(f"small{i}", 2, seed=100 + i)
        assert space.cache.wait_for_maintenance()
        manifest = directory.read_manifest()
        version = space.core.store.knowledge_state(space.org, ENV).version
        assert manifest is not None and manifest.version == version
        assert space.index().tail_rows == 0
    finally:
        space.close()


@pytest.mark.parametrize("codec", sorted(set(kernels.CODECS) - {"float32"}))
def test_segments_keep_the_workspace_codec_and_its_float32_rows(db: Path, codec: str) -> None:
    space = Workspace(db, index_dtype=codec)
    try:
        for i in range(6):
            space.add_document(f"d{i}", 200, seed=i)
        space.index()
        assert space.cache.wait_for_maintenance()
    finally:
        space.close()
    again = Workspace(db, index_dtype=codec)
    try:
        index = again.index()
        assert again.segment_loads() == 1
        (part,) = index.parts()
        assert part.codec.name == codec and part.codes.dtype != np.float32
        assert part.codes is not part.vectors and not part.codes.flags.writeable
        ids, vectors = again.core.store.load_vectors(again.org, ENV, again.d)
        np.testing.assert_array_equal(part.vectors, vectors[np.argsort(ids)])
        hits = 0
        for q in unit_rows(10, again.d, seed=77):
            scores = vectors @ q
            best = ids[np.lexsort((ids, -scores))[:10]]
            found, found_scores = index.search(q, 10)
            hits += len(set(found.tolist()) & set(best.tolist()))
            # scores are exact float32 re-scores of the candidates
            np.testing.assert_allclose(found_scores, np.sort(scores)[::-1][: len(found)], atol=0.02)
        assert hits >= 95  # recall@10 over 10 queries
    finally:
        again.close()


def test_tombstones_are_per_segment_rows_so_a_re_added_id_stays_live(tmp_path: Path) -> None:
    from agentcore.knowledge.vectors._segments import Manifest

    directory = SegmentDirectory(tmp_path / "ws")
    codec = kernels.CODECS["float32"]
    old_rows, new_row = unit_rows(3, 4, seed=1), unit_rows(1, 4, seed=2)
    first = directory.write_segment(np.array([4, 5, 6]), old_rows, codec)
    second = directory.write_segment(np.array([5]), new_row, codec)
    tombstones = directory.write_tombstones([np.array([1]), np.empty(0, np.int64)])
    assert first.name and second.name
    directory.publish(Manifest(7, 4, "e", "s", (first.name, second.name), tombstones))
    loaded = directory.load()
    assert loaded is not None
    manifest, parts = loaded
    assert manifest.version == 7 and [p.dead.tolist() for p in parts] == [[1], []]
    index = from_parts(4, parts)
    assert len(index) == 3 and sorted(index.ids().tolist()) == [4, 5, 6]
    np.testing.assert_array_equal(index.get(5), new_row[0])
    # a tombstone file that does not fit the manifest's segments is refused
    bad = directory.write_tombstones([np.array([3])])
    directory.publish(Manifest(8, 4, "e", "s", (first.name,), bad))
    with pytest.raises(SegmentError):
        directory.load()

"""SQLite keeps a document's sentence counts as one packed row and sums them in memory.

The sums follow the change log like the vector index: another store object or another
process writing to the same file is seen at the next read, deletions of documents counted
before and after the sums were built both come out right, and a sums version older than
the log reaches is rebuilt from every row. Migration m011 moves the old per-stem rows.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import core_with, run_python
from sqlite_utils import Database as UtilsDatabase

from agentcore import AgentCore
from agentcore.knowledge.terms import count_terms
from agentcore.knowledge.text import stems as tokenizer
from agentcore.knowledge.vectors import nonzero_rows, unit_rows
from agentcore.knowledge.vectors._embedding import unit_rows_into
from agentcore.storage.sql import vectors as sql_vectors
from agentcore.storage.sql.documents import json_ints
from agentcore.storage.sql.terms import TermSums, pack_stems, unpack_stems
from agentcore.storage.sqlite.migrations import migrations

tokens_of = tokenizer.tokens_of

TEXTS = [
    "The turbine blades are stored in Rotterdam. Each blade weighs nine tonnes.",
    "The canteen opens at eight. Breakfast is served until ten.",
    "Blades are inspected every spring. The canteen closes at four.",
    "... !!! It is what it is.",  # stop words only: no vector, but sentences that count
    "Zeppelins are stored in hangars; hangars are cold.",
]
ASKED = ["blade", "canteen", "zeppelin", "hangar", "turbine", "stor", "nothing"]


def scope(core: AgentCore) -> tuple[str, str]:
    ws = core.workspace("acme", "test")
    return ws.organization_id, ws.environment


def recount(core: AgentCore) -> tuple[int, dict[str, int]]:
    """The workspace's counts from scratch, over every chunk it holds now."""
    texts = [
        text
        for _document, _ids, chunk_texts in core.store.iter_chunk_texts(*scope(core))
        for text in chunk_texts
    ]
    counts = count_terms(texts, tokens_of)
    return counts.sentences, {stem: n for stem, n in counts.stems.items() if stem in ASKED}


def stored(core: AgentCore) -> tuple[int, dict[str, int]]:
    return core.store.term_counts(*scope(core), ASKED)


def test_pack_and_unpack_round_trip() -> None:
    counts = {"blade": 3, "ärzte": 2, "x": 1, "gone": 0, "": 7}
    packed = pack_stems(counts)
    assert dict(unpack_stems(packed)) == {"blade": 3, "ärzte": 2, "x": 1}
    assert pack_stems({}) == "" and list(unpack_stems("")) == []
    # a stem is read up to its last space, so even an odd one survives
    assert dict(unpack_stems(pack_stems({"a b": 2}))) == {"a b": 2}
    # damaged lines are skipped, the rest still read
    damaged = "blade 3\nnocount\n 4\nx -1\ny 2z\nz \u00b2\n\ncanteen 1"
    assert list(unpack_stems(damaged)) == [("blade", 3), ("canteen", 1)]


def test_sums_add_and_take_away_to_nothing() -> None:
    sums = TermSums(0)
    sums.add(3, pack_stems({"blade": 2, "canteen": 1}), 1)
    sums.add(1, pack_stems({"blade": 1}), 1)
    assert (sums.sentences, sums.counts) == (4, {"blade": 3, "canteen": 1})
    sums.add(3, pack_stems({"blade": 2, "canteen": 1}), -1)
    assert (sums.sentences, sums.counts) == (1, {"blade": 1})  # no zero entries kept


def test_another_store_on_the_same_file_is_followed(tmp_path: Path) -> None:
    reader = core_with(tmp_path)
    writer = core_with(tmp_path)  # its own connections and sums, like another process
    try:
        assert stored(reader) == (0, {})  # an empty workspace
        kept = [
            writer.workspace("acme", "test").knowledge.ingest_text(f"{n}.txt", t)
            for n, t in enumerate(TEXTS[:3])
        ]
        assert stored(reader) == recount(reader)  # built from every row
        knowledge = writer.workspace("acme", "test").knowledge
        late = knowledge.ingest_text("late.txt", TEXTS[4])
        odd = knowledge.ingest_text("odd.txt", TEXTS[3])
        knowledge.delete(kept[0].id)  # counted by the reader: taken away
        knowledge.delete(late.id)  # added and deleted since: never added
        assert stored(reader) == recount(reader)
        assert stored(reader)[1].get("zeppelin", 0) == 0
        assert stored(reader)[1]["canteen"] == 2
        for document in kept[1:]:
            knowledge.delete(document.id)
        assert stored(reader) == recount(reader) == (3, {})  # the stop words' sentences
        with writer.store.db.read() as conn:  # which had no vectors to index
            assert conn.execute("SELECT COUNT(*) FROM vector_segments").fetchone()[0] == 0
        knowledge.delete(odd.id)
        assert stored(reader) == (0, {})
    finally:
        writer.close()
        reader.close()


def test_a_sums_version_older_than_the_log_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = core_with(tmp_path)
    writer = core_with(tmp_path)
    try:
        knowledge = writer.workspace("acme", "test").knowledge
        first = knowledge.ingest_text("a.txt", TEXTS[0])
        assert stored(reader) == recount(reader)
        # the log forgets deletions older than this many versions: the reader falls behind
        monkeypatch.setattr(sql_vectors, "TOMBSTONE_VERSIONS", 2)
        knowledge.ingest_text("b.txt", TEXTS[1])
        for n in range(3):
            knowledge.ingest_text(f"c{n}.txt", TEXTS[2])
        knowledge.delete(first.id)  # prunes the log up to 2 versions back
        with writer.store.db.read() as conn:
            floor = conn.execute("SELECT log_floor FROM knowledge_state").fetchone()[0]
        assert floor > 1  # the version the reader's sums are at is below the floor
        assert stored(reader) == recount(reader)
        assert stored(reader)[1].get("turbine", 0) == 0
    finally:
        writer.close()
        reader.close()


def test_a_reembed_moves_the_floor_and_the_sums_rebuild(tmp_path: Path) -> None:
    core = core_with(tmp_path)
    try:
        knowledge = core.workspace("acme", "test").knowledge
        gone = knowledge.ingest_text("a.txt", TEXTS[0])
        knowledge.ingest_text("b.txt", TEXTS[2])
        assert stored(core) == recount(core)
        ids, vectors = core.store.load_vectors("acme", "test", 1024)
        core.store.replace_all_vectors("acme", "test", "hashing-v1", [(None, ids, vectors)], 1024)
        knowledge.delete(gone.id)
        assert stored(core) == recount(core)
    finally:
        core.close()


def test_another_process_writing_is_seen(tmp_path: Path) -> None:
    core = core_with(tmp_path)
    try:
        knowledge = core.workspace("acme", "test").knowledge
        first = knowledge.ingest_text("a.txt", TEXTS[0])
        assert stored(core)[1]["blade"] == 2
        script = (
            "import sys; from agentcore import AgentCore\n"
            "core = AgentCore.open(sys.argv[1])\n"
            "k = core.workspace('acme', 'test').knowledge\n"
            f"k.delete({first.id!r})\n"
            f"k.ingest_text('z.txt', {TEXTS[4]!r})\n"
            "core.close()\n"
        )
        done = run_python(script, str(tmp_path / "chat.db"))
        assert done.returncode == 0, done.stderr
        assert stored(core) == recount(core)
        assert stored(core)[1] == {"zeppelin": 1, "hangar": 1, "stor": 1}
    finally:
        core.close()


def test_counts_survive_a_restart_without_term_rows_rewritten(tmp_path: Path) -> None:
    core = core_with(tmp_path)
    knowledge = core.workspace("acme", "test").knowledge
    for n, text in enumerate(TEXTS):
        knowledge.ingest_text(f"{n}.txt", text)
    expected = stored(core)
    with core.store.db.read() as conn:
        rows = conn.execute("SELECT COUNT(*) FROM document_terms").fetchone()[0]
    assert rows == len(TEXTS)  # one row per document, not one per stem
    core.close()
    again = core_with(tmp_path)
    try:
        assert stored(again) == expected == recount(again)
    finally:
        again.close()


def test_migration_moves_the_per_stem_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = UtilsDatabase(str(path))
    migrations.apply(old, stop_before="m011_document_terms")
    for seq, (document, sentences, stems) in enumerate(
        [("doc_a", 4, {"blade": 3, "rotterdam": 1}), ("doc_b", 2, {}), ("doc_c", 1, {"x": 1})],
        start=1,
    ):
        old.execute(
            "INSERT INTO documents (seq, id, organization_id, environment, source, content_type,"
            " pages, chunks, bytes, created_at) VALUES (?, ?, 'acme', 'test', 's', 'text/plain',"
            " 1, 1, 1, '2026-01-01T00:00:00.000Z')",
            [seq, document],
        )
        rows = [(document, "acme", "test", "", sentences)]
        rows += [(document, "acme", "test", stem, n) for stem, n in stems.items()]
        old.conn.executemany("INSERT INTO term_counts VALUES (?, ?, ?, ?, ?)", rows)
    old.conn.commit()
    old.close()

    core = AgentCore.open(path)
    try:
        with core.store.db.read() as conn:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
            moved = conn.execute(
                "SELECT document_seq, version, sentences, stems FROM document_terms"
                " ORDER BY document_seq"
            ).fetchall()
        assert "term_counts" not in tables
        assert [tuple(row) for row in moved] == [
            (1, 0, 4, "blade 3\nrotterdam 1"),
            (2, 0, 2, ""),
            (3, 0, 1, "x 1"),
        ]
        assert core.store.term_counts("acme", "test", ["blade", "x", "y"]) == (
            7,
            {"blade": 3, "x": 1},
        )
        assert core.store.delete_document("acme", "test", "doc_a")
        assert core.store.term_counts("acme", "test", ["blade", "x"]) == (3, {"x": 1})
    finally:
        core.close()


@pytest.mark.parametrize(
    "values", [[], [1], [1, 2, 3], [0, 10**30], [-1, 7], [True], [1.5], ["x"], [None]]
)
def test_json_ints_is_json_dumps(values: list[Any]) -> None:
    assert json_ints(values) == json.dumps(values)


def test_unit_rows_into_is_unit_rows_and_nonzero_rows() -> None:
    rng = np.random.default_rng(3)
    rows = rng.normal(size=(9, 16)).astype(np.float32)
    rows[1] = 0.0  # all zeros
    rows[2, 3] = np.nan
    rows[3, 0] = np.inf
    rows[4] = np.float32(1e-45)  # subnormal: squares still positive in float64
    rows[5] = np.float32(3e38)  # near the float32 limit: no overflow in float64
    rows[6, :15] = 0.0  # one non-zero entry
    out = np.full_like(rows, 7.0)
    keep = unit_rows_into(rows, out)
    expected = unit_rows(rows)
    np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))
    np.testing.assert_array_equal(keep, nonzero_rows(expected))
    assert keep.tolist() == [True, False, False, False, True, True, True, True, True]
    # every row fine: the fast branch, same bits
    fine = rng.normal(size=(4, 8)).astype(np.float32)
    out = np.empty_like(fine)
    assert unit_rows_into(fine, out).all()
    np.testing.assert_array_equal(out.view(np.uint32), unit_rows(fine).view(np.uint32))
    empty = np.empty((0, 8), dtype=np.float32)
    assert unit_rows_into(empty, np.empty_like(empty)).shape == (0,)


def test_one_workspace_summing_its_counts_holds_no_other(tmp_path: Path) -> None:
    # a workspace's first sums read every document's row (seconds at a million chunks):
    # another workspace, behind a lock of its own, is answered meanwhile
    with AgentCore.open(tmp_path / "db", entry_points=False) as core:
        store: Any = core.store
        slow = scope(core)
        workspaces = (core.workspace(f"org{n}", "test") for n in range(1000))
        ws = next(
            ws
            for ws in workspaces
            if store._term_lock((ws.organization_id, "test")) is not store._term_lock(slow)
        )
        other = (ws.organization_id, "test")
        core.workspace("acme", "test").knowledge.ingest_text("a.txt", TEXTS[0])
        ws.knowledge.ingest_text("b.txt", TEXTS[2])
        summing, release = threading.Event(), threading.Event()
        current = store._current_term_sums

        def held(key: tuple[str, str], entry: TermSums | None) -> TermSums:
            if key == slow:
                summing.set()
                release.wait(120)
            return current(key, entry)  # type: ignore[no-any-return]

        store._current_term_sums = held
        first = threading.Thread(target=stored, args=(core,))
        first.start()
        try:
            assert summing.wait(60)
            assert store.term_counts(*other, ["blade", "canteen"]) == (
                2,
                {"blade": 1, "canteen": 1},
            )
            assert first.is_alive()  # answered while the slow workspace was still summing
        finally:
            release.set()
            first.join(60)
        assert stored(core) == recount(core)

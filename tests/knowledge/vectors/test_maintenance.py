"""Compaction and merging stream their rows into the new segment file block by block.

A maintenance step's rows (``MaintenancePlan.gather``: a ``RowSource``) are copied out
a block at a time and never gathered into one matrix. These tests pin that the result
is exactly what gathering the whole matrix gave: the same rows in the same order, and
byte for byte the same segment file, at the block boundaries (empty, one row, exactly
a block, a block and one row, several blocks), for every codec. And that a step's
``apply`` carries over deletes made while it ran, also those that land just before
it takes the writer lock.
"""

from __future__ import annotations

import json
import struct
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from agentcore.knowledge.vectors import Part, VectorIndex, from_parts
from agentcore.knowledge.vectors import _index as index_module
from agentcore.knowledge.vectors import _kernels as kernels
from agentcore.knowledge.vectors import _segments as segments
from agentcore.knowledge.vectors._plan import MaintenancePlan, RowSource
from agentcore.knowledge.vectors._segments import HEADER_BYTES, SegmentDirectory

D = 8
BLOCK_ROWS = 3  # blocks this small put the boundaries where small tests reach them


@pytest.fixture(autouse=True)
def files_for_small_workspaces(monkeypatch: pytest.MonkeyPatch) -> None:
    """These workspaces hold a few rows: give them segment files anyway, mapped."""
    from agentcore.knowledge.vectors import _workspace_loading

    monkeypatch.setattr(_workspace_loading, "SEGMENT_MIN_BYTES", 0)
    monkeypatch.setattr(segments, "MAP_MIN_BYTES", 0)


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segments, "BLOCK_BYTES", BLOCK_ROWS * D * 4)


def unit_rows(n: int, seed: int, d: int = D) -> npt.NDArray[np.float32]:
    rows = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def index_with(
    parts: Sequence[tuple[Sequence[int], int]],
    tail: Sequence[int] = (),
    dead: Sequence[int] = (),
) -> VectorIndex:
    """An index of frozen RAM parts (ids, seed) and tail rows (in the order given),
    with ``dead`` ids deleted; no background maintenance."""
    built = [
        Part.build(np.asarray(ids, np.int64), unit_rows(len(ids), seed), kernels.Float32Codec())
        for ids, seed in parts
    ]
    index = from_parts(D, built)
    index.set_maintenance(None)
    if tail:
        index.add(np.asarray(tail, np.int64), unit_rows(len(tail), seed=99))
    if dead:
        assert index.remove(dead) == len(dead)
    return index


def plan_all(index: VectorIndex) -> MaintenancePlan:
    """A step that rewrites every part and the whole tail into one part."""
    index.persisted = True  # RAM parts become files: every part and the tail are chosen
    plan = index.plan_maintenance(force=True)
    assert plan is not None
    return plan


def expected(index: VectorIndex) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """The live ids ascending and their rows, one by one (brute force)."""
    ids = np.sort(index.ids())
    rows = [index.get(int(i)) for i in ids]
    matrix = np.array(rows, dtype=np.float32).reshape(len(ids), D)
    return ids, matrix


SHAPES = {
    "one whole part": dict(parts=[(range(10, 17), 1)]),
    "one part with dead rows": dict(parts=[(range(10, 20), 1)], dead=[10, 13, 19]),
    "parts and a shuffled tail": dict(
        parts=[(range(100, 107), 1), (range(0, 200, 40), 2)],
        tail=[55, 3, 500, 41, 7],
        dead=[100, 80, 3, 500],
    ),
    "a tail only": dict(parts=[], tail=[9, 2, 5, 1]),
    "everything deleted": dict(parts=[(range(3), 1)], tail=[7], dead=[0, 1, 2, 7]),
    "one row": dict(parts=[(range(5), 1)], dead=[0, 1, 3, 4]),
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("block", [1, 2, 3, 1000])
def test_row_source_gives_the_live_rows_in_id_order(shape: str, block: int) -> None:
    index = index_with(**SHAPES[shape])  # type: ignore[arg-type]
    want_ids, want_rows = expected(index)
    ids, source = plan_all(index).gather()
    np.testing.assert_array_equal(ids, want_ids)
    assert (source.rows, source.dimension) == (want_ids.shape[0], D)
    buffer = np.empty((block, D), dtype=np.float32)
    got = [
        source.block(a, min(a + block, source.rows), buffer).copy()
        for a in range(0, source.rows, block)
    ]
    rows = np.concatenate(got) if got else np.empty((0, D), np.float32)
    np.testing.assert_array_equal(rows, want_rows)
    # and the whole-matrix form the RAM maintenance uses agrees
    live_ids, live = plan_all(index).live_rows()
    np.testing.assert_array_equal(live_ids, want_ids)
    np.testing.assert_array_equal(live, want_rows)


def test_one_whole_part_is_a_view_not_a_copy() -> None:
    index = index_with(parts=[(range(4), 1)])
    _, source = plan_all(index).gather()
    assert source.view is not None and source.view is index.parts()[0].vectors
    shuffled = index_with(parts=[(range(4), 1)], tail=[9])
    assert plan_all(shuffled).gather()[1].view is None


def test_fill_outside_the_rows_copies_nothing() -> None:
    _, source = plan_all(index_with(parts=[(range(4), 1)], dead=[1])).gather()
    out = np.full((2, D), 7.0, dtype=np.float32)
    assert source.fill(3, 3, out).shape == (0, D)
    assert (out == 7.0).all()


def _sections(data: bytes) -> dict[str, list[int]]:
    (length,) = struct.unpack_from("<I", data, 8)
    meta = json.loads(data[12 : 12 + length])
    sections: dict[str, list[int]] = meta["sections"]
    assert meta["size"] == len(data)
    return sections


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("codec_name", ["float32", "float16", "int8"])
@pytest.mark.parametrize("n", [0, 1, BLOCK_ROWS, BLOCK_ROWS + 1, 3 * BLOCK_ROWS + 2])
def test_a_streamed_segment_is_byte_for_byte_the_gathered_one(
    tmp_path: Path, codec_name: str, n: int
) -> None:
    codec = kernels.CODECS[codec_name]
    # n live rows out of a part with dead rows and a tail out of order: the order path
    total = list(range(0, 4 * n + 4, 2))
    dead = total[1::4]
    live_part = [i for i in total if i not in dead]
    tail = [1001, 1000] if n >= 2 else []
    keep = live_part[: max(0, n - len(tail))]
    dead += live_part[len(keep) :]
    index = index_with(parts=[(total, 1)], tail=tail, dead=dead)
    ids, source = plan_all(index).gather()
    assert source.rows == n
    matrix = source.fill(0, n, np.empty((n, D), np.float32))

    directory = SegmentDirectory(tmp_path)
    streamed = directory.write_segment(ids, source, codec)
    gathered = directory.write_segment(ids, matrix, codec)
    assert streamed.name != gathered.name
    data = (tmp_path / str(streamed.name)).read_bytes()
    assert data == (tmp_path / str(gathered.name)).read_bytes()

    # the layout: header, then each section page-aligned, zeros in between
    codes, params = codec.encode(matrix)  # the whole matrix at once, as before
    arrays = {
        "ids": ids.astype("<i8"),
        "vectors": matrix,
        "params": params.astype("<f4"),
        # no labels: one value, NO_LABEL, and each row's code 0
        "label_values": np.full(1, -1, dtype="<i8"),
        "label_codes": np.zeros(n, dtype="<i4"),
    }
    if codec_name != "float32":
        arrays["codes"] = codes
    sections = _sections(data)
    order = list(arrays)  # (empty sections share an offset)
    assert sorted(sections, key=lambda k: (sections[k][0], order.index(k))) == order
    covered = np.zeros(len(data), dtype=bool)
    covered[:HEADER_BYTES] = True
    for key, (offset, nbytes) in sections.items():
        assert offset % HEADER_BYTES == 0
        assert data[offset : offset + nbytes] == np.ascontiguousarray(arrays[key]).tobytes()
        covered[offset : offset + nbytes] = True
    assert not any(np.frombuffer(data, np.uint8)[~covered])
    np.testing.assert_array_equal(streamed.vectors, matrix)
    np.testing.assert_array_equal(streamed.ids, ids)


@pytest.mark.usefixtures("small_blocks")
def test_writing_a_segment_holds_a_block_not_the_matrix(tmp_path: Path) -> None:
    n, d = 4000, D
    index = index_with(parts=[(range(n), 1)], dead=list(range(0, n, 10)))
    ids, source = plan_all(index).gather()
    matrix_bytes = source.rows * d * 4
    tracemalloc.start()
    try:
        part = SegmentDirectory(tmp_path).write_segment(ids, source, kernels.CODECS["float32"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert part.rows == source.rows
    assert peak < matrix_bytes // 4, f"peak {peak} bytes for a {matrix_bytes}-byte matrix"


def test_a_segment_writer_refuses_rows_that_do_not_match_the_ids(tmp_path: Path) -> None:
    directory = SegmentDirectory(tmp_path)
    source = RowSource(((unit_rows(3, 1), None),), None, D)
    with pytest.raises(ValueError, match="ids"):
        directory.write_segment(np.array([1, 2]), source, kernels.CODECS["float32"])
    with pytest.raises(ValueError):
        directory.write_segment(np.array([1]), np.zeros(D, np.float32), kernels.CODECS["float32"])


class _DeleteBeforeTheLock(MaintenancePlan):
    """A plan that deletes ``late`` from ``index`` right after ``apply`` carried over the
    earlier deletes, before it takes the writer lock: the moment a concurrent DELETE
    can land."""

    def carry_deletes(self, before, now, new_parts):  # type: ignore[no-untyped-def,override]
        out = super().carry_deletes(before, now, new_parts)
        late = self.__dict__.pop("late", None)  # the first carry-over only
        if late:
            assert self.__dict__["index"].remove(late) == len(late)
        return out


def test_apply_carries_over_deletes_made_during_the_step_and_just_before_the_lock() -> None:
    parts = [Part.build(np.arange(50, dtype=np.int64), unit_rows(50, 1), kernels.Float32Codec())]
    index = from_parts(D, parts)
    index.set_maintenance(None)
    index.add(np.array([70, 60]), unit_rows(2, 2))
    index.remove([0, 1])
    planned = plan_all(index)
    new_part = index.build_part(planned)
    index.remove([2, 3, 70])  # while the step ran (one of them in the sealed tail)
    plan = _DeleteBeforeTheLock(planned.snapshot, planned.parts, planned.tail_rows)
    plan.__dict__.update(
        index=index, late=[4, 60]
    )  # lands between the early carry-over and the lock
    assert index.apply(plan, [new_part])
    gone = {0, 1, 2, 3, 4, 60, 70}
    assert set(index.ids().tolist()) == set(range(50)) - gone
    assert len(index) == 50 - 5
    for i in gone:
        assert not index.contains(i)
    top, _ = index.search(unit_rows(50, 1)[4], 50)
    assert not set(top.tolist()) & gone


def test_apply_refuses_a_plan_overtaken_by_another_step() -> None:
    index = index_with(parts=[(range(20), 1)], tail=[30, 25])
    first = plan_all(index)
    second = plan_all(index)
    assert index.apply(first, [index.build_part(first)])
    assert not index.apply(second, [index.build_part(second)])
    assert sorted(index.ids().tolist()) == [*range(20), 25, 30]


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("codec_name", ["float32", "int8"])
def test_the_writer_paces_itself_before_every_block(tmp_path: Path, codec_name: str) -> None:
    n = 2 * BLOCK_ROWS + 1  # three blocks
    index = index_with(parts=[(range(n + 2), 1)], dead=[0, 5])
    ids, source = plan_all(index).gather()
    calls: list[int] = []
    part = SegmentDirectory(tmp_path).write_segment(
        ids, source, kernels.CODECS[codec_name], pace=lambda: calls.append(1)
    )
    assert part.rows == n
    # int8 reads the rows twice: once to fit its grid, once to write them
    assert len(calls) == (6 if codec_name == "int8" else 3)


def test_background_steps_wait_while_a_write_is_in_flight() -> None:
    from agentcore.knowledge.vectors._maintenance import Foreground

    foreground = Foreground()
    assert foreground.wait_idle(0)
    with foreground.running():
        with foreground.running():  # nested writes
            assert not foreground.wait_idle(0.01)
        assert not foreground.wait_idle(0.01)
    assert foreground.wait_idle(0)
    with pytest.raises(RuntimeError), foreground.running():
        raise RuntimeError("a failed write still ends")
    assert foreground.wait_idle(0)


def test_a_merge_beside_a_segment_with_dead_rows_reloads_from_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tombstone file has an entry for every segment the manifest names, the new one
    included: with one missing a reload found it unusable and read the store instead."""
    from test_segments import Workspace

    from agentcore.knowledge.vectors import _workspace_loading

    monkeypatch.setattr(_workspace_loading, "SEGMENT_MERGE_ROWS", 40)
    db = tmp_path / "kb.db"
    space = Workspace(db)
    try:
        for i in range(8):
            space.add_document(f"d{i}", 12, seed=i)
        space.index()
        assert space.cache.wait_for_maintenance()
        space.delete("doc_d0")  # 12 of 96 rows: kept, with tombstones (not compacted)
        space.add_document("late", 45, seed=50)  # the tail passes the merge threshold
        assert space.cache.wait_for_maintenance()
        manifest = space.directory().read_manifest()
        assert manifest is not None and len(manifest.segments) == 2
        assert manifest.tombstones is not None
        space.check()
    finally:
        space.close()
    again = Workspace(db)
    try:
        again.check()
        assert again.segment_loads() == 1  # the files, not the store
    finally:
        again.close()


def test_a_tail_sealed_while_a_step_ran_makes_the_step_start_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``add`` seals a full tail into a part and starts a new tail: a step planned on
    the old tail's rows must not cut them off the new one (that would drop new rows
    and keep the sealed ones twice)."""
    monkeypatch.setattr(index_module, "SEAL_ROWS", 4)
    index = VectorIndex(D, capacity=4)
    index.set_maintenance(None)
    index.add(np.arange(4, dtype=np.int64), unit_rows(4, 1))
    plan = plan_all(index)
    assert plan.tail_rows == 4
    built = index.build_part(plan)
    index.add(np.array([10, 11], np.int64), unit_rows(2, 2))  # seals rows 0-3, new tail
    assert not index.apply(plan, [built])
    assert sorted(index.ids().tolist()) == [0, 1, 2, 3, 10, 11]
    again = plan_all(index)
    assert index.apply(again, [index.build_part(again)])
    assert sorted(index.ids().tolist()) == [0, 1, 2, 3, 10, 11]
    assert len(index) == 6
    top, _ = index.search(unit_rows(2, 2)[1], 6)
    assert sorted(top.tolist()) == [0, 1, 2, 3, 10, 11]

"""Filtered exact search in ``VectorIndex``: rows carry their document's label, and a
filter on labels is applied before the top k is taken.

Checked against brute force over the matching rows (order: score down, id up), for
every codec, for selective filters (the rows gathered and scored alone) and wide ones
(every row scanned, the others masked), across frozen parts, the tail, deletes,
maintenance and segment files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from agentcore.knowledge.vectors import NO_LABEL, VectorIndex, adopt, from_parts
from agentcore.knowledge.vectors import _index as index_module
from agentcore.knowledge.vectors._parts import codec_named
from agentcore.knowledge.vectors._segments import SegmentDirectory

D = 32


def unit(n: int, seed: int) -> npt.NDArray[np.float32]:
    rows = np.random.default_rng(seed).standard_normal((n, D)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def allowing(labels: set[int]) -> Callable[[npt.NDArray[np.int64]], npt.NDArray[np.bool_]]:
    chosen = np.asarray(sorted(labels), dtype=np.int64)
    return lambda values: np.isin(values, chosen)


class Truth:
    """Every live row (id, vector, label): brute force over them is the reference."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple[npt.NDArray[np.float32], int]] = {}

    def add(
        self,
        ids: npt.NDArray[np.int64],
        vectors: npt.NDArray[np.float32],
        labels: npt.NDArray[np.int64],
    ) -> None:
        for i, v, label in zip(ids.tolist(), vectors, labels.tolist(), strict=True):
            self.rows[i] = (v, label)

    def remove(self, ids: list[int]) -> None:
        for i in ids:
            self.rows.pop(i, None)

    def top(self, q: npt.NDArray[np.float32], k: int, labels: set[int]) -> list[int]:
        ids = np.asarray([i for i, (_, label) in self.rows.items() if label in labels], np.int64)
        if not ids.size:
            return []
        matrix = np.stack([self.rows[i][0] for i in ids.tolist()])
        scores = matrix @ q
        return ids[np.lexsort((ids, -scores))][:k].tolist()


def build(codec: str, seed: int = 0) -> tuple[VectorIndex, Truth]:
    """An index with a frozen part (a load), tail rows of several writes, and deletes."""
    truth = Truth()
    rng = np.random.default_rng(seed)
    ids = np.arange(0, 6000, dtype=np.int64) * 2
    labels = np.arange(ids.size, dtype=np.int64) // 200  # 30 documents of 200 rows
    vectors = unit(ids.size, seed)
    index = adopt(ids, vectors, labels=labels, codec=codec, spare_rows=2000)
    truth.add(ids, vectors, labels)
    for document in range(30, 36):  # six more documents, each one write
        new = np.arange(100, dtype=np.int64) + 100_000 + document * 1000
        rows = unit(100, seed + document)
        index.add(new, rows, np.full(100, document))
        truth.add(new, rows, np.full(100, document))
    gone = rng.choice(list(truth.rows), 700, replace=False).tolist()
    index.remove(gone)
    truth.remove(gone)
    return index, truth


FILTERS = {
    "one document (gathered)": {3},
    "a tail document only": {33},
    "a few documents (gathered)": {0, 7, 31},
    "half the documents (masked)": set(range(0, 36, 2)),
    "all but one (masked)": set(range(36)) - {5},
    "nothing": {999},
}


@pytest.mark.parametrize("codec", ["float32", "float16", "int8"])
@pytest.mark.parametrize("name", list(FILTERS))
def test_filtered_search_is_brute_force_over_the_matching_rows(codec: str, name: str) -> None:
    index, truth = build(codec)
    labels = FILTERS[name]
    for seed in range(5):
        q = unit(1, 100 + seed)[0]
        for k in (1, 10, 150):
            found, scores = index.search(q, k, allow=allowing(labels))
            assert found.tolist() == truth.top(q, k, labels), (name, k)
            assert np.all(np.diff(scores) <= 0)


def test_a_selective_filter_still_returns_k_rows_when_that_many_match() -> None:
    index, truth = build("float32")
    q = unit(1, 7)[0]
    # the best 10 rows of the whole index are almost all other documents' rows: a
    # post-filter of them would leave (nearly) none
    found, _ = index.search(q, 10, allow=allowing({4}))
    assert len(found) == 10 and found.tolist() == truth.top(q, 10, {4})
    # fewer rows match than k: all of them, and no other row
    few = [i for i, (_, label) in truth.rows.items() if label == 4]
    found, _ = index.search(q, len(few) + 50, allow=allowing({4}))
    assert sorted(found.tolist()) == sorted(few)


def test_both_paths_of_a_part_give_the_same_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    index, truth = build("int8")
    labels = set(range(0, 36, 3))
    q = unit(1, 3)[0]
    expected = truth.top(q, 25, labels)
    for fraction in (0.0, 1.0):  # always scanned and masked; always gathered
        monkeypatch.setattr(index_module, "GATHER_FRACTION", fraction)
        assert index.search(q, 25, allow=allowing(labels))[0].tolist() == expected


def test_ties_are_broken_by_id_among_the_allowed_rows() -> None:
    same = unit(1, 1).repeat(8, axis=0)
    index = adopt(np.arange(8) * 10, same, labels=[1, 2, 1, 2, 1, 2, 1, 2])
    found, scores = index.search(same[0], 3, allow=allowing({2}))
    assert found.tolist() == [10, 30, 50] and len(set(scores.tolist())) == 1


def test_unlabelled_rows_are_no_label() -> None:
    index = VectorIndex(D)
    index.add([1, 2], unit(2, 0))  # no labels: NO_LABEL
    index.add([3], unit(1, 1), [7])
    q = unit(1, 0)[0]
    assert index.search(q, 5, allow=allowing({NO_LABEL}))[0].tolist() == [1, 2]
    assert index.search(q, 5, allow=allowing({7}))[0].tolist() == [3]
    with pytest.raises(Exception, match="labels"):
        index.add([4, 5], unit(2, 2), [1])


def test_labels_survive_maintenance_and_segment_files(tmp_path: Path) -> None:
    index, truth = build("float32")
    while index.maintain():  # compaction and merging rebuild parts: their labels go along
        pass
    labels = {2, 32, 35}
    q = unit(1, 11)[0]
    expected = truth.top(q, 40, labels)
    assert index.search(q, 40, allow=allowing(labels))[0].tolist() == expected

    # every part written to a segment file and mapped again, as a process restart would
    directory = SegmentDirectory(tmp_path)
    plan = index.plan_maintenance(force=True)
    index.persisted = True
    plan = index.plan_maintenance(force=True)
    assert plan is not None
    ids, source = plan.gather()
    mapped = directory.write_segment(ids, source, codec_named("float32"))
    reopened = from_parts(D, [directory.open_segment(str(mapped.name))])
    assert reopened.search(q, 40, allow=allowing(labels))[0].tolist() == expected
    assert reopened.search(q, 40)[0].tolist() == index.search(q, 40)[0].tolist()


def test_a_filter_adds_nothing_when_it_lets_every_row_through() -> None:
    index, truth = build("float32")
    q = unit(1, 5)[0]
    everything = set(range(-1, 40))
    assert (
        index.search(q, 30, allow=allowing(everything))[0].tolist()
        == index.search(q, 30)[0].tolist()
    )

"""VectorIndex: exact cosine top-k, deletes, persistence, refusals and concurrent reads."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentcore.errors import ValidationFailed
from agentcore.knowledge.vectors import VectorIndex, adopt, from_buffers, from_segments
from agentcore.knowledge.vectors import _kernels as kernels
from agentcore.knowledge.vectors._plan import MAX_STEPS

TOL = 1e-5


@pytest.fixture(params=["single-block", "many-blocks"])
def blocks(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Executor | None]:
    """Run a test on the plain path (no executor) and on the blocked path, with helper
    threads (the executor a test's indexes are given: scans and maintenance use it)."""
    if request.param == "single-block":
        yield None
        return
    monkeypatch.setattr(kernels, "PARALLEL_MIN_ELEMENTS", 1)
    monkeypatch.setattr(kernels, "_BLOCK_BYTES", 1)  # 4096-row blocks
    monkeypatch.setattr(kernels, "_BATCH_BLOCK_ELEMENTS", 1)  # 1024-row blocks
    with ThreadPoolExecutor(3, initializer=kernels.pin_blas_thread) as helpers:
        yield helpers


def unit(v: npt.ArrayLike) -> npt.NDArray[np.float64]:
    a = np.asarray(v, dtype=np.float64)
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def assert_exact_top_k(
    ids: npt.NDArray[np.int64],
    scores: npt.NDArray[np.float32],
    live: dict[int, npt.NDArray[np.float64]],
    query: npt.ArrayLike,
    k: int,
) -> None:
    """Compare with a float64 brute force; order may differ only among equal scores."""
    ref_ids = np.array(sorted(live), dtype=np.int64)
    ref = unit(np.array([live[i] for i in ref_ids])) @ unit(query)
    ref_of = dict(zip(ref_ids.tolist(), ref.tolist(), strict=True))
    assert len(ids) == min(k, len(live))
    assert len(set(ids.tolist())) == len(ids)
    kth = np.sort(ref)[::-1][len(ids) - 1]
    # Everything clearly better than the k-th reference score must be returned,
    # nothing clearly worse may be.
    assert set(ref_ids[ref > kth + TOL].tolist()) <= set(ids.tolist())
    assert all(ref_of[i] >= kth - TOL for i in ids.tolist())
    np.testing.assert_allclose(scores, [ref_of[i] for i in ids.tolist()], atol=TOL)
    assert np.all(np.diff(scores) <= 0)
    equal = np.diff(scores) == 0
    assert np.all(np.diff(ids)[equal] > 0), "exact ties must be ordered by ascending id"
    assert np.all((scores >= -1) & (scores <= 1))


# Small integer coordinates make duplicate and parallel vectors, hence exact ties.
vectors = st.lists(st.integers(-3, 3), min_size=4, max_size=4).filter(any)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(vectors, min_size=1, max_size=40),
    query=vectors,
    k=st.integers(1, 45),
)
def test_search_matches_float64_brute_force(
    rows: list[list[int]], query: list[int], k: int
) -> None:
    index = VectorIndex(4)
    ids = np.arange(len(rows), dtype=np.int64) * 7 + 3
    index.add(ids, rows)
    found, scores = index.search(query, k)
    assert_exact_top_k(
        found, scores, dict(zip(ids.tolist(), map(unit, rows), strict=True)), query, k
    )


@pytest.mark.slow
def test_large_index_matches_reference_on_both_paths(blocks: Executor | None) -> None:
    rng = np.random.default_rng(7)
    data = rng.standard_normal((20_000, 16)).astype(np.float32)
    data[5000:5100] = data[0]  # duplicates straddling block borders: ties at the cut
    ids = rng.permutation(10**6)[:20_000].astype(np.int64)
    index = VectorIndex(16, executor=blocks)
    index.add(ids, data)
    live = dict(zip(ids.tolist(), data.astype(np.float64), strict=True))
    for query in [*rng.standard_normal((5, 16)), data[0]]:
        found, scores = index.search(query, 10)
        assert_exact_top_k(found, scores, live, query, 10)
    found, scores = index.search(data[0], 10)
    assert np.allclose(scores, 1.0) and (found == np.sort(ids[[0, *range(5000, 5100)]])[:10]).all()


def test_rows_are_normalised_and_scores_bounded() -> None:
    rng = np.random.default_rng(1)
    data = rng.standard_normal((50, 8)).astype(np.float32) * rng.uniform(1e-3, 1e3, (50, 1))
    index = VectorIndex(8)
    index.add(range(50), data.astype(np.float32))
    for i in range(50):
        stored = index.get(i)
        assert stored is not None
        assert abs(np.linalg.norm(stored) - 1) < 1e-6
        np.testing.assert_allclose(stored, unit(data[i]), atol=1e-6)
    found, scores = index.search(data[3] * 1e6, 50)
    assert found[0] == 3 and scores[0] <= 1.0 and scores.min() >= -1.0
    assert index.get(999) is None and not index.contains(999) and index.contains(49)

    # Squares of these under/overflow float32; they are still valid directions.
    extremes = np.array([[3e-25, 4e-25, 0, 0, 0, 0, 0, 0], [3e25, 0, 4e25, 0, 0, 0, 0, 0]])
    index.add([100, 101], extremes.astype(np.float32))
    np.testing.assert_allclose(index.get(100), [0.6, 0.8, 0, 0, 0, 0, 0, 0], atol=1e-6)
    np.testing.assert_allclose(index.get(101), [0.6, 0, 0.8, 0, 0, 0, 0, 0], atol=1e-6)


def test_deletes_readds_and_compaction(blocks: Executor | None) -> None:
    rng = np.random.default_rng(2)
    data = rng.standard_normal((9000, 8)).astype(np.float32)
    index = VectorIndex(8, executor=blocks)
    index.add(range(9000), data)
    assert index.remove([1, 2, 3, 10**9]) == 3  # unknown ids are ignored
    assert index.remove([1]) == 0
    assert len(index) == 8997 and not index.contains(2)
    found, _ = index.search(data[2], 5)
    assert 2 not in found
    gone = set(range(0, 9000, 3))
    assert index.remove(sorted(gone)) == len(gone - {3})  # crosses the compaction threshold
    live = {i: data[i].astype(np.float64) for i in range(9000) if i not in gone | {1, 2}}
    assert len(index) == len(live)
    assert sorted(index.ids().tolist()) == sorted(live)
    for query in rng.standard_normal((4, 8)):
        assert_exact_top_k(*index.search(query, 25), live, query, 25)
    everything, _ = index.search(rng.standard_normal(8), 10**6)
    assert sorted(everything.tolist()) == sorted(live)

    index.add([2], [data[2] * 5])  # re-adding a deleted id works
    found, scores = index.search(data[2], 1)
    assert found.tolist() == [2] and scores[0] == pytest.approx(1.0, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.booleans(), st.lists(st.integers(0, 30), max_size=8, unique=True)),
        max_size=25,
    )
)
def test_random_adds_and_removes_match_a_model(ops: list[tuple[bool, list[int]]]) -> None:
    index = VectorIndex(3)
    model: dict[int, npt.NDArray[np.float64]] = {}
    for is_add, ids in ops:
        if is_add:
            fresh = [i for i in ids if i not in model]
            rows = [[1.0 + i, (i * 7) % 5 - 2.0, 0.5] for i in fresh]
            index.add(fresh, np.array(rows, dtype=np.float32).reshape(-1, 3))
            model.update((i, np.array(r)) for i, r in zip(fresh, rows, strict=True))
        else:
            assert index.remove(ids) == len(set(ids) & set(model))
            for i in ids:
                model.pop(i, None)
        assert len(index) == len(model)
        assert sorted(index.ids().tolist()) == sorted(model)
        if model:
            assert_exact_top_k(*index.search([1.0, -1.0, 2.0], 100), model, [1.0, -1.0, 2.0], 100)


def test_round_trip_through_buffers_and_segments(blocks: Executor | None) -> None:
    rng = np.random.default_rng(3)
    data = rng.standard_normal((10_000, 12)).astype(np.float32)
    index = VectorIndex(12, executor=blocks)
    index.add(np.arange(10_000) * 2, data)
    index.remove(range(0, 400, 2))
    id_bytes, vector_bytes = index.to_buffers()
    assert len(id_bytes) == 8 * len(index) and len(vector_bytes) == 4 * 12 * len(index)

    loaded = from_buffers(12, memoryview(id_bytes), vector_bytes, executor=blocks)
    cuts = [0, 1, 777, 5000, len(index)]
    segments = [
        (id_bytes[8 * a : 8 * b], vector_bytes[48 * a : 48 * b])
        for a, b in zip(cuts, cuts[1:], strict=False)
    ]
    segmented = from_segments(12, iter(segments), total_rows=len(index), executor=blocks)
    grown = from_segments(12, segments)  # no size hint: grows as it goes
    queries = rng.standard_normal((6, 12)).astype(np.float32)
    for other in (loaded, segmented, grown):
        assert len(other) == len(index)
        for q in queries:
            a, b = index.search(q, 10), other.search(q, 10)
            assert (a[0] == b[0]).all() and (a[1] == b[1]).all()
        assert other.to_buffers() == (id_bytes, vector_bytes)

    raw = from_buffers(12, id_bytes, (data[200:] * 3).tobytes(), normalized=False)
    assert abs(np.linalg.norm(raw.get(400)) - 1) < 1e-6  # type: ignore[arg-type]


def test_bad_buffers_are_refused() -> None:
    ids = np.array([1, 1], dtype="<i8").tobytes()
    vectors = np.ones((2, 3), dtype="<f4").tobytes()
    with pytest.raises(ValidationFailed) as dup:
        from_buffers(3, ids, vectors)
    assert dup.value.code == "duplicate_id"
    with pytest.raises(ValidationFailed) as short:
        from_buffers(3, ids, vectors[:-4])
    assert short.value.code == "dimension_mismatch"


@pytest.mark.parametrize(
    ("ids", "rows", "code"),
    [
        ([1], [[0.0, 0.0, 0.0]], "zero_vector"),
        ([1], [[1.0, float("nan"), 0.0]], "non_finite_vector"),
        ([1], [[1.0, float("inf"), 0.0]], "non_finite_vector"),
        ([1], [[1.0, 2.0]], "dimension_mismatch"),
        ([1, 2], [[1.0, 2.0, 3.0]], "dimension_mismatch"),
        ([5, 5], [[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]], "duplicate_id"),
        ([7], [[1.0, 2.0, 3.0]], "duplicate_id"),  # already in the index
    ],
)
def test_refusals(ids: list[int], rows: list[list[float]], code: str) -> None:
    index = VectorIndex(3)
    index.add([7], [[1.0, 0.0, 0.0]])
    with pytest.raises(ValidationFailed) as caught:
        index.add(ids, rows)
    assert caught.value.code == code
    assert len(index) == 1  # a refused batch writes nothing


def test_query_refusals_and_boundaries() -> None:
    empty = VectorIndex(3)
    ids, scores = empty.search([1.0, 0.0, 0.0], 5)
    assert ids.shape == scores.shape == (0,)
    assert empty.search_batch(np.ones((2, 3)), 5)[0].shape == (2, 0)

    index = VectorIndex(3)
    index.add([10, 20, 30], [[1, 0, 0], [0, 1, 0], [1, 1, 0]])
    for k in (0, -1):
        with pytest.raises(ValidationFailed) as bad_k:
            index.search([1, 0, 0], k)
        assert bad_k.value.code == "invalid_top_k"
    with pytest.raises(ValidationFailed) as wrong_dim:
        index.search([1, 0], 1)
    assert wrong_dim.value.code == "dimension_mismatch"
    with pytest.raises(ValidationFailed) as nan:
        index.search([np.nan, 0, 0], 1)
    assert nan.value.code == "non_finite_vector"

    assert index.search([0, 0, 0], 3)[0].size == 0  # no similarity for a zero query
    ids, scores = index.search([1, 0, 0], 10)  # k beyond size: every row
    assert ids.tolist() == [10, 30, 20]
    np.testing.assert_allclose(scores, [1.0, np.sqrt(0.5), 0.0], atol=1e-6)
    assert index.search([1, 0, 0], 10, min_score=0.5)[0].tolist() == [10, 30]
    assert index.search([0, 0, 1], 2)[0].tolist() == [10, 20]  # all tie at 0: by id


def test_batch_equals_single_queries(blocks: Executor | None) -> None:
    rng = np.random.default_rng(4)
    data = rng.standard_normal((6000, 16)).astype(np.float32)
    data[100:140] = data[7]  # ties at the cut exercise the exact tie handling
    index = VectorIndex(16, executor=blocks)
    index.add(rng.permutation(6000), data)
    index.remove(range(0, 6000, 11))
    queries = np.vstack([rng.standard_normal((20, 16)), data[7:8], np.zeros((1, 16))])
    ids, scores = index.search_batch(queries, 12)
    assert ids.shape == scores.shape == (22, 12)
    for row, q in enumerate(queries[:-1]):
        single_ids, single_scores = index.search(q, 12)
        np.testing.assert_allclose(scores[row], single_scores, atol=TOL)
        # The matrix product may round differently; ids agree except among near-ties.
        mismatch = ids[row] != single_ids
        assert np.all(np.abs(np.diff(single_scores))[mismatch[:-1]] < TOL) or not mismatch.any()
    assert (ids[-1] == -1).all() and np.isnan(scores[-1]).all()
    assert len(set(ids[20].tolist())) == 12 and np.allclose(scores[20], 1.0)


def vector_of(i: int, dimension: int = 24) -> npt.NDArray[np.float32]:
    """A vector that is a pure function of its id, so readers can check any answer."""
    return np.random.default_rng(i).standard_normal(dimension).astype(np.float32)


@pytest.mark.slow
def test_readers_see_consistent_rows_while_a_writer_churns(blocks: Executor | None) -> None:
    index = VectorIndex(24, executor=blocks)
    index.add(range(3000), np.array([vector_of(i) for i in range(3000)]))
    stop = threading.Event()
    failures: list[str] = []
    searches = [0]

    def write() -> None:
        rng = np.random.default_rng(5)
        next_id = 3000
        while not stop.is_set():
            batch = list(range(next_id, next_id + 200))
            index.add(batch, np.array([vector_of(i) for i in batch]))  # grows the buffer
            next_id += 200
            live = index.ids()
            index.remove(rng.choice(live, 200, replace=False))  # triggers compactions

    def read(seed: int) -> None:
        rng = np.random.default_rng(seed)
        while not stop.is_set():
            q = rng.standard_normal(24).astype(np.float32)
            ids, scores = index.search(q, 20)
            expected = np.array([unit(vector_of(i)) @ unit(q) for i in ids.tolist()])
            if len(ids) != 20 or not np.allclose(scores, expected, atol=TOL):
                failures.append(f"search returned {ids} with scores {scores}")
            batch_ids, batch_scores = index.search_batch(q[None, :], 5)
            expected = np.array([unit(vector_of(i)) @ unit(q) for i in batch_ids[0].tolist()])
            if not np.allclose(batch_scores[0], expected, atol=TOL):
                failures.append(f"search_batch returned {batch_ids}")
            probe = int(rng.integers(0, 6000))
            row = index.get(probe)
            if row is not None and not np.allclose(row, unit(vector_of(probe)), atol=1e-6):
                failures.append(f"get({probe}) returned another vector")
            searches[0] += 1

    threads = [threading.Thread(target=write)]
    threads += [threading.Thread(target=read, args=(seed,)) for seed in (10, 11)]
    for thread in threads:
        thread.start()
    time.sleep(1.5)
    stop.set()
    for thread in threads:
        thread.join()
    assert not failures, failures[:3]
    assert searches[0] > 20


def test_adopt_takes_the_arrays_without_copying_and_searches_them() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((50, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.arange(100, 150, dtype=np.int64)
    index = adopt(ids, vectors)
    assert len(index) == 50 and index.dimension == 8
    found, scores = index.search(vectors[7], 1)
    assert found.tolist() == [107] and scores[0] == pytest.approx(1.0, abs=1e-6)
    index.add([999], np.ones((1, 8), dtype=np.float32))  # grows past the adopted arrays
    assert index.contains(999) and len(index) == 51
    with pytest.raises(ValidationFailed) as duplicate:
        adopt(np.zeros(2, dtype=np.int64), vectors[:2])
    assert duplicate.value.code == "duplicate_id"
    with pytest.raises(ValidationFailed):
        adopt(ids[:3], vectors[:2])


def test_store_load_vectors_reads_every_segment_into_one_matrix(tmp_path: Path) -> None:
    from agentcore.storage.sqlite import SQLiteStore
    from agentcore.storage.sqlite import connection as stored

    store = SQLiteStore.open(tmp_path / "v.db")
    rng = np.random.default_rng(5)
    parts = [rng.standard_normal((n, 16)).astype(np.float32) for n in (7, 1, 20)]
    original = stored.BLOB_CHUNK
    stored.BLOB_CHUNK = 100  # several reads per blob
    try:
        start = 0
        for part in parts:
            ids = np.arange(start, start + len(part), dtype=np.int64)
            store.add_vectors("org", "test", None, "e", 16, ids, part)
            start += len(part)
        store.add_vectors("org", "live", None, "e", 16, np.arange(3), parts[0][:3])
        ids, vectors = store.load_vectors("org", "test", 16)
    finally:
        stored.BLOB_CHUNK = original
        store.close()
    assert ids.tolist() == list(range(28))
    assert vectors.flags.c_contiguous and vectors.dtype == np.float32
    np.testing.assert_array_equal(vectors, np.vstack(parts))


def test_maintenance_that_never_settles_is_capped_and_the_executor_moves_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps: list[int] = []
    rows = np.random.default_rng(3).standard_normal((16, 4))
    with ThreadPoolExecutor(1) as pool:  # one thread: the capped index must let it go
        spinning = VectorIndex(4, executor=pool)
        monkeypatch.setattr(spinning, "maintain", lambda: steps.append(1) or True)
        due = VectorIndex(4, executor=pool)
        for index in (spinning, due):
            index.add(np.arange(16), rows)
            index.remove(np.arange(8))  # half the tail dead: sealing it is due, and submitted
        deadline = time.monotonic() + 30
        while due.maintenance_due() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not due.maintenance_due()  # the pool's thread got past the spinning index
    assert len(steps) == MAX_STEPS
    assert len(due) == 8 and due.tail_rows == 0


def test_an_index_without_an_executor_starts_no_thread_and_waits_for_maintain() -> None:
    before = set(threading.enumerate())
    index = VectorIndex(8)
    index.add(np.arange(1000), np.random.default_rng(4).standard_normal((1000, 8)))
    index.remove(np.arange(500))
    assert index.maintenance_due()
    time.sleep(0.05)
    assert index.maintenance_due() and index.tail_rows == 1000  # nobody ran it
    assert set(threading.enumerate()) == before
    assert index.maintain() and not index.maintenance_due() and len(index) == 500


def test_large_scans_share_their_blocks_with_the_executor_and_agree_without_it() -> None:
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((60_000, 32)).astype(np.float32)  # past PARALLEL_MIN_ELEMENTS
    queries = rng.standard_normal((5, 32)).astype(np.float32)
    alone = adopt(np.arange(60_000), rows / np.linalg.norm(rows, axis=1)[:, None])
    used: set[str] = set()
    with ThreadPoolExecutor(3, thread_name_prefix="helper") as pool:
        original = pool.submit

        def submit(fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
            def run():  # type: ignore[no-untyped-def]
                used.add(threading.current_thread().name)
                return fn(*args, **kwargs)

            return original(run)

        pool.submit = submit  # type: ignore[method-assign]
        helped = adopt(
            np.arange(60_000), rows / np.linalg.norm(rows, axis=1)[:, None], executor=pool
        )
        for q in queries:
            ids, scores = helped.search(q, 10)
            expected = alone.search(q, 10)
            assert ids.tolist() == expected[0].tolist()
            np.testing.assert_allclose(scores, expected[1], rtol=1e-6)
        batch = helped.search_batch(queries, 10)
        np.testing.assert_array_equal(batch[0], alone.search_batch(queries, 10)[0])
    assert used and all(name.startswith("helper") for name in used)

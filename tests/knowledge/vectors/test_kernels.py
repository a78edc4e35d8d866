"""Scoring kernels and codecs: round trips, recall after re-scoring, ties, dead rows, threads."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from agentcore.knowledge.vectors import _kernels as kernels
from agentcore.knowledge.vectors import unit_rows
from agentcore.plugins.hashing_embedder import HashingEmbedder

Matrix = npt.NDArray[np.float32]
NO_DEAD = np.empty(0, dtype=np.int64)
APPROXIMATE = ["float16", "int8"]
PINNED = Path(__file__).resolve().parents[2] / "data" / "hashing_v1_pinned.json"
SQUAD = Path(__file__).resolve().parents[4] / "shared" / "eval" / "squad-sample.json"


@pytest.fixture(params=["single-block", "many-blocks"])
def blocks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run a test on the plain path and on the blocked, multi-threaded path."""
    if request.param == "many-blocks":
        monkeypatch.setattr(kernels, "PARALLEL_MIN_ELEMENTS", 1)
        monkeypatch.setattr(kernels, "_BLOCK_BYTES", 1)  # 2048-row blocks
        monkeypatch.setattr(kernels, "_BATCH_BLOCK_ELEMENTS", 1)  # 1024-row blocks
    yield request.param


# The codecs the helpers below search with, by name: the package's, unless a fixture
# puts in others (a codec carries how its codes are scored)
codecs: dict[str, kernels.Codec] = dict(kernels.CODECS)


@pytest.fixture(params=["numpy", "numkong"])
def widen(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Score int8/float16 codes by widening them in numpy, or with numkong's kernels."""
    if request.param == "numkong":
        pytest.importorskip("numkong")
    use = request.param == "numkong"
    monkeypatch.setitem(codecs, "int8", kernels.Int8Codec(numkong=use))
    monkeypatch.setitem(codecs, "float16", kernels.Float16Codec(numkong=use))
    return str(request.param)


def clustered(n: int, d: int, seed: int, centres: int = 50) -> tuple[Matrix, Matrix]:
    """Unit rows around a few centres (as real embeddings are), and 40 queries near them."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres, d), dtype=np.float32)
    rows = c[rng.integers(0, centres, n)] + 0.7 * rng.standard_normal((n, d), dtype=np.float32)
    queries = c[rng.integers(0, centres, 40)] + 0.7 * rng.standard_normal((40, d), dtype=np.float32)
    return unit_rows(rows), unit_rows(queries)


def exact_top(rows: Matrix, queries: Matrix, k: int) -> list[set[int]]:
    """Each query's true top-``k`` ids, plus every id tied with the k-th within float32
    rounding: rows whose float64 scores differ by 1e-9 are equal in float32, where the
    index orders them by id, so either may rightly be returned."""
    scores = queries.astype(np.float64) @ rows.astype(np.float64).T
    tops = []
    for s in scores:
        kth = np.sort(s)[-k]
        tops.append(set(np.flatnonzero(s >= kth - 1e-6).tolist()))
    return tops


def search(name: str, rows: Matrix, q: Matrix, k: int, dead: npt.NDArray[np.int64] = NO_DEAD):
    codec = codecs[name]
    codes, params = codec.encode(rows)
    found, scores = kernels.search_part(codec, codes, params, rows, dead, q, k)
    return kernels.order(found, scores, k)


def batch(name: str, rows: Matrix, queries: Matrix, k: int):
    codec = codecs[name]
    codes, params = codec.encode(rows)
    triples = kernels.search_part_batch(codec, codes, params, rows, NO_DEAD, queries, k)
    return kernels.order_batch(queries.shape[0], k, *triples)


def recall(found: npt.NDArray[np.int64], truth: list[set[int]], k: int) -> float:
    return float(np.mean([len(set(f.tolist()) & t) / k for f, t in zip(found, truth, strict=True)]))


# -- codecs -----------------------------------------------------------------------


def test_codecs_are_registered_by_name_and_dtype() -> None:
    assert set(kernels.CODECS) == {"float32", "float16", "int8"}
    for name, codec in kernels.CODECS.items():
        assert codec.name == name
        codes, _ = codec.encode(np.eye(4, dtype=np.float32))
        assert codes.dtype == codec.dtype
        assert kernels.codec_of(codes) is codec
    assert kernels.CODECS["float32"].exact and kernels.CODECS["float32"].candidates(7) == 7
    for name in APPROXIMATE:
        assert not kernels.CODECS[name].exact and kernels.CODECS[name].candidates(10) > 10
    with pytest.raises(ValueError, match="no codec stores rows as float64"):
        kernels.codec_of(np.zeros((2, 2)))


def test_memory_per_row_halves_and_quarters() -> None:
    rows, _ = clustered(1000, 64, seed=1)
    sizes = {name: codec.encode(rows)[0].nbytes for name, codec in kernels.CODECS.items()}
    assert sizes == {"float32": 1000 * 64 * 4, "float16": 1000 * 64 * 2, "int8": 1000 * 64}


@pytest.mark.parametrize("name", ["float32", *APPROXIMATE])
def test_round_trip_error_is_bounded(name: str) -> None:
    rows, queries = clustered(2000, 48, seed=2)
    codec = kernels.CODECS[name]
    codes, params = codec.encode(rows)
    decoded = codec.decode(codes, np.empty(rows.shape, dtype=np.float32))
    scaled, offsets = codec.fold(queries, params)
    approximate = scaled @ decoded.T + offsets[:, None]
    error = np.abs(approximate - queries @ rows.T).max()
    bound = {"float32": 1e-6, "float16": 2e-3, "int8": 3e-2}[name]
    assert error <= bound
    if name == "int8":
        lo, step = params[:48], params[48:]
        assert (
            np.abs(lo + step * (codes.astype(np.float32) + 128) - rows).max()
            <= step.max() / 2 + 1e-6
        )


def test_int8_encodes_appended_rows_with_the_given_parameters() -> None:
    codec = kernels.CODECS["int8"]
    rows, _ = clustered(500, 16, seed=3)
    first, params = codec.encode(rows[:400])
    more, same = codec.encode(rows[400:], params)
    assert same is params
    again, _ = codec.encode(rows[400:], params)
    np.testing.assert_array_equal(more, again)
    # encoding all rows at once with the first part's grid gives the same codes
    whole, _ = codec.encode(rows, params)
    np.testing.assert_array_equal(whole, np.concatenate([first, more]))
    # a row outside the grid is clipped to its edge, not wrapped around
    outside = np.full((1, 16), 1.0, dtype=np.float32)
    codes, _ = codec.encode(outside, params)
    assert (codes == 127).all()
    with pytest.raises(ValueError, match="int8 parameters must have shape"):
        codec.encode(rows, params[:10])


def test_int8_grid_of_a_tiny_part_leaves_room_for_later_rows(widen: str) -> None:
    codec = codecs["int8"]
    one = unit_rows(np.arange(1, 17, dtype=np.float32).reshape(1, 16))
    codes, params = codec.encode(one)
    assert (params[16:] > 0).all()  # no zero step even with one row
    rows, queries = clustered(300, 16, seed=4)
    more, _ = codec.encode(rows, params)
    found, _ = kernels.order(
        *kernels.search_part(codec, more, params, rows, NO_DEAD, queries[0], 5), 5
    )
    assert set(found.tolist()) == exact_top(rows, queries[:1], 5)[0]


# -- exactness and recall -----------------------------------------------------------


def test_float32_scan_is_exact_on_both_paths(blocks: str) -> None:
    rows, queries = clustered(9000, 32, seed=5)
    truth = exact_top(rows, queries, 10)
    for q, t in zip(queries, truth, strict=True):
        found, scores = search("float32", rows, q, 10)
        assert set(found.tolist()) == t
        np.testing.assert_allclose(scores, np.sort(rows[found] @ q)[::-1], atol=1e-6)


@pytest.mark.parametrize("name", APPROXIMATE)
def test_approximate_codecs_recall_after_rescoring(name: str, blocks: str, widen: str) -> None:
    rows, queries = clustered(20_000, 96, seed=6)
    truth = exact_top(rows, queries, 10)
    singles = np.array([search(name, rows, q, 10)[0] for q in queries])
    ids, scores = batch(name, rows, queries, 10)
    floor = 1.0 if name == "float16" else 0.99
    assert recall(singles, truth, 10) >= floor
    assert recall(ids, truth, 10) >= floor
    # scores are the exact float32 ones of the rows returned, best first
    for i, q in enumerate(queries):
        np.testing.assert_allclose(scores[i], rows[ids[i]] @ q, atol=1e-6)
        assert (np.diff(scores[i]) <= 0).all()


def _hashing_texts() -> list[str]:
    texts: list[str] = json.loads(PINNED.read_text())["texts"]
    if SQUAD.exists():  # the shared evaluation sample, where the checkout has it
        data = json.loads(SQUAD.read_text())["data"]
        texts += [p["context"] for a in data for p in a["paragraphs"]]
        texts += [q["question"] for a in data for p in a["paragraphs"] for q in p["qas"]]
    return [t for t in texts if t.strip()]


@pytest.mark.parametrize("name", APPROXIMATE)
def test_recall_on_hashing_embedder_vectors(name: str, widen: str) -> None:
    texts = _hashing_texts()
    embedder = HashingEmbedder()
    rows = unit_rows(embedder.embed(texts, kind="passage"))
    keep = np.abs(rows).sum(axis=1) > 0
    rows = np.ascontiguousarray(rows[keep])
    queries = rows[:: max(1, rows.shape[0] // 60)]
    truth = exact_top(rows, queries, 10)
    ids, _ = batch(name, rows, queries, 10)
    singles = np.array([search(name, rows, q, 10)[0] for q in queries])
    floor = 1.0 if name == "float16" else 0.99
    assert recall(ids, truth, 10) >= floor and recall(singles, truth, 10) >= floor


# -- ties, dead rows, zero queries --------------------------------------------------


@pytest.mark.parametrize("name", ["float32", *APPROXIMATE])
def test_ties_are_kept_and_ordered_by_id(name: str, blocks: str, widen: str) -> None:
    rows, queries = clustered(6000, 24, seed=7)
    rows[3000:3040] = rows[17]  # duplicates straddling block borders
    ids = np.arange(6000, dtype=np.int64)
    found, scores = search(name, rows, rows[17], 10)
    assert found.tolist() == sorted([17, *range(3000, 3040)])[:10]
    np.testing.assert_allclose(scores, 1.0, atol=1e-6)
    batch_ids, _ = batch(name, rows, rows[17:18], 10)
    assert batch_ids[0].tolist() == found.tolist()
    assert ids[found].tolist() == found.tolist()


@pytest.mark.parametrize("name", ["float32", *APPROXIMATE])
def test_dead_rows_are_never_returned(name: str, blocks: str, widen: str) -> None:
    rows, queries = clustered(5000, 16, seed=8)
    best = np.argsort(-(rows @ queries[0]))[:30]
    dead = np.sort(best[:20]).astype(np.int64)
    found, _ = search(name, rows, queries[0], 10, dead)
    assert not set(found.tolist()) & set(dead.tolist())
    assert set(found.tolist()) == set(best[20:30].tolist())
    # everything dead but three rows: only those come back
    alive = np.array([5, 77, 4999])
    all_dead = np.setdiff1d(np.arange(5000), alive).astype(np.int64)
    found, _ = search(name, rows, queries[1], 10, all_dead)
    assert sorted(found.tolist()) == alive.tolist()


@pytest.mark.parametrize("name", ["float32", *APPROXIMATE])
def test_zero_query_rows_of_a_batch_get_nothing(name: str) -> None:
    rows, queries = clustered(3000, 16, seed=9)
    queries[1] = 0
    ids, scores = batch(name, rows, queries[:3], 5)
    assert (ids[1] == -1).all() and np.isnan(scores[1]).all()
    assert (ids[[0, 2]] >= 0).all()


# -- threads ------------------------------------------------------------------------


def test_concurrent_searches_of_different_parts_equal_serial_ones(blocks: str) -> None:
    """Many threads searching four parts of three codecs at once give the serial answers."""
    parts = []
    for seed, name in enumerate(["float32", "float16", "int8", "float32"]):
        rows, queries = clustered(8000, 32, seed=20 + seed)
        codec = kernels.CODECS[name]
        codes, params = codec.encode(rows)
        parts.append((codec, codes, params, rows, queries))

    def answer(p: int, i: int) -> tuple[list[int], list[list[int]]]:
        codec, codes, params, rows, queries = parts[p]
        single = kernels.order(
            *kernels.search_part(codec, codes, params, rows, NO_DEAD, queries[i], 10), 10
        )[0]
        triples = kernels.search_part_batch(codec, codes, params, rows, NO_DEAD, queries, 10)
        batched = kernels.order_batch(queries.shape[0], 10, *triples)[0]
        return single.tolist(), batched.tolist()

    serial = {(p, i): answer(p, i) for p in range(4) for i in range(3)}
    results: dict[tuple[int, int], tuple[list[int], list[list[int]]]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(24)

    def worker(t: int) -> None:
        p, i = t % 4, t % 3
        try:
            start.wait()
            for _ in range(3):
                results[(p, i, t)] = answer(p, i)  # type: ignore[index]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(results) == 24
    for (p, i, _), got in results.items():  # type: ignore[misc]
        assert got == serial[(p, i)]


def test_single_threaded_blas_nests_and_restores() -> None:
    rows, queries = clustered(3000, 16, seed=10)
    expected = queries @ rows.T
    with kernels.single_threaded_blas():
        with kernels.single_threaded_blas():
            np.testing.assert_allclose(queries @ rows.T, expected, atol=1e-6)
        np.testing.assert_allclose(queries @ rows.T, expected, atol=1e-6)
    np.testing.assert_allclose(queries @ rows.T, expected, atol=1e-6)


def test_the_scan_path_names_blas_numkong_and_the_cpu(caplog: pytest.LogCaptureFixture) -> None:
    path = kernels.scan_path()
    assert set(path) == {"blas", "numkong", "cpu"}
    assert path["blas"].split()[0] in ("openblas", "mkl", "blis", "unknown")
    if kernels._numkong() is None:
        assert path["numkong"] == "none"
    else:
        assert path["numkong"] and path["numkong"] != "none"
    if Path("/proc/cpuinfo").is_file():
        assert path["cpu"] != "unknown"
        assert set(path["cpu"].split()) <= set(kernels.CPU_FLAGS) | {"none"}
    from agentcore import AgentCore

    with caplog.at_level("INFO", logger="agentcore"), AgentCore.open(start_workers=False) as core:
        core.start()
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("vector scans")]
    assert said == [
        f"vector scans: BLAS {path['blas']}; numkong {path['numkong']}; CPU {path['cpu']}"
    ]

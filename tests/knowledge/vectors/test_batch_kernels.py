"""Batch kernels (``scan_batch`` / ``search_part_batch``) against a plain reference.

Every product path a batch can take is covered: float32 rows read in place or copied
through the per-thread buffer, or (a few queries) scored by numkong's packed products,
float16 widened by numkong or numpy, int8 scored by
numkong's packed integer products or widened by numpy; each with one block or many
(rows not a multiple of the block, nor of the widening step).
Integer-valued rows make float32 and float16 scores exact, so those paths must return
exactly the reference's ids (ties ordered by id); int8 is approximate before its
re-scoring, so it must return rows whose exact scores are the reference's top scores.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pytest

from agentcore.knowledge.vectors import _kernels as kernels

Matrix = npt.NDArray[np.float32]
IdArray = npt.NDArray[np.int64]
NO_DEAD = np.empty(0, dtype=np.int64)
ALL = ["float32", "float16", "int8"]


@pytest.fixture(params=["single-block", "many-blocks"])
def blocks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """One block for the whole part, or 1024-row blocks shared with the pool, widened
    or copied 100 rows at a time (neither divides the other nor the part)."""
    if request.param == "many-blocks":
        monkeypatch.setattr(kernels, "_BATCH_BLOCK_ELEMENTS", 1)
        monkeypatch.setattr(kernels, "_BATCH_WIDE_BYTES", 100 * 8 * 4)  # d = 8 below
    yield request.param


# The codecs the helpers below search with, by name: the package's, unless a fixture
# puts in others (a codec carries how its codes are scored)
codecs: dict[str, kernels.Codec] = dict(kernels.CODECS)


@pytest.fixture(params=["numpy", "numkong", "numkong-widen", "direct", "few-packed"])
def widen(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which products a batch takes.

    ``numpy``: float16 and int8 widened by numpy's cast; ``numkong``: float16 widened by
    numkong's cast and int8 by numkong's packed products (the defaults); ``numkong-widen``:
    int8 widened by numpy although numkong is there (``Int8Codec(batch="widen")``);
    ``direct``: float32 rows read in place instead of copied
    (``Float32Codec(batch_rows="direct")``); ``few-packed``: float32 batches of at most
    ``FEW_QUERIES`` scored by numkong's packed products (the default), where the others
    take BLAS (``Float32Codec(few="blas")``) whatever the batch's size.
    """
    if request.param.startswith(("numkong", "few")):
        pytest.importorskip("numkong")
    use = request.param.startswith(("numkong", "few"))
    batch = "widen" if request.param == "numkong-widen" else "packed"
    rows = "direct" if request.param == "direct" else "copy"
    few = "packed" if request.param == "few-packed" else "blas"
    monkeypatch.setitem(codecs, "int8", kernels.Int8Codec(numkong=use, batch=batch))
    monkeypatch.setitem(codecs, "float16", kernels.Float16Codec(numkong=use))
    monkeypatch.setitem(codecs, "float32", kernels.Float32Codec(batch_rows=rows, few=few))
    return str(request.param)


def integer_rows(n: int, d: int, seed: int, levels: int = 1) -> Matrix:
    """Rows of small integers over 4: every dot product is exact in float32 and
    float16, so many scores tie exactly (the adversarial case for the id tie-break)."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-levels, levels + 1, (n, d)) / 4).astype(np.float32)


def reference(
    rows: Matrix, queries: Matrix, k: int, dead: IdArray = NO_DEAD
) -> tuple[IdArray, Matrix]:
    """Per query: ids by score descending then id ascending (float64, dead left out)."""
    alive = np.setdiff1d(np.arange(rows.shape[0]), dead)
    kk = min(k, alive.shape[0])
    ids = np.full((queries.shape[0], kk), -1, dtype=np.int64)
    scores = np.full((queries.shape[0], kk), np.nan, dtype=np.float32)
    for i, q in enumerate(queries):
        if not q.any():
            continue
        s = rows[alive].astype(np.float64) @ q.astype(np.float64)
        top = np.lexsort((alive, -s))[:kk]
        ids[i], scores[i] = alive[top], np.clip(s[top], -1, 1)
    return ids, scores


def batch(
    name: str, rows: Matrix, queries: Matrix, k: int, dead: IdArray = NO_DEAD
) -> tuple[IdArray, Matrix]:
    codec = codecs[name]
    codes, params = codec.encode(rows)
    triples = kernels.search_part_batch(codec, codes, params, rows, dead, queries, k)
    return kernels.order_batch(queries.shape[0], min(k, rows.shape[0] - dead.size), *triples)


def assert_matches(name: str, got: tuple[IdArray, Matrix], want: tuple[IdArray, Matrix]) -> None:
    got_ids, got_scores = got
    want_ids, want_scores = want
    assert got_ids.shape == want_ids.shape
    # the scores returned are always the exact float32 ones
    np.testing.assert_array_equal(got_scores, want_scores)
    if name != "int8":
        np.testing.assert_array_equal(got_ids, want_ids)
        return
    # int8: rows tied exactly may be chosen differently before the re-scoring, but
    # they carry the reference's scores and are ordered by score, then id
    for ids, scores in zip(got_ids, got_scores, strict=True):
        if (ids < 0).all():
            continue
        assert len(set(ids.tolist())) == ids.shape[0]
        assert (np.lexsort((ids, -scores)) == np.arange(ids.shape[0])).all()


@pytest.mark.parametrize("name", ALL)
def test_batch_equals_the_reference_on_tied_integer_rows(
    name: str, blocks: str, widen: str
) -> None:
    rows = integer_rows(3077, 8, seed=1)  # 3 full 1024-row blocks and a 5-row tail
    queries = integer_rows(16, 8, seed=2)
    queries[3] = 0  # a zero query gets nothing
    for k in (1, 10, 40):
        assert_matches(name, batch(name, rows, queries, k), reference(rows, queries, k))


@pytest.mark.parametrize("name", ALL)
def test_batch_on_gaussian_rows_returns_the_exact_top_k(name: str, blocks: str, widen: str) -> None:
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((5000, 48), dtype=np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    queries = rows[rng.integers(0, 5000, 24)] + 0.3 * rng.standard_normal((24, 48)).astype(
        np.float32
    )
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    ids, scores = batch(name, rows, queries, 10)
    want_ids, _ = reference(rows, queries, 10)
    # distinct scores: every codec finds the same rows, in the same order
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, np.einsum("ijk,ik->ij", rows[ids], queries), atol=1e-6)


@pytest.mark.parametrize("name", ALL)
def test_dead_rows_are_left_out_of_batches(name: str, blocks: str, widen: str) -> None:
    rows = integer_rows(3077, 8, seed=4)
    queries = integer_rows(8, 8, seed=5)
    best = reference(rows, queries, 30)[0].reshape(-1)
    dead = np.unique(best[: best.shape[0] // 2])
    assert_matches(name, batch(name, rows, queries, 10, dead), reference(rows, queries, 10, dead))
    # whole blocks dead (their bound starts at the dead marker) but three rows
    alive = np.array([5, 1500, 3076])
    dead = np.setdiff1d(np.arange(3077), alive).astype(np.int64)
    ids, _ = batch(name, rows, queries, 10, dead)
    for i in range(8):
        assert sorted(ids[i].tolist()) == alive.tolist()


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("n", [1, 2, 9])
def test_k_larger_than_the_part(name: str, n: int, widen: str) -> None:
    rows = integer_rows(n, 8, seed=6, levels=2)
    rows[0] = 0  # a zero row scores 0 and is still a row
    queries = integer_rows(5, 8, seed=7)
    got = batch(name, rows, queries, 25)
    assert got[0].shape == (5, n)
    assert_matches(name, got, reference(rows, queries, 25))


@pytest.mark.parametrize("name", ALL)
def test_duplicate_rows_across_blocks_tie_and_are_ordered_by_id(
    name: str, blocks: str, widen: str
) -> None:
    rows = integer_rows(4000, 8, seed=8)
    rows[17] = rows[1000:1060] = 0.25  # duplicates straddling the first block border
    queries = np.stack([rows[17], rows[3], rows[17]])
    ids, scores = batch(name, rows, queries, 10)
    want, _ = reference(rows, queries, 10)
    # identical rows have identical codes, so every codec ties them and orders by id
    np.testing.assert_array_equal(ids[[0, 2]], want[[0, 2]])
    assert {17, 1000, 1001} <= set(ids[0].tolist())
    np.testing.assert_array_equal(scores[0], 0.5)


@pytest.mark.parametrize("name", ALL)
def test_a_batch_of_one_query(name: str, blocks: str, widen: str) -> None:
    rows = integer_rows(3077, 8, seed=17)
    queries = integer_rows(1, 8, seed=18)
    for k in (1, 10):
        assert_matches(name, batch(name, rows, queries, k), reference(rows, queries, k))


@pytest.mark.parametrize("name", ALL)
def test_rising_scores_raise_every_bound_again(name: str, blocks: str, widen: str) -> None:
    """Each block beats the last (the worst order for a running bound): every block's
    candidates survive, so the bound is raised over and over, and still exact."""
    n = 9000
    rows = np.zeros((n, 8), dtype=np.float32)
    # 18 levels of 500 identical rows each: identical rows have identical codes, so
    # every codec ties them and the answer is the first ids of the best level
    rows[:, 0] = 0.05 + 0.9 * (np.arange(n) // 500) / 17
    rows[:, 1] = np.sqrt(1 - rows[:, 0] ** 2)
    queries = np.zeros((2, 8), dtype=np.float32)
    queries[0, 0] = 1.0  # scores rise with the row number
    queries[1, 0] = -1.0  # scores fall: the first block holds the answer
    for k in (1, 12, 700):  # 700: more than one level
        ids, scores = batch(name, rows, queries, k)
        want_ids, _ = reference(rows, queries, k)
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_array_equal(scores, np.clip(rows[ids, 0] * queries[:, :1], -1, 1))
    assert ids[0, :3].tolist() == [8500, 8501, 8502]
    assert ids[1, :3].tolist() == [0, 1, 2]


def test_an_empty_part_and_an_empty_batch_give_no_candidates() -> None:
    codec = kernels.CODECS["float32"]
    empty = np.empty((0, 8), dtype=np.float32)
    queries = integer_rows(3, 8, seed=9)
    query, rows, scores = kernels.scan_batch(empty, codec.encode(empty)[1], NO_DEAD, queries, 5)
    assert query.size == rows.size == scores.size == 0
    some = integer_rows(10, 8, seed=10)
    query, rows, scores = kernels.scan_batch(some, np.empty(0, np.float32), NO_DEAD, empty, 5)
    assert query.size == rows.size == scores.size == 0


@pytest.mark.parametrize("name", ALL)
def test_bad_batch_input_is_refused(name: str, widen: str) -> None:
    codec = codecs[name]
    rows = integer_rows(100, 8, seed=11)
    codes, params = codec.encode(rows)
    with pytest.raises(ValueError, match="queries must have shape"):
        kernels.scan_batch(codes, params, NO_DEAD, integer_rows(3, 7, seed=12), 5, codec)
    with pytest.raises(ValueError, match="queries must have shape"):
        kernels.scan_batch(codes, params, NO_DEAD, rows[0], 5, codec)
    with pytest.raises(ValueError, match="k must be at least 1"):
        kernels.scan_batch(codes, params, NO_DEAD, rows[:2], 0, codec)


def test_numkong_paths_are_taken_when_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The int8 batch scores with numkong's packed products, and float16 widens with
    numkong's cast; with numkong disabled both fall back to numpy (same answers)."""
    pytest.importorskip("numkong")
    rows = integer_rows(3000, 8, seed=13)
    queries = integer_rows(6, 8, seed=14)
    calls: list[str] = []
    packed = kernels._BatchScorer.packed_product

    def counting(self: kernels._BatchScorer, block: kernels.Codes, out: object) -> None:
        calls.append("int8")
        packed(self, block, out)

    monkeypatch.setattr(kernels._BatchScorer, "packed_product", counting)
    with_numkong = {name: batch(name, rows, queries, 10) for name in ("int8", "float16")}
    assert calls == ["int8"] * len(calls) and len(calls) >= 1
    codec = kernels.CODECS["float16"]
    offsets = np.zeros(6, np.float32)
    numkong_cast = kernels._BatchScorer(codec, queries, offsets, rows=3000).widen
    assert numkong_cast is not None and numkong_cast != codec.decode
    calls.clear()
    monkeypatch.setitem(codecs, "int8", kernels.Int8Codec(numkong=False))
    monkeypatch.setitem(codecs, "float16", kernels.Float16Codec(numkong=False))
    assert (
        kernels._BatchScorer(codecs["float16"], queries, offsets, rows=3000).widen
        == codecs["float16"].decode
    )
    for name, got in with_numkong.items():
        assert_matches(name, batch(name, rows, queries, 10), got)
    assert calls == []


def test_the_codec_options_choose_the_products() -> None:
    """``Float32Codec(batch_rows=...)`` copies float32 rows through the buffer or reads
    them in place; ``Int8Codec(batch="widen")`` widens int8 codes by numpy even with
    numkong installed."""
    queries = integer_rows(4, 8, seed=16)
    offsets = np.zeros(4, np.float32)
    codec = kernels.Float32Codec(batch_rows="copy", few="blas")
    copied = kernels._BatchScorer(codec, queries, offsets, rows=100)
    assert copied.widen is kernels._copy_rows and copied.packed is None
    codec = kernels.Float32Codec(batch_rows="direct", few="blas")
    direct = kernels._BatchScorer(codec, queries, offsets, rows=100)
    assert direct.widen is None and direct.packed is None
    int8 = kernels.Int8Codec(numkong=True, batch="widen")
    scorer = kernels._BatchScorer(int8, queries, offsets, rows=100)
    assert scorer.packed is None and scorer.widen == int8.decode
    # the package's codecs take the measured defaults
    assert kernels.CODECS["float32"].batch_rows == "copy"  # type: ignore[attr-defined]
    assert kernels.CODECS["float32"].few == "packed"  # type: ignore[attr-defined]
    assert kernels.CODECS["int8"].batch == "packed" and kernels.CODECS["int8"].numkong  # type: ignore[attr-defined]


def test_few_queries_over_a_small_part_take_numkongs_packed_products() -> None:
    """Up to ``FEW_QUERIES`` queries over a part of at most ``FEW_QUERIES_PART_BYTES``
    are scored by numkong's float32 products (float64 keys, the exact products); one
    query more, or a larger part, goes to BLAS as before."""
    pytest.importorskip("numkong")
    codec = kernels.CODECS["float32"]
    few = kernels.FEW_QUERIES
    rng = np.random.default_rng(17)
    rows = rng.standard_normal((3000, 16)).astype(np.float32)
    queries = rng.standard_normal((few, 16)).astype(np.float32)
    scorer = kernels._BatchScorer(codec, queries, np.zeros(few, np.float32), rows=3000)
    assert scorer.packed is not None and scorer.widen is None
    keys = scorer.score(rows, 0, 3000)
    assert keys.dtype == np.float64 and keys.shape == (3000, few)
    np.testing.assert_allclose(keys, rows.astype(np.float64) @ queries.T.astype(np.float64))
    more = rng.standard_normal((few + 1, 16)).astype(np.float32)
    offsets = np.zeros(few + 1, np.float32)
    assert kernels._BatchScorer(codec, more, offsets, rows=3000).packed is None
    large = kernels.FEW_QUERIES_PART_BYTES // (4 * 16) + 1
    offsets = np.zeros(few, np.float32)
    assert kernels._BatchScorer(codec, queries, offsets, rows=large).packed is None
    blas = kernels.Float32Codec(few="blas")
    assert kernels._BatchScorer(blas, queries, offsets, rows=3000).packed is None


def test_packed_and_blas_batches_answer_alike() -> None:
    """The same unit rows and queries (a zero query, dead rows, one block or many):
    the packed products and BLAS find the same ids, with scores equal to float32's
    rounding."""
    pytest.importorskip("numkong")
    rng = np.random.default_rng(18)
    rows = rng.standard_normal((5000, 64)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    queries = rng.standard_normal((5, 64)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    queries[2] = 0.0
    dead = np.array([3, 700, 4999], dtype=np.int64)
    params = np.empty(0, np.float32)
    answers = []
    for few in ("packed", "blas"):
        codec = kernels.Float32Codec(few=few)  # type: ignore[arg-type]
        query, found, scores = kernels.scan_batch(rows, params, dead, queries, 10, codec)
        answers.append(kernels.order_batch(5, 10, query, found, scores))
    (packed_ids, packed_scores), (blas_ids, blas_scores) = answers
    np.testing.assert_array_equal(packed_ids, blas_ids)
    assert (packed_ids[2] == -1).all()  # a zero query matches nothing
    assert not np.isin(packed_ids, dead).any()
    np.testing.assert_allclose(packed_scores, blas_scores, atol=1e-6)


def test_the_int8_packed_keys_are_the_integer_products() -> None:
    """numkong's int8 products against the queries rounded to int8 are exact integers,
    and ``scores`` maps them back to approximate scores within the rounding."""
    pytest.importorskip("numkong")
    codec = kernels.CODECS["int8"]
    rng = np.random.default_rng(15)
    rows = rng.standard_normal((700, 32), dtype=np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    queries = rows[:5] + 0.1 * rng.standard_normal((5, 32), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    codes, params = codec.encode(rows)
    folded, offsets = codec.fold(queries, params)
    scorer = kernels._BatchScorer(codec, folded, offsets, rows=700)
    assert scorer.unit is not None
    keys = scorer.score(codes, 0, 700).copy()
    rounded = np.rint(folded / scorer.unit[:, None]).astype(np.int64)
    np.testing.assert_array_equal(keys, codes.astype(np.int64) @ rounded.T)
    query = np.repeat(np.arange(5), 700)
    approximate = scorer.scores(query, keys.T.reshape(-1)).reshape(5, 700)
    np.testing.assert_allclose(approximate, queries @ rows.T, atol=3e-2)


# -- BLAS threads -------------------------------------------------------------------


def test_only_numpys_blas_is_recognised_as_ours() -> None:
    assert kernels._inside_numpy("/venv/site-packages/numpy.libs/libscipy_openblas64_.so")
    assert kernels._inside_numpy("/venv/site-packages/numpy/.dylibs/libscipy_openblas.dylib")
    assert not kernels._inside_numpy("/venv/site-packages/faiss_cpu.libs/libopenblaso.so")
    assert not kernels._inside_numpy("/usr/lib/x86_64-linux-gnu/libopenblas.so.0")
    assert not kernels._inside_numpy(None)


_FOREIGN_BLAS = """
import json, numpy as np
import faiss  # loads its own OpenMP OpenBLAS next to numpy's
from threadpoolctl import threadpool_info
from agentcore.knowledge.vectors import _kernels as kernels
def threads():
    return {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
before = threads()
rows = np.random.default_rng(0).standard_normal((5000, 32), dtype=np.float32)
codec = kernels.CODECS["float32"]
kernels.search_part_batch(codec, rows, codec.encode(rows)[1], rows, np.empty(0, np.int64), rows[:64], 10)
print(json.dumps({"before": before, "after": threads()}))
"""


def test_a_batch_search_leaves_another_librarys_blas_threads_alone() -> None:
    """The kernels make numpy's BLAS single-threaded per calling thread only; a BLAS
    another library loaded (FAISS's) keeps its thread count."""
    import json
    import subprocess
    import sys

    pytest.importorskip("faiss")
    done = subprocess.run(
        [sys.executable, "-c", _FOREIGN_BLAS], capture_output=True, text=True, check=True
    )
    found = json.loads(done.stdout)
    foreign = [path for path in found["before"] if not kernels._inside_numpy(path)]
    assert foreign, "faiss loaded no BLAS of its own"
    for path in foreign:
        assert found["after"][path] == found["before"][path]

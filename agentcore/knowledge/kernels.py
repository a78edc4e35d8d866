"""Scoring kernels of the vector index: exact top-k candidates over one block of rows.

These are pure functions over arrays; ``VectorIndex`` owns the layout (which rows,
which ids, which rows are dead) and calls them once per contiguous part of its data.

A kernel returns *candidates*: the positions (rows of the matrix it was given) of the
``k`` best scores plus any tied with the k-th, unordered, and their scores. The caller
maps rows to ids, merges the candidates of several parts and orders them
(``order``: score descending, then id ascending).

Codecs
    A part's rows may be stored in a compact form (``Codec``): ``encode`` turns unit
    float32 rows into ``(codes, params)`` - an ``(n, d)`` array of one numpy dtype and a
    small float32 array of parameters of that part - and the kernels take ``codes`` and
    ``params``. A codec whose scores are not exact (``exact = False``) asks the index
    for more candidates (``candidates(k)``), which it re-scores against the float32
    rows before ordering them.

Threads
    Large single queries are split into row blocks that the calling thread and a small
    shared pool of helper threads claim one by one; each block is scored with
    ``np.vecdot`` (per-row dot products, which release the GIL and never start BLAS
    threads of their own) into a thread-local buffer that stays in cache, reduced to its
    top-k at once, and the few survivors of all blocks are merged; after a thread's
    first block, "reduced" is one comparison against the k-th best score that thread
    has seen. Batches use one matrix product per row block (BLAS threads it) and the
    same per-query bound.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

IdArray = npt.NDArray[np.int64]
ScoreArray = npt.NDArray[np.float32]
Matrix = npt.NDArray[np.float32]
Codes = npt.NDArray[Any]

# Below this many matrix elements (about 100k rows at d=384) one BLAS matrix-vector
# product was as fast or faster than the block scan; above it the scan wins.
PARALLEL_MIN_ELEMENTS = 40_000_000
BLAS_LOCK = threading.Lock()
# Most matrix bytes per block: enough work to amortise the hand-off, scores fit in L2.
_BLOCK_BYTES = 32 << 20
# Fewest blocks a parallel scan is cut into, so small scans still share the work.
_MIN_BLOCKS = 8
# Bound on the (queries x rows) score block of a batch search.
_BATCH_BLOCK_ELEMENTS = 4_000_000


class Codec(Protocol):
    """How a part stores its rows for scoring (``Settings.index_dtype`` names one)."""

    name: str
    dtype: np.dtype[Any]
    exact: bool

    def encode(self, rows: Matrix, params: ScoreArray | None = None) -> tuple[Codes, ScoreArray]:
        """``(codes, params)`` for unit float32 ``rows`` ``(n, d)``.

        Without ``params`` the codec fits new ones to ``rows`` (a new part); with them
        it encodes with those (rows appended to a part that already has parameters).
        """

    def candidates(self, k: int) -> int:
        """How many approximate candidates to re-score exactly for a top-``k``."""


class Float32Codec:
    """Rows kept as they are: exact scores, 4 bytes per dimension."""

    name: str = "float32"
    dtype: np.dtype[Any] = np.dtype("<f4")
    exact: bool = True

    def encode(self, rows: Matrix, params: ScoreArray | None = None) -> tuple[Codes, ScoreArray]:
        """The rows themselves and no parameters."""
        return np.ascontiguousarray(rows, dtype=self.dtype), np.empty(0, dtype=np.float32)

    def candidates(self, k: int) -> int:
        """Exact scores need no extra candidates."""
        return k


CODECS: dict[str, Codec] = {"float32": Float32Codec()}


class _Pool:
    """A lazily started, process-wide pool of helper threads for block scans."""

    _lock = threading.Lock()
    _executor: ThreadPoolExecutor | None = None
    helpers = max(0, min(os.cpu_count() or 1, 8) - 1)

    @classmethod
    def executor(cls) -> ThreadPoolExecutor:
        with cls._lock:
            if cls._executor is None:
                cls._executor = ThreadPoolExecutor(
                    max_workers=max(1, cls.helpers), thread_name_prefix="agentcore-index"
                )
            return cls._executor


def run_blocks(count: int, work: Callable[[int, dict[str, Any]], Any]) -> list[Any]:
    """Run ``work(i, state)`` for ``i`` in ``range(count)`` on this thread plus idle helpers.

    Blocks are claimed one at a time, so a busy pool only means this thread does more
    of them itself; it never waits for a helper that has not started. ``state`` is a
    dict private to one thread for the duration of the call (a running top-k bound).
    """
    results: list[Any] = [None] * count
    if count <= 1 or _Pool.helpers == 0:
        own: dict[str, Any] = {}
        for i in range(count):
            results[i] = work(i, own)
        return results
    lock = threading.Lock()
    done = threading.Event()
    progress = [0, 0]  # next block to claim, blocks finished
    errors: list[BaseException] = []

    def drain() -> None:
        state: dict[str, Any] = {}
        while True:
            with lock:
                i = progress[0]
                if i >= count:
                    return
                progress[0] += 1
            try:
                results[i] = work(i, state)
            except BaseException as exc:  # re-raised in the calling thread
                errors.append(exc)
            with lock:
                progress[1] += 1
                if progress[1] == count:
                    done.set()

    executor = _Pool.executor()
    for _ in range(min(_Pool.helpers, count - 1)):
        executor.submit(drain)
    drain()
    done.wait()
    if errors:
        raise errors[0]
    return results


_scratch = threading.local()


def _scratch_scores(size: int) -> ScoreArray:
    """A per-thread float32 buffer of at least ``size`` (avoids a malloc per block)."""
    buf: ScoreArray | None = getattr(_scratch, "buf", None)
    if buf is None or buf.shape[0] < size:
        buf = np.empty(size, dtype=np.float32)
        _scratch.buf = buf
    return buf[:size]


def top_candidates(scores: ScoreArray, k: int) -> IdArray:
    """Positions of the ``k`` largest scores, plus any tied with the k-th (unordered)."""
    n = scores.shape[0]
    if k >= n:
        return np.arange(n, dtype=np.int64)
    part = np.argpartition(scores, n - k)[n - k :]
    cut = scores[part].min()
    # Ties at the cut are kept so the id tie-break downstream is exact.
    if np.count_nonzero(scores == cut) > np.count_nonzero(scores[part] == cut):
        return np.flatnonzero(scores >= cut).astype(np.int64, copy=False)
    return part.astype(np.int64, copy=False)


def order(ids: IdArray, scores: ScoreArray, k: int) -> tuple[IdArray, ScoreArray]:
    """Sort candidates by score descending then id ascending, keep ``k``, drop dead."""
    ranked = np.lexsort((ids, -scores))[:k]
    out_ids, out_scores = ids[ranked], scores[ranked]
    alive = out_scores > -np.inf
    if not alive.all():
        out_ids, out_scores = out_ids[alive], out_scores[alive]
    np.clip(out_scores, -1.0, 1.0, out=out_scores)
    return out_ids, out_scores


def scan(
    codes: Codes, params: ScoreArray, dead: IdArray, q: Matrix, k: int
) -> tuple[IdArray, ScoreArray]:
    """Candidates for one unit query ``q`` ``(d,)`` over ``codes`` ``(n, d)``.

    ``dead`` holds sorted row numbers that must not be returned (scored ``-inf``).
    ``params`` are the codec's parameters of this part (empty for float32).
    Returns rows of ``codes`` and their scores.
    """
    n, d = codes.shape
    if n == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    if n * d < PARALLEL_MIN_ELEMENTS:
        # One BLAS call, which may use BLAS threads: one such call at a time, since
        # OpenBLAS called from many Python threads at once thrashes (a server under
        # 32 concurrent searches fell from ~280 to ~16 requests/s without this).
        with BLAS_LOCK:
            scores = codes @ q
        if dead.size:
            scores[dead] = -np.inf
        rows = top_candidates(scores, k)
        return rows, scores[rows]
    return _parallel_scan(codes, dead, q, k)


def _parallel_scan(matrix: Matrix, dead: IdArray, q: Matrix, k: int) -> tuple[IdArray, ScoreArray]:
    n, d = matrix.shape
    block = max(2048, min(_BLOCK_BYTES // (4 * d), -(-n // _MIN_BLOCKS)))
    starts = range(0, n, block)

    def work(i: int, state: dict[str, Any]) -> tuple[IdArray, ScoreArray]:
        a = starts[i]
        b = min(a + block, n)
        scores = _scratch_scores(b - a)
        np.vecdot(matrix[a:b], q, out=scores)
        if dead.size:
            lo, hi = np.searchsorted(dead, (a, b))
            if hi > lo:
                scores[dead[lo:hi] - a] = -np.inf
        best: ScoreArray | None = state.get("best")
        # After the first block, rows below the k-th best this thread has seen cannot
        # make the top-k: one comparison pass is far cheaper than another argpartition.
        local = top_candidates(scores, k) if best is None else np.flatnonzero(scores >= best[0])
        found = scores[local]  # fancy indexing copies out of the scratch buffer
        pool = found if best is None else np.concatenate((best, found))
        if pool.shape[0] >= k:
            state["best"] = np.partition(pool, pool.shape[0] - k)[-k:]
            state["best"].sort()
        return local + a, found

    parts = run_blocks(len(starts), work)
    rows = np.concatenate([p[0] for p in parts])
    return rows, np.concatenate([p[1] for p in parts])


def scan_batch(
    codes: Codes, params: ScoreArray, dead: IdArray, queries: Matrix, k: int
) -> tuple[IdArray, IdArray, ScoreArray]:
    """Candidates for each row of unit ``queries`` ``(m, d)`` over ``codes`` ``(n, d)``.

    A zero query row gets no candidates. Returns parallel arrays ``(query, row,
    score)``: for each query, its candidate rows of ``codes`` and their scores.
    """
    n = codes.shape[0]
    m = queries.shape[0]
    zero = ~queries.any(axis=1)
    # Blocks of rows keep each (m x block) score matrix small and cache-friendly.
    block = max(k, 1024, _BATCH_BLOCK_ELEMENTS // max(m, 1))
    starts = range(0, n, block)

    def work(i: int, state: dict[str, Any]) -> tuple[IdArray, IdArray, ScoreArray]:
        a = starts[i]
        b = min(a + block, n)
        with BLAS_LOCK:
            scores = queries @ codes[a:b].T
        if dead.size:
            lo, hi = np.searchsorted(dead, (a, b))
            scores[:, dead[lo:hi] - a] = -np.inf
        cut: ScoreArray | None = state.get("cut")
        if cut is None:
            if b - a >= k:
                # The first full block sets, per query, the bound later blocks must
                # reach: its k-th best score (ties are kept by >=). This replaces an
                # argpartition per block with one comparison pass.
                part = np.argpartition(scores, b - a - k, axis=1)[:, b - a - k :]
                cut = np.take_along_axis(scores, part, axis=1).min(axis=1)
                cut[zero] = np.inf  # a zero query matches nothing
                state["cut"] = cut
            else:
                cut = np.where(zero, np.float32(np.inf), np.float32(-np.inf))
        query, col = np.nonzero(scores >= cut[:, None])
        return query, col + a, scores[query, col]

    # Sequential on purpose: sgemm already runs on every core, and a second layer
    # of threads made batches measurably slower.
    state: dict[str, Any] = {}
    parts = [work(i, state) for i in range(len(starts))]
    if not parts:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, np.empty(0, dtype=np.float32)
    return (
        np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False),
        np.concatenate([p[1] for p in parts]).astype(np.int64, copy=False),
        np.concatenate([p[2] for p in parts]),
    )


def order_batch(
    m: int, k: int, query: IdArray, ids: IdArray, scores: ScoreArray
) -> tuple[IdArray, ScoreArray]:
    """Per-query top-``k`` of candidate triples: ``(m, k)`` ids (``-1`` pad) and scores."""
    out_ids = np.full((m, k), -1, dtype=np.int64)
    out_scores = np.full((m, k), np.nan, dtype=np.float32)
    # One sort orders every query's candidates: query, then score down, then id up.
    ranked = np.lexsort((ids, -scores, query))
    query, ids, scores = query[ranked], ids[ranked], scores[ranked]
    rank = np.arange(query.shape[0]) - np.searchsorted(query, query)
    keep = (rank < k) & (scores > -np.inf)
    out_ids[query[keep], rank[keep]] = ids[keep]
    out_scores[query[keep], rank[keep]] = scores[keep]
    np.clip(out_scores, -1.0, 1.0, out=out_scores)
    return out_ids, out_scores


def search_part(
    codec: Codec,
    codes: Codes,
    params: ScoreArray,
    vectors: Matrix,
    dead: IdArray,
    q: Matrix,
    k: int,
) -> tuple[IdArray, ScoreArray]:
    """Exact candidates for one unit query over one part: rows and float32 scores.

    ``codes``/``params`` are the part's rows as ``codec`` stores them and ``vectors``
    the same rows in float32 (the same array for the float32 codec; for others, read
    only at the candidates' rows, to re-score them exactly).
    """
    rows, scores = scan(codes, params, dead, q, codec.candidates(k))
    if codec.exact or rows.size == 0:
        return rows, scores
    exact = vectors[rows] @ q
    keep = top_candidates(exact, k)
    return rows[keep], exact[keep]


def search_part_batch(
    codec: Codec,
    codes: Codes,
    params: ScoreArray,
    vectors: Matrix,
    dead: IdArray,
    queries: Matrix,
    k: int,
) -> tuple[IdArray, IdArray, ScoreArray]:
    """``search_part`` for each row of ``queries``: triples ``(query, row, score)``."""
    query, rows, scores = scan_batch(codes, params, dead, queries, codec.candidates(k))
    if codec.exact or rows.size == 0:
        return query, rows, scores
    exact = np.vecdot(vectors[rows], queries[query])
    return query, rows, exact

"""Scoring kernels of the vector index: exact top-k candidates over one block of rows.

These are pure functions over arrays; ``VectorIndex`` owns the layout (which rows,
which ids, which rows are dead) and calls them once per contiguous part of its data.

A kernel returns *candidates*: the positions (rows of the matrix it was given) of the
``k`` best scores plus any tied with the k-th, unordered, and their scores. The caller
maps rows to ids, merges the candidates of several parts and orders them
(``order``: score descending, then id ascending).

Codecs
    A part's rows may be stored in a compact form (``Codec``; ``Settings.index_dtype``
    names one): ``encode`` turns unit float32 rows into ``(codes, params)`` - an
    ``(n, d)`` array of one numpy dtype and a small float32 array of parameters of that
    part - and the kernels take ``codes`` and ``params``. Scores of codes are affine in
    the query: ``fold`` turns queries into scaled queries and offsets, and ``decode``
    widens one cache-sized block of codes at a time into a per-thread float32 buffer,
    which the float32 kernels then score. A codec whose scores are not exact
    (``exact = False``: float16, int8) asks for more candidates (``candidates(k)``),
    which ``search_part`` re-scores against the float32 rows before they are ordered.

Threads
    No process-wide lock: every BLAS call here runs single-threaded on its calling
    thread (``single_threaded_blas``: a per-thread BLAS setting found by
    threadpoolctl), and the parallelism is ours. Scans are split into row blocks that
    the calling thread and the helper threads of an executor its owner gives (the
    core's runtime: one per extra core, ``default_helpers``) claim one by one, so
    concurrent searches share the cores instead of queueing or oversubscribing them;
    without an executor the calling thread scans every block itself. A single query scores each block with ``np.vecdot`` into a
    thread-local buffer that stays in cache, reduced to its top-k at once, and the few
    survivors of all blocks are merged; after a thread's first block, "reduced" is one
    comparison against the k-th best score that thread has seen. A batch takes one
    matrix product per 2048-row block (float32 rows copied, or codes widened, 512 rows
    at a time into a per-thread buffer that stays in cache) and a per-query bound that
    each thread raises as it sees better scores.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

IdArray = npt.NDArray[np.int64]
ScoreArray = npt.NDArray[np.float32]
Matrix = npt.NDArray[np.float32]
Codes = npt.NDArray[Any]


class Rows(Protocol):
    """Float32 rows read by row number: a matrix, or rows kept elsewhere and read back
    (``_parts.StoredRows``: all NaN for a row no longer kept)."""

    @property
    def shape(self) -> tuple[int, ...]:
        """``(rows, dimension)``."""

    def __getitem__(self, rows: Any) -> Any:
        """The rows at ``rows`` (row numbers or a slice) as float32."""


# Below this many matrix elements (a few thousand rows, in cache) one single-threaded
# BLAS matrix-vector product answers a float32 query; above it the block scan on the
# pool was faster (measured at 20k and 100k x 384: 7.3 vs 9.1 and 15.6 vs 20.5 ms).
PARALLEL_MIN_ELEMENTS = 1_000_000
# Most matrix bytes per block (float32 rows, or codes a direct kernel scores as they
# are): enough work to amortise the hand-off. int8 codes in blocks of float32 rows'
# decode size (2048 rows) scanned 1M x 384 at 1.80x their read bound, in 32 MB blocks
# at 1.20x (float16: 1.30x, 1.16x).
_BLOCK_BYTES = 32 << 20
# Fewest blocks a parallel scan is cut into, so small scans still share the work.
_MIN_BLOCKS = 8
# Most bytes of float32 rows one block of codes is widened into (stays in cache): 2048
# rows at d=384; 4096- and 8192-row blocks measured slower, 1024 no faster.
_DECODE_BYTES = 3 << 20
# Bound on the (queries x rows) score block of a batch search, and fewest rows a block has.
# 64 queries x 2048 rows: 512 KB of scores per block, one comparison pass each; measured
# (CPU time per batch at 100k x 384, two threads) 5-10% below 1024-row blocks, which
# pay the per-block Python and selection overhead twice as often; 4096 no better.
_BATCH_BLOCK_ELEMENTS = 131_072
_BATCH_MIN_ROWS = 1024
# Most bytes of float32 rows a batch widens (or copies) at a time into a per-thread
# buffer before their product: 512 rows at d=384 (768 KB). Measured at 100k x 384, two
# threads, batch q/s against tuned FAISS in the same process: 128 rows 0.97x, 256 rows
# 1.07x, 512 rows 1.19x, 1024 rows 1.21-1.26x, 2048 rows 1.04x (each sgemm call packs
# the queries again, so small slices pay that more often).
_BATCH_WIDE_BYTES = 768 << 10
FEW_QUERIES = 8
"""Most queries of a batch whose float32 scores are numkong's packed products
(``Float32Codec(few="packed")``); more go to BLAS, whose sgemm is then the faster."""
FEW_QUERIES_PART_BYTES = 16 << 20
"""Largest part (float32 rows) those products score: one that stays in the last-level
cache; a larger one streamed from memory is scored faster by BLAS (docs/decisions.md)."""


class Codec(Protocol):
    """How a part stores its rows for scoring (``Settings.index_dtype`` names one).

    Scores of codes are affine in the query: ``fold`` turns unit queries into the
    float32 queries and offsets that score ``decode``d rows, so a kernel converts a
    cache-sized block of codes at a time and never holds a float32 copy of a part.
    """

    name: str
    dtype: np.dtype[Any]
    exact: bool
    #: whether its codes are scored with numkong's SIMD kernels when numkong is installed
    numkong: bool

    def encode(self, rows: Matrix, params: ScoreArray | None = None) -> tuple[Codes, ScoreArray]:
        """``(codes, params)`` for unit float32 ``rows`` ``(n, d)``.

        Without ``params`` the codec fits new ones to ``rows`` (a new part); with them
        it encodes with those (rows appended to a part that already has parameters).
        """

    def candidates(self, k: int) -> int:
        """How many approximate candidates to re-score exactly for a top-``k``."""

    def fold(self, queries: Matrix, params: ScoreArray) -> tuple[Matrix, ScoreArray]:
        """``(scaled, offsets)``: approximate scores are ``decode(codes) @ scaled[i] + offsets[i]``."""

    def decode(self, codes: Codes, out: Matrix) -> Matrix:
        """``codes`` as float32 rows (into ``out``, same shape, unless no copy is needed)."""


class Float32Codec:
    """Rows kept as they are: exact scores, 4 bytes per dimension.

    :param batch_rows: how rows enter a batch's product: ``"copy"`` (through the L2
        buffer first) or ``"direct"`` (sgemm packs straight from the rows). With both
        cores streaming rows from memory, ``"copy"`` measured 10-12% more batch
        throughput at 100k and 1M x 384; on one thread the two are equal.
    :param few: how a batch of at most ``FEW_QUERIES`` queries over a part of at most
        ``FEW_QUERIES_PART_BYTES`` is scored:
        ``"packed"``, numkong's products against the queries packed once (each row
        read once, straight from the part, summed in float64), when numkong is
        installed; or ``"blas"``, as larger batches are.
    """

    name: str = "float32"
    dtype: np.dtype[Any] = np.dtype("<f4")
    exact: bool = True
    numkong: bool = False  # single queries go to BLAS

    def __init__(
        self,
        *,
        batch_rows: Literal["copy", "direct"] = "copy",
        few: Literal["packed", "blas"] = "packed",
    ) -> None:
        self.batch_rows = batch_rows
        self.few = few

    def encode(self, rows: Matrix, params: ScoreArray | None = None) -> tuple[Codes, ScoreArray]:
        """The rows themselves and no parameters."""
        return np.ascontiguousarray(rows, dtype=self.dtype), np.empty(0, dtype=np.float32)

    def candidates(self, k: int) -> int:
        """Exact scores need no extra candidates."""
        return k

    def fold(self, queries: Matrix, params: ScoreArray) -> tuple[Matrix, ScoreArray]:
        """The queries themselves, no offset."""
        return queries, np.zeros(queries.shape[0], dtype=np.float32)

    def decode(self, codes: Codes, out: Matrix) -> Matrix:
        """The codes are the rows: no copy."""
        return codes


class Float16Codec:
    """IEEE half-precision rows: 2 bytes per dimension, scores within about 1e-3.

    Unit rows fit float16's range; its 11-bit significand moves a score by at most
    about ``2**-11`` (relative), so a few extra candidates re-scored against the
    float32 rows give the exact top-k.
    """

    name: str = "float16"
    dtype: np.dtype[Any] = np.dtype("<f2")
    exact: bool = False

    def __init__(self, *, numkong: bool = True) -> None:
        self.numkong = numkong

    def encode(self, rows: Matrix, params: ScoreArray | None = None) -> tuple[Codes, ScoreArray]:
        """Rows rounded to float16; no parameters."""
        return np.ascontiguousarray(rows, dtype=self.dtype), np.empty(0, dtype=np.float32)

    def candidates(self, k: int) -> int:
        """``k`` plus a margin for scores that rounding moved across the cut.

        Measured at k=10: recall@10 0.999 with 10 candidates, 1.0 from 14 on.
        """
        return k + max(8, k // 2)

    def fold(self, queries: Matrix, params: ScoreArray) -> tuple[Matrix, ScoreArray]:
        """The queries themselves, no offset."""
        return queries, np.zeros(queries.shape[0], dtype=np.float32)

    def decode(self, codes: Codes, out: Matrix) -> Matrix:
        """Widen into ``out``."""
        out[...] = codes
        return out


class Int8Codec:
    """Scalar quantisation: one byte per dimension, a grid of 256 steps per dimension.

    ``params`` are ``lo`` and ``step`` (``(2, d)`` flattened, float32) of the part:
    a row is stored as ``round((x - lo) / step) - 128`` and read as
    ``lo + step * (code + 128)``. The grid spans each dimension's range over the
    rows the part was fitted on (at least ``±2/sqrt(d)`` around its middle, so a
    small first part leaves room for later rows); appended rows outside it are
    clipped. The score of a query is then ``code @ (q * step) + q @ (lo + 128 step)``:
    the per-dimension scales fold into the query, and codes are widened to float32
    one cache-sized block at a time.

    :param numkong: score codes with numkong's kernels when it is installed.
    :param batch: a batch's product with numkong: ``"packed"`` (its int8 products) or
        ``"widen"`` (numpy's cast into the L2 buffer, then sgemm; the path without
        numkong). Measured at 100k: packed 88-99 vs widen 115-120 ms CPU per batch of
        64; at 1M within noise of each other, so packed at every size.
    """

    name: str = "int8"
    dtype: np.dtype[Any] = np.dtype("i1")
    exact: bool = False

    def __init__(
        self, *, numkong: bool = True, batch: Literal["packed", "widen"] = "packed"
    ) -> None:
        self.numkong = numkong
        self.batch = batch

    def encode(self, rows: Matrix, params: ScoreArray | None = None) -> tuple[Codes, ScoreArray]:
        """Codes on the part's grid; fits the grid to ``rows`` unless ``params`` is given."""
        rows = np.asarray(rows, dtype=np.float32)
        n, d = rows.shape
        if params is None or params.size == 0:
            if n:
                low, high = rows.min(axis=0), rows.max(axis=0)
            else:
                low = high = np.zeros(d, dtype=np.float32)
            middle = (low + high) / 2
            half = np.maximum((high - low) / 2, np.float32(2.0 / np.sqrt(d)))
            lo = (middle - half).astype(np.float32)
            step = (2 * half / 255).astype(np.float32)
            params = np.concatenate((lo, step)).astype(np.float32)
        elif params.shape != (2 * d,):
            raise ValueError(f"int8 parameters must have shape ({2 * d},), not {params.shape}")
        lo, step = params[:d], params[d:]
        codes = np.empty((n, d), dtype=self.dtype)
        for a in range(0, n, 16_384):  # bounded temporaries
            grid = (rows[a : a + 16_384] - lo) / step
            np.rint(grid, out=grid)
            np.clip(grid, 0, 255, out=grid)
            grid -= 128
            codes[a : a + 16_384] = grid
        return codes, params

    def candidates(self, k: int) -> int:
        """Enough candidates that re-scoring recovers the exact top-k.

        Measured at k=10: recall@10 was 0.97-0.98 with 10 candidates and 1.0 from 14
        on (200k x 384 Gaussian and clustered rows, hashing-embedder SQuAD vectors);
        ``2k + 8`` keeps twice that margin.
        """
        return 2 * k + 8

    def fold(self, queries: Matrix, params: ScoreArray) -> tuple[Matrix, ScoreArray]:
        """Queries scaled per dimension by the grid step, and the grid's offset."""
        d = queries.shape[1]
        lo, step = params[:d], params[d:]
        scaled = np.ascontiguousarray(queries * step, dtype=np.float32)
        offsets = (queries @ lo + 128 * scaled.sum(axis=1)).astype(np.float32)
        return scaled, offsets

    def decode(self, codes: Codes, out: Matrix) -> Matrix:
        """Widen into ``out`` (the grid's scale is in the folded query)."""
        out[...] = codes
        return out


CODECS: dict[str, Codec] = {
    "float32": Float32Codec(),
    "float16": Float16Codec(),
    "int8": Int8Codec(),
}
_BY_DTYPE: dict[np.dtype[Any], Codec] = {codec.dtype: codec for codec in CODECS.values()}


def codec_of(codes: Codes) -> Codec:
    """The codec whose codes have ``codes``' dtype."""
    try:
        return _BY_DTYPE[codes.dtype]
    except KeyError:
        raise ValueError(f"no codec stores rows as {codes.dtype}") from None


def default_helpers() -> int:
    """Helper threads worth giving block scans here: one per core beyond the calling
    thread's, at most 7 (``0`` on one core: the calling thread does it all)."""
    return max(0, min(os.cpu_count() or 1, 8) - 1)


def scan_helpers(name: str = "scan-helper") -> ThreadPoolExecutor | None:
    """A new pool of scan helpers as a core gives its indexes (``default_helpers``
    threads, BLAS pinned to one thread each), for a ``VectorIndex`` used on its own:
    the caller owns it and shuts it down. ``None`` on one core (nothing to share)."""
    helpers = default_helpers()
    if not helpers:
        return None
    return ThreadPoolExecutor(helpers, thread_name_prefix=name, initializer=pin_blas_thread)


def helper_count(helpers: Executor | None) -> int:
    """How many threads ``helpers`` runs: its ``max_workers`` (a runtime's ``Pool``),
    else a ``ThreadPoolExecutor``'s own count, else one."""
    if helpers is None:
        return 0
    count = getattr(helpers, "max_workers", None) or getattr(helpers, "_max_workers", None)
    return max(int(count or 1), 1)


# The CPU's vector extensions that decide which kernels run (named as /proc/cpuinfo does).
CPU_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_fp16", "amx_tile")


def scan_path() -> dict[str, str]:
    """Which code scores vectors on this machine, for the start-up log and ``/metrics``:
    ``blas`` (numpy's BLAS library and the CPU kind it chose, e.g. ``openblas
    SkylakeX``: float32 rows), ``numkong`` (the SIMD targets it can use here, or ``none``
    when it is not installed: float16 and int8 codes) and ``cpu`` (the ``CPU_FLAGS`` this
    CPU has, or ``unknown`` where /proc/cpuinfo is not)."""
    from threadpoolctl import threadpool_info

    blas = [lib for lib in threadpool_info() if lib.get("user_api") == "blas"]
    ours = [lib for lib in blas if _inside_numpy(lib.get("filepath"))] or blas
    described = (
        " ".join(
            str(part) for part in (ours[0].get("internal_api"), ours[0].get("architecture")) if part
        )
        if ours
        else "unknown"
    )
    nk = _numkong()
    targets = "none"
    if nk is not None:
        found = [name for name, on in nk.get_capabilities().items() if on and name != "serial"]
        targets = " ".join(found) or "serial"
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            flags = next(
                (line.split(":", 1)[1].split() for line in info if line.startswith("flags")), []
            )
        cpu = " ".join(flag for flag in CPU_FLAGS if flag in flags) or "none"
    except OSError:
        pass
    return {"blas": described or "unknown", "numkong": targets, "cpu": cpu}


class _Blas:
    """Per-thread control of the BLAS library's own threads (found by threadpoolctl).

    Kernels make every BLAS call single-threaded *for the calling thread only*
    (OpenBLAS ``openblas_set_num_threads_local``, MKL ``MKL_Set_Num_Threads_Local``)
    and parallelise by row blocks on the pool instead: many threads each running a
    multi-threaded BLAS call at once thrash (a server under 32 concurrent searches fell
    from ~280 to ~16 requests/s), while single-threaded calls on as many threads as
    there are cores do not. A BLAS without a per-thread setting is limited to one
    thread process-wide on first use (``threadpoolctl.threadpool_limits``).
    """

    _lock = threading.Lock()
    _setters: list[Callable[[int], int]] | None = None

    @classmethod
    def setters(cls) -> list[Callable[[int], int]]:
        if cls._setters is not None:
            return cls._setters
        with cls._lock:
            if cls._setters is None:
                cls._setters = _find_blas_setters()
            return cls._setters


def _find_blas_setters() -> list[Callable[[int], int]]:
    """Per-thread thread-count setters of numpy's BLAS (found by threadpoolctl).

    Only numpy's BLAS is ours to configure: other libraries in the process may load
    their own (FAISS ships an OpenMP OpenBLAS), and limiting those process-wide would
    change the host's behaviour (it made FAISS's BLAS single-threaded in the search
    benchmark). numpy's is the one inside its wheel (``numpy.libs``,
    ``numpy/.dylibs``); where none is recognisably numpy's (a system or conda BLAS),
    every BLAS library loaded counts. One without a per-thread setter is limited to
    one thread process-wide.
    """
    import ctypes

    from threadpoolctl import ThreadpoolController

    libs = ThreadpoolController().select(user_api="blas").lib_controllers
    ours = [lib for lib in libs if _inside_numpy(lib.filepath)] or libs
    setters: list[Callable[[int], int]] = []
    for lib in ours:
        names = {
            "openblas": ["openblas_set_num_threads_local", f"{lib.prefix}_set_num_threads_local"],
            "mkl": ["MKL_Set_Num_Threads_Local"],
        }.get(lib.internal_api, [])
        for name in names:
            function = getattr(lib.dynlib, name, None)
            if function is not None:
                function.argtypes = [ctypes.c_int]
                function.restype = ctypes.c_int
                setters.append(function)
                break
        else:
            lib.set_num_threads(1)
    return setters


def _inside_numpy(path: str | None) -> bool:
    """Whether a shared library's ``path`` is one numpy's wheel ships."""
    parts = os.path.normpath(path or "").split(os.sep)[:-1]
    return "numpy.libs" in parts or "numpy" in parts


_pinned = threading.local()


def pin_blas_thread() -> None:
    """Make this (helper) thread's BLAS calls single-threaded for good: the
    ``initializer`` of a pool of scan helpers."""
    for setter in _Blas.setters():
        setter(1)
    _pinned.done = True


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """BLAS calls of the calling thread run on that thread alone, inside the block."""
    if getattr(_pinned, "done", False):
        yield
        return
    setters = _Blas.setters()
    previous = [setter(1) for setter in setters]
    try:
        yield
    finally:
        for setter, count in zip(setters, previous, strict=True):
            setter(count)


def run_blocks(
    count: int, work: Callable[[int, dict[str, Any]], Any], helpers: Executor | None = None
) -> list[Any]:
    """Run ``work(i, state)`` for ``i`` in ``range(count)`` on this thread plus idle helpers.

    Blocks are claimed one at a time, so a busy (or absent) pool of ``helpers`` only
    means this thread does more of them itself; it never waits for a helper that has
    not started. ``state`` is a dict private to one thread for the duration of the
    call (a running top-k bound).
    """
    results: list[Any] = [None] * count
    extra = min(helper_count(helpers), count - 1)
    if extra <= 0 or helpers is None:
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

    def help_out() -> None:
        # a helper pool made without pin_blas_thread: single-threaded BLAS all the same
        with single_threaded_blas():
            drain()

    for _ in range(extra):
        try:
            helpers.submit(help_out)
        except RuntimeError:  # the pool is shutting down: this thread does the rest
            break
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


def _scratch_rows(rows: int, d: int) -> Matrix:
    """A per-thread float32 ``(rows, d)`` buffer that codes are widened into."""
    buf: ScoreArray | None = getattr(_scratch, "rows", None)
    if buf is None or buf.shape[0] < rows * d:
        buf = np.empty(rows * d, dtype=np.float32)
        _scratch.rows = buf
    return buf[: rows * d].reshape(rows, d)


def _scratch_block(rows: int, m: int) -> Matrix:
    """A per-thread float32 ``(rows, m)`` buffer for a batch's block of scores."""
    buf: ScoreArray | None = getattr(_scratch, "block", None)
    if buf is None or buf.shape[0] < m * rows:
        buf = np.empty(m * rows, dtype=np.float32)
        _scratch.block = buf
    return buf[: m * rows].reshape(rows, m)


def _scratch_mask(rows: int, m: int) -> npt.NDArray[np.bool_]:
    """A per-thread boolean ``(rows, m)`` buffer for a batch block's comparison."""
    buf: npt.NDArray[np.bool_] | None = getattr(_scratch, "mask", None)
    if buf is None or buf.shape[0] < rows * m:
        buf = np.empty(rows * m, dtype=np.bool_)
        _scratch.mask = buf
    return buf[: rows * m].reshape(rows, m)


def _scratch_tensor(rows: int, m: int, dtype: str) -> tuple[Any, npt.NDArray[Any]]:
    """A per-thread numkong ``(rows, m)`` tensor of ``dtype`` and a numpy view of it.

    ``dots_packed`` writes only into its own tensors of the exact shape; a batch uses
    one shape for its full blocks and one for its last, so a few are kept per thread.
    """
    cache: dict[tuple[int, int, str], tuple[Any, npt.NDArray[Any]]] | None = getattr(
        _scratch, "tensors", None
    )
    if cache is None:
        cache = _scratch.tensors = {}
    found = cache.get((rows, m, dtype))
    if found is None:
        if len(cache) >= 8:
            cache.clear()
        tensor = _numkong().empty((rows, m), dtype=dtype)
        found = cache[(rows, m, dtype)] = (tensor, np.asarray(tensor))
    return found


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
    codes: Codes,
    params: ScoreArray,
    dead: IdArray,
    q: Matrix,
    k: int,
    codec: Codec | None = None,
    helpers: Executor | None = None,
    blocked: npt.NDArray[np.bool_] | None = None,
) -> tuple[IdArray, ScoreArray]:
    """Candidates for one unit query ``q`` ``(d,)`` over ``codes`` ``(n, d)``.

    ``dead`` holds sorted row numbers that must not be returned (scored ``-inf``), and
    so does ``blocked``, a mask over the rows (a filter's: the rows it keeps out).
    ``params`` are the codec's parameters of this part (empty for float32); the
    codec is the one named by ``codec`` or else the one of ``codes``' dtype. Row
    blocks of a large scan are shared with the threads of ``helpers``, if given.
    Returns rows of ``codes`` and their (for an approximate codec, approximate) scores.
    """
    codec = codec or codec_of(codes)
    n, d = codes.shape
    if n == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    folded, offsets = codec.fold(q.reshape(1, d), params)
    if codec.exact and n * d < PARALLEL_MIN_ELEMENTS:
        # One single-threaded matrix-vector product: small enough that handing
        # blocks to the pool costs more than it saves.
        with single_threaded_blas():
            scores = codes @ folded[0]
        if dead.size:
            scores[dead] = -np.inf
        if blocked is not None:
            np.putmask(scores, blocked, -np.inf)
        rows = top_candidates(scores, k)
        if blocked is not None:  # fewer rows let through than k: no -inf candidates
            rows = rows[scores[rows] > -np.inf]
        return rows, scores[rows]
    return _parallel_scan(codec, codes, dead, folded[0], float(offsets[0]), k, helpers, blocked)


def scan_rows(
    vectors: Matrix, rows: IdArray, q: Matrix, k: int, helpers: Executor | None = None
) -> tuple[IdArray, ScoreArray]:
    """Exact candidates for unit ``q`` among ``rows`` (ascending row numbers) of the
    float32 ``vectors``: the rows a selective filter lets through, gathered a block at
    a time into a per-thread buffer and scored there. Returns rows and their scores."""
    n, d = rows.shape[0], vectors.shape[1]
    if n == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    block = max(2048, min(_DECODE_BYTES // (4 * d), -(-n // _MIN_BLOCKS)))
    starts = range(0, n, block)

    def work(i: int, state: dict[str, Any]) -> tuple[IdArray, ScoreArray]:
        a = starts[i]
        b = min(a + block, n)
        wanted = rows[a:b]
        gathered = np.take(vectors, wanted, axis=0, out=_scratch_rows(b - a, d), mode="clip")
        scores = np.vecdot(gathered, q, out=_scratch_scores(b - a))
        best = top_candidates(scores, k)
        return wanted[best], scores[best]  # fancy indexing copies out of the scratch

    if n * d < PARALLEL_MIN_ELEMENTS:
        found = [work(i, {}) for i in range(len(starts))]
    else:
        found = run_blocks(len(starts), work, helpers)
    return np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found])


def _parallel_scan(
    codec: Codec,
    codes: Codes,
    dead: IdArray,
    q: Matrix,
    offset: float,
    k: int,
    helpers: Executor | None,
    blocked: npt.NDArray[np.bool_] | None = None,
) -> tuple[IdArray, ScoreArray]:
    n, d = codes.shape
    direct = _direct_scorer(codec, q)
    if direct is not None:  # codes scored as they are: blocks of their own bytes
        width = d * codes.itemsize
        block = max(2048, min(_BLOCK_BYTES // width, -(-n // _MIN_BLOCKS)))
    else:  # widened into (or copied as) float32 rows first
        limit = _BLOCK_BYTES if codec.exact else min(_BLOCK_BYTES, _DECODE_BYTES)
        block = max(2048, min(limit // (4 * d), -(-n // _MIN_BLOCKS)))
    starts = range(0, n, block)

    def work(i: int, state: dict[str, Any]) -> tuple[IdArray, ScoreArray]:
        a = starts[i]
        b = min(a + block, n)
        scores = _scratch_scores(b - a)
        if direct is not None:
            direct(codes[a:b], scores)
        else:
            np.vecdot(codec.decode(codes[a:b], _scratch_rows(b - a, d)), q, out=scores)
        if offset:
            scores += np.float32(offset)
        if dead.size:
            lo, hi = np.searchsorted(dead, (a, b))
            if hi > lo:
                scores[dead[lo:hi] - a] = -np.inf
        if blocked is not None:
            np.putmask(scores, blocked[a:b], -np.inf)
        best: ScoreArray | None = state.get("best")
        # After the first block, rows below the k-th best this thread has seen cannot
        # make the top-k: one comparison pass is far cheaper than another argpartition.
        local = top_candidates(scores, k) if best is None else np.flatnonzero(scores >= best[0])
        found = scores[local]  # fancy indexing copies out of the scratch buffer
        if blocked is not None:
            # a block the filter lets few rows of through: its -inf rows must not set
            # the bound (every later row would pass it)
            finite = found > -np.inf
            if not finite.all():
                local, found = local[finite], found[finite]
        pool = found if best is None else np.concatenate((best, found))
        if pool.shape[0] >= k:
            state["best"] = np.partition(pool, pool.shape[0] - k)[-k:]
            state["best"].sort()
        return local + a, found

    parts = run_blocks(len(starts), work, helpers)
    rows = np.concatenate([p[0] for p in parts])
    return rows, np.concatenate([p[1] for p in parts])


def _direct_scorer(codec: Codec, q: Matrix) -> Callable[[Codes, ScoreArray], None] | None:
    """A numkong kernel scoring codes as they are (no widening), or ``None``.

    With ``numkong`` installed, one query's int8 and float16 scans use its SIMD dot
    products straight on the codes, with the query rounded to the codes' type (int8:
    scaled to +-127; the rounding is one more approximation the re-scoring of the
    candidates absorbs). Measured at 200k x 384 on one thread: 49 ms against 244 ms
    (int8 widened by numpy) and 264 ms (float32 rows), and about 10x for float16.
    """
    if not codec.numkong or codec.exact or codec.name not in ("int8", "float16"):
        return None
    nk = _numkong()
    if nk is None:
        return None
    if codec.name == "float16":
        query = np.ascontiguousarray(q, dtype=np.float16).reshape(1, -1)
        unit = 1.0
    else:
        top = float(np.abs(q).max())
        unit = top / 127 if top > 0 else 1.0
        query = np.rint(q / unit).astype(np.int8).reshape(1, -1)

    def score(codes: Codes, out: ScoreArray) -> None:
        dots = np.asarray(nk.cdist(query, codes, metric="dot"))[0]
        np.multiply(dots, unit, out=out, casting="same_kind")

    return score


_numkong_module: Any = None


def _numkong() -> Any:
    """The ``numkong`` module, or ``None`` when it is not installed (imported once)."""
    global _numkong_module
    if _numkong_module is None:
        try:
            import numkong

            _numkong_module = numkong
        except ImportError:
            _numkong_module = False
    return _numkong_module or None


def scan_batch(
    codes: Codes,
    params: ScoreArray,
    dead: IdArray,
    queries: Matrix,
    k: int,
    codec: Codec | None = None,
    helpers: Executor | None = None,
) -> tuple[IdArray, IdArray, ScoreArray]:
    """Candidates for each row of unit ``queries`` ``(m, d)`` over ``codes`` ``(n, d)``.

    A zero query row gets no candidates. Returns parallel arrays ``(query, row,
    score)``: for each query, its candidate rows of ``codes`` and their scores.
    Row blocks run on this thread and ``helpers``' threads, one single-threaded product each
    (``_BatchScorer``), so the ``(block x m)`` scores of a block stay in cache, and each
    thread selects its own blocks' candidates as it goes: no serial phase but the merge.
    """
    codec = codec or codec_of(codes)
    n, d = codes.shape
    if queries.ndim != 2 or queries.shape[1] != d:
        raise ValueError(f"queries must have shape (m, {d}), not {queries.shape}")
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    m = queries.shape[0]
    if n == 0 or m == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, np.empty(0, dtype=np.float32)
    zero = ~queries.any(axis=1)
    folded, offsets = codec.fold(queries, params)
    scorer = _BatchScorer(codec, folded, offsets, rows=n)
    block = max(k, _BATCH_MIN_ROWS, _BATCH_BLOCK_ELEMENTS // m)
    starts = range(0, n, block)
    low, high = scorer.low, scorer.high
    states: list[dict[str, Any]] = []  # one per thread that took part

    def work(i: int, state: dict[str, Any]) -> None:
        if not state:
            state["kept"] = ([], [])  # flat (row * m + query) positions and keys
            state["pending"] = 0
            states.append(state)  # list.append is atomic
        a = starts[i]
        b = min(a + block, n)
        keys = scorer.score(codes, a, b)
        if dead.size:
            lo, hi = np.searchsorted(dead, (a, b))
            if hi > lo:
                keys[dead[lo:hi] - a] = low
        cut: npt.NDArray[Any] | None = state.get("cut")
        if cut is None:
            if b - a >= k:
                # The first full block sets, per query, the bound later blocks must
                # reach: its k-th best key (ties are kept by >=). Later blocks then cost
                # one comparison pass instead of an argpartition each.
                cut = np.partition(keys, b - a - k, axis=0)[b - a - k]
                cut[zero] = high  # a zero query matches nothing
                state["cut"] = cut
            else:
                cut = np.where(zero, high, low).astype(keys.dtype)
        mask = _scratch_mask(b - a, m)
        np.greater_equal(keys, cut, out=mask)
        # one flat pass finds the few survivors; (row, query) follow from the flat index
        flat = np.flatnonzero(mask)
        if flat.shape[0]:
            state["kept"][1].append(keys.reshape(-1)[flat])  # copies out of the scratch
            flat += a * m
            state["kept"][0].append(flat)
            state["pending"] += flat.shape[0]
            if "cut" in state and state["pending"] > 2 * m * k:
                _raise_cut(state, k, m)

    with single_threaded_blas():
        run_blocks(len(starts), work, helpers)
    for state in states:
        if "cut" in state and state["pending"]:
            _raise_cut(state, k, m)  # each thread hands over only its best k per query
    flat = np.concatenate([f for state in states for f in state["kept"][0]] or [_NO_ROWS])
    keys = np.concatenate(
        [key for state in states for key in state["kept"][1]] or [np.empty(0, scorer.dtype)]
    )
    rows, query = np.divmod(flat, m)
    return query, rows, scorer.scores(query, keys)


_NO_ROWS = np.empty(0, dtype=np.int64)


class _BatchScorer:
    """How one batch scores rows ``a:b`` of a part: ``(rows, m)`` keys in a per-thread buffer.

    Keys order each query's candidates as its (approximate) scores do; ``scores`` turns
    the few selected keys into those scores (adding the codec's offsets), so no pass
    over a whole block is spent on an offset. A batch of at most ``FEW_QUERIES`` queries
    over a part of float32 rows of at most ``FEW_QUERIES_PART_BYTES``
    (``Float32Codec(few="packed")``, with numkong) takes numkong's
    products of the rows, read in place, against the queries packed once per batch
    (float64 keys). Otherwise a block's product is one single-threaded sgemm against the
    folded queries (``(d, m)``, packed once per batch by BLAS), of:

    - float32 rows: read in place (``Float32Codec(batch_rows="direct")``) or first copied,
      ``_BATCH_WIDE_BYTES`` at a time, into a per-thread buffer that stays in L2
      (``"copy"``);
    - float16 codes: widened into that buffer by numkong's F16C cast (numpy's float16
      cast is not vectorised in this build), else by numpy;
    - int8 codes: widened into that buffer by numpy's cast (``Int8Codec(batch="widen")``),
      products of the unrounded folded queries; or numkong's packed integer products
      against the queries rounded to int8 (``"packed"``, exact int32 keys; the query's
      rounding is one more approximation the re-scoring absorbs).
    """

    def __init__(self, codec: Codec, folded: Matrix, offsets: ScoreArray, *, rows: int) -> None:
        self.m, self.d = folded.shape
        self.codec = codec
        self.offsets = offsets
        self.unit: ScoreArray | None = None
        self.packed: Any = None
        self.dtype: np.dtype[Any] = np.dtype(np.float32)
        self.low: Any = np.float32(-np.inf)  # the key of dead rows
        self.high: Any = np.float32(np.inf)  # the bound of zero queries
        self.widen: Callable[[Codes, Matrix], Any] | None = None
        self.wide_rows = max(1, _BATCH_WIDE_BYTES // (4 * self.d))
        if (
            isinstance(codec, Float32Codec)
            and codec.few == "packed"
            and self.m <= FEW_QUERIES
            and rows * self.d * 4 <= FEW_QUERIES_PART_BYTES
            and (few := _numkong()) is not None
        ):
            self.packed = few.dots_pack(np.ascontiguousarray(folded), dtype="float32")
            self.dtype = np.dtype(np.float64)
            self.low = np.float64(-np.inf)
            self.high = np.float64(np.inf)
            return
        nk = _numkong() if codec.numkong and not codec.exact else None
        if nk is not None and isinstance(codec, Int8Codec) and codec.batch == "packed":
            top = np.abs(folded).max(axis=1)
            self.unit = np.where(top > 0, top / 127, 1).astype(np.float32)
            rounded = np.rint(folded / self.unit[:, None]).astype(np.int8)
            self.packed = nk.dots_pack(rounded, dtype="int8")
            self.dtype = np.dtype(np.int32)
            self.low = np.int32(np.iinfo(np.int32).min)
            self.high = np.int32(np.iinfo(np.int32).max)
            return
        if codec.exact:
            if isinstance(codec, Float32Codec) and codec.batch_rows == "copy":
                self.widen = _copy_rows
        elif nk is not None and codec.name == "float16":
            self.widen = lambda block, out: nk.astype(block, "float32", out=out)
        else:
            self.widen = codec.decode
        self.queries = np.ascontiguousarray(folded.T)  # (d, m): a plain NN product

    def score(self, codes: Codes, a: int, b: int) -> npt.NDArray[Any]:
        """``(b - a, m)`` keys of rows ``a:b`` in a per-thread buffer (valid until the next call)."""
        rows = b - a
        if self.packed is not None:
            out = _scratch_tensor(rows, self.m, self.dtype.name)  # the products' type
            self.packed_product(codes[a:b], out[0])
            return out[1]
        keys = _scratch_block(rows, self.m)
        if self.widen is None:
            np.matmul(codes[a:b], self.queries, out=keys)
            return keys
        step = self.wide_rows
        wide = _scratch_rows(min(step, rows), self.d)
        for s in range(0, rows, step):
            e = min(s + step, rows)
            part = self.widen(codes[a + s : a + e], wide[: e - s])
            np.matmul(part, self.queries, out=keys[s:e])
        return keys

    def packed_product(self, block: Codes, out: Any) -> None:
        """numkong's products of ``block`` and the packed queries into ``out``."""
        _numkong().dots_packed(block, self.packed, out=out)

    def scores(self, query: IdArray, keys: npt.NDArray[Any]) -> ScoreArray:
        """The (approximate) float32 scores of selected ``keys`` of queries ``query``."""
        values = keys.astype(np.float32, copy=True)  # int32 -> float32 keeps the order
        if self.unit is not None:
            values *= self.unit[query]
            values[keys == self.low] = -np.inf
        if self.offsets.any():
            values += self.offsets[query]
        return values


def _copy_rows(block: Codes, out: Matrix) -> Matrix:
    """Copy float32 rows into ``out`` (a cache-resident buffer)."""
    np.copyto(out, block)
    return out


def _raise_cut(state: dict[str, Any], k: int, m: int) -> None:
    """Raise a batch's per-query bound to the k-th best key this thread has kept,
    and drop the kept candidates below it.

    Called each time the candidates kept since the last raise outnumber twice the
    wanted ones, so the bound tracks the keys seen so far at the cost of a sort of
    a few thousand candidates now and then (about log(blocks) times per thread), and
    once at the end, so a thread hands over at most its best k per query (and ties).
    """
    flat, keys = (np.concatenate(kept) for kept in state["kept"])
    query = flat % m
    ranked = np.lexsort((keys, query))  # by query, then key ascending (no negation)
    query, flat, keys = query[ranked], flat[ranked], keys[ranked]
    cut: npt.NDArray[Any] = state["cut"]
    each = np.arange(m)
    firsts = np.searchsorted(query, each)
    ends = np.searchsorted(query, each, side="right")
    full = ends - firsts >= k
    cut[full] = np.maximum(cut[full], keys[ends[full] - k])
    keep = keys >= cut[query]
    state["kept"] = ([flat[keep]], [keys[keep]])
    state["pending"] = 0


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
    vectors: Rows,
    dead: IdArray,
    q: Matrix,
    k: int,
    helpers: Executor | None = None,
    blocked: npt.NDArray[np.bool_] | None = None,
) -> tuple[IdArray, ScoreArray]:
    """Exact candidates for one unit query over one part: rows and float32 scores.

    ``codes``/``params`` are the part's rows as ``codec`` stores them and ``vectors``
    the same rows in float32 (the same array for the float32 codec; for others, read
    only at the candidates' rows, to re-score them exactly; a row read back as NaN is
    no longer kept and is no candidate). ``blocked`` rows (a filter's mask) are never
    candidates, so only rows it lets through are read back.
    """
    wanted = codec.candidates(k)
    rows, scores = scan(codes, params, dead, q, wanted, codec, helpers, blocked)
    if codec.exact or rows.size == 0:
        return rows, scores
    # Each block of the scan hands over its own best, so there are several times
    # ``wanted`` of them (~210 at 100k rows for int8's 28): only the best ``wanted``
    # (and ties) are read again, as in a batch. Rows kept in the store cost a read each.
    keep = top_candidates(scores, wanted)
    keep = keep[scores[keep] > -np.inf]  # dead rows stay out
    rows = np.sort(rows[keep])  # read in file order
    exact = np.vecdot(vectors[rows], q)
    gone = np.isnan(exact)
    if gone.any():
        rows, exact = rows[~gone], exact[~gone]
    keep = top_candidates(exact, k)
    return rows[keep], exact[keep]


def search_part_batch(
    codec: Codec,
    codes: Codes,
    params: ScoreArray,
    vectors: Rows,
    dead: IdArray,
    queries: Matrix,
    k: int,
    helpers: Executor | None = None,
) -> tuple[IdArray, IdArray, ScoreArray]:
    """``search_part`` for each row of ``queries``: triples ``(query, row, score)``."""
    query, rows, scores = scan_batch(
        codes, params, dead, queries, codec.candidates(k), codec, helpers
    )
    if codec.exact or rows.size == 0:
        return query, rows, scores
    # Only each query's best candidates(k) by approximate score (and ties) are read
    # again; dead rows stay out.
    keep = _best_per_query(query, scores, codec.candidates(k), queries.shape[0])
    keep &= scores > -np.inf
    query, rows = query[keep], rows[keep]
    exact = np.vecdot(vectors[rows], queries[query])
    gone = np.isnan(exact)  # rows no longer kept
    if gone.any():
        query, rows, exact = query[~gone], rows[~gone], exact[~gone]
    return query, rows, exact


def _best_per_query(query: IdArray, scores: ScoreArray, c: int, m: int) -> npt.NDArray[np.bool_]:
    """Mask of each query's ``c`` best triples, plus any tied with its c-th."""
    ranked = np.lexsort((-scores, query))
    sorted_query, sorted_scores = query[ranked], scores[ranked]
    firsts = np.searchsorted(sorted_query, np.arange(m))
    ends = np.append(firsts[1:], sorted_query.shape[0])
    cut = np.full(m, -np.inf, dtype=np.float32)
    full = ends - firsts >= c
    cut[full] = sorted_scores[firsts[full] + c - 1]
    mask: npt.NDArray[np.bool_] = scores >= cut[query]
    return mask

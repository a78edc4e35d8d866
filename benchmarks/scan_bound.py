"""Single-query search against each codec's own memory bound, and batch-64 against tuned FAISS.

Issue 43's rows: a single query at 1M x 384 against the time to stream-read the bytes
its codec's scan reads (goal: float32 within 1.1x of that read, float16 and int8 within
1.3x), and batch-64 throughput of VectorIndex against FAISS ``IndexFlatIP`` with its BLAS
threshold tuned to 20 (goal: at least 2x FAISS's queries/s; the goal's row is float32's,
and every codec's batch is measured against it too).

For each codec the index is ``search_speed.py``'s: the same ``VectorIndex`` over one
frozen part stored by that codec (``CodecEngine``; for float32 the part's codes are the
float32 rows themselves), with the scan helpers a core lends its indexes
(``search_speed.HELPERS``: the calling thread plus ``default_helpers()`` threads). The
data, ids and queries are ``search_speed.py``'s (same seeds).

The bound of a codec is a read of that part's ``codes`` array itself (the bytes its
scan streams: N x d x 4 for float32, x 2 for float16, x 1 for int8; int8's 2d
per-dimension parameters and the float32 rows of the few re-scored candidates are a
few KB), cut into 8 MB blocks that the calling thread and the same helper pool claim
one by one (``run_blocks``, the scan's own hand-out), so only the work per block
differs from the scan. The work per block is the fastest of a few streaming reads that
touch every byte, chosen at start-up on this machine (``READERS``). Each timed query is
followed by one timed read of its codec's bytes on the same threads and one on the
calling thread alone, so a noisy neighbour hits both sides alike; medians over the
queries, then the median of ``--runs`` runs (codecs rotated per run).

The batch side passes ``--passes`` times over ``--batches`` batches of 64 queries per
run with each codec's VectorIndex (the engines above) and
``search_speed.FaissEngine(blas_threshold=20)``, and counts each run's fastest pass; its
recall@K is that of the last pass's answers against the exact top-K of the batch queries
(``search_speed.exact_top_k``). Each run also times a bare sgemm
(``SgemmBound``): one ``np.matmul`` of the float32 rows (N, d) by one batch's queries
(d, 64) into a preallocated (N, 64) float32 output, on numpy's BLAS limited by
threadpoolctl to the scan's threads, the fastest of ``--passes`` products, freed after
the run: the product every exact float32 batch scan makes, as one BLAS call (a reference,
not a floor: a scan cut into blocks, each a single-threaded product whose output stays
in cache, beats it by about 10%), which the float32 engines are given as a fraction
of. The engines and the bound are rotated per run (each goes first in turn). Per engine the table gives the median queries/s of the runs, the best run, each
run's, recall@K, queries/s over FAISS's median (each run's over FAISS's of that run in
brackets) against the 2x goal, and for float32 VectorIndex and FAISS their fraction of
the bare sgemm. FAISS's wheel ships its own OpenBLAS; when it runs other kernels than
numpy's (an older OpenBLAS that does not know the CPU), the script says so:
``OPENBLAS_CORETYPE`` gives FAISS the same kernels.

``--avx2`` runs the kernels an AVX2-only machine has on one with AVX-512: numpy's and
OpenBLAS's dispatch limited by their environment variables (``NPY_DISABLE_CPU_FEATURES``,
``OPENBLAS_CORETYPE=Haswell``, set by re-running the script with them) and numkong's
AVX-512 targets disabled. The memory system stays this machine's.

Run ``nice python benchmarks/scan_bound.py [--rows 1000000] [--dim 384] [--queries 50]
[--runs 3] [--codecs float32,float16,int8] [--batches 2] [--passes 3] [--skip-faiss] [--avx2]
[--json out.json]``. Prints two markdown tables (single query; batch of 64 with a row per
codec, FAISS's unless ``--skip-faiss`` (then no ratios), and the bare sgemm's) and the
machine (CPU model and flags, numpy's and FAISS's BLAS, numkong's targets, load average
and CPU steal), writes ``benchmarks/results/scan_bound.json`` (``batch``: a row per engine
with its ratios; ``batch_ratio``: float32's over FAISS's; ``batch_ratios``: each codec's;
``sgemm_bound``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

AVX512 = "AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR"
"""numpy's AVX-512 dispatch targets, all disabled by ``--avx2``."""
if "--avx2" in sys.argv and os.environ.get("NPY_DISABLE_CPU_FEATURES") != AVX512:
    # numpy and OpenBLAS choose their kernels when they load: run again with them limited
    limited = {**os.environ, "NPY_DISABLE_CPU_FEATURES": AVX512, "OPENBLAS_CORETYPE": "Haswell"}
    os.execve(sys.executable, [sys.executable, *sys.argv], limited)

import numpy as np  # noqa: E402
import search_speed as ss  # noqa: E402  (also puts the repository on sys.path)

from agentcore.knowledge.vectors import scan_path  # noqa: E402
from agentcore.knowledge.vectors._kernels import (  # noqa: E402
    CPU_FLAGS,
    default_helpers,
    helper_count,
    run_blocks,
)

K = 10
BATCH = ss.BATCH
SGEMM = "bare sgemm (one BLAS call)"
# issue 43's goals: single-query time / codec's memory bound, batch q/s / tuned FAISS's
BOUND_GOAL = {"float32": 1.1, "float16": 1.3, "int8": 1.3}
BATCH_GOAL = 2.0
WARMUP = 5
READ_BLOCK = 8 << 20  # bytes per block a reading thread claims (1-32 MB measured alike)
COPY_BYTES = 1 << 20  # the per-thread buffer the "copy" reader streams into (stays in L2)

Reader = Callable[[np.ndarray], Any]
_local = threading.local()


def _read_max(block: np.ndarray) -> Any:
    """``np.maximum.reduce`` over the bytes as uint64 (no temporaries, no FP assists)."""
    return np.maximum.reduce(block.view(np.uint64))


def _read_sum(block: np.ndarray) -> Any:
    """``np.add.reduce`` over the bytes as uint64."""
    return np.add.reduce(block.view(np.uint64))


def _read_copy(block: np.ndarray) -> Any:
    """``np.copyto`` of the bytes, 1 MB at a time, into a per-thread buffer in L2."""
    out: np.ndarray | None = getattr(_local, "copy", None)
    if out is None:
        out = _local.copy = np.empty(COPY_BYTES, dtype=np.uint8)
    for start in range(0, block.shape[0], COPY_BYTES):
        part = block[start : start + COPY_BYTES]
        np.copyto(out[: part.shape[0]], part)
    return out[0]


READERS: dict[str, Reader] = {"max": _read_max, "sum": _read_sum, "copy": _read_copy}
READER_NAMES = {
    "max": "np.maximum.reduce over each block as uint64",
    "sum": "np.add.reduce over each block as uint64",
    "copy": "np.copyto of each block, 1 MB at a time, into a per-thread buffer in L2",
}


def _bytes_of(array: np.ndarray) -> np.ndarray:
    """The array's memory as a flat uint8 view (no copy)."""
    flat = np.ascontiguousarray(array).reshape(-1)
    return flat.view(np.uint8)


def stream_read(data: np.ndarray, reader: Reader, helpers: Any) -> float:
    """Seconds to read every byte of ``data`` (uint8, a multiple of 8 bytes long except
    a tail read bytewise) in ``READ_BLOCK`` blocks on this thread and ``helpers``."""
    whole = data.shape[0] // 8 * 8
    count = -(-whole // READ_BLOCK)

    def work(i: int, state: dict[str, Any]) -> Any:
        return reader(data[i * READ_BLOCK : min((i + 1) * READ_BLOCK, whole)])

    start = time.perf_counter()
    run_blocks(count, work, helpers)
    if whole < data.shape[0]:
        np.maximum.reduce(data[whole:])
    return time.perf_counter() - start


def pick_reader(data: np.ndarray, helpers: Any, reps: int = 5) -> tuple[str, dict[str, float]]:
    """The fastest reader over ``data`` on these threads, and each one's GB/s (median).

    For information, also the GB/s of a single-threaded sgemv of float32 rows with a ones
    vector (``np.dot``), when ``data`` holds float32 rows: not a candidate, because over
    int8 or float16 bytes read as float32 it would meet denormals and NaNs.
    """
    speeds: dict[str, float] = {}
    for name, reader in READERS.items():
        stream_read(data, reader, helpers)
        speeds[name] = data.shape[0] / np.median(
            [stream_read(data, reader, helpers) for _ in range(reps)]
        )
    best = max(speeds, key=lambda name: speeds[name])
    return best, {name: value / 1e9 for name, value in speeds.items()}


def sgemv_speed(rows: np.ndarray, helpers: Any, reps: int = 5) -> float:
    """GB/s of ``rows[block] @ ones`` over float32 rows, same blocks and threads."""
    ones = np.ones(rows.shape[1], dtype=np.float32)
    per = max(1, READ_BLOCK // (4 * rows.shape[1]))
    count = -(-rows.shape[0] // per)

    def work(i: int, state: dict[str, Any]) -> Any:
        return rows[i * per : (i + 1) * per] @ ones

    times = []
    for _ in range(reps + 1):
        start = time.perf_counter()
        run_blocks(count, work, helpers)
        times.append(time.perf_counter() - start)
    return float(rows.nbytes / np.median(times[1:]) / 1e9)


def cpu_times() -> list[int]:
    """The aggregate ``cpu`` line of /proc/stat (user nice system idle iowait irq
    softirq steal ...), or an empty list."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            return [int(value) for value in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return []


def steal_percent(before: list[int], after: list[int]) -> float | None:
    """CPU time stolen by the hypervisor between two ``cpu_times``, in % of all."""
    if len(before) < 8 or len(after) < 8:
        return None
    total = sum(after[:8]) - sum(before[:8])
    return 100.0 * (after[7] - before[7]) / total if total else None


def machine() -> dict[str, Any]:
    """CPU model and the flags that pick kernels, BLAS libraries, numkong's targets."""
    model = ""
    flags: list[str] = []
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("model name") and not model:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = line.split(":", 1)[1].split()
    except OSError:
        pass
    from threadpoolctl import threadpool_info

    libs = [lib for lib in threadpool_info() if lib.get("user_api") == "blas"]
    blas = [
        f"{lib.get('internal_api')} {lib.get('version')} {lib.get('architecture')}"
        f" ({Path(lib.get('filepath', '')).name}, {lib.get('num_threads')} threads)"
        for lib in libs
    ]
    path = scan_path()
    # FAISS's wheel ships its own OpenBLAS: an older one may not know this CPU and fall
    # back to generic kernels (e.g. 0.3.15's Prescott on a Sapphire Rapids), which slows
    # FAISS's sgemm and so flatters the batch ratio
    ours = [lib for lib in libs if "numpy" in str(lib.get("filepath"))]
    theirs = [lib for lib in libs if "faiss" in str(lib.get("filepath"))]
    faiss_note = None
    if ours and theirs and ours[0].get("architecture") != theirs[0].get("architecture"):
        faiss_note = (
            f"FAISS's OpenBLAS {theirs[0].get('version')} runs its"
            f" {theirs[0].get('architecture')} kernels here, numpy's its"
            f" {ours[0].get('architecture')}: the batch ratio is against a FAISS slowed by"
            f" that; `OPENBLAS_CORETYPE={ours[0].get('architecture')}` gives FAISS the same"
            " kernels (run again with it)"
        )
    return {
        "cpu": model or platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "flags": {flag: flag in flags for flag in CPU_FLAGS},
        "blas": blas,
        "numpy_blas": path["blas"],
        "numkong": path["numkong"],
        "numpy": np.__version__,
        "python": platform.python_version(),
        "scan_threads": 1 + helper_count(ss.HELPERS),
        "default_helpers": default_helpers(),
        "faiss_blas_note": faiss_note,
    }


def time_codec(
    engine: ss.CodecEngine,
    codes: np.ndarray,
    queries: np.ndarray,
    truth: np.ndarray,
    reader: Reader,
) -> dict[str, float]:
    """One run of one codec: per query, its search, then a read of the codes on the
    scan's threads, then one on this thread alone. Medians (ms) and recall@K."""
    for q in queries[:WARMUP]:
        engine.search(q, K)
    stream_read(codes, reader, ss.HELPERS)
    latencies, bound, single, found = [], [], [], []
    for q in queries:
        start = time.perf_counter()
        found.append(engine.search(q, K))
        latencies.append(time.perf_counter() - start)
        bound.append(stream_read(codes, reader, ss.HELPERS))
        single.append(stream_read(codes, reader, None))
    return {
        "median_ms": float(np.median(latencies) * 1e3),
        "p95_ms": float(np.percentile(latencies, 95) * 1e3),
        "bound_ms": float(np.median(bound) * 1e3),
        "one_thread_read_ms": float(np.median(single) * 1e3),
        "recall": ss.recall(found, truth, K),
    }


def batch_pass(
    engine: ss.Engine, batches: list[np.ndarray], passes: int
) -> tuple[float, list[np.ndarray]]:
    """Queries/s of the fastest of ``passes`` passes over ``batches`` (after a warm-up),
    and the last pass's answers, one array of ids per query."""
    engine.search_batch(batches[0], K)
    fastest = float("inf")
    answers: list[np.ndarray] = []
    for _ in range(passes):
        start = time.perf_counter()
        answers = [engine.search_batch(batch, K) for batch in batches]
        fastest = min(fastest, time.perf_counter() - start)
    return BATCH * len(batches) / fastest, [row for found in answers for row in found]


class SgemmBound(ss.Engine):
    """The product of an exact float32 batch scan as one BLAS call: one ``np.matmul`` of the float32 rows
    (N, d) by a batch's queries (d, 64) into a preallocated (N, 64) float32 output, with
    no selection (it answers no ids). The output is allocated at the first call
    (``batch_pass``'s warm-up, which also faults its pages in) and freed by ``close``."""

    name = SGEMM

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = rows
        self.out: np.ndarray | None = None

    def search_batch(self, queries: ss.Matrix, k: int) -> ss.Ids:
        if self.out is None or self.out.shape[1] != queries.shape[0]:
            self.out = np.empty((self.rows.shape[0], queries.shape[0]), dtype=np.float32)
        np.matmul(self.rows, queries.T, out=self.out)
        return np.empty((queries.shape[0], 0), dtype=np.int64)

    def close(self) -> None:
        self.out = None


def sgemm_pass(rows: np.ndarray, batch: np.ndarray, passes: int, threads: int) -> float:
    """Queries/s (64 / seconds) of the fastest of ``passes`` ``SgemmBound`` products of
    ``rows`` by ``batch`` (after a warm-up), numpy's BLAS limited to ``threads``; the
    output is freed afterwards."""
    from threadpoolctl import threadpool_limits

    bound = SgemmBound(rows)
    try:
        with threadpool_limits(limits=threads, user_api="blas"):
            return batch_pass(bound, [batch], passes)[0]
    finally:
        bound.close()


def fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def summarise_batches(
    batch_runs: dict[str, list[float]],
    batch_recalls: dict[str, list[float]],
    batch_engines: dict[str, ss.Engine],
    faiss_name: str | None,
    on_float32: list[str],
    shape: tuple[int, int],
    threads: int,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The bare sgemm's row and each engine's batch row: median q/s of the runs, recall,
    ratios to FAISS (against the goal) and, for the float32 scans, to the sgemm."""
    n, d = shape

    def median_row(name: str) -> dict[str, Any]:
        got = batch_runs[name]
        return {"engine": name, "qps": float(np.median(got)), "best_qps": max(got), "runs": got}

    sgemm = median_row(SGEMM)
    sgemm["seconds"] = BATCH / sgemm["qps"]
    sgemm["gflops"] = 2 * n * d * BATCH / sgemm["seconds"] / 1e9
    sgemm["blas_threads"] = threads
    sgemm["shape"] = {"rows": [n, d], "queries": [d, BATCH], "out": [n, BATCH]}
    faiss_runs = batch_runs[faiss_name] if faiss_name else None
    batch_rows: list[dict[str, Any]] = []
    for name, timed_engine in batch_engines.items():
        brow = median_row(name)
        brow["codec"] = timed_engine.codec if isinstance(timed_engine, ss.CodecEngine) else None
        brow["recall"] = min(batch_recalls[name])
        brow["run_recalls"] = batch_recalls[name]
        brow["ratio_vs_faiss"] = brow["run_ratios_vs_faiss"] = None
        brow["goal"] = brow["met"] = None
        if faiss_runs is not None and name != faiss_name:
            brow["ratio_vs_faiss"] = brow["qps"] / float(np.median(faiss_runs))
            brow["run_ratios_vs_faiss"] = [
                a / b for a, b in zip(brow["runs"], faiss_runs, strict=True)
            ]
            brow["goal"] = BATCH_GOAL
            brow["met"] = brow["ratio_vs_faiss"] >= BATCH_GOAL
        brow["sgemm_fraction"] = brow["run_sgemm_fractions"] = None
        if name in on_float32:
            brow["sgemm_fraction"] = brow["qps"] / sgemm["qps"]
            brow["run_sgemm_fractions"] = [
                a / b for a, b in zip(brow["runs"], sgemm["runs"], strict=True)
            ]
        batch_rows.append(brow)
    return sgemm, batch_rows


def print_batches(
    batch_rows: list[dict[str, Any]],
    sgemm: dict[str, Any],
    faiss_name: str | None,
    info: dict[str, Any],
    args: argparse.Namespace,
    shape: tuple[int, int],
    threads: int,
) -> None:
    """The batch table and the bare sgemm's note."""
    n, d = shape

    def with_runs(value: float | None, per_run: list[float] | None) -> str:
        if value is None or per_run is None:
            return "—"
        return f"**{value:.2f}** ({' / '.join(f'{r:.2f}' for r in per_run)})"

    print(
        f"\n## Batch of {BATCH}, N={n:,} x d={d}, top-{K}: {args.batches} batches a pass,"
        f" fastest of {args.passes} passes per run, median of {args.runs} runs"
        " (engines and the bare sgemm rotated per run)\n"
    )
    against = f"÷ {faiss_name} (runs)" if faiss_name else "÷ FAISS"
    print(
        f"| engine | batch-64 q/s | best run q/s | runs q/s | recall@{K} | {against}"
        f" | goal ≥ {BATCH_GOAL} | ÷ bare sgemm (runs) |"
    )
    print("|---|---:|---:|---|---:|---:|---|---:|")
    for brow in [*batch_rows, sgemm]:
        goal = "—" if brow.get("met") is None else ("met" if brow["met"] else "NOT met")
        print(
            f"| {brow['engine']} | {brow['qps']:,.1f} | {brow['best_qps']:,.1f}"
            f" | {' / '.join(f'{q:,.1f}' for q in brow['runs'])}"
            f" | {fmt(brow.get('recall'), '.3f')}"
            f" | {with_runs(brow.get('ratio_vs_faiss'), brow.get('run_ratios_vs_faiss'))}"
            f" | {goal}"
            f" | {with_runs(brow.get('sgemm_fraction'), brow.get('run_sgemm_fractions'))} |"
        )
    numpy_blas = next((b for b in info["blas"] if "numpy" in b), info["numpy_blas"])
    print(
        f"\nThe {SGEMM}: one `np.matmul` of the float32 rows ({n:,} x {d}) by the first"
        f" batch's {BATCH} queries ({d} x {BATCH}) into a preallocated ({n:,} x {BATCH})"
        f" float32 output (freed after each run), numpy's BLAS ({numpy_blas}) limited to"
        f" {threads} threads (threadpoolctl `threadpool_limits(limits={threads})`, the"
        f" scan's threads), fastest of {args.passes} products per run after a warm-up:"
        f" {sgemm['seconds'] * 1e3:.1f} ms, {sgemm['gflops']:.1f} GFLOP/s (median of runs);"
        " no selection, no ids. ÷ sgemm is given for the float32 scans only"
        " (float16 and int8 read other bytes); it is a reference, not a floor: a scan cut"
        " into blocks of single-threaded products whose output stays in cache beats it."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=50, help="single queries per run")
    parser.add_argument("--runs", type=int, default=3, help="median of this many runs")
    parser.add_argument("--codecs", default="float32,float16,int8")
    parser.add_argument("--skip-faiss", action="store_true")
    parser.add_argument("--batches", type=int, default=2, help="batches of 64 per pass")
    parser.add_argument("--passes", type=int, default=3, help="batch passes per run")
    parser.add_argument(
        "--avx2", action="store_true", help="AVX2 kernels only (numpy, OpenBLAS, numkong)"
    )
    parser.add_argument("--json", default=str(Path(__file__).parent / "results/scan_bound.json"))
    args = parser.parse_args(argv)
    if args.avx2:
        import numkong

        for target in ("skylake", "icelake", "genoa", "sapphire", "sapphireamx", "turin"):
            with contextlib.suppress(Exception):  # a target this build does not know
                numkong.disable_capability(target)
    codecs = [c.strip() for c in args.codecs.split(",") if c.strip()]
    unknown = [c for c in codecs if c not in BOUND_GOAL]
    if unknown:
        parser.error(f"unknown codecs: {', '.join(unknown)} (known: {', '.join(BOUND_GOAL)})")
    load_before, steal_before, began = os.getloadavg(), cpu_times(), time.perf_counter()
    if not args.skip_faiss:
        with contextlib.suppress(ImportError):
            import faiss  # noqa: F401  (loaded now, so its BLAS is listed)
    info = machine()  # before any search changes a BLAS thread setting
    n, d = args.rows, args.dim

    data = ss.make_data(n, d, seed=n)  # search_speed.py's data, ids and queries
    ids = np.random.default_rng(1).permutation(n * 2)[:n].astype(np.int64)
    queries = ss.make_data(args.queries, d, seed=10**9 + n)
    batch_queries = ss.make_data(args.batches * BATCH, d, seed=2 * 10**9 + n)
    truth = ss.exact_top_k(data, ids, queries, K)
    batch_truth = ss.exact_top_k(data, ids, batch_queries, K)

    engines: dict[str, ss.CodecEngine] = {}
    codes: dict[str, np.ndarray] = {}
    for codec in codecs:
        gc.collect()
        start = time.perf_counter()
        engine = ss.CodecEngine(codec)
        engine.build(data, ids)
        engines[codec], codes[codec] = engine, _bytes_of(engine.part.codes)
        assert np.shares_memory(codes[codec], engine.part.codes)  # the scanned bytes themselves
        print(
            f"  built {codec} ({codes[codec].shape[0] / 1e6:,.0f} MB of codes)"
            f" in {time.perf_counter() - start:.1f}s",
            file=sys.stderr,
        )
    largest = max(codes.values(), key=lambda c: c.shape[0])
    reader_name, reader_speeds = pick_reader(largest, ss.HELPERS)
    reader = READERS[reader_name]
    sgemv = sgemv_speed(engines["float32"].part.codes, ss.HELPERS) if "float32" in engines else None

    runs: dict[str, list[dict[str, float]]] = {codec: [] for codec in codecs}
    for run in range(args.runs):
        order = codecs[run % len(codecs) :] + codecs[: run % len(codecs)]
        for codec in order:
            runs[codec].append(time_codec(engines[codec], codes[codec], queries, truth, reader))
        print(f"  single-query run {run + 1}/{args.runs} done", file=sys.stderr)

    batch_engines: dict[str, ss.Engine] = {f"VectorIndex {c}": engines[c] for c in codecs}
    faiss_name: str | None = None
    if not args.skip_faiss:
        try:
            faiss_engine = ss.FaissEngine(blas_threshold=20)
            faiss_engine.build(data, ids)
            faiss_name = faiss_engine.name
            batch_engines[faiss_name] = faiss_engine
        except ImportError:
            print("  FAISS skipped: `pip install faiss-cpu`", file=sys.stderr)
    # the exact float32 scans, given as a fraction of the bare sgemm
    on_float32 = [name for name in ("VectorIndex float32", faiss_name) if name in batch_engines]
    threads = info["scan_threads"]
    batches = [batch_queries[i : i + BATCH] for i in range(0, batch_queries.shape[0], BATCH)]
    timed = [*batch_engines, SGEMM]
    batch_runs: dict[str, list[float]] = {name: [] for name in timed}
    batch_recalls: dict[str, list[float]] = {name: [] for name in batch_engines}
    for run in range(args.runs):
        order = timed[run % len(timed) :] + timed[: run % len(timed)]
        for name in order:
            if name == SGEMM:
                batch_runs[name].append(sgemm_pass(data, batches[0], args.passes, threads))
                continue
            qps, found = batch_pass(batch_engines[name], batches, args.passes)
            batch_runs[name].append(qps)
            batch_recalls[name].append(ss.recall(found, batch_truth, K))
        print(f"  batch run {run + 1}/{args.runs} done", file=sys.stderr)

    load_after, steal = os.getloadavg(), steal_percent(steal_before, cpu_times())

    rows = []
    for codec in codecs:
        got = runs[codec]
        row: dict[str, Any] = {"codec": codec, "scanned_bytes": int(codes[codec].shape[0])}
        for key in ("median_ms", "p95_ms", "bound_ms", "one_thread_read_ms"):
            row[key] = float(np.median([r[key] for r in got]))
        row["recall"] = min(r["recall"] for r in got)
        row["bound_gbps"] = row["scanned_bytes"] / row["bound_ms"] / 1e6
        row["one_thread_gbps"] = row["scanned_bytes"] / row["one_thread_read_ms"] / 1e6
        row["scan_gbps"] = row["scanned_bytes"] / row["median_ms"] / 1e6
        row["ratio"] = row["median_ms"] / row["bound_ms"]
        # the per-run ratios, to show how far one run's figure moves
        row["run_ratios"] = [r["median_ms"] / r["bound_ms"] for r in got]
        row["goal"] = BOUND_GOAL[codec]
        row["met"] = row["ratio"] <= row["goal"]
        row["runs"] = got
        rows.append(row)

    sgemm, batch_rows = summarise_batches(
        batch_runs, batch_recalls, batch_engines, faiss_name, on_float32, (n, d), threads
    )
    batch_ratios = {
        brow["codec"]: brow["ratio_vs_faiss"]
        for brow in batch_rows
        if brow["codec"] and brow["ratio_vs_faiss"] is not None
    }
    batch_ratio = batch_ratios.get("float32")

    print(
        f"## Single query against each codec's memory bound, N={n:,} x d={d}, top-{K},"
        f" {args.queries} queries, {args.runs} runs\n"
    )
    flags = " ".join(f"{f}{'+' if on else '-'}" for f, on in info["flags"].items())
    print(f"{info['cpu']}, {info['cores']} cores; {flags}")
    print(f"BLAS: {'; '.join(info['blas'])}")
    print(f"numkong targets: {info['numkong']}; numpy {info['numpy']}")
    print(
        f"load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f};"
        f" CPU steal during the run: {fmt(steal, '.1f')} %;"
        f" {time.perf_counter() - began:.0f} s\n"
    )
    speeds = ", ".join(f"{name} {value:.1f}" for name, value in reader_speeds.items())
    print(
        f"Bound read: `{reader_name}` ({READER_NAMES[reader_name]}), the fastest"
        f" of [{speeds}] GB/s over {largest.shape[0] / 1e6:,.0f} MB on {threads} threads"
        + (
            f"; sgemv of the float32 rows with ones, for comparison: {sgemv:.1f} GB/s"
            if sgemv
            else ""
        )
        + "\n"
    )
    print(
        f"| codec | scanned MB | single median ms | p95 ms | bound ms ({threads} threads)"
        " | bound GB/s | 1-thread read GB/s | scan GB/s | latency ÷ bound (runs)"
        f" | goal | recall@{K} |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for row in rows:
        per_run = " / ".join(f"{r:.2f}" for r in row["run_ratios"])
        print(
            f"| {row['codec']} | {row['scanned_bytes'] / 1e6:,.0f} | {row['median_ms']:.2f}"
            f" | {row['p95_ms']:.2f} | {row['bound_ms']:.2f} | {row['bound_gbps']:.1f}"
            f" | {row['one_thread_gbps']:.1f} | {row['scan_gbps']:.1f}"
            f" | **{row['ratio']:.2f}** ({per_run})"
            f" | ≤ {row['goal']}: {'met' if row['met'] else 'NOT met'} | {row['recall']:.3f} |"
        )

    print_batches(batch_rows, sgemm, faiss_name, info, args, (n, d), threads)
    if batch_ratio is not None:
        verdict = "met" if batch_ratio >= BATCH_GOAL else "NOT met"
        print(
            f"\nVectorIndex float32 ÷ {faiss_name}: **{batch_ratio:.2f}**"
            f" (goal ≥ {BATCH_GOAL}: {verdict})"
        )
    if faiss_name and info["faiss_blas_note"]:
        print(f"\nNote: {info['faiss_blas_note']}.")

    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "params": vars(args),
                "machine": info
                | {
                    "load_average_before": load_before[0],
                    "load_average_after": load_after[0],
                    "steal_percent": steal,
                    "seconds": time.perf_counter() - began,
                },
                "bound_reader": {
                    "chosen": reader_name,
                    "gbps": reader_speeds,
                    "sgemv_gbps": sgemv,
                    "block_bytes": READ_BLOCK,
                    "threads": threads,
                },
                "single": rows,
                "batch": batch_rows,
                "batch_ratio": batch_ratio,
                "batch_ratios": batch_ratios,
                "sgemm_bound": sgemm,
                "goals": {"bound": BOUND_GOAL, "batch": BATCH_GOAL},
            },
            indent=2,
        )
    )
    print(f"\nJSON written to {out}")
    for timed_engine in batch_engines.values():
        timed_engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

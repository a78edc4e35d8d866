"""Index lifecycle: cold load, add after load, DELETE latency, and RAM of N workers.

One SQLite workspace of ``--rows`` synthetic unit vectors of ``--dim`` dimensions, in
``--documents`` documents (so deletes remove whole documents, as the API does), indexed
by a deterministic benchmark embedder of that dimension. Two modes, measured in the
same run:

* ``segments``: ``index_dir = "auto"``: memory-mapped segment files next to the
  database, an in-RAM tail, background merge and compaction (this change);
* ``in RAM``: ``index_dir = "off"``: each process reads every vector from the store
  into its own matrix (what every process did before).

Figures (medians of ``--runs``):

* cold load: ``WorkspaceIndexes.get`` of a fresh core (mapping + change log, or reading the
  store), and the first search after it (which touches every page);
* add one row right after the load: ms, and whether a matrix was copied (the loaded
  part's memory is compared before and after);
* DELETE: ``--deletes`` document deletes through the service (store write + index
  tombstones), p50 / p99 / max, crossing the compaction threshold; and how long the
  background compaction took afterwards;
* RAM: ``--workers`` processes load the workspace and search it, then each reads its
  ``/proc/self/smaps_rollup``: RSS and PSS per worker, PSS total against one copy of
  the vectors (rows x dim x 4 bytes + ids). The in-RAM peer runs
  ``--ram-peer-workers`` processes (each holds its own copy).

Run: ``python benchmarks/index_lifecycle.py [--rows 1000000] [--dim 384] [--workers 4]``
(default 100,000 rows for a quick run). Writes ``benchmarks/results/index_lifecycle.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
RESULTS = REPO / "benchmarks" / "results" / "index_lifecycle.json"
ORG = "bench"
ENV = "test"

from bench_embedder import BenchPlugin  # noqa: E402

from agentcore import AgentCore  # noqa: E402
from agentcore.schema import Document  # noqa: E402

# what the cores' index caches told their observer (loads, merges, ...), by event
SEEN: Counter[str] = Counter()


def open_core(db: str, dim: int, index_dir: str) -> AgentCore:
    return AgentCore.open(
        db,
        start_workers=False,
        plugins=[BenchPlugin(dim)],
        embedder=f"bench-{dim}",
        index_dir=index_dir,
        observer=lambda event, count: SEEN.update({event: count}),
    )


def fill(db: str, rows: int, dim: int, documents: int) -> list[str]:
    """Write ``rows`` unit vectors as ``documents`` documents; their ids."""
    core = open_core(db, dim, "off")
    try:
        org = core.workspace(ORG, ENV).organization_id
        rng = np.random.default_rng(5)
        per = rows // documents
        doc_ids = []
        name = f"bench-{dim}"
        for j in range(documents):
            n = per if j < documents - 1 else rows - per * (documents - 1)
            doc = Document(
                id=f"doc_bench{j:06d}",
                source=f"bench-{j}.txt",
                content_type="text/plain",
                pages=1,
                chunks=n,
                bytes=1,
                created_at=datetime(2026, 1, 1, tzinfo=UTC),
            )
            core.store.insert_document(
                org, ENV, doc, [], name, np.empty((0, dim), np.float32), np.empty(0, bool)
            )
            vectors = rng.standard_normal((n, dim), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            ids = np.arange(j * per, j * per + n, dtype=np.int64) + 10**9
            core.store.add_vectors(org, ENV, doc.id, name, dim, ids, vectors)
            doc_ids.append(doc.id)
        return doc_ids
    finally:
        core.close()


def ms(seconds: float) -> float:
    return seconds * 1000


def cold_load(db: str, dim: int, index_dir: str) -> dict[str, Any]:
    core = open_core(db, dim, index_dir)
    segment_loads = SEEN["index.segment_load"]
    try:
        org = core.workspace(ORG, ENV).organization_id
        began = time.perf_counter()
        index = core.indexes.get(org, ENV)
        load = time.perf_counter() - began
        q = np.random.default_rng(1).standard_normal(dim).astype(np.float32)
        began = time.perf_counter()
        index.search(q, 10)
        first = time.perf_counter() - began
        parts = index.parts()
        before = [(p.vectors.ctypes.data, p.vectors.shape) for p in parts]
        began = time.perf_counter()
        index.add([1], q)
        add = time.perf_counter() - began
        copied = [(p.vectors.ctypes.data, p.vectors.shape) for p in index.parts()] != before
        mapped = bool(parts) and all(p.name for p in parts)
        return {
            "load_ms": ms(load),
            "first_search_ms": ms(first),
            "add_ms": ms(add),
            "copied": copied,
            "mapped": mapped,
            "segment_load": SEEN["index.segment_load"] - segment_loads == 1,
        }
    finally:
        core.close()


def deletes(db: str, dim: int, index_dir: str, doc_ids: list[str]) -> dict[str, Any]:
    core = open_core(db, dim, index_dir)
    try:
        ws = core.workspace(ORG, ENV)
        cache = core.indexes
        index = cache.get(ws.organization_id, ENV)
        cache.wait_for_maintenance(600)
        merges = SEEN["index.merge"]
        times: list[float] = []
        store_times: list[float] = []
        for doc_id in doc_ids:

            def store_write(doc_id: str = doc_id) -> bool:
                began = time.perf_counter()
                done = core.store.delete_document(ws.organization_id, ENV, doc_id)
                store_times.append(time.perf_counter() - began)
                return done

            # what KnowledgeService.delete does, with the store's share timed apart
            began = time.perf_counter()
            assert cache.write(ws.organization_id, ENV, store_write)
            times.append(time.perf_counter() - began)
        index_times = sorted(t - s for t, s in zip(times, store_times, strict=True))
        began = time.perf_counter()
        cache.wait_for_maintenance(600)
        while index.maintenance_due() and index_dir == "off":  # RAM mode: shared thread
            time.sleep(0.01)
        settle = time.perf_counter() - began
        times.sort()
        p99 = min(len(times) - 1, int(len(times) * 0.99))
        return {
            "p50_ms": ms(statistics.median(times)),
            "p99_ms": ms(times[p99]),
            "max_ms": ms(times[-1]),
            "index_p50_ms": ms(statistics.median(index_times)),
            "index_p99_ms": ms(index_times[p99]),
            "index_max_ms": ms(index_times[-1]),
            "background_merges": SEEN["index.merge"] - merges,
            "settle_ms": ms(settle),
            "dead_left": sum(int(p.dead.size) for p in cache.get(ws.organization_id, ENV).parts()),
        }
    finally:
        core.close()


# -- RAM of N worker processes ------------------------------------------------------------


def worker(db: str, dim: int, index_dir: str) -> None:
    core = open_core(db, dim, index_dir)
    org = core.workspace(ORG, ENV).organization_id
    index = core.indexes.get(org, ENV)
    rng = np.random.default_rng(os.getpid())
    for _ in range(3):
        index.search(rng.standard_normal(dim).astype(np.float32), 10)
    print("ready", flush=True)
    sys.stdin.readline()  # every worker is loaded: now the shares are settled
    rollup: dict[str, int] = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        rollup[key] = int(value.split()[0])
    print(json.dumps(rollup), flush=True)
    sys.stdin.readline()
    core.close()


def workers_ram(db: str, dim: int, index_dir: str, n: int) -> dict[str, Any]:
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "worker", db, str(dim), index_dir],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("a worker failed to load")
        rollups = []
        for proc in procs:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("\n")
            proc.stdin.flush()
            rollups.append(json.loads(proc.stdout.readline()))
    finally:
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.write("\n")
                proc.stdin.close()
            proc.wait(timeout=120)
    return {
        "workers": n,
        "rss_mb": [r["Rss"] / 1024 for r in rollups],
        "pss_mb": [r["Pss"] / 1024 for r in rollups],
        "pss_anon_mb": [r.get("Pss_Anon", 0) / 1024 for r in rollups],
        "pss_file_mb": [r.get("Pss_File", 0) / 1024 for r in rollups],
        "pss_total_mb": sum(r["Pss"] for r in rollups) / 1024,
    }


def baseline_pss(dim: int) -> float:
    """PSS of a worker process that imported everything but loaded no vectors (MB)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import numpy, agentcore;"
        " from pathlib import Path;"
        " print(sum(int(l.split()[1]) for l in Path('/proc/self/smaps_rollup').read_text()"
        ".splitlines()[1:] if l.startswith('Pss:')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip()) / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--deletes", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--ram-peer-workers", type=int, default=2)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "lifecycle.db")
        began = time.perf_counter()
        doc_ids = fill(db, args.rows, args.dim, args.documents)
        print(f"filled {args.rows} x {args.dim} in {time.perf_counter() - began:.1f} s", flush=True)
        # the first core in segment mode loads from the store and writes the segments
        first = open_core(db, args.dim, "auto")
        began = time.perf_counter()
        first.indexes.get(first.workspace(ORG, ENV).organization_id, ENV)
        first.indexes.wait_for_maintenance(3600)
        write_s = time.perf_counter() - began
        first.close()
        print(f"first load + segment write: {write_s:.1f} s", flush=True)

        loads: dict[str, list[dict[str, Any]]] = {"auto": [], "off": []}
        for run in range(args.runs):
            for mode in ("auto", "off") if run % 2 == 0 else ("off", "auto"):
                loads[mode].append(cold_load(db, args.dim, mode))
            print(
                f"  load run {run + 1}: "
                + ", ".join(f"{m} {loads[m][-1]['load_ms']:.0f} ms" for m in loads),
                flush=True,
            )

        ram_seg = workers_ram(db, args.dim, "auto", args.workers)
        ram_off = workers_ram(db, args.dim, "off", args.ram_peer_workers)
        base = baseline_pss(args.dim)
        print("  RAM measured", flush=True)

        # deletes last: they change the workspace (half the documents per mode)
        half = args.deletes
        delete_seg = deletes(db, args.dim, "auto", doc_ids[:half])
        delete_off = deletes(db, args.dim, "off", doc_ids[half : 2 * half])

    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in loads[mode])

    copy_mb = args.rows * (args.dim * 4 + 8) / 2**20
    print()
    print(
        f"{args.rows} x {args.dim} float32 in {args.documents} documents, SQLite;"
        f" median of {args.runs} runs; {os.cpu_count()} CPUs, load average"
        f" {os.getloadavg()[0]:.1f} (shared machine: compare rows of this run)"
    )
    print()
    print("| figure | segments (mapped) | in RAM (from the store) | ratio |")
    print("|---|---:|---:|---:|")
    seg_load, off_load = med("auto", "load_ms"), med("off", "load_ms")
    print(f"| cold load, ms | {seg_load:.1f} | {off_load:.1f} | {seg_load / off_load:.3f}x |")
    print(
        f"| first search after load, ms | {med('auto', 'first_search_ms'):.1f}"
        f" | {med('off', 'first_search_ms'):.1f} | |"
    )
    print(
        f"| add one row after load, ms | {med('auto', 'add_ms'):.2f}"
        f" | {med('off', 'add_ms'):.2f} | |"
    )
    copied = {m: any(r["copied"] for r in loads[m]) for m in loads}
    print(f"| add copied the matrix | {copied['auto']} | {copied['off']} | |")
    print(
        f"| DELETE p50 / p99 / max, ms ({half} deletes) | {delete_seg['p50_ms']:.1f} /"
        f" {delete_seg['p99_ms']:.1f} / {delete_seg['max_ms']:.1f} | {delete_off['p50_ms']:.1f} /"
        f" {delete_off['p99_ms']:.1f} / {delete_off['max_ms']:.1f} | |"
    )
    print(
        f"| of which the index (catch-up + tombstones), p50 / p99 / max, ms"
        f" | {delete_seg['index_p50_ms']:.1f} / {delete_seg['index_p99_ms']:.1f} /"
        f" {delete_seg['index_max_ms']:.1f} | {delete_off['index_p50_ms']:.1f} /"
        f" {delete_off['index_p99_ms']:.1f} / {delete_off['index_max_ms']:.1f} | |"
    )
    print(
        f"| background compactions after the deletes (time to settle, ms)"
        f" | {delete_seg['background_merges']} ({delete_seg['settle_ms']:.0f})"
        f" | ({delete_off['settle_ms']:.0f}) | |"
    )
    per_seg = statistics.median(ram_seg["pss_mb"])
    per_off = statistics.median(ram_off["pss_mb"])
    print(
        f"| PSS per worker, MB (median) | {per_seg:.0f} ({ram_seg['workers']} workers)"
        f" | {per_off:.0f} ({ram_off['workers']} workers) | |"
    )
    print(
        f"| RSS per worker, MB (median) | {statistics.median(ram_seg['rss_mb']):.0f}"
        f" | {statistics.median(ram_off['rss_mb']):.0f} | |"
    )
    total_seg = ram_seg["pss_total_mb"]
    extra_seg = total_seg - base * ram_seg["workers"]
    extra_off = (ram_off["pss_total_mb"] - base * ram_off["workers"]) / ram_off["workers"]
    print(
        f"| PSS total of {ram_seg['workers']} workers minus their baseline, MB"
        f" | {extra_seg:.0f} ({extra_seg / copy_mb:.2f}x one copy)"
        f" | {extra_off * ram_seg['workers']:.0f} ({extra_off * ram_seg['workers'] / copy_mb:.2f}x"
        f" one copy, extrapolated) | |"
    )
    print(
        f"\none copy of the vectors and ids: {copy_mb:.0f} MB; baseline PSS of a worker"
        f" with nothing loaded: {base:.0f} MB; target: {ram_seg['workers']} workers <= 1.3x"
        " one copy, cold load <= 500 ms, add <= 50 ms without a copy, DELETE p99 <= 50 ms"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "index_lifecycle",
                "rows": args.rows,
                "dimension": args.dim,
                "loads": loads,
                "ram_segments": ram_seg,
                "ram_in_memory": ram_off,
                "baseline_pss_mb": base,
                "deletes_segments": delete_seg,
                "deletes_in_memory": delete_off,
                "segment_write_s": write_s,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(main())

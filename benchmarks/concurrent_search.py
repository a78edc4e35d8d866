"""Concurrent in-process search throughput: many threads searching different workspaces.

Run ``python benchmarks/concurrent_search.py --help``. Builds ``--workspaces``
VectorIndex objects of ``--rows`` seeded unit vectors each, then ``--threads`` threads
search them (thread i searches workspace i mod W, top-10, single queries, and every
``--batch-every``-th call a batch of 64) for ``--seconds``; prints searches/s per run
and the median, and the single-thread figure for comparison. Exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if os.environ.get("AGENTCORE_BENCH_NO_REPO_PATH") is None:
    sys.path.insert(0, str(REPO))

from agentcore.knowledge.vectors import VectorIndex, scan_helpers  # noqa: E402

# the scan helpers a core's runtime lends its indexes (one pool for every workspace)
HELPERS = scan_helpers()


def build(workspaces: int, rows: int, dim: int) -> list[VectorIndex]:
    indexes = []
    for w in range(workspaces):
        rng = np.random.default_rng(w)
        data = rng.standard_normal((rows, dim), dtype=np.float32)
        index = VectorIndex(dim, capacity=rows, executor=HELPERS)
        index.add(np.arange(rows, dtype=np.int64), data)
        indexes.append(index)
    return indexes


def run(
    indexes: list[VectorIndex], threads: int, seconds: float, batch_every: int, dim: int
) -> float:
    """Searches completed per second by ``threads`` threads over ``seconds``."""
    stop = threading.Event()
    counts = [0] * threads
    queries = np.random.default_rng(99).standard_normal((256, dim), dtype=np.float32)
    start = threading.Barrier(threads + 1)

    def loop(t: int) -> None:
        index = indexes[t % len(indexes)]
        i = t
        start.wait()
        while not stop.is_set():
            if batch_every and i % batch_every == 0:
                index.search_batch(queries[:64], 10)
                counts[t] += 64
            else:
                index.search(queries[i % 256], 10)
                counts[t] += 1
            i += 1

    workers = [threading.Thread(target=loop, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for worker in workers:
        worker.join()
    return sum(counts) / (time.perf_counter() - began)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspaces", type=int, default=4)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--batch-every", type=int, default=0, help="every n-th call is a batch of 64 (0: never)"
    )
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    indexes = build(args.workspaces, args.rows, args.dim)
    solo, crowd = [], []
    for _ in range(args.runs):
        solo.append(run(indexes, 1, args.seconds, args.batch_every, args.dim))
        crowd.append(run(indexes, args.threads, args.seconds, args.batch_every, args.dim))
    print(
        f"{args.workspaces} workspaces x {args.rows:,} x {args.dim}, {os.cpu_count()} cores,"
        f" load average before/after {load:.1f} / {os.getloadavg()[0]:.1f}"
    )
    print(
        f"1 thread: {' '.join(f'{x:.0f}' for x in solo)} searches/s, median {np.median(solo):.0f}"
    )
    print(
        f"{args.threads} threads: {' '.join(f'{x:.0f}' for x in crowd)} searches/s,"
        f" median {np.median(crowd):.0f} ({np.median(crowd) / np.median(solo):.2f}x 1 thread)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
